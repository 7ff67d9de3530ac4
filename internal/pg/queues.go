package pg

import (
	"context"
	"time"

	"github.com/gendurable/gendurable/internal/pg/dbsqlc"
)

// Queue is a queue's settings.
type Queue struct {
	Name                 string
	Paused               bool
	MaxInFlight          int
	Batch                int
	Retention            *time.Duration // nil: the server default
	StepBodies           string         // which attempts keep their bodies: "failures", "all" or "off"
	Fairness             string         // how claims share the queue among fairness keys: FairnessNone or FairnessRoundRobin
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
	// StepBodies is "failures", "all" or "off" (nil: keep; "failures" for a new queue).
	StepBodies *string
	// Fairness is FairnessNone or FairnessRoundRobin (nil: keep; none for a new queue).
	Fairness *string
}

func queueFromRow(r dbsqlc.Queue) Queue {
	q := Queue{Name: r.Name, Paused: r.Paused, MaxInFlight: r.MaxInFlight, Batch: r.Batch,
		StepBodies: r.StepBodies, Fairness: r.Fairness, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
	if r.Retention.Valid {
		d := time.Duration(r.Retention.Microseconds)*time.Microsecond +
			time.Duration(r.Retention.Days)*24*time.Hour + time.Duration(r.Retention.Months)*30*24*time.Hour
		q.Retention = &d
	}
	return q
}

// QueueUpsert creates or changes a queue.
func (db *DB) QueueUpsert(ctx context.Context, p QueueUpsert) (Queue, error) {
	var retentionMS *int64
	if p.Retention != nil {
		ms := p.Retention.Milliseconds()
		retentionMS = &ms
	}
	q, err := db.q.QueueUpsert(ctx, dbsqlc.QueueUpsertParams{Name: p.Name, Paused: p.Paused, MaxInFlight: p.MaxInFlight,
		Batch: p.Batch, ClearRetention: p.ClearRetention, RetentionMs: retentionMS, StepBodies: p.StepBodies,
		Fairness: p.Fairness})
	if err == nil && p.Fairness != nil && *p.Fairness == FairnessRoundRobin {
		_, err = db.q.JobFairnessKeyBackfill(ctx, p.Name)
	}
	return queueFromRow(dbsqlc.Queue(q)), translate(err)
}

// QueueList returns every queue's settings.
func (db *DB) QueueList(ctx context.Context) ([]Queue, error) {
	qs, err := db.q.QueueList(ctx)
	return convertAll(qs, queueFromRow), translate(err)
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
	rows, err := db.q.QueueCounts(ctx, queue)
	return convertAll(rows, func(r dbsqlc.QueueCountsRow) QueueCount {
		c := QueueCount{Queue: r.Queue, Status: r.Status, N: r.N}
		if t, ok := r.OldestRunnable.(time.Time); ok { // min() of no runnable row is NULL
			c.OldestRunnable = &t
		}
		return c
	}), translate(err)
}

// QueueEnsureMany creates the named queues that do not exist yet (default settings).
func (db *DB) QueueEnsureMany(ctx context.Context, names []string) error {
	return translate(db.q.QueueEnsureMany(ctx, names))
}
