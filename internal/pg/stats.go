package pg

import (
	"context"
	"time"

	"github.com/gendurable/gendurable/internal/pg/dbsqlc"
)

// StepStatsParams asks for the series of one queue or one handler (exactly one is set):
// Buckets buckets of Bucket each, the last one holding the database's now.
type StepStatsParams struct {
	Queue, Handler *string
	Bucket         time.Duration
	Buckets        int
}

// StepStatsPoint is one bucket of finished attempts. LatencyMs holds p50, p95 and p99 of
// their durations in milliseconds (nil for an empty bucket).
type StepStatsPoint struct {
	At                      time.Time
	OK, Failed, Done, Total int64
	LatencyMs               []float64
}

// StepStats returns the time-bucketed series of a queue's or a handler's finished steps,
// one point per bucket, oldest first (StepStats in sql/stats.sql: reads the window's rows only).
func (db *DB) StepStats(ctx context.Context, p StepStatsParams) ([]StepStatsPoint, error) {
	rows, err := db.q.StepStats(ctx, dbsqlc.StepStatsParams{Queue: p.Queue, Handler: p.Handler,
		BucketMs: p.Bucket.Milliseconds(), Buckets: p.Buckets})
	return convertAll(rows, func(r dbsqlc.StepStatsRow) StepStatsPoint {
		return StepStatsPoint{At: r.Bucket, OK: r.Ok, Failed: r.Failed, Done: r.Done, Total: r.Total, LatencyMs: r.LatencyMs}
	}), translate(err)
}
