package pg

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/gendurable/gendurable/internal/pg/dbcitus"
	"github.com/gendurable/gendurable/internal/pg/dbsqlc"
)

// SignalDelivered is the answer of SignalDeliver.
type SignalDelivered struct {
	JobID     int64
	JobStatus string // the status when the signal arrived
	SignalID  *int64 // nil: the job had finished, nothing was delivered
	Woke      bool
}

// SignalDeliver delivers a signal to job id (or, id nil, to the live job holding key) in
// one statement (sql/signals.sql). ErrNotFound when there is no such job.
//
// traceContext, when set, is kept with the signal, and becomes the job's trace context
// if it has none.
func (db *DB) SignalDeliver(ctx context.Context, id *int64, key *string, name string, payload []byte, traceContext *string) (SignalDelivered, error) {
	if db.citus != nil {
		d, err := db.citusSignal(ctx, id, key, name, payload, traceContext)
		if key != nil && errors.Is(err, ErrNotFound) {
			// No live job has the key at its placement: the job its holder row names,
			// when the key is displaced (citus_keys.go), by id.
			holder, found, herr := db.citusDisplacedHolder(ctx, dbcitus.New(db.pool), *key)
			if herr != nil || !found {
				return d, cmp.Or(herr, err)
			}
			d, err = db.citusSignal(ctx, &holder, nil, name, payload, traceContext)
			if err == nil && d.SignalID == nil {
				// The holder finished in between: no live job holds the key.
				return SignalDelivered{}, ErrNotFound
			}
			return d, err
		}
		return d, err
	}
	d, err := db.q.SignalDeliver(ctx, dbsqlc.SignalDeliverParams{JobID: id, JobKey: key, Name: name, Payload: payload,
		TraceContext: traceContext})
	return SignalDelivered(d), translate(err)
}

// InboxWindow is the range of a job's inbox a claimed step is shown: after < seq <= upto.
type InboxWindow struct {
	JobID       int64
	After, Upto int64
}

// SignalLoadInboxes loads the signals of many claimed steps in one statement.
func (db *DB) SignalLoadInboxes(ctx context.Context, windows []InboxWindow) ([]Signal, error) {
	if db.citus != nil {
		return db.citusInboxes(ctx, windows)
	}
	p := dbsqlc.SignalLoadInboxesParams{JobIds: make([]int64, len(windows)), AfterSeqs: make([]int64, len(windows)),
		UptoSeqs: make([]int64, len(windows))}
	for i, w := range windows {
		p.JobIds[i], p.AfterSeqs[i], p.UptoSeqs[i] = w.JobID, w.After, w.Upto
	}
	rows, err := db.q.SignalLoadInboxes(ctx, p)
	return convertAll(rows, func(r dbsqlc.SignalLoadInboxesRow) Signal {
		return Signal{ID: r.ID, JobID: r.JobID, Seq: r.Seq, Name: r.Name, Payload: r.Payload, CreatedAt: r.CreatedAt,
			TraceContext: r.TraceContext}
	}), translate(err)
}

// InboxEntry is a signal as the inbox listing shows it.
type InboxEntry struct {
	ID        int64
	Seq       int64
	Name      string
	Payload   []byte
	CreatedAt time.Time
	Consumed  bool
}

// SignalList returns a job's inbox, oldest first.
func (db *DB) SignalList(ctx context.Context, jobID int64, limit int) ([]InboxEntry, error) {
	if db.citus != nil {
		placement, err := db.citusPlacementOf(ctx, jobID)
		if err != nil {
			return nil, err
		}
		rows, err := dbcitus.New(db.pool).SignalList(ctx, dbcitus.SignalListParams{Placement: placement, JobID: jobID, MaxRows: limit})
		return convertAll(rows, func(r dbcitus.SignalListRow) InboxEntry {
			return InboxEntry{ID: r.ID, Seq: r.Seq, Name: r.Name, Payload: r.Payload, CreatedAt: r.CreatedAt, Consumed: r.Consumed}
		}), translate(err)
	}
	rows, err := db.q.SignalList(ctx, dbsqlc.SignalListParams{JobID: jobID, MaxRows: limit})
	return convertAll(rows, func(r dbsqlc.SignalListRow) InboxEntry {
		return InboxEntry{ID: r.ID, Seq: r.Seq, Name: r.Name, Payload: r.Payload, CreatedAt: r.CreatedAt, Consumed: r.Consumed}
	}), translate(err)
}

// ChildLoadForJoin loads at most limit children of each parent, with each parent's
// total, in one statement.
func (db *DB) ChildLoadForJoin(ctx context.Context, parents []int64, limit int) (children []Child, totals map[int64]int, err error) {
	if db.citus != nil {
		return db.citusChildrenForJoin(ctx, parents, limit)
	}
	rows, err := db.q.ChildLoadForJoin(ctx, dbsqlc.ChildLoadForJoinParams{ParentIds: parents, PerParent: limit})
	totals = map[int64]int{}
	for _, r := range rows {
		totals[r.ParentID] = int(r.Total)
	}
	return convertAll(rows, func(r dbsqlc.ChildLoadForJoinRow) Child {
		return Child{ID: r.ID, ParentID: r.ParentID, Handler: r.Handler, Key: r.Key, Status: r.Status, Result: r.Result, Error: r.Error}
	}), totals, translate(err)
}

// JobCancel cancels job id and its live descendants; found is false when there is no
// such job and changed is 0 when it had already finished.
func (db *DB) JobCancel(ctx context.Context, id int64) (found bool, changed int, err error) {
	if db.citus != nil {
		placement, err := db.citusPlacementOf(ctx, id)
		if err != nil {
			return false, 0, err
		}
		r, err := dbcitus.New(db.pool).JobCancel(ctx, dbcitus.JobCancelParams{Placement: placement, ID: id})
		if err != nil {
			return false, 0, translate(err)
		}
		if r.RemoteWork > 0 {
			db.carryRemoteChildrenNow(ctx, placement, true)
		}
		return r.Found > 0, int(r.Changed), db.citusNotify(ctx, citusWakes(r.Woken, int(placement)))
	}
	r, err := db.q.JobCancel(ctx, id)
	return r.Found > 0, int(r.Changed), translate(err)
}

// JobRetry makes a failed or cancelled job runnable again; ErrNotFound when job id is
// not failed or cancelled (or does not exist), ErrConflict when a live job holds its key.
func (db *DB) JobRetry(ctx context.Context, id int64) error {
	if db.citus != nil {
		placement, err := db.citusPlacementOf(ctx, id)
		if err != nil {
			return err
		}
		var r dbcitus.JobRetryRow
		err = db.citusRevive(ctx, id, placement, func(q *dbcitus.Queries) (int64, error) {
			r, err = q.JobRetry(ctx, dbcitus.JobRetryParams{Placement: placement, ID: id})
			return id, err
		})
		if err != nil {
			return translate(err)
		}
		if r.Relive {
			db.carryRemoteChildrenNow(ctx, placement, false)
		}
		if r.Status == "runnable" {
			return db.citusNotify(ctx, []citusWake{{queue: r.Queue, placement: int(placement)}})
		}
		return nil
	}
	_, err := db.q.JobRetry(ctx, id)
	return translate(err)
}
