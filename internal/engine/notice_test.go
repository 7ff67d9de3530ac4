package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// Two processes (engines with their own names and pools) listen for work. A's inserts
// that its dispatcher claims at once (SetLocalClaims answering yes) reach A's listener
// and not B's; an insert A's dispatcher has no room for, and one after A's dispatcher
// stopped (SetLocalClaims(nil)), reach both. Each case inserts into a queue of its own,
// and notices arrive in commit order, so B's first notice after a case's tells it all.
func TestListenForWorkPassesOverWorkAnotherProcessClaims(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := newTestEngine(t, engine.Config{Owner: "process-a"})
	bDB := pgtest.Open(t, a.url, pg.Options{})
	b, err := engine.New(bDB, engine.Config{LeaseTTL: time.Minute, Owner: "process-b"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	bMetrics := engine.NewMetrics(nil, bDB)
	b.SetMetrics(bMetrics)
	next := func(notices <-chan string, who string) string {
		t.Helper()
		select {
		case q := <-notices:
			return q
		case <-time.After(30 * time.Second):
			t.Fatalf("%s heard nothing", who)
			return ""
		}
	}
	listen := func(eng *engine.Engine) <-chan string {
		notices := make(chan string, 100)
		go eng.ListenForWork(ctx, func(queue string) { notices <- queue }, nil)
		if got := next(notices, "the listener"); got != "" { // the connect's notice: listening
			t.Errorf("first notice %q, want the connect's", got)
		}
		return notices
	}
	toA, toB := listen(a.Engine), listen(b)
	room := 10
	a.SetLocalClaims(func(queue string, rows int) bool { return rows <= room })
	a.insert(t, engine.NewJob{Queue: "claimed-by-a"})
	if _, err := a.InsertJobs(ctx, jobsIn("too-many-for-a", room+1)); err != nil {
		t.Fatal(err)
	}
	a.SetLocalClaims(nil)
	a.insert(t, engine.NewJob{Queue: "after-a-stopped"})
	for _, want := range []string{"claimed-by-a", "too-many-for-a", "after-a-stopped"} {
		if got := next(toA, "A"); got != want {
			t.Errorf("A heard %q, want %q", got, want)
		}
	}
	for _, want := range []string{"too-many-for-a", "after-a-stopped"} {
		if got := next(toB, "B"); got != want {
			t.Errorf("B heard %q, want %q", got, want)
		}
	}
	if passed := testutil.ToFloat64(bMetrics.NoticesPassed); passed != 1 {
		t.Errorf("B counted %v notices passed, want 1", passed)
	}
}

// jobsIn is n jobs of handler "h" in queue.
func jobsIn(queue string, n int) []engine.NewJob {
	jobs := make([]engine.NewJob, n)
	for i := range jobs {
		jobs[i] = engine.NewJob{Handler: "h", Queue: queue}
	}
	return jobs
}
