package pg

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gendurable/gendurable/internal/pg/dbcitus"
	"github.com/jackc/pgx/v5"
)

// The circuit breaker on Citus (sql/citus/breaker.sql): the handlers' statements in the
// forms Citus runs on a reference table, and the parking of steps per shard.

// citusBreakerRecord is HandlerBreakerRecord on Citus: one transaction that locks the
// handlers in name order (HandlerBreakerLock), then adds the tallies; a breaker opened
// is one that was closed under the lock and is open after.
func (db *DB) citusBreakerRecord(ctx context.Context, tallies []BreakerTally, now *time.Time) ([]BreakerRecorded, error) {
	p := dbcitus.HandlerBreakerRecordParams{Now: now, Names: make([]string, len(tallies)),
		Failures: make([]int, len(tallies)), Resets: make([]bool, len(tallies))}
	for i, t := range tallies {
		p.Names[i], p.Failures[i], p.Resets[i] = t.Handler, t.Failures, t.Reset
	}
	var out []BreakerRecorded
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		q := dbcitus.New(tx)
		locked, err := q.HandlerBreakerLock(ctx, p.Names)
		if err != nil {
			return err
		}
		before := make(map[string]string, len(locked))
		for _, l := range locked {
			before[l.Name] = l.BreakerState
		}
		rows, err := q.HandlerBreakerRecord(ctx, p)
		if err != nil {
			return err
		}
		out = make([]BreakerRecorded, len(rows))
		for i, r := range rows {
			out[i] = BreakerRecorded{Handler: r.Name, State: r.BreakerState, ConsecutiveFailures: r.ConsecutiveFailures,
				Opened: before[r.Name] == "closed" && r.BreakerState == "open"}
		}
		return nil
	})
	return out, translate(err)
}

// citusBreakerProbe is HandlerBreakerProbe on Citus: the UPDATE that wins the probe (or
// pauses the handler, whose reason is then written), else the breaker as it is.
func (db *DB) citusBreakerProbe(ctx context.Context, handler string, now *time.Time) (BreakerProbe, error) {
	q := dbcitus.New(db.pool)
	won, err := q.HandlerBreakerProbe(ctx, dbcitus.HandlerBreakerProbeParams{Name: handler, Now: now})
	switch {
	case err == nil && won.PausedAt != nil:
		reason := breakerPausedReason(won.BreakerOpenedAt, won.BreakerPauseAfterMs)
		if err := q.HandlerBreakerPausedReason(ctx, dbcitus.HandlerBreakerPausedReasonParams{Reason: reason, Name: handler}); err != nil {
			return BreakerProbe{}, translate(err)
		}
		return BreakerProbe{State: won.BreakerState, NextProbeAt: won.BreakerNextProbeAt, PausedAt: won.PausedAt}, nil
	case err == nil:
		return BreakerProbe{State: won.BreakerState, NextProbeAt: won.BreakerNextProbeAt, Probe: true}, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return BreakerProbe{}, translate(err)
	}
	r, err := q.HandlerBreakerState(ctx, handler)
	return BreakerProbe{State: r.BreakerState, NextProbeAt: r.BreakerNextProbeAt, PausedAt: r.PausedAt}, translate(err)
}

// breakerPausedReason says why a breaker paused its handler, in the words of
// HandlerBreakerProbe (sql/breaker.sql): since when it is open and its pause_after (as
// PostgreSQL prints an interval).
func breakerPausedReason(openedAt *time.Time, pauseAfterMS int64) string {
	since := "?"
	if openedAt != nil {
		since = openedAt.UTC().Format("2006-01-02T15:04:05Z")
	}
	return fmt.Sprintf("circuit breaker open since %s, longer than its pause_after (%s)", since, pgInterval(pauseAfterMS))
}

// pgInterval prints a number of milliseconds as PostgreSQL prints the interval
// (IntervalStyle postgres): "1 day 02:00:00", "00:00:10", "00:00:01.5".
func pgInterval(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	days := d / (24 * time.Hour)
	d -= days * 24 * time.Hour
	h, m := d/time.Hour, (d%time.Hour)/time.Minute
	s := float64(d%time.Minute) / float64(time.Second)
	clock := fmt.Sprintf("%02d:%02d:%02d", h, m, int64(s))
	if frac := d % time.Second; frac != 0 {
		clock = fmt.Sprintf("%02d:%02d:%09.6f", h, m, s)
		for clock[len(clock)-1] == '0' {
			clock = clock[:len(clock)-1]
		}
	}
	switch {
	case days == 1:
		return "1 day " + clock
	case days > 1:
		return fmt.Sprintf("%d days %s", days, clock)
	}
	return clock
}

// citusBreakerProbeResult is HandlerBreakerProbeResult on Citus.
func (db *DB) citusBreakerProbeResult(ctx context.Context, handler string, success bool, now *time.Time) (string, *time.Time, error) {
	r, err := dbcitus.New(db.pool).HandlerBreakerProbeResult(ctx,
		dbcitus.HandlerBreakerProbeResultParams{Now: now, Success: success, Name: handler})
	return r.BreakerState, r.BreakerNextProbeAt, translate(err)
}

// citusParkMany is LeaseParkMany on Citus: a router statement per shard of the leases.
func (db *DB) citusParkMany(ctx context.Context, parks []Park) ([]int64, error) {
	leases := make([]Lease, len(parks))
	at := make(map[int64]time.Time, len(parks))
	for i, k := range parks {
		leases[i], at[k.ID] = Lease{JobID: k.ID, Token: k.Token}, k.At
	}
	var parked []int64
	err := db.citusLeases(ctx, leases, func(ctx context.Context, q shardQuerier, placements []int, part []Lease) error {
		p := dbcitus.LeaseParkManyParams{Placements: placements, Ids: make([]int64, len(part)),
			Tokens: make([]string, len(part)), EligibleAts: make([]time.Time, len(part))}
		for i, l := range part {
			p.Ids[i], p.Tokens[i], p.EligibleAts[i] = l.JobID, l.Token, at[l.JobID]
		}
		ids, err := dbcitus.New(q).LeaseParkMany(ctx, p)
		parked = append(parked, ids...)
		return translate(err)
	})
	return parked, err
}

// citusWakeParked is JobWakeParked on Citus: one statement on every shard, then the
// wake-up of the queues on the coordinator.
func (db *DB) citusWakeParked(ctx context.Context, handler string) (int64, error) {
	queues, err := dbcitus.New(db.pool).JobWakeParked(ctx, handler)
	if err != nil {
		return 0, translate(err)
	}
	wake := make([]citusWake, len(queues))
	for i, q := range queues {
		wake[i] = citusWake{queue: q, placement: -1} // parked anywhere: every shard
	}
	return int64(len(queues)), db.citusNotify(ctx, wake)
}
