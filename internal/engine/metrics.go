package engine

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gendurable/gendurable/internal/pg"
)

// Metrics are the engine's Prometheus instruments (names prefixed gendurable_). The zero
// value of *Metrics (nil) records nothing.
type Metrics struct {
	JobsInserted  *prometheus.CounterVec // jobs inserted, by queue
	Deduplicated  prometheus.Counter     // inserts answered with a live job holding the key
	Reaped        *prometheus.CounterVec // expired leases taken back, by resulting status
	AwaitTimeouts prometheus.Counter     // awaits woken by their deadline
	GCDeleted     prometheus.Counter     // finished jobs deleted by GC
	GateRepairs   prometheus.Counter     // gate slot counters repaired by the reconciler
	ScheduleTicks *prometheus.CounterVec // schedule ticks this process fired, by schedule and outcome
	// NoticesPassed counts work notices this process let pass: another process claims the
	// work at once (pg.WorkNotice).
	NoticesPassed prometheus.Counter
}

// NewMetrics creates the engine's instruments and registers them, with collectors that
// sample queue depth and the connection pool at scrape time, on reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer, db *pg.DB) *Metrics {
	m := &Metrics{
		JobsInserted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gendurable_jobs_inserted_total",
			Help: "Jobs inserted through the API, by queue (children spawned by a step are not counted)."}, []string{"queue"}),
		Deduplicated: prometheus.NewCounter(prometheus.CounterOpts{Name: "gendurable_jobs_deduplicated_total",
			Help: "Inserts answered with the live job that already held their key."}),
		Reaped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gendurable_reaped_total",
			Help: "Steps whose lease expired and that the reaper took back, by the status they were put in."}, []string{"status"}),
		AwaitTimeouts: prometheus.NewCounter(prometheus.CounterOpts{Name: "gendurable_await_timeouts_total",
			Help: "Awaiting jobs woken by their deadline."}),
		GCDeleted: prometheus.NewCounter(prometheus.CounterOpts{Name: "gendurable_gc_deleted_total",
			Help: "Finished jobs deleted after their retention."}),
		GateRepairs: prometheus.NewCounter(prometheus.CounterOpts{Name: "gendurable_gate_repairs_total",
			Help: "Gate slot counters the reconciler found wrong and repaired."}),
		ScheduleTicks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gendurable_schedule_ticks_total",
			Help: "Schedule ticks this process fired, by schedule and outcome: fired (a job made), skipped " +
				"(overlap skip, the previous run still live), no_handler (the handler is not registered)."},
			[]string{"schedule", "outcome"}),
		NoticesPassed: prometheus.NewCounter(prometheus.CounterOpts{Name: "gendurable_work_notices_passed_total",
			Help: "Notices of new work this process's dispatcher did not wake for: the process that inserted it claims it at once."}),
	}
	if reg != nil {
		reg.MustRegister(m.JobsInserted, m.Deduplicated, m.Reaped, m.AwaitTimeouts, m.GCDeleted, m.GateRepairs, m.ScheduleTicks, m.NoticesPassed,
			&depthCollector{db: db}, &poolCollector{db: db}, &breakerCollector{db: db})
	}
	return m
}

// depthCollector reports jobs per queue and status, sampled at most every 5 seconds so
// that frequent scrapes cost one grouped count per interval.
type depthCollector struct {
	db     *pg.DB
	mu     sync.Mutex
	at     time.Time
	counts []pg.QueueCount
}

var (
	depthDesc  = prometheus.NewDesc("gendurable_queue_jobs", "Jobs per queue and status (sampled).", []string{"queue", "status"}, nil)
	oldestDesc = prometheus.NewDesc("gendurable_queue_oldest_runnable_age_seconds",
		"Age of the oldest due runnable job per queue: how far behind the queue is.", []string{"queue"}, nil)
)

func (c *depthCollector) Describe(ch chan<- *prometheus.Desc) { ch <- depthDesc; ch <- oldestDesc }

func (c *depthCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.at) > 5*time.Second {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		counts, err := c.db.QueueCounts(ctx, nil)
		cancel()
		if err == nil {
			c.counts, c.at = counts, time.Now()
		}
	}
	for _, q := range c.counts {
		ch <- prometheus.MustNewConstMetric(depthDesc, prometheus.GaugeValue, float64(q.N), q.Queue, q.Status)
		if q.Status == "runnable" && q.OldestRunnable != nil {
			ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue,
				max(time.Since(*q.OldestRunnable).Seconds(), 0), q.Queue)
		}
	}
}

// poolCollector reports the database connection pool.
type poolCollector struct{ db *pg.DB }

var (
	poolConnsDesc = prometheus.NewDesc("gendurable_db_connections", "Pool connections by state.", []string{"state"}, nil)
	poolMaxDesc   = prometheus.NewDesc("gendurable_db_connections_max", "Pool size limit.", nil, nil)
	poolWaitDesc  = prometheus.NewDesc("gendurable_db_acquire_wait_seconds_total", "Time spent waiting for a pool connection.", nil, nil)
)

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- poolConnsDesc
	ch <- poolMaxDesc
	ch <- poolWaitDesc
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.db.Stats()
	ch <- prometheus.MustNewConstMetric(poolConnsDesc, prometheus.GaugeValue, float64(s.InUse), "in_use")
	ch <- prometheus.MustNewConstMetric(poolConnsDesc, prometheus.GaugeValue, float64(s.Idle), "idle")
	ch <- prometheus.MustNewConstMetric(poolMaxDesc, prometheus.GaugeValue, float64(s.Max))
	ch <- prometheus.MustNewConstMetric(poolWaitDesc, prometheus.CounterValue, s.AcquireWait.Seconds())
}
