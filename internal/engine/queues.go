package engine

import (
	"context"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
)

// Queue is a queue's settings and how many of its jobs are in each status.
type Queue struct {
	Name        string
	Paused      bool
	MaxInFlight int
	Batch       int
	// Retention is how long finished jobs are kept (nil: the server default).
	Retention *time.Duration
	// StepBodies says which attempts keep their bodies in the history: StepBodiesFailures
	// (the default), StepBodiesAll or StepBodiesOff.
	StepBodies string
	// Fairness is how claims share the queue among fairness keys: FairnessNone (the
	// default) or FairnessRoundRobin (docs/fairness.md).
	Fairness string
	Counts   QueueCounts
	// OldestRunnableAt is when the longest-waiting runnable job became eligible (nil: none).
	OldestRunnableAt     *time.Time
	CreatedAt, UpdatedAt time.Time
}

// QueueCounts counts a queue's jobs per status.
type QueueCounts struct {
	Runnable, Executing, Awaiting, Done, Failed, Cancelled int64
}

// queueOf joins a queue's settings with its rows of counts (counts may hold other
// queues' rows, which are skipped).
func queueOf(q pg.Queue, counts []pg.QueueCount) Queue {
	out := Queue{Name: q.Name, Paused: q.Paused, MaxInFlight: q.MaxInFlight, Batch: q.Batch, Retention: q.Retention,
		StepBodies: q.StepBodies, Fairness: q.Fairness, CreatedAt: q.CreatedAt, UpdatedAt: q.UpdatedAt}
	for _, c := range counts {
		if c.Queue != q.Name {
			continue
		}
		switch c.Status {
		case "runnable":
			out.Counts.Runnable = c.N
			out.OldestRunnableAt = c.OldestRunnable
		case "executing":
			out.Counts.Executing = c.N
		case "awaiting":
			out.Counts.Awaiting = c.N
		case "done":
			out.Counts.Done = c.N
		case "failed":
			out.Counts.Failed = c.N
		case "cancelled":
			out.Counts.Cancelled = c.N
		}
	}
	return out
}

// ListQueues lists every queue with its counts, in two statements.
func (e *Engine) ListQueues(ctx context.Context) ([]Queue, error) {
	qs, err := e.db.QueueList(ctx)
	if err != nil {
		return nil, err
	}
	counts, err := e.db.QueueCounts(ctx, nil)
	if err != nil {
		return nil, err
	}
	out := make([]Queue, len(qs))
	for i, q := range qs {
		out[i] = queueOf(q, counts)
	}
	return out, nil
}

// GetQueue returns one queue with its counts; ErrNotFound when none has the name.
func (e *Engine) GetQueue(ctx context.Context, name string) (Queue, error) {
	qs, err := e.db.QueueList(ctx)
	if err != nil {
		return Queue{}, err
	}
	for _, q := range qs {
		if q.Name == name {
			counts, err := e.db.QueueCounts(ctx, &name)
			if err != nil {
				return Queue{}, err
			}
			return queueOf(q, counts), nil
		}
	}
	return Queue{}, ErrNotFound
}

// QueueSettings changes a queue's settings; nil fields keep their value.
type QueueSettings struct {
	Paused      *bool
	MaxInFlight *int // steps one server process runs at once, 1-100000
	Batch       *int // rows one pick claims at most, 1-1000
	// Retention is how long the queue's finished jobs are kept; 0 returns the queue to
	// the server's default.
	Retention *time.Duration
	// StepBodies is StepBodiesFailures, StepBodiesAll or StepBodiesOff.
	StepBodies *string
	// Fairness is FairnessNone or FairnessRoundRobin.
	Fairness *string
}

// SetQueue creates a queue or changes its settings (a *ValidationError for settings out
// of range; nothing is written) and answers it with its counts, in two statements.
func (e *Engine) SetQueue(ctx context.Context, name string, s QueueSettings) (Queue, error) {
	q, err := e.storeQueue(ctx, name, s)
	if err != nil {
		return Queue{}, err
	}
	counts, err := e.db.QueueCounts(ctx, &name)
	if err != nil {
		return Queue{}, err
	}
	return queueOf(q, counts), nil
}

// SetQueueWithoutCounts is SetQueue without the answer: one statement, and no count of
// the queue's jobs (which reads the whole jobs table: see QueueCounts).
func (e *Engine) SetQueueWithoutCounts(ctx context.Context, name string, s QueueSettings) error {
	_, err := e.storeQueue(ctx, name, s)
	return err
}

// storeQueue validates s and upserts the queue.
func (e *Engine) storeQueue(ctx context.Context, name string, s QueueSettings) (pg.Queue, error) {
	v := &validator{}
	v.name("name", name)
	if s.MaxInFlight != nil && (*s.MaxInFlight < 1 || *s.MaxInFlight > 100_000) {
		v.add("max_in_flight", "must be between 1 and 100000, got %d", *s.MaxInFlight)
	}
	if s.Batch != nil && (*s.Batch < 1 || *s.Batch > 1000) {
		v.add("batch", "must be between 1 and 1000, got %d", *s.Batch)
	}
	if s.Retention != nil && *s.Retention < 0 {
		v.add("retention", "must not be negative")
	}
	if b := s.StepBodies; b != nil && *b != StepBodiesFailures && *b != StepBodiesAll && *b != StepBodiesOff {
		v.add("step_bodies", "must be one of failures, all, off, got %q", *b)
	}
	if f := s.Fairness; f != nil {
		switch {
		case *f != FairnessNone && *f != FairnessRoundRobin:
			v.add("fairness", "must be one of none, round_robin, got %q", *f)
		}
	}
	if err := v.err(); err != nil {
		return pg.Queue{}, err
	}
	p := pg.QueueUpsert{Name: name, Paused: s.Paused, MaxInFlight: s.MaxInFlight, Batch: s.Batch, StepBodies: s.StepBodies,
		Fairness: s.Fairness}
	if s.Retention != nil {
		if *s.Retention > 0 {
			p.Retention = s.Retention
		} else {
			p.ClearRetention = true
		}
	}
	return e.db.QueueUpsert(ctx, p)
}

// ListQueueSettings returns every queue's settings without its counts: what the
// dispatcher reloads every second (one read of the queues table).
func (e *Engine) ListQueueSettings(ctx context.Context) ([]Queue, error) {
	qs, err := e.db.QueueList(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Queue, len(qs))
	for i, q := range qs {
		out[i] = queueOf(q, nil)
	}
	return out, nil
}

// SettingsChanged is the notice ListenForWork passes when a queue's settings changed
// (no queue name can take this form).
const SettingsChanged = "!settings"

// ListenForWork calls fn with the queue named by each notice that work is ready, and
// with "" after each (re)connect (anything may have been missed meanwhile), until ctx
// ends; onError hears of each lost connection. One connection, reconnected with backoff.
// A notice whose work another process claims at once (pg.WorkNotice) is not passed on.
func (e *Engine) ListenForWork(ctx context.Context, fn func(queue string), onError func(error)) {
	e.db.Listen(ctx, pg.JobsChannel, func(payload string) {
		queue, claimer := pg.WorkNotice(payload)
		if claimer != "" && claimer != e.cfg.Owner {
			if e.metrics != nil {
				e.metrics.NoticesPassed.Inc()
			}
			return
		}
		fn(queue)
	}, onError)
}
