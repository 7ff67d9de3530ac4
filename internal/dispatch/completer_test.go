package dispatch

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// The completer fills its statements: 200 outcomes waiting when it starts are written by
// 4 statements of 50 with one worker; with three, the overflow workers share the backlog
// (no more than 8 statements) and every outcome is applied and reported once.
func TestCompleterFillsItsStatements(t *testing.T) {
	t.Parallel()
	for _, workers := range []int{1, 3} {
		counter := &pg.StatementCounter{}
		db := pgtest.Open(t, pgtest.NewDatabase(t), pg.Options{Counter: counter, MaxConns: 8})
		eng, err := engine.New(db, engine.Config{LeaseTTL: time.Hour}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if _, err := db.HandlerUpsert(ctx, pg.HandlerUpsert{Name: "h", URL: "http://127.0.0.1:9/"}); err != nil {
			t.Fatal(err)
		}
		jobs := make([]engine.NewJob, 200)
		for i := range jobs {
			jobs[i] = engine.NewJob{Handler: "h", Input: json.RawMessage(`{}`)}
		}
		if _, err := eng.InsertJobs(ctx, jobs); err != nil {
			t.Fatal(err)
		}
		var steps []engine.Step
		for len(steps) < len(jobs) {
			got, _, err := eng.Claim(ctx, "default", 100)
			if err != nil || len(got) == 0 {
				t.Fatalf("claimed %d (%v)", len(got), err)
			}
			steps = append(steps, got...)
		}
		cfg := Config{OutcomeBatch: 50, OutcomeWorkers: workers}
		cfg.applyDefaults()
		c := newCompleter(eng, cfg, NewMetrics(nil), slog.New(slog.DiscardHandler))
		var mu sync.Mutex
		reported := map[int64]int{}
		var wg sync.WaitGroup
		for _, st := range steps { // all queued before a worker runs: the channel holds 4 batches
			wg.Add(1)
			c.submit(st.WithOutcome(engine.Outcome{Kind: pg.KindDone, Label: "done"}), breakerNote{}, func(a *engine.OutcomeApplied, err error) {
				defer wg.Done()
				if err != nil || a == nil || a.Status != "done" {
					t.Errorf("job %d: applied %+v, %v", st.ID, a, err)
				}
				mu.Lock()
				reported[st.ID]++
				mu.Unlock()
			})
		}
		before := counter.Count("JobApplyOutcomes")
		c.start()
		wg.Wait()
		c.stop()
		statements := counter.Count("JobApplyOutcomes") - before
		t.Logf("%d workers: 200 outcomes in %d statements", workers, statements)
		if workers == 1 && statements != 4 || statements > 8 {
			t.Fatalf("%d workers: 200 outcomes took %d statements of at most 50", workers, statements)
		}
		for _, st := range steps {
			if reported[st.ID] != 1 {
				t.Fatalf("job %d reported %d times", st.ID, reported[st.ID])
			}
		}
	}
}
