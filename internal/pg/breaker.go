package pg

import (
	"context"
	"time"

	"github.com/gendurable/gendurable/internal/pg/dbsqlc"
)

// Breaker states (handlers.breaker_state).
const (
	BreakerClosed   = "closed"
	BreakerOpen     = "open"
	BreakerHalfOpen = "half_open"
)

// BreakerTally is what one outcome batch says about a handler: Failures breaker failures
// after its last success, and Reset when a success came (the counter restarts at 0).
type BreakerTally struct {
	Handler  string
	Failures int
	Reset    bool
}

// BreakerRecorded is a handler's breaker after HandlerBreakerRecord; Opened is true when
// that statement opened it.
type BreakerRecorded struct {
	Handler             string
	State               string
	ConsecutiveFailures int
	Opened              bool
}

// HandlerBreakerRecord adds the tallies of one outcome batch to their handlers' failure
// counters and opens the breakers that reach their threshold: one statement, a
// handlers_pkey probe per handler; handlers with nothing to change are not written.
// now nil is the database's clock.
func (db *DB) HandlerBreakerRecord(ctx context.Context, tallies []BreakerTally, now *time.Time) ([]BreakerRecorded, error) {
	if db.citus != nil {
		return db.citusBreakerRecord(ctx, tallies, now)
	}
	p := dbsqlc.HandlerBreakerRecordParams{Now: now, Names: make([]string, len(tallies)),
		Failures: make([]int, len(tallies)), Resets: make([]bool, len(tallies))}
	for i, t := range tallies {
		p.Names[i], p.Failures[i], p.Resets[i] = t.Handler, t.Failures, t.Reset
	}
	rows, err := db.q.HandlerBreakerRecord(ctx, p)
	return convertAll(rows, func(r dbsqlc.HandlerBreakerRecordRow) BreakerRecorded {
		return BreakerRecorded{Handler: r.Name, State: r.BreakerState, ConsecutiveFailures: r.ConsecutiveFailures,
			Opened: r.Opened != nil && *r.Opened}
	}), translate(err)
}

// BreakerProbe is the answer to HandlerBreakerProbe: the breaker as it is now, and
// whether the caller won the right to send the probe.
type BreakerProbe struct {
	State       string
	NextProbeAt *time.Time
	PausedAt    *time.Time
	Probe       bool
}

// HandlerBreakerProbe asks for the one probe of an open breaker whose probe is due (or
// pauses a handler open for longer than its pause_after); ErrNotFound for an unknown
// handler. One statement.
func (db *DB) HandlerBreakerProbe(ctx context.Context, handler string, now *time.Time) (BreakerProbe, error) {
	if db.citus != nil {
		return db.citusBreakerProbe(ctx, handler, now)
	}
	r, err := db.q.HandlerBreakerProbe(ctx, dbsqlc.HandlerBreakerProbeParams{Name: handler, Now: now})
	if err != nil {
		return BreakerProbe{}, translate(err)
	}
	if r.WonState != nil {
		return BreakerProbe{State: *r.WonState, NextProbeAt: r.WonNextProbeAt, PausedAt: r.WonPausedAt,
			Probe: r.WonPausedAt == nil}, nil
	}
	return BreakerProbe{State: r.BreakerState, NextProbeAt: r.BreakerNextProbeAt, PausedAt: r.PausedAt}, nil
}

// HandlerBreakerProbeResult records the outcome of the probe: success closes the
// breaker, failure reopens it with a doubled interval (capped). It answers the new state
// and next probe time, or ErrNotFound when the breaker was no longer half-open.
func (db *DB) HandlerBreakerProbeResult(ctx context.Context, handler string, success bool, now *time.Time) (string, *time.Time, error) {
	if db.citus != nil {
		return db.citusBreakerProbeResult(ctx, handler, success, now)
	}
	r, err := db.q.HandlerBreakerProbeResult(ctx, dbsqlc.HandlerBreakerProbeResultParams{Name: handler, Success: success, Now: now})
	return r.BreakerState, r.BreakerNextProbeAt, translate(err)
}

// HandlerBreakerResume closes a handler's breaker and lifts its pause; ErrNotFound for
// an unknown handler.
func (db *DB) HandlerBreakerResume(ctx context.Context, handler string) (Handler, error) {
	h, err := db.q.HandlerBreakerResume(ctx, handler)
	return handlerFromRow(h), translate(err)
}

// Park is a claimed step given back unrun until At.
type Park struct {
	ID    int64
	Token string
	At    time.Time
}

// LeaseParkMany gives claimed steps back without calling their webhook, each runnable
// again at its At, the attempt undone and its gate slot returned. It answers the ids
// given back (a missing one was no longer held). One statement for the batch.
func (db *DB) LeaseParkMany(ctx context.Context, parks []Park) ([]int64, error) {
	if db.citus != nil {
		return db.citusParkMany(ctx, parks)
	}
	p := dbsqlc.LeaseParkManyParams{Ids: make([]int64, len(parks)), Tokens: make([]string, len(parks)),
		EligibleAts: make([]time.Time, len(parks))}
	for i, k := range parks {
		p.Ids[i], p.Tokens[i], p.EligibleAts[i] = k.ID, k.Token, k.At
	}
	ids, err := db.q.LeaseParkMany(ctx, p)
	return ids, translate(err)
}

// JobWakeParked makes the steps parked by handler's breaker due now (it closed) and
// answers how many; one statement through jobs_breaker_parked.
func (db *DB) JobWakeParked(ctx context.Context, handler string) (int64, error) {
	if db.citus != nil {
		return db.citusWakeParked(ctx, handler)
	}
	n, err := db.q.JobWakeParked(ctx, handler)
	return n, translate(err)
}
