package dispatch

import (
	"context"
	"sync"
	"time"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/webhookclient"
)

// leaseRegistry holds the leases of this process's running steps (until their outcome
// is written), with the control of each webhook call.
type leaseRegistry struct {
	mu     sync.Mutex
	leases map[int64]heldLease
}

type heldLease struct {
	token string
	call  *callControl
	// completing: the call is over and its outcome is queued for writing; a heartbeat
	// that misses it raced the outcome itself (the completer reports a real loss).
	completing bool
}

func newLeaseRegistry() *leaseRegistry { return &leaseRegistry{leases: map[int64]heldLease{}} }

func (r *leaseRegistry) add(id int64, token string, call *callControl) {
	r.mu.Lock()
	r.leases[id] = heldLease{token: token, call: call}
	r.mu.Unlock()
}

// remove forgets a step's lease. It checks the token: the job may already have been
// claimed again (its outcome made it runnable at once) and hold a new lease, which must
// not be dropped, nor its webhook call aborted.
func (r *leaseRegistry) remove(id int64, token string) {
	r.mu.Lock()
	if l, ok := r.leases[id]; ok && l.token == token {
		delete(r.leases, id)
	}
	r.mu.Unlock()
}

// abortAll aborts every call still running (the end of the shutdown grace period).
func (r *leaseRegistry) abortAll(cause error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range r.leases {
		if !l.completing {
			l.call.abort(cause)
		}
	}
}

func (r *leaseRegistry) markCompleting(id int64, token string) {
	r.mu.Lock()
	if l, ok := r.leases[id]; ok && l.token == token {
		l.completing = true
		r.leases[id] = l
	}
	r.mu.Unlock()
}

func (r *leaseRegistry) snapshot() []engine.Lease {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]engine.Lease, 0, len(r.leases))
	for id, l := range r.leases {
		out = append(out, engine.Lease{JobID: id, Token: l.token})
	}
	return out
}

// lost aborts the calls of leases that a heartbeat found gone and returns them; leases
// whose call already finished (removed, or completing) are not losses.
func (r *leaseRegistry) lost(leases []engine.Lease) []engine.Lease {
	r.mu.Lock()
	defer r.mu.Unlock()
	var gone []engine.Lease
	for _, l := range leases {
		if h, ok := r.leases[l.JobID]; ok && h.token == l.Token && !h.completing {
			h.call.abort(errLeaseLost)
			delete(r.leases, l.JobID)
			gone = append(gone, l)
		}
	}
	return gone
}

// heartbeatLoop extends every held lease with one statement every third of the lease
// TTL; a lease missing from the answer was lost (reaped and maybe re-claimed elsewhere):
// its call is abandoned, since its outcome would be refused anyway. A lease is held from
// the claim until its outcome is written or given up, so the loop runs until Stop has
// nothing left to write.
func (d *Dispatcher) heartbeatLoop() {
	interval := d.eng.Config().LeaseTTL / 3
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-d.callCtx.Done():
			return
		case <-t.C:
		}
		held := d.leases.snapshot()
		if len(held) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(d.callCtx, interval)
		extended, err := d.eng.ExtendLeases(ctx, held)
		cancel()
		if err != nil {
			if d.callCtx.Err() == nil {
				d.log.Error("heartbeat failed", "leases", len(held), "err", err)
			}
			continue
		}
		if len(extended) == len(held) {
			continue
		}
		ok := make(map[int64]bool, len(extended))
		for _, e := range extended {
			ok[e.JobID] = true
		}
		var missing []engine.Lease
		for _, l := range held {
			if !ok[l.JobID] {
				missing = append(missing, l)
			}
		}
		gone := d.leases.lost(missing)
		for _, l := range gone {
			d.log.Warn("lease lost; abandoning the step's webhook call", "job_id", l.JobID)
		}
		d.metrics.LeaseLost.WithLabelValues("heartbeat").Add(float64(len(gone)))
	}
}

// callControl lets a heartbeat (the lease is lost) or the shutdown (the grace period is
// over) end a step's webhook call from outside the step's runner: an abort before the
// call is sent keeps it from being sent, one during the call interrupts it
// (webhookclient.Exchange.Abort). A context per step did the same with a cancellable
// context, its Done channel and an AfterFunc on the connection, each registered in its
// parent: 0.8 kB and 4 % of the server's CPU a step in a drain's profile.
type callControl struct {
	mu    sync.Mutex
	cause error
	x     *webhookclient.Exchange
}

// abort ends the call with cause (the first cause given stays).
func (c *callControl) abort(cause error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cause != nil {
		return
	}
	c.cause = cause
	if c.x != nil {
		c.x.Abort(cause)
	}
}

// attach lets an abort end x, and aborts it at once if an abort came first.
func (c *callControl) attach(x *webhookclient.Exchange) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.x = x
	if c.cause != nil {
		x.Abort(c.cause)
	}
}

// aborted reports whether the call was aborted: its failure is not the attempt's fault.
func (c *callControl) aborted() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cause != nil
}
