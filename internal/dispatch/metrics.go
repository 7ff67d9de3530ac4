package dispatch

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the dispatcher's Prometheus instruments (names prefixed gendurable_).
type Metrics struct {
	Steps           *prometheus.CounterVec   // steps finished, by queue, handler, outcome label
	WebhookDuration *prometheus.HistogramVec // webhook call latency, by handler and status class
	InFlight        *prometheus.GaugeVec     // steps running now, by queue
	LeaseLost       *prometheus.CounterVec   // outcomes or heartbeats fenced off, by where
	Picks           *prometheus.CounterVec   // pick statements, by queue
	PickRows        *prometheus.HistogramVec // rows claimed per pick, by queue
	PickDuration    *prometheus.HistogramVec // pick statement latency, by queue
	PickContended   *prometheus.CounterVec   // picks retried after a concurrency-key race
	PickThrottled   *prometheus.CounterVec   // empty picks while due work waited on a gate or rate limit
	OutcomeBatch    prometheus.Histogram     // outcomes written per statement
	ListenErrors    prometheus.Counter       // LISTEN connections lost (reconnected with backoff)
	BreakerOpens    *prometheus.CounterVec   // circuit breakers this process opened, by handler
	BreakerProbes   *prometheus.CounterVec   // circuit breaker probes this process sent, by handler
	BreakerParked   *prometheus.CounterVec   // claimed steps parked unrun by an open breaker, by handler
}

// NewMetrics creates the instruments and registers them on reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Steps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gendurable_steps_total",
			Help: "Steps finished, by queue, handler and outcome (next, done, retry, timeout, http_error…)."},
			[]string{"queue", "handler", "outcome"}),
		WebhookDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gendurable_webhook_duration_seconds",
			Help:    "Latency of step webhook calls, by handler and status class (2xx, 4xx, 5xx, error).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}},
			[]string{"handler", "class"}),
		InFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gendurable_in_flight_steps",
			Help: "Steps this process is running now, by queue."}, []string{"queue"}),
		LeaseLost: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gendurable_lease_lost_total",
			Help: "Outcomes and heartbeats refused because the lease token was no longer current, by where."},
			[]string{"where"}),
		Picks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gendurable_picks_total",
			Help: "Pick statements run, by queue."}, []string{"queue"}),
		PickRows: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gendurable_pick_rows",
			Help: "Rows claimed per pick, by queue.", Buckets: []float64{0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000}},
			[]string{"queue"}),
		PickDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gendurable_pick_duration_seconds",
			Help: "Latency of the pick statement, by queue.", Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 12)},
			[]string{"queue"}),
		PickContended: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gendurable_pick_contended_total",
			Help: "Picks retried after losing a concurrency-key, gate or rate-bucket race to another process."},
			[]string{"queue"}),
		PickThrottled: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gendurable_pick_throttled_total",
			Help: "Empty picks while due jobs waited on a gate or a rate limit."}, []string{"queue"}),
		OutcomeBatch: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gendurable_outcome_batch_size",
			Help: "Outcomes written by one statement.", Buckets: []float64{1, 2, 5, 10, 20, 50, 100, 200}}),
		ListenErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "gendurable_listen_errors_total",
			Help: "LISTEN connections lost or refused; the dispatcher reconnects with backoff and polls meanwhile."}),
		BreakerOpens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gendurable_breaker_opens_total",
			Help: "Circuit breakers this process opened (the failure that reached the threshold was its), by handler."},
			[]string{"handler"}),
		BreakerProbes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gendurable_breaker_probes_total",
			Help: "Probes of an open circuit breaker this process sent, by handler."}, []string{"handler"}),
		BreakerParked: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gendurable_breaker_parked_steps_total",
			Help: "Claimed steps given back unrun because their handler's circuit breaker was open, by handler."},
			[]string{"handler"}),
	}
	if reg != nil {
		reg.MustRegister(m.Steps, m.WebhookDuration, m.InFlight, m.LeaseLost, m.Picks, m.PickRows,
			m.PickDuration, m.PickContended, m.PickThrottled, m.OutcomeBatch, m.ListenErrors,
			m.BreakerOpens, m.BreakerProbes, m.BreakerParked)
	}
	return m
}
