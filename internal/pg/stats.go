package pg

import (
	"context"
	"encoding/json"
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

// StepStatsPoint is one bucket of finished attempts and their latency histogram:
// LatencyBuckets ascending (engine.LatencyBucket numbers), LatencyCounts the attempts in
// each (both empty for an empty bucket).
type StepStatsPoint struct {
	At                      time.Time
	OK, Failed, Done, Total int64
	LatencyBuckets          []int
	LatencyCounts           []int64
}

// StepStats returns the time-bucketed series of a queue's or a handler's finished steps,
// one point per bucket, oldest first (StepStats in sql/stats.sql: reads the window's
// rollup rows only).
func (db *DB) StepStats(ctx context.Context, p StepStatsParams) ([]StepStatsPoint, error) {
	rows, err := db.q.StepStats(ctx, dbsqlc.StepStatsParams{Queue: p.Queue, Handler: p.Handler,
		BucketMs: p.Bucket.Milliseconds(), Buckets: p.Buckets})
	return convertAll(rows, func(r dbsqlc.StepStatsRow) StepStatsPoint {
		return StepStatsPoint{At: r.Bucket, OK: r.Ok, Failed: r.Failed, Done: r.Done, Total: r.Total,
			LatencyBuckets: r.LatencyBuckets, LatencyCounts: r.LatencyCounts}
	}), translate(err)
}

// StepRollup is what one process counted of one queue's and handler's attempts that
// finished in one second (a row of step_rollups, migration 0016).
type StepRollup struct {
	At      time.Time `json:"at"`
	Queue   string    `json:"queue"`
	Handler string    `json:"handler"`
	OK      int       `json:"ok"`
	Failed  int       `json:"failed"`
	Done    int       `json:"done"`
	Total   int       `json:"total"`
	// LatencyBuckets ascending, LatencyCounts the attempts in each.
	LatencyBuckets []int `json:"latency_buckets"`
	LatencyCounts  []int `json:"latency_counts"`
}

// StepRollupAppend inserts rollups with one statement (nothing when there are none).
func (db *DB) StepRollupAppend(ctx context.Context, rollups []StepRollup) error {
	if len(rollups) == 0 {
		return nil
	}
	doc, err := json.Marshal(rollups)
	if err != nil {
		return err
	}
	return translate(db.q.StepRollupAppend(ctx, doc))
}

// StepRollupTrim deletes the rollups older than before and says how many.
func (db *DB) StepRollupTrim(ctx context.Context, before time.Time) (int64, error) {
	n, err := db.q.StepRollupTrim(ctx, before)
	return n, translate(err)
}
