package dispatch_test

import (
	"context"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/dispatch"
	"github.com/gendurable/gendurable/internal/pg"
)

// BenchmarkHealthyBesideADeadHandler drains 5 000 steps of a healthy handler on a queue
// that also holds a dead handler's backlog (its endpoint answers 503, its breaker is
// open), against the same drain with no dead handler, and reports the healthy steps/s:
//   - none: no dead handler;
//   - parked: 10 000 dead steps already parked by the breaker;
//   - arriving: 10 000 dead steps inserted just before the healthy ones, in the timed
//     window (before they were parked at insert, the drain also paid their first claim
//     and park: 2 470-2 919 healthy steps/s);
//   - scheduled: the control for arriving, 10 000 jobs of a third, healthy handler
//     inserted into the same queue in the timed window, due in an hour (not runnable yet,
//     as the parked ones), no breaker open;
//   - inserting: 10 000 jobs of a third handler inserted into a paused queue in the
//     timed window (an insert of runnable rows; see docs/flow-control.md for its outliers).
//
// go test -run '^$' -bench HealthyBesideADeadHandler -benchtime 1x -count 5 ./internal/dispatch/
func BenchmarkHealthyBesideADeadHandler(b *testing.B) {
	const healthy, dead = 5000, 10000
	for _, mode := range []string{"none", "parked", "arriving", "scheduled", "inserting"} {
		b.Run(mode, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				ctx := context.Background()
				h := newHarness(b, 30*time.Second)
				h.handler(b, "healthy", doneReceiver(b).URL, 3)
				if _, err := h.db.QueueUpsert(ctx, pg.QueueUpsert{Name: "shared", MaxInFlight: ptr(200), Batch: ptr(100)}); err != nil {
					b.Fatal(err)
				}
				d := startDispatcher(b, h.eng, dispatch.Config{})
				if mode == "inserting" || mode == "scheduled" {
					h.handler(b, "later", doneReceiver(b).URL, 3)
					if _, err := h.db.QueueUpsert(ctx, pg.QueueUpsert{Name: "held", Paused: ptr(true)}); err != nil {
						b.Fatal(err)
					}
				}
				if mode == "parked" || mode == "arriving" {
					endpoint := newFlakyEndpoint(b)
					h.breakerHandler(b, "dead", endpoint.URL, 5, time.Second, 0)
					h.insert(b, jobsOf("dead", 20)...)
					waitUntil(b, 30*time.Second, "the breaker opens", func() bool { return h.breaker(b, "dead").State != pg.BreakerClosed })
					waitUntil(b, 30*time.Second, "no dead step in flight", func() bool {
						return h.count(b, `SELECT count(*) FROM jobs WHERE handler = 'dead' AND status = 'executing'`) == 0
					})
				}
				if mode == "parked" {
					h.insert(b, jobsOf("dead", dead)...)
					waitUntil(b, 60*time.Second, "the dead backlog parked", func() bool {
						return h.count(b, `SELECT count(*) FROM jobs WHERE handler = 'dead' AND status = 'runnable' AND eligible_at > now() + interval '10 seconds'`) >= dead
					})
				}
				// The same table state for every mode: no autovacuum of the inserts above
				// competing with the timed drain for the two cores.
				if _, err := h.db.Exec(ctx, `VACUUM ANALYZE jobs`); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				started := time.Now()
				switch mode {
				case "arriving":
					h.insert(b, jobsOf("dead", dead)...)
				case "scheduled":
					later := jobsOf("later", dead)
					inAnHour := time.Now().Add(time.Hour)
					for i := range later {
						later[i].RunAt = &inAnHour
					}
					h.insert(b, later...)
				case "inserting":
					later := jobsOf("later", dead)
					for i := range later {
						later[i].Queue = "held"
					}
					h.insert(b, later...)
				}
				h.insert(b, jobsOf("healthy", healthy)...)
				waitUntil(b, 120*time.Second, "every healthy step done", func() bool {
					return h.count(b, `-- probe
						SELECT count(*) FROM jobs WHERE handler = 'healthy' AND status = 'done'`) == healthy
				})
				elapsed := time.Since(started)
				b.StopTimer()
				d.Stop(ctx)
				b.ReportMetric(healthy/elapsed.Seconds(), "healthy-steps/s")
				if testing.Verbose() {
					b.Logf("%s: statements %v; client-side time claims %s, outcomes %s, inserts %s", mode, h.counter.Snapshot(),
						h.counter.Time("JobClaimBatch")+h.counter.Time("JobClaimPlain"),
						h.counter.Time("JobApplyOutcomes")+h.counter.Time("JobApplyPlainOutcomes"), h.counter.Time("JobInsertMany")+h.counter.Time("JobInsertPlain"))
				}
			}
		})
	}
}
