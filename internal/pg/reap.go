package pg

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gendurable/gendurable/internal/pg/dbcitus"
	"github.com/gendurable/gendurable/internal/pg/dbsqlc"
)

// ExpiredLease is a step whose lease expired, with what its retry delay is computed
// from: its attempt and its handler's backoff settings (nil when no handler is
// registered under its name).
type ExpiredLease struct {
	Lease
	Attempt       int
	BackoffBaseMS *int
	BackoffMaxMS  *int
}

// LeaseReap is one expired lease to take back, and the delay before the step runs again.
type LeaseReap struct {
	Lease
	Delay time.Duration
}

// Reaped is one step whose lease expired, and the status it was put in; its queue,
// handler and the attempt's start and end are the history row's.
type Reaped struct {
	JobID                 int64
	Status                string
	Queue, Handler        string
	StartedAt, FinishedAt time.Time
}

// JobListExpiredLeases lists up to limit leases expired at asOf (nil: the database's
// clock), oldest first (sql/job_lease.sql). It locks nothing.
func (db *DB) JobListExpiredLeases(ctx context.Context, limit int, asOf *time.Time) ([]ExpiredLease, error) {
	if db.citus != nil {
		return db.citusListExpiredLeases(ctx, limit, asOf)
	}
	rows, err := db.q.JobListExpiredLeases(ctx, dbsqlc.JobListExpiredLeasesParams{MaxRows: limit, AsOf: asOf})
	return convertAll(rows, func(r dbsqlc.JobListExpiredLeasesRow) ExpiredLease {
		return ExpiredLease{Lease: Lease{JobID: r.ID, Token: r.LeaseToken}, Attempt: r.Attempt,
			BackoffBaseMS: r.BackoffBaseMs, BackoffMaxMS: r.BackoffMaxMs}
	}), translate(err)
}

// JobReapExpiredLeases takes back the leases of reaps that are still held and still
// expired at asOf (nil: the database's clock), each runnable again after its delay (or
// failed, or cancelled), in one statement (sql/job_lease.sql). A lease missing from the
// answer was no longer expired, held by that token, or was locked by another reaper.
func (db *DB) JobReapExpiredLeases(ctx context.Context, reaps []LeaseReap, asOf *time.Time) ([]Reaped, error) {
	if db.citus != nil {
		return db.citusReapExpiredLeases(ctx, reaps, asOf)
	}
	p := dbsqlc.JobReapExpiredLeasesParams{Ids: make([]int64, len(reaps)), Tokens: make([]string, len(reaps)),
		DelaysMs: make([]int64, len(reaps)), AsOf: asOf}
	for i, r := range reaps {
		p.Ids[i], p.Tokens[i], p.DelaysMs[i] = r.JobID, r.Token, r.Delay.Milliseconds()
	}
	rows, err := db.q.JobReapExpiredLeases(ctx, p)
	return convertAll(rows, func(r dbsqlc.JobReapExpiredLeasesRow) Reaped {
		return Reaped{JobID: r.ID, Status: r.Status, Queue: r.Queue, Handler: r.Handler, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt}
	}), translate(err)
}

// JobWakeExpiredAwaits makes up to limit awaiting jobs past their deadline at asOf (nil:
// the database's clock) runnable and returns how many it woke.
func (db *DB) JobWakeExpiredAwaits(ctx context.Context, limit int, asOf *time.Time) (int, error) {
	if db.citus != nil {
		return db.citusWakeExpiredAwaits(ctx, limit, asOf)
	}
	ids, err := db.q.JobWakeExpiredAwaits(ctx, dbsqlc.JobWakeExpiredAwaitsParams{MaxRows: limit, AsOf: asOf})
	return len(ids), translate(err)
}

// ReaperTurn reports whether the reaper of process owner may sweep now. On plain
// PostgreSQL every reaper sweeps, and it asks nothing. On Citus, where a sweep starts with
// two fan-outs to every shard, one process sweeps at a time: it takes the turn (or renews
// it) for hold, and the others pass until its turn lapses (migrations/citus/0033; one
// statement on the coordinator).
func (db *DB) ReaperTurn(ctx context.Context, owner string, hold time.Duration) (bool, error) {
	if db.citus == nil {
		return true, nil
	}
	_, err := dbcitus.New(db.pool).ReaperTurnTake(ctx, dbcitus.ReaperTurnTakeParams{Owner: owner, HoldMs: hold.Milliseconds()})
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, translate(err)
}
