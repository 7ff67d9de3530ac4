package pg_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// The outcome statement writes a record's bodies into its history row, and nothing for a
// record without them: the batch document of a record without bodies holds no "bodies"
// key (no byte added to the happy path), and its row's column is NULL.
func TestOutcomeHistoryBodies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	seedJobs(t, db, "q", 3, "")
	claimed, err := db.JobClaimBatch(ctx, pg.JobClaimParams{Queue: "q", Limit: 3, LeaseTTL: time.Minute, Owner: "t", SignalCap: 10})
	if err != nil || len(claimed) != 3 {
		t.Fatalf("claimed %d (%v)", len(claimed), err)
	}
	delay := int64(1000)
	status := 500
	kept := &pg.StepBodies{
		Request:  &pg.StepBody{Text: `{"job":{"id":1}}`, Size: 16},
		Response: &pg.StepBody{Text: "upstream \u00e9 down", Size: 9000, Truncated: true},
	}
	recs := []pg.OutcomeRecord{
		{ID: claimed[0].ID, Token: claimed[0].LeaseToken, Kind: pg.KindDone, Label: "done"},
		{ID: claimed[1].ID, Token: claimed[1].LeaseToken, Kind: pg.KindRetry, Label: "http_error",
			Error: json.RawMessage(`{"message":"500"}`), DelayMS: &delay, HTTPStatus: &status, Bodies: kept},
		{ID: claimed[2].ID, Token: claimed[2].LeaseToken, Kind: pg.KindFail, Label: "fail",
			Error: json.RawMessage(`{}`), Bodies: &pg.StepBodies{Response: &pg.StepBody{Text: "", Size: 0}}},
	}
	doc, err := json.Marshal(recs[:1])
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(doc), "bodies") {
		t.Fatalf("a record without bodies puts them in the batch: %s", doc)
	}
	if applied, err := db.JobApplyOutcomes(ctx, recs, false); err != nil || len(applied) != 3 {
		t.Fatalf("applied %d (%v)", len(applied), err)
	}
	for i, want := range []*pg.StepBodies{nil, kept, recs[2].Bodies} {
		steps, err := db.StepList(ctx, claimed[i].ID, 10)
		if err != nil || len(steps) != 1 {
			t.Fatalf("job %d: %d steps (%v)", claimed[i].ID, len(steps), err)
		}
		got := steps[0].Bodies
		if (got == nil) != (want == nil) {
			t.Fatalf("record %d: bodies %+v, want %+v", i, got, want)
		}
		if want != nil {
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(want)
			if string(g) != string(w) {
				t.Fatalf("record %d: bodies %s, want %s", i, g, w)
			}
		}
	}
	if n, err := db.QueryInt(ctx, `SELECT count(*) FROM steps WHERE bodies IS NULL`); err != nil || n != 1 {
		t.Fatalf("%d rows without bodies, want the done one (%v)", n, err)
	}
	// The done row is as large as it was without the column: the NULL is a bit of the null
	// bitmap the row has anyway (its error is NULL), so the heap and the WAL see no byte more.
	const sizes = `SELECT pg_column_size(s.*) - pg_column_size(ROW(s.job_id, s.id, s.step, s.attempt, s.outcome,
		s.http_status, s.started_at, s.finished_at, s.error, s.queue, s.handler)) FROM steps s WHERE s.job_id = $1`
	if extra, err := db.QueryInt(ctx, sizes, claimed[0].ID); err != nil || extra != 0 {
		t.Fatalf("the done row is %d bytes larger than without the bodies column (%v)", extra, err)
	}
}

// The queue setting is stored, kept when a PUT leaves it out, and refused by the CHECK
// for an unknown value (the engine validates first; this is the last line).
func TestQueueStepBodiesSetting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	q, err := db.QueueUpsert(ctx, pg.QueueUpsert{Name: "q"})
	if err != nil || q.StepBodies != "failures" {
		t.Fatalf("a new queue: %q (%v)", q.StepBodies, err)
	}
	all := "all"
	if q, err = db.QueueUpsert(ctx, pg.QueueUpsert{Name: "q", StepBodies: &all}); err != nil || q.StepBodies != "all" {
		t.Fatalf("set all: %q (%v)", q.StepBodies, err)
	}
	paused := true
	if q, err = db.QueueUpsert(ctx, pg.QueueUpsert{Name: "q", Paused: &paused}); err != nil || q.StepBodies != "all" {
		t.Fatalf("a PUT without it: %q (%v)", q.StepBodies, err)
	}
	bad := "some"
	if _, err = db.QueueUpsert(ctx, pg.QueueUpsert{Name: "q", StepBodies: &bad}); err == nil {
		t.Fatal("an unknown step_bodies value was stored")
	}
	seedJobs(t, db, "q", 1, "")
	id, err := db.QueryInt(ctx, `SELECT id FROM jobs WHERE queue = 'q'`)
	if err != nil {
		t.Fatal(err)
	}
	modes, err := db.JobStepBodiesMode(ctx, []int64{id, id + 1000})
	if err != nil || len(modes) != 1 || modes[id] != "all" {
		t.Fatalf("modes %v (%v)", modes, err)
	}
}

// The asynchronous outcomes' read of their queues' step_bodies is a primary-key lookup per
// job: with 20 000 jobs it reads no more rows of jobs than it is given ids.
func TestJobStepBodiesModeReadsOneRowPerID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	if _, err := db.QueueUpsert(ctx, pg.QueueUpsert{Name: "bulk"}); err != nil {
		t.Fatal(err)
	}
	seedJobs(t, db, "bulk", 20_000, "")
	if _, err := db.Exec(ctx, `ANALYZE jobs`); err != nil {
		t.Fatal(err)
	}
	ids := []int64{3, 500, 19_999}
	raw, err := db.ExplainAnalyze(ctx, pg.Statement("JobStepBodiesMode"), ids)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := pgtest.ParsePlan(raw)
	if err != nil {
		t.Fatal(err)
	}
	if read := plan.MaxRowsRead("jobs"); read > float64(len(ids)) {
		t.Fatalf("a node read %.0f rows of jobs for %d ids:\n%s", read, len(ids), raw)
	}
}
