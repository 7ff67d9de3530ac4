package dispatch_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/dispatch"
	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/webhook"
)

// BenchmarkDrainOneStepJobs drains 10 000 one-step jobs through a real (in-process)
// webhook and reports steps/s and statements per step. cmd/bench measures the same with
// the receiver in its own process.
func BenchmarkDrainOneStepJobs(b *testing.B) {
	const jobs = 10000
	for range b.N {
		b.StopTimer()
		h := newHarness(b, 30*time.Second)
		rcv := newReceiver(b, func(w http.ResponseWriter, req *webhook.StepRequest) {
			answer(w, webhook.Response{Done: &webhook.Done{}})
		})
		h.handler(b, "h", rcv.URL, 3)
		batch := make([]engine.NewJob, jobs)
		for i := range batch {
			batch[i] = engine.NewJob{Handler: "h"}
		}
		h.insert(b, batch...)
		if _, err := h.db.QueueUpsert(context.Background(), pg.QueueUpsert{Name: "default", MaxInFlight: ptr(200), Batch: ptr(100)}); err != nil {
			b.Fatal(err)
		}
		h.counter.Reset()
		_, _ = h.db.Exec(context.Background(), `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`)
		_, _ = h.db.Exec(context.Background(), `SELECT pg_stat_statements_reset()`)
		b.StartTimer()
		started := time.Now()
		d := startDispatcher(b, h.eng, dispatch.Config{})
		for {
			n, err := h.db.QueryInt(context.Background(), `-- probe
				SELECT count(*) FROM jobs WHERE status = 'done'`)
			if err != nil {
				b.Fatal(err)
			}
			if n == jobs {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		elapsed := time.Since(started)
		b.StopTimer()
		d.Stop(context.Background())
		if rows, err := h.db.QueryStrings(context.Background(), `-- probe
			SELECT calls, round(total_exec_time::numeric, 1), round(total_plan_time::numeric, 1), left(regexp_replace(query, '\s+', ' ', 'g'), 60)
			FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
			ORDER BY total_exec_time + total_plan_time DESC LIMIT 6`); err != nil {
			b.Logf("pg_stat_statements: %v", err)
		} else {
			for _, r := range rows {
				b.Logf("calls=%s exec_ms=%s plan_ms=%s %s", r[0], r[1], r[2], r[3])
			}
		}
		c := h.counter.Snapshot()
		b.ReportMetric(float64(jobs)/elapsed.Seconds(), "steps/s")
		claims, outcomes := c["JobClaimBatch"]+c["JobClaimPlain"], c["JobApplyOutcomes"]+c["JobApplyPlainOutcomes"]
		claimTime := h.counter.Time("JobClaimBatch") + h.counter.Time("JobClaimPlain")
		outcomeTime := h.counter.Time("JobApplyOutcomes") + h.counter.Time("JobApplyPlainOutcomes")
		b.ReportMetric(float64(outcomes)/jobs, "outcome-stmts/step")
		b.ReportMetric(float64(claims)/jobs, "claim-stmts/step")
		b.ReportMetric(float64(claimTime.Microseconds())/float64(max(claims, 1)), "µs/claim")
		b.ReportMetric(float64(outcomeTime.Microseconds())/float64(max(outcomes, 1)), "µs/outcome-stmt")
		b.ReportMetric(float64(c["JobReadyExists"]), "throttle-probes")
	}
}
