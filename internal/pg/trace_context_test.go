package pg_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

const (
	traceparentA = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	traceparentB = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
)

// A job's trace context goes in with every insert (plain, general and, on Citus, the
// dialect's), comes back from the claim with the job's eligible time in one column (NULL
// for a job without one), and a spawned child gets its own or else its parent's.
func TestTraceContextIsKeptClaimedAndInherited(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	if _, err := db.HandlerUpsert(ctx, pg.HandlerUpsert{Name: "h", URL: "http://127.0.0.1:1/steps"}); err != nil {
		t.Fatal(err)
	}
	withState := traceparentA + " vendor=abc"
	key := "keyed"
	items := []pg.JobInsert{
		{Handler: "h", Queue: "tc", TraceContext: &withState},
		{Handler: "h", Queue: "tc"},
	}
	plain, err := db.JobInsertMany(ctx, items) // no key: JobInsertPlain
	if err != nil {
		t.Fatal(err)
	}
	general, err := db.JobInsertMany(ctx, []pg.JobInsert{{Handler: "h", Queue: "tc", Key: &key, TraceContext: &withState}})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range []pg.Job{plain[0].Job, general[0].Job} {
		got, err := db.JobGet(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if j.TraceContext == nil || *j.TraceContext != withState || got.TraceContext == nil || *got.TraceContext != withState {
			t.Fatalf("job %d: answered %v, stored %v; want %q", j.ID, j.TraceContext, got.TraceContext, withState)
		}
	}
	if got, _ := db.JobGet(ctx, plain[1].ID); got.TraceContext != nil || plain[1].TraceContext != nil {
		t.Fatalf("a job inserted without a trace context has one: %q", *got.TraceContext)
	}

	claimed, err := db.JobClaimBatch(ctx, pg.JobClaimParams{Queue: "tc", Limit: 10, LeaseTTL: time.Minute, Owner: "t", SignalCap: 10})
	if err != nil || len(claimed) != 3 {
		t.Fatalf("claimed %d (%v)", len(claimed), err)
	}
	var parent pg.ClaimedJob
	for _, c := range claimed {
		switch c.ID {
		case plain[1].ID:
			if c.Trace != nil {
				t.Fatalf("the claim answers a trace for a job without one: %q", *c.Trace)
			}
		default:
			us, tc, ok := strings.Cut(valueOf(c.Trace), " ")
			n, err := strconv.ParseInt(us, 10, 64)
			if !ok || err != nil || tc != withState {
				t.Fatalf("the claim's trace column: %q", valueOf(c.Trace))
			}
			if eligible := time.UnixMicro(n); eligible.After(c.ClaimedAt) || c.ClaimedAt.Sub(eligible) > time.Minute {
				t.Fatalf("eligible %s, claimed %s", eligible, c.ClaimedAt)
			}
			if c.ID == plain[0].ID {
				parent = c
			}
		}
	}

	// A spawn: one child with a context of its own, one without.
	own := traceparentB
	children := `[{"handler": "h", "trace_context": "` + own + `"}, {"handler": "h"}]`
	applied, err := db.JobApplyOutcomes(ctx, []pg.OutcomeRecord{{ID: parent.ID, Token: parent.LeaseToken, Kind: pg.KindSpawn,
		Label: "spawn", Children: []byte(children)}}, false)
	if err != nil || len(applied) != 1 {
		t.Fatalf("spawn: %v %v", applied, err)
	}
	kids, err := db.JobList(ctx, pg.JobListParams{ParentID: &parent.ID, Limit: 10})
	if err != nil || len(kids) != 2 {
		t.Fatalf("children: %v %v", kids, err)
	}
	got := map[string]bool{}
	for _, k := range kids {
		got[valueOf(k.TraceContext)] = true
	}
	if !got[own] || !got[withState] {
		t.Fatalf("the children's trace contexts: %v, want %q and the parent's %q", got, own, withState)
	}
}

// gendurable_enqueue takes traceparent and tracestate options, and refuses malformed ones
// naming the option.
func TestSQLEnqueueTakesATraceContext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, conn := enqueueDB(t)
	var id int64
	if err := conn.QueryRow(ctx, `SELECT gendurable_enqueue('h', '{}', jsonb_build_object('traceparent', $1::text,
		'tracestate', 'vendor=abc'))`, traceparentA).Scan(&id); err != nil {
		t.Fatal(err)
	}
	j, err := db.JobGet(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if valueOf(j.TraceContext) != traceparentA+" vendor=abc" {
		t.Fatalf("trace context %q", valueOf(j.TraceContext))
	}
	for opts, field := range map[string]string{
		`{"traceparent": "00-xyz"}`: "traceparent",
		`{"traceparent": "00-00000000000000000000000000000000-00f067aa0ba902b7-01"}`: "traceparent",
		`{"tracestate": "a=b"}`: "tracestate",
		`{"traceparent": 7}`:    "traceparent",
	} {
		_, err := conn.Exec(ctx, `SELECT gendurable_enqueue('h', '{}', $1::jsonb)`, opts)
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Fatalf("%s: %v, want a refusal naming %s", opts, err, field)
		}
	}
}

func valueOf(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// A signal's trace context becomes the job's when the job has none, and leaves one alone.
func TestSignalGivesItsTraceContextToAJobWithout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	if _, err := db.HandlerUpsert(ctx, pg.HandlerUpsert{Name: "h", URL: "http://127.0.0.1:1/steps"}); err != nil {
		t.Fatal(err)
	}
	a := traceparentA
	jobs, err := db.JobInsertMany(ctx, []pg.JobInsert{{Handler: "h"}, {Handler: "h", TraceContext: &a}})
	if err != nil {
		t.Fatal(err)
	}
	b := traceparentB
	for _, j := range jobs {
		if _, err := db.SignalDeliver(ctx, &j.ID, nil, "go", nil, &b); err != nil {
			t.Fatal(err)
		}
	}
	for i, want := range []string{traceparentB, traceparentA} {
		got, err := db.JobGet(ctx, jobs[i].ID)
		if err != nil {
			t.Fatal(err)
		}
		if valueOf(got.TraceContext) != want {
			t.Fatalf("job %d: trace context %q, want %q", i, valueOf(got.TraceContext), want)
		}
	}
}
