package engine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// BenchmarkSpawnAndJoin measures a family of a parent and four children, without the
// webhook: the spawn's outcome (ns/op), then the children's `done` outcomes in one batch and
// what it takes to make their parent runnable (join-ns/op). "local": children without keys,
// at their parent's placement, joined by the outcome statement itself. "remote": each child
// with a concurrency key of its own; on Citus (TEST_CITUS=1) they live at their keys'
// placements (docs/citus.md, "A child away from its parent"): the spawn is a transaction on
// two or more shards, and each outcome batch that ends a remote child carries its end to the
// parent in a transaction of its own (a reaper sweep, should the parent still wait). On plain
// PostgreSQL the two are the same family. Run the two alternately: the machine is shared.
func BenchmarkSpawnAndJoin(b *testing.B) {
	for _, remote := range []bool{false, true} {
		b.Run(map[bool]string{false: "local", true: "remote"}[remote], func(b *testing.B) {
			benchmarkSpawnAndJoin(b, remote)
		})
	}
}

func benchmarkSpawnAndJoin(b *testing.B, remote bool) {
	ctx := context.Background()
	db := pgtest.Open(b, pgtest.NewDatabase(b), pg.Options{})
	eng, err := engine.New(db, engine.Config{LeaseTTL: time.Minute}, nil)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := db.HandlerUpsert(ctx, pg.HandlerUpsert{Name: "h", URL: "http://127.0.0.1:9/"}); err != nil {
		b.Fatal(err)
	}
	reaper := eng.NewReaper(engine.ReaperConfig{})
	claim := func(want int) []engine.Step {
		steps, _, err := eng.Claim(ctx, "default", 10)
		if err != nil || len(steps) != want {
			b.Fatalf("claimed %d steps (%v), want %d", len(steps), err, want)
		}
		return steps
	}
	var join time.Duration
	for i := range b.N {
		b.StopTimer()
		parent, err := eng.InsertJob(ctx, engine.NewJob{Handler: "h"})
		if err != nil {
			b.Fatal(err)
		}
		st := claim(1)[0]
		children := make([]pg.JobInsert, 4)
		for k := range children {
			children[k] = pg.JobInsert{Handler: "h"}
			if remote {
				key := fmt.Sprintf("key-%d-%d", i, k)
				children[k].ConcurrencyKey = &key
			}
		}
		b.StartTimer()
		if _, err := eng.ApplyOutcome(ctx, engine.StepOutcome{JobID: st.ID, Token: st.LeaseToken,
			Outcome: engine.Outcome{Kind: pg.KindSpawn, Label: "spawn", Children: children}}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		kids := claim(4)
		outcomes := make([]engine.StepOutcome, len(kids))
		for k, c := range kids {
			outcomes[k] = engine.StepOutcome{JobID: c.ID, Token: c.LeaseToken, Outcome: engine.Outcome{Kind: pg.KindDone, Label: "done"}}
		}
		start := time.Now()
		for _, r := range eng.ApplyOutcomes(ctx, outcomes) {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
		}
		for j, err := db.JobGet(ctx, parent.ID); j.Status != "runnable"; j, err = db.JobGet(ctx, parent.ID) {
			if err != nil {
				b.Fatal(err)
			}
			if _, err := reaper.Sweep(ctx); err != nil {
				b.Fatal(err)
			}
		}
		join += time.Since(start)
		if _, err := eng.ApplyOutcome(ctx, engine.StepOutcome{JobID: parent.ID, Token: claim(1)[0].LeaseToken,
			Outcome: engine.Outcome{Kind: pg.KindDone, Label: "done"}}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(join.Nanoseconds())/float64(b.N), "join-ns/op")
}
