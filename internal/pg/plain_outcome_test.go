package pg_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// The plain outcome statement writes what the general one writes for `next` and `done`:
// the same job rows, history rows, parent join and answers, for a done with a result and
// kept bodies, a next with a state and a delay, a bare next, a next and a done whose job
// a cancel was requested of during the step, the done of a child whose parent waits for
// it, and a JSON null result and state (values, unlike an absent one). Each case runs
// twice, in queue "plain" by JobApplyOutcomes (which picks the plain statement, as the
// counter shows) and in queue "general" by the general statement.
func TestPlainOutcomesWriteWhatTheGeneralStatementWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	counter := &pg.StatementCounter{}
	db := pgtest.Open(t, pgtest.NewDatabase(t), pg.Options{Counter: counter})
	if _, err := db.HandlerUpsert(ctx, pg.HandlerUpsert{Name: "h", URL: "http://example.test/", NewSecret: "whsec_x"}); err != nil {
		t.Fatal(err)
	}
	status := 200
	delay := int64(1500)
	cases := []struct {
		name            string
		kind            string
		state, result   json.RawMessage
		delay           *int64
		bodies          *pg.StepBodies
		cancelRequested bool
		child           bool
	}{
		{name: "done with a result and bodies", kind: pg.KindDone, result: json.RawMessage(`{"r": 1}`),
			bodies: &pg.StepBodies{Request: &pg.StepBody{Text: `{"q":1}`, Size: 7}, Response: &pg.StepBody{Text: `{"done":{}}`, Size: 11}}},
		{name: "next with a state and a delay", kind: pg.KindNext, state: json.RawMessage(`{"s": 2}`), delay: &delay},
		{name: "bare next", kind: pg.KindNext},
		// JSON null is a value, not an absent one: the arrays carry absent as NULL.
		{name: "done with a null result", kind: pg.KindDone, result: json.RawMessage(`null`)},
		{name: "next with a null state", kind: pg.KindNext, state: json.RawMessage(`null`)},
		{name: "next of a cancelled job", kind: pg.KindNext, state: json.RawMessage(`{"s": 3}`), cancelRequested: true},
		{name: "done of a cancelled job", kind: pg.KindDone, cancelRequested: true},
		{name: "done of a child", kind: pg.KindDone, child: true},
	}
	ids, answers := map[string][]int64{}, map[string][]string{}
	for _, queue := range []string{"plain", "general"} {
		for _, c := range cases {
			parent := "NULL"
			if c.child {
				pid, err := db.QueryInt(ctx, `INSERT INTO jobs (queue, handler, input, max_attempts, status, pending_children, eligible_at, wake)
					VALUES ('parents', 'h', '{}', 5, 'awaiting', 1, 'infinity', NULL) RETURNING id`)
				if err != nil {
					t.Fatal(err)
				}
				parent = fmt.Sprint(pid)
			}
			id, err := db.QueryInt(ctx, `INSERT INTO jobs (queue, handler, input, max_attempts, parent_id, state)
				VALUES ($1, 'h', '{"n": 1}', 5, `+parent+`, '{"before": true}') RETURNING id`, queue)
			if err != nil {
				t.Fatal(err)
			}
			ids[queue] = append(ids[queue], id)
		}
		claimed, err := db.JobClaimBatch(ctx, pg.JobClaimParams{Queue: queue, Limit: 100, LeaseTTL: time.Minute, Owner: "t", SignalCap: 100})
		if err != nil || len(claimed) != len(cases) {
			t.Fatalf("claim %s: %d, %v", queue, len(claimed), err)
		}
		byID := map[int64]pg.ClaimedJob{}
		for _, c := range claimed {
			byID[c.ID] = c
		}
		var recs []pg.OutcomeRecord
		for i, c := range cases {
			cl := byID[ids[queue][i]]
			if c.cancelRequested {
				if _, err := db.Exec(ctx, `UPDATE jobs SET cancel_requested = true WHERE id = $1`, cl.ID); err != nil {
					t.Fatal(err)
				}
			}
			recs = append(recs, pg.OutcomeRecord{ID: cl.ID, Token: cl.LeaseToken, Kind: c.kind, Label: c.kind,
				State: c.state, Result: c.result, DelayMS: c.delay, Bodies: c.bodies, HTTPStatus: &status, Attempt: cl.Attempt})
		}
		// A stale outcome of the first job (a token it no longer holds) ahead of its
		// current one: it applies nothing, and the answer names the current one.
		stale := recs[0]
		stale.Token = "00000000-0000-4000-8000-000000000001"
		recs = append([]pg.OutcomeRecord{stale}, recs...)
		var applied []pg.OutcomeApplied
		if queue == "plain" {
			before := counter.Count("JobApplyPlainOutcomes")
			applied, err = db.JobApplyOutcomes(ctx, recs, false)
			if counter.Count("JobApplyPlainOutcomes") != before+1 {
				t.Fatal("JobApplyOutcomes did not take the plain statement for plain outcomes")
			}
		} else {
			applied, err = db.JobApplyOutcomesGeneral(ctx, recs)
		}
		if err != nil || len(applied) != len(cases) {
			t.Fatalf("%s outcomes: %d applied, %v", queue, len(applied), err)
		}
		for _, a := range applied {
			i := slices.Index(ids[queue], a.ID)
			if i < 0 || a.Label != cases[i].kind || a.Handler != "h" || a.StartedAt.IsZero() || a.Token != byID[a.ID].LeaseToken {
				t.Fatalf("%s: answer %+v", queue, a)
			}
			// Ready is "claim it now": runnable and due, never a finished job.
			if want := a.Status == "runnable" && cases[i].delay == nil; a.Ready != want {
				t.Errorf("%s: %s: %s ready=%v, want %v", queue, cases[i].name, a.Status, a.Ready, want)
			}
			answers[queue] = append(answers[queue], fmt.Sprintf("%s: %s ready=%v", cases[i].name, a.Status, a.Ready))
		}
		slices.Sort(answers[queue])
	}
	// Everything but identities and clocks, with the delay of a job that runs again as an
	// offset from updated_at.
	const jobShape = `SELECT jsonb_build_object(
		'row', to_jsonb(j) - '{id,queue,created_at,updated_at,finished_at,eligible_at,attempted_at,parent_id}'::text[],
		'finished', j.finished_at IS NOT NULL,
		'sql_nulls', jsonb_build_array(j.state IS NULL, j.result IS NULL),  -- to_jsonb writes both nulls alike
		'delay_ms', CASE WHEN j.finished_at IS NOT NULL THEN NULL WHEN j.eligible_at = 'infinity' THEN -1 ELSE round(extract(epoch FROM j.eligible_at - j.updated_at) * 1000) END,
		'parent', (SELECT to_jsonb(p) - '{id,created_at,updated_at,eligible_at}'::text[] FROM jobs p WHERE p.id = j.parent_id),
		'history', (SELECT jsonb_agg(to_jsonb(s) - '{id,job_id,queue,started_at,finished_at}'::text[]
		                             || jsonb_build_object('started_at_is_attempt', s.started_at = j.attempted_at))
		            FROM steps s WHERE s.job_id = j.id))::text
		FROM jobs j WHERE j.id = $1`
	if !slices.Equal(answers["plain"], answers["general"]) {
		t.Errorf("answers:\nplain   %q\ngeneral %q", answers["plain"], answers["general"])
	}
	for i, c := range cases {
		plain, err := db.QueryStrings(ctx, jobShape, ids["plain"][i])
		if err != nil {
			t.Fatal(err)
		}
		general, err := db.QueryStrings(ctx, jobShape, ids["general"][i])
		if err != nil {
			t.Fatal(err)
		}
		if plain[0][0] != general[0][0] {
			t.Errorf("%s:\nplain   %s\ngeneral %s", c.name, plain[0][0], general[0][0])
		}
	}
}
