package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
)

// The bounds of a step series: the read is proportional to the rollup rows in the
// window (one per second, handler and process), so the window is capped, and so is the
// number of points a chart draws.
const (
	DefaultStatsWindow = time.Hour
	DefaultStatsBucket = time.Minute
	MaxStatsWindow     = 24 * time.Hour
	MaxStatsBuckets    = 500
	MinStatsBucket     = time.Second
)

// StepStatsQuery asks for the series of one queue or one handler (exactly one is set)
// over the last Window in buckets of Bucket (zero: DefaultStatsWindow, DefaultStatsBucket).
type StepStatsQuery struct {
	Queue, Handler *string
	Window, Bucket time.Duration
}

// StepSeries is a queue's or a handler's finished attempts over time: Points has one
// point per bucket from From to To, oldest first; Window is the buckets' total width
// (the window asked for, rounded up to whole buckets).
type StepSeries struct {
	Queue, Handler *string
	Window, Bucket time.Duration
	From, To       time.Time
	Points         []StepStatsPoint
}

// StepStatsPoint is one bucket: attempts by outcome class (OK + Retry + Failed = Total),
// the jobs they completed (Done, a part of OK), and their latency (nil when Total is 0).
type StepStatsPoint struct {
	At                             time.Time
	OK, Retry, Failed, Done, Total int64
	Latency                        *Latency
}

// Latency is the p50, p95 and p99 of the attempts' durations (finished_at - started_at),
// in milliseconds, read from a histogram of 8 buckets per doubling (within 4.4 %,
// LatencyBucket).
type Latency struct{ P50, P95, P99 float64 }

// StepStats returns the series of a queue's or a handler's steps: one statement reading
// the window's rollups only (StepRollups writes them, up to its Interval behind). A query beyond the bounds is a *ValidationError naming the
// query parameter.
func (e *Engine) StepStats(ctx context.Context, q StepStatsQuery) (StepSeries, error) {
	if q.Window == 0 {
		q.Window = DefaultStatsWindow
	}
	if q.Bucket == 0 {
		q.Bucket = DefaultStatsBucket
	}
	var fields []FieldError
	if (q.Queue == nil) == (q.Handler == nil) {
		fields = append(fields, FieldError{Field: "query/queue", Message: "give exactly one of queue and handler"})
	}
	switch {
	case q.Bucket < MinStatsBucket:
		fields = append(fields, FieldError{Field: "query/bucket", Message: fmt.Sprintf("must be at least %s", MinStatsBucket)})
	case q.Bucket%time.Millisecond != 0:
		fields = append(fields, FieldError{Field: "query/bucket", Message: "must be a whole number of milliseconds"})
	}
	buckets := 0
	switch {
	case q.Window <= 0 || q.Window > MaxStatsWindow:
		fields = append(fields, FieldError{Field: "query/window", Message: fmt.Sprintf("must be more than 0 and at most %s", MaxStatsWindow)})
	case q.Bucket >= MinStatsBucket:
		buckets = int((q.Window + q.Bucket - 1) / q.Bucket)
		if buckets > MaxStatsBuckets {
			fields = append(fields, FieldError{Field: "query/bucket", Message: fmt.Sprintf(
				"the window of %s holds %d buckets of %s, more than %d: choose a wider bucket", q.Window, buckets, q.Bucket, MaxStatsBuckets)})
		}
	}
	if len(fields) > 0 {
		return StepSeries{}, &ValidationError{Errors: fields}
	}
	rows, err := e.db.StepStats(ctx, pg.StepStatsParams{Queue: q.Queue, Handler: q.Handler, Bucket: q.Bucket, Buckets: buckets})
	if err != nil {
		return StepSeries{}, err
	}
	s := StepSeries{Queue: q.Queue, Handler: q.Handler, Window: time.Duration(buckets) * q.Bucket, Bucket: q.Bucket,
		Points: make([]StepStatsPoint, len(rows))}
	for i, r := range rows {
		p := StepStatsPoint{At: r.At, OK: r.OK, Retry: r.Total - r.OK - r.Failed, Failed: r.Failed, Done: r.Done, Total: r.Total}
		p.Latency = latencyPercentiles(r.LatencyBuckets, r.LatencyCounts)
		s.Points[i] = p
	}
	if len(rows) > 0 {
		s.From, s.To = rows[0].At, rows[len(rows)-1].At.Add(q.Bucket)
	}
	return s, nil
}

// ThroughputPoint is one minute of a queue's finished steps: Failed counts every attempt
// that did not continue its step (retryable or not).
type ThroughputPoint struct {
	Minute              time.Time
	Done, Failed, Total int64
}

// QueueThroughput returns a queue's finished steps per minute over the last minutes,
// minutes without any left out: the older shape of StepStats (GET /v1/queues/{name}/throughput).
func (e *Engine) QueueThroughput(ctx context.Context, queue string, minutes int) ([]ThroughputPoint, error) {
	s, err := e.StepStats(ctx, StepStatsQuery{Queue: &queue, Window: time.Duration(minutes) * time.Minute, Bucket: time.Minute})
	if err != nil {
		return nil, err
	}
	out := []ThroughputPoint{}
	for _, p := range s.Points {
		if p.Total > 0 {
			out = append(out, ThroughputPoint{Minute: p.At, Done: p.Done, Failed: p.Retry + p.Failed, Total: p.Total})
		}
	}
	return out, nil
}
