package pg

import (
	"context"
	"time"

	"github.com/gendurable/gendurable/internal/pg/dbsqlc"
)

// StepSpan is one attempt's lease, from its claim to its outcome.
type StepSpan struct {
	JobID      int64
	StartedAt  time.Time
	FinishedAt time.Time
}

// StepWindowOfQueue returns at most limit attempts of queue that finished in [from,
// until), oldest first (one range scan of steps_queue_finished).
func (db *DB) StepWindowOfQueue(ctx context.Context, queue string, from, until time.Time, limit int) ([]StepSpan, error) {
	rows, err := db.q.StepWindowOfQueue(ctx, dbsqlc.StepWindowOfQueueParams{Queue: queue, FromAt: from, UntilAt: until, MaxRows: limit})
	return convertAll(rows, func(r dbsqlc.StepWindowOfQueueRow) StepSpan { return StepSpan(r) }), translate(err)
}

// JobFlow is what a job holds of flow control: its concurrency key and first rate limit.
type JobFlow struct {
	ID             int64
	ConcurrencyKey *string
	RateLimit      *string
	RateKey        *string
	RateWeight     int
	Status         string
	AttemptedAt    *time.Time
}

// JobFlowListParams selects the jobs JobFlowList answers: those IDs names, and at most
// Limit executing ones holding ConcurrencyKey or drawing from the bucket (RateLimit,
// RateKey); nil fields select none.
type JobFlowListParams struct {
	IDs            []int64
	ConcurrencyKey *string
	RateLimit      *string
	RateKey        *string
	Limit          int
}

// JobFlowList returns the flow control of the jobs p selects (one statement; a job may
// come twice).
func (db *DB) JobFlowList(ctx context.Context, p JobFlowListParams) ([]JobFlow, error) {
	ids := p.IDs
	if ids == nil {
		ids = []int64{}
	}
	rows, err := db.q.JobFlowList(ctx, dbsqlc.JobFlowListParams{Ids: ids, ConcurrencyKey: p.ConcurrencyKey,
		RateLimit: p.RateLimit, RateKey: p.RateKey, MaxRows: p.Limit})
	return convertAll(rows, func(r dbsqlc.JobFlowListRow) JobFlow { return JobFlow(r) }), translate(err)
}
