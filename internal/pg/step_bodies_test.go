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
}

// Bodies flagged by_queue (outcomes reported through the API) are kept by the outcome
// statement itself as the job's queue says, in the same one statement: 'off' keeps none,
// 'failures' those of a retry or a fail, 'all' every one; the flag is not stored.
func TestOutcomeKeepsBodiesByQueueInTheStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	counter := &pg.StatementCounter{}
	db := pgtest.Open(t, url, pg.Options{Counter: counter})
	type attempt struct {
		queue, kind string
		kept        bool
	}
	cases := []attempt{
		{"off", pg.KindRetry, false}, {"off", pg.KindDone, false},
		{"failures", pg.KindRetry, true}, {"failures", pg.KindFail, true}, {"failures", pg.KindDone, false},
		{"all", pg.KindDone, true}, {"all", pg.KindNext, true},
	}
	for _, mode := range []string{"off", "failures", "all"} {
		m := mode
		if _, err := db.QueueUpsert(ctx, pg.QueueUpsert{Name: mode, StepBodies: &m}); err != nil {
			t.Fatal(err)
		}
		seedJobs(t, db, mode, 3, "")
	}
	delay := int64(1000)
	var recs []pg.OutcomeRecord
	used := map[string]int{}
	claimedBy := map[string][]pg.ClaimedJob{}
	for _, q := range []string{"off", "failures", "all"} {
		got, err := db.JobClaimBatch(ctx, pg.JobClaimParams{Queue: q, Limit: 3, LeaseTTL: time.Minute, Owner: "t", SignalCap: 10})
		if err != nil || len(got) != 3 {
			t.Fatalf("claimed %d of %s (%v)", len(got), q, err)
		}
		claimedBy[q] = got
	}
	for _, c := range cases {
		j := claimedBy[c.queue][used[c.queue]]
		used[c.queue]++
		r := pg.OutcomeRecord{ID: j.ID, Token: j.LeaseToken, Kind: c.kind, Label: c.kind,
			Bodies: &pg.StepBodies{Response: &pg.StepBody{Text: "answer", Size: 6}, ByQueue: true}}
		switch c.kind {
		case pg.KindRetry:
			r.Error, r.DelayMS = json.RawMessage(`{}`), &delay
		case pg.KindFail:
			r.Error = json.RawMessage(`{}`)
		}
		recs = append(recs, r)
	}
	counter.Reset()
	if applied, err := db.JobApplyOutcomes(ctx, recs, false); err != nil || len(applied) != len(recs) {
		t.Fatalf("applied %d of %d (%v)", len(applied), len(recs), err)
	}
	if total := counter.Snapshot(); len(total) != 1 || total["JobApplyOutcomes"] != 1 {
		t.Fatalf("the batch ran %v, want one JobApplyOutcomes", total)
	}
	for i, c := range cases {
		steps, err := db.StepList(ctx, recs[i].ID, 10)
		if err != nil || len(steps) != 1 {
			t.Fatalf("case %d: %d steps (%v)", i, len(steps), err)
		}
		b := steps[0].Bodies
		if (b != nil) != c.kept {
			t.Errorf("queue %s, %s: bodies %+v, kept %v wanted", c.queue, c.kind, b, c.kept)
		}
		if b != nil && (b.ByQueue || b.Response == nil || b.Response.Text != "answer") {
			t.Errorf("queue %s, %s: stored %+v", c.queue, c.kind, *b)
		}
	}
}
