package pg_test

import (
	"context"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
	"github.com/gendurable/gendurable/internal/proctimes"
)

// BenchmarkStepStatements measures what PostgreSQL spends on the two statements of a
// one-step job, without the webhook: claims of 100 and `done` outcomes of 100 on one
// connection, over a queue of 20 000 runnable jobs. It reports the backend's CPU (from
// /proc, so the database must run on this machine) and each statement's time, per step.
// "plain" is what the engine runs for plain rows (JobClaimPlain, JobApplyPlainOutcomes);
// "general" is the statements with admission and every outcome kind (JobClaimBatch,
// JobApplyOutcomes). cmd/bench measures the same inside a real drain; this one isolates
// the SQL. Run the two alternately, several times: the machine is shared.
func BenchmarkStepStatements(b *testing.B) {
	for _, general := range []bool{false, true} {
		b.Run(map[bool]string{false: "plain", true: "general"}[general], func(b *testing.B) {
			benchmarkStepStatements(b, general)
		})
	}
}

func benchmarkStepStatements(b *testing.B, general bool) {
	const jobs, batch = 20000, 100
	ctx := context.Background()
	db := pgtest.Open(b, pgtest.NewDatabase(b), pg.Options{MaxConns: 1})
	if _, err := db.HandlerUpsert(ctx, pg.HandlerUpsert{Name: "h", URL: "http://example.test/", NewSecret: "whsec_x"}); err != nil {
		b.Fatal(err)
	}
	pid, err := db.QueryInt(ctx, `SELECT pg_backend_pid()`)
	if err != nil {
		b.Fatal(err)
	}
	p := pg.JobClaimParams{Queue: "bench", Limit: batch, LeaseTTL: time.Minute, Owner: "bench", SignalCap: 100}
	status := 200
	var cpu, claimTime, outcomeTime time.Duration
	steps := 0
	for range b.N {
		b.StopTimer()
		if _, err := db.Exec(ctx, `INSERT INTO jobs (queue, handler, input, max_attempts)
			SELECT 'bench', 'h', '{"n":1}', 5 FROM generate_series(1, $1)`, jobs); err != nil {
			b.Fatal(err)
		}
		for _, sql := range []string{`ANALYZE jobs`, `CHECKPOINT`} {
			if _, err := db.Exec(ctx, sql); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		before := backendCPU(b, pid)
		for {
			start := time.Now()
			var claimed []pg.ClaimedJob
			if general {
				claimed, err = db.JobClaimBatch(ctx, p)
			} else {
				claimed, _, err = db.JobClaimPlain(ctx, p)
			}
			if err != nil {
				b.Fatal(err)
			}
			claimTime += time.Since(start)
			if len(claimed) == 0 {
				break
			}
			recs := make([]pg.OutcomeRecord, len(claimed))
			for i, c := range claimed {
				recs[i] = pg.OutcomeRecord{ID: c.ID, Token: c.LeaseToken, Kind: pg.KindDone, Label: "done",
					HTTPStatus: &status, Attempt: c.Attempt}
			}
			start = time.Now()
			var applied []pg.OutcomeApplied
			if general {
				applied, err = db.JobApplyOutcomesGeneral(ctx, recs)
			} else {
				applied, err = db.JobApplyOutcomes(ctx, recs, false)
			}
			if err != nil || len(applied) != len(recs) {
				b.Fatalf("outcomes: %d of %d, %v", len(applied), len(recs), err)
			}
			outcomeTime += time.Since(start)
			steps += len(claimed)
		}
		cpu += backendCPU(b, pid) - before
	}
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(steps) }
	b.ReportMetric(per(cpu), "pg-cpu-µs/step")
	b.ReportMetric(per(claimTime), "claim-µs/step")
	b.ReportMetric(per(outcomeTime), "outcome-µs/step")
}

// backendCPU reads a backend's utime+stime from /proc.
func backendCPU(b *testing.B, pid int64) time.Duration {
	self, _, _, err := proctimes.Read(int(pid))
	if err != nil {
		b.Skipf("the backend's /proc entry: %v (the database is not on this machine)", err)
	}
	return time.Duration(self) * time.Second / proctimes.ClockTicks
}
