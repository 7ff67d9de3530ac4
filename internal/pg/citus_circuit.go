package pg

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// A worker that stops answering without closing its connections (a hung host, a network
// partition with no reset) would hold every statement routed to its shards for ever: the
// coordinator waits on the worker, and the server on the coordinator. So each statement
// the server sends to one shard (a claim, an outcome batch, a heartbeat, the reaper's) has
// a deadline, ShardTimeout, and a circuit per worker stops sending to a worker that
// failed so: after a statement on one of its shards timed out, its shards are passed over
// for a while (1 s, doubling up to 30 s while it keeps failing). A worker that is down
// fails each statement at once (the coordinator's connection is refused): that opens no
// circuit, and its shards are tried again as soon as it is back.
// When that time is up, one statement probes it (the others keep passing it over); its
// success closes the circuit. A claim then takes its steps from the other workers'
// shards, and a stalled statement costs at most ShardTimeout once per probe.
// TestCitusWorkerHungDuringADrain freezes a worker (SIGSTOP) during a drain.

// DefaultShardTimeout is a Citus shard statement's deadline when Options.ShardTimeout is 0.
const DefaultShardTimeout = 5 * time.Second

const (
	workerCircuitFirst = time.Second      // how long a worker is passed over after its first failure
	workerCircuitMost  = 30 * time.Second // and at most, while it keeps failing
)

// ErrWorkerUnavailable is the error of a shard statement not sent: its worker failed a
// moment ago and its circuit is open.
var ErrWorkerUnavailable = errors.New("the Citus worker of this shard is not answering (passed over for a while)")

// workerCircuits is the circuit of each worker (its group id in pg_dist_node).
type workerCircuits struct {
	mu    sync.Mutex
	state map[int32]*workerCircuit
}

type workerCircuit struct {
	failures  int
	openUntil time.Time
	probing   bool // a statement is probing the worker
}

// allow says whether a statement may go to group's worker now (true for a probe too).
func (c *workerCircuits) allow(group int32, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.state[group]
	switch {
	case s == nil:
		return true
	case now.Before(s.openUntil) || s.probing:
		return false
	}
	s.probing = true
	return true
}

// failed opens group's circuit (or keeps it open, for twice as long).
func (c *workerCircuits) failed(group int32, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == nil {
		c.state = map[int32]*workerCircuit{}
	}
	s := c.state[group]
	if s == nil {
		s = &workerCircuit{}
		c.state[group] = s
	}
	s.failures++
	s.openUntil = now.Add(min(workerCircuitFirst<<min(s.failures-1, 10), workerCircuitMost))
	s.probing = false
}

// anyOpen reports whether some worker failed a moment ago: its circuit is open, or a
// statement is probing it.
func (c *workerCircuits) anyOpen() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.state) > 0
}

// answered closes group's circuit: a statement there came back.
func (c *workerCircuits) answered(group int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.state, group)
}

// probeEnded lets another statement probe group's worker: the probe ended by its
// caller's context, which says nothing of the worker.
func (c *workerCircuits) probeEnded(group int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.state[group]; s != nil {
		s.probing = false
	}
}

// shardsAtOnce bounds the shards one call visits at once (a fair claim's wave): each
// holds a connection, of its shard's pool or of the coordinator's when statements go
// through it.
const shardsAtOnce = 8

// onShard runs fn, a statement on shard (an index of l) sent on q (the pool of the
// shard's worker, or the coordinator's: citus_direct.go), under the shard's deadline and
// its worker's circuit: ErrWorkerUnavailable when the circuit is open; a timeout opens
// it, any answer closes it. ctx's own end is fn's error as it is.
func (db *DB) onShard(ctx context.Context, l *citusLayout, shard int, fn func(ctx context.Context, q shardQuerier) error) error {
	group := l.shardGroup(shard)
	if !db.circuits.allow(group, time.Now()) {
		return fmt.Errorf("%w (shard %d)", ErrWorkerUnavailable, l.shardIDAt(shard))
	}
	sctx, cancel := context.WithTimeout(ctx, db.shardTimeout)
	defer cancel()
	q := db.shardQuerier(l, shard)
	err := fn(sctx, q)
	if _, onTables := q.(shardTables); onTables && shardElsewhere(err) {
		// The shard moved (or split) since the layout was read: its guard refused before
		// anything was written. Through the coordinator, which routes the statements to
		// wherever the shard is now; the layout is read again at the next statement.
		l.expire()
		db.shardsMovedAway.Add(1)
		err = fn(sctx, db.pool)
	}
	switch {
	case ctx.Err() != nil:
		db.circuits.probeEnded(group) // not the worker's doing
	case err != nil && sctx.Err() != nil:
		db.circuits.failed(group, time.Now())
		return fmt.Errorf("pg: shard %d did not answer within %s: %w", l.shardIDAt(shard), db.shardTimeout, err)
	default:
		db.circuits.answered(group)
	}
	return err
}
