package pg

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Queue is a queue's settings.
type Queue struct {
	Name                 string
	Paused               bool
	MaxInFlight          int
	Batch                int
	Retention            *time.Duration // nil: the server default
	CreatedAt, UpdatedAt time.Time
}

// QueueUpsert changes a queue's settings; nil fields keep their value.
type QueueUpsert struct {
	Name        string
	Paused      *bool
	MaxInFlight *int
	Batch       *int
	// Retention sets the queue's retention; ClearRetention returns it to the default.
	Retention      *time.Duration
	ClearRetention bool
}

func scanQueue(r pgx.Row) (Queue, error) {
	var q Queue
	var retentionMS *float64
	err := r.Scan(&q.Name, &q.Paused, &q.MaxInFlight, &q.Batch, &retentionMS, &q.CreatedAt, &q.UpdatedAt)
	if retentionMS != nil {
		d := time.Duration(*retentionMS) * time.Millisecond
		q.Retention = &d
	}
	return q, err
}

// QueueUpsert creates or changes a queue.
func (db *DB) QueueUpsert(ctx context.Context, p QueueUpsert) (Queue, error) {
	var retentionMS *int64
	if p.Retention != nil {
		ms := p.Retention.Milliseconds()
		retentionMS = &ms
	}
	q, err := scanQueue(db.pool.QueryRow(ctx, stmt("QueueUpsert"), p.Name, p.Paused, p.MaxInFlight, p.Batch,
		p.ClearRetention, retentionMS))
	return q, translate(err)
}

// QueueList returns every queue's settings.
func (db *DB) QueueList(ctx context.Context) ([]Queue, error) {
	return collect(ctx, db, stmt("QueueList"), func(r pgx.Rows) (Queue, error) { return scanQueue(r) })
}

// QueueCount is the number of jobs of one queue in one status.
type QueueCount struct {
	Queue          string
	Status         string
	N              int64
	OldestRunnable *time.Time
}

// QueueCounts counts jobs per queue and status; queue nil counts every queue.
func (db *DB) QueueCounts(ctx context.Context, queue *string) ([]QueueCount, error) {
	return collect(ctx, db, stmt("QueueCounts"), func(r pgx.Rows) (QueueCount, error) {
		var c QueueCount
		return c, r.Scan(&c.Queue, &c.Status, &c.N, &c.OldestRunnable)
	}, queue)
}

// ThroughputPoint is one minute of a queue's finished steps.
type ThroughputPoint struct {
	Minute              time.Time
	Done, Failed, Total int64
}

// QueueThroughput returns the steps finished per minute on queue over the last minutes.
func (db *DB) QueueThroughput(ctx context.Context, queue string, minutes int) ([]ThroughputPoint, error) {
	return collect(ctx, db, stmt("QueueThroughput"), func(r pgx.Rows) (ThroughputPoint, error) {
		var p ThroughputPoint
		return p, r.Scan(&p.Minute, &p.Done, &p.Failed, &p.Total)
	}, queue, minutes)
}

// QueueEnsureMany creates the named queues that do not exist yet (default settings).
func (db *DB) QueueEnsureMany(ctx context.Context, names []string) error {
	_, err := db.pool.Exec(ctx, stmt("QueueEnsureMany"), names)
	return translate(err)
}
