package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// The reapers of two processes on one database: on plain PostgreSQL both sweep; on Citus,
// where a sweep starts with fan-outs to every shard, one sweeps at a time, the other
// passing its sweeps until the first one's turn lapses (three of its intervals after its
// last sweep), and then it takes the turn and the expired leases.
func TestReapersOfTwoProcessesTakeTurnsOnCitus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	te := newTestEngine(t, engine.Config{LeaseTTL: time.Hour, Owner: "process-a"})
	other, err := engine.New(pgtest.Open(t, te.url, pg.Options{}), engine.Config{LeaseTTL: time.Hour, Owner: "process-b"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	te.insert(t, engine.NewJob{})
	if steps, _, err := te.Claim(ctx, "default", 10); err != nil || len(steps) != 1 {
		t.Fatalf("claim: %d, %v", len(steps), err)
	}
	ahead := func() time.Time { return time.Now().Add(2 * time.Hour) }
	// a's turn is held for three of its intervals from each sweep: 3 s, longer than any
	// sweep of this test takes on a busy machine.
	a := te.NewReaper(engine.ReaperConfig{Interval: time.Second})
	b := other.NewReaper(engine.ReaperConfig{Interval: time.Second, Now: ahead})
	if st, err := a.Sweep(ctx); err != nil || st.Passed || st.Reaped != 0 {
		t.Fatalf("process a's sweep at the real time: %+v (%v); want a sweep that takes nothing", st, err)
	}
	st, err := b.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !pgtest.Citus() {
		if st.Passed || st.Reaped != 1 {
			t.Fatalf("process b's sweep two hours ahead: %+v; on plain PostgreSQL every reaper sweeps", st)
		}
		return
	}
	if !st.Passed || st.Reaped != 0 {
		t.Fatalf("process b's sweep while a has the turn: %+v; want it passed", st)
	}
	// a sweeps no more: its turn lapses 3 s after its sweep, and b's next sweep takes it.
	deadline := time.Now().Add(30 * time.Second)
	for st.Passed {
		if time.Now().After(deadline) {
			t.Fatal("process b never got the turn after a stopped sweeping")
		}
		time.Sleep(100 * time.Millisecond)
		if st, err = b.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if st.Reaped != 1 {
		t.Fatalf("process b's sweep with the turn: %+v; want the expired lease taken back", st)
	}
	if st, err := a.Sweep(ctx); err != nil || !st.Passed {
		t.Fatalf("process a's sweep while b has the turn: %+v (%v); want it passed", st, err)
	}
}
