package pg

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// SignalDelivered is the answer of SignalDeliver.
type SignalDelivered struct {
	JobID     int64
	JobStatus string // the status when the signal arrived
	SignalID  *int64 // nil: the job had finished, nothing was delivered
	Woke      bool
}

// SignalDeliver delivers a signal to job id (or, id nil, to the live job holding key) in
// one statement (sql/signal.sql). ErrNotFound when there is no such job.
func (db *DB) SignalDeliver(ctx context.Context, id *int64, key *string, name string, payload []byte) (SignalDelivered, error) {
	var d SignalDelivered
	err := db.pool.QueryRow(ctx, stmt("SignalDeliver"), id, key, name, payload).Scan(&d.JobID, &d.JobStatus, &d.SignalID, &d.Woke)
	return d, translate(err)
}

// InboxWindow is the range of a job's inbox a claimed step is shown: after < seq <= upto.
type InboxWindow struct {
	JobID       int64
	After, Upto int64
}

// SignalLoadInboxes loads the signals of many claimed steps in one statement.
func (db *DB) SignalLoadInboxes(ctx context.Context, windows []InboxWindow) ([]Signal, error) {
	ids := make([]int64, len(windows))
	after := make([]int64, len(windows))
	upto := make([]int64, len(windows))
	for i, w := range windows {
		ids[i], after[i], upto[i] = w.JobID, w.After, w.Upto
	}
	return collect(ctx, db, stmt("SignalLoadInboxes"), func(r pgx.Rows) (Signal, error) {
		var s Signal
		return s, r.Scan(&s.JobID, &s.ID, &s.Seq, &s.Name, &s.Payload, &s.CreatedAt)
	}, ids, after, upto)
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
	return collect(ctx, db, stmt("SignalList"), func(r pgx.Rows) (InboxEntry, error) {
		var e InboxEntry
		return e, r.Scan(&e.ID, &e.Seq, &e.Name, &e.Payload, &e.CreatedAt, &e.Consumed)
	}, jobID, limit)
}

// ChildLoadForJoin loads at most limit children of each parent, with each parent's
// total, in one statement.
func (db *DB) ChildLoadForJoin(ctx context.Context, parents []int64, limit int) (children []Child, totals map[int64]int, err error) {
	totals = map[int64]int{}
	children, err = collect(ctx, db, stmt("ChildLoadForJoin"), func(r pgx.Rows) (Child, error) {
		var c Child
		var total int
		err := r.Scan(&c.ParentID, &c.ID, &c.Handler, &c.Key, &c.Status, &c.Result, &c.Error, &total)
		totals[c.ParentID] = total
		return c, err
	}, parents, limit)
	return children, totals, err
}

// JobCancel cancels job id and its live descendants; found is false when there is no
// such job and changed is 0 when it had already finished.
func (db *DB) JobCancel(ctx context.Context, id int64) (found bool, changed int, err error) {
	var nFound, nChanged, notified int64
	err = db.pool.QueryRow(ctx, stmt("JobCancel"), id).Scan(&nFound, &nChanged, &notified)
	return nFound > 0, int(nChanged), translate(err)
}

// JobRetry makes a failed or cancelled job runnable again; ErrNotFound when job id is
// not failed or cancelled (or does not exist), ErrConflict when a live job holds its key.
func (db *DB) JobRetry(ctx context.Context, id int64) error {
	var got int64
	return translate(db.pool.QueryRow(ctx, stmt("JobRetry"), id).Scan(&got))
}
