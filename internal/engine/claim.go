package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/gendurable/gendurable/internal/pg"
)

// Step is a claimed, leased step with everything its webhook request shows.
type Step struct {
	pg.ClaimedJob
	// Signals are the unconsumed signals the step is shown (seq in (ConsumedSeq,
	// ClaimInboxSeq]); SignalsMore counts the ones beyond the cap.
	Signals     []pg.Signal
	SignalsMore int
	// Children are sent to the step that follows a join; ChildrenMore counts the rest.
	Children     []pg.Child
	ChildrenMore int
	// Span is the dispatcher's span of this attempt (nil when tracing is off).
	Span trace.Span
}

// Claim leases up to limit runnable steps of queue in one statement, then loads the
// inboxes and children the claimed steps need with at most one statement each for the
// whole batch (none when no claimed step has signals or just joined its children).
// A claim that lost a cross-process race on a concurrency key, gate or bucket is retried
// a few times; contended counts those retries.
func (e *Engine) Claim(ctx context.Context, queue string, limit int) (steps []Step, contended int, err error) {
	claimed, contended, err := e.claim(ctx, queue, limit)
	if err != nil || len(claimed) == 0 {
		return nil, contended, err
	}
	steps, err = e.withWhatTheyAreShown(ctx, claimed)
	return steps, contended, err
}

// withWhatTheyAreShown makes the claimed steps into Steps and loads the inboxes and
// children they are shown (at most one statement each for the batch); when that fails
// it gives the steps back unrun.
func (e *Engine) withWhatTheyAreShown(ctx context.Context, claimed []pg.ClaimedJob) ([]Step, error) {
	steps := make([]Step, len(claimed))
	for i, c := range claimed {
		steps[i] = Step{ClaimedJob: c}
	}
	err := e.enrich(ctx, steps)
	for retry := 1; err != nil && retry <= 2 && ctx.Err() == nil; retry++ {
		if !sleepCtx(ctx, time.Duration(retry)*25*time.Millisecond) {
			break
		}
		for i := range steps {
			steps[i].Signals, steps[i].Children = nil, nil
		}
		err = e.enrich(ctx, steps)
	}
	if err != nil {
		// The steps are leased but cannot be shown what they need: give them back unrun
		// rather than leave them executing until the lease expires (and, on a last
		// attempt, failed without their handler ever being called).
		e.release(ctx, claimed)
		return nil, fmt.Errorf("loading what the claimed steps are shown: %w", err)
	}
	return steps, nil
}

// admissionWindow is how long a queue's claims go by JobClaimBatch after a plain claim
// met rows that need admission, before a plain claim is tried again: at most one plain
// claim in vain per window for a queue that always holds such rows.
const admissionWindow = 10 * time.Second

// claim leases up to limit steps of queue. A queue whose rows need no admission (none
// with a concurrency key or a rate limit: most queues) is claimed by JobClaimPlain, a
// statement a sixth the size of JobClaimBatch. When a plain claim meets rows that do
// need it, the rest of the batch is claimed at once by JobClaimBatch, which the queue's
// claims then use for admissionWindow. Those rows wait for no more than that second
// statement; the plain rows behind them in the queue's order may go one claim earlier.
func (e *Engine) claim(ctx context.Context, queue string, limit int) (claimed []pg.ClaimedJob, contended int, err error) {
	p := pg.JobClaimParams{Queue: queue, Limit: limit, LeaseTTL: e.cfg.LeaseTTL, Owner: e.cfg.Owner, SignalCap: e.cfg.SignalCap}
	// A claim that lost a cross-process race is retried up to 3 times in all.
	retrying := func(run func() error) error {
		for {
			err := run()
			if !errors.Is(err, ErrRetryable) || contended >= 3 {
				return err
			}
			contended++
		}
	}
	if !e.admitting(queue) {
		var others int
		err = retrying(func() (err error) { claimed, others, err = e.db.JobClaimPlain(ctx, p); return err })
		if others > 0 {
			e.admissionUntil.Store(queue, time.Now().Add(admissionWindow))
		}
		if err != nil || others == 0 || len(claimed) == limit {
			return claimed, contended, err
		}
		p.Limit -= len(claimed)
	}
	var more []pg.ClaimedJob
	err = retrying(func() (err error) { more, err = e.db.JobClaimBatch(ctx, p); return err })
	if err != nil && len(claimed) > 0 {
		// The plain part is leased: it runs, and the next claim tries the rest again.
		e.log.Warn("claim: the rows that need admission were not claimed", "queue", queue, "err", err)
		return claimed, contended, nil
	}
	return append(claimed, more...), contended, err
}

// admitting reports whether queue's claims go by JobClaimBatch: for admissionWindow after
// a plain claim met rows that need admission.
func (e *Engine) admitting(queue string) bool {
	until, ok := e.admissionUntil.Load(queue)
	return ok && time.Now().Before(until.(time.Time))
}

// release gives claimed steps back, retrying for up to half a lease: past that the
// reaper takes them back when their leases expire. It outlives ctx (a shutdown must
// not strand the steps it claimed).
func (e *Engine) release(ctx context.Context, claimed []pg.ClaimedJob) {
	leases := make([]pg.Lease, len(claimed))
	for i, c := range claimed {
		leases[i] = pg.Lease{JobID: c.ID, Token: c.LeaseToken}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.LeaseTTL/2)
	defer cancel()
	wait := 25 * time.Millisecond
	for {
		released, err := e.db.LeaseReleaseMany(ctx, leases)
		if err == nil {
			e.log.Warn("claimed steps given back unrun", "steps", len(claimed), "released", len(released))
			return
		}
		if !sleepCtx(ctx, wait) {
			e.log.Error("giving claimed steps back failed; the reaper takes them back at lease expiry",
				"steps", len(claimed), "err", err)
			return
		}
		wait = min(2*wait, time.Second)
	}
}

// sleepCtx waits for d or until ctx ends; false when ctx ended.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Lease names one leased step: its job and the token its claim was given.
type Lease struct {
	JobID int64
	Token string
}

// ExtendLeases extends the leases of in-flight steps in one statement and returns the
// ones still held (a lease missing from the answer is lost).
func (e *Engine) ExtendLeases(ctx context.Context, leases []Lease) ([]LeaseExtended, error) {
	if len(leases) == 0 {
		return nil, nil
	}
	in := make([]pg.Lease, len(leases))
	for i, l := range leases {
		in[i] = pg.Lease{JobID: l.JobID, Token: l.Token}
	}
	got, err := e.db.LeaseExtendMany(ctx, in, e.cfg.LeaseTTL)
	if err != nil {
		return nil, err
	}
	out := make([]LeaseExtended, len(got))
	for i, g := range got {
		out[i] = LeaseExtended{JobID: g.JobID, ExpiresAt: g.ExpiresAt}
	}
	return out, nil
}

// LeaseExtended is a lease that is still held, with its new expiry.
type LeaseExtended struct {
	JobID     int64
	ExpiresAt time.Time
}

// Heartbeat extends one lease (the asynchronous-step API); ErrLeaseLost when the token
// is not the job's current one.
func (e *Engine) Heartbeat(ctx context.Context, jobID int64, token string) (LeaseExtended, error) {
	got, err := e.db.LeaseExtendMany(ctx, []pg.Lease{{JobID: jobID, Token: token}}, e.cfg.LeaseTTL)
	if err != nil {
		return LeaseExtended{}, err
	}
	if len(got) == 0 {
		return LeaseExtended{}, ErrLeaseLost
	}
	return LeaseExtended{JobID: got[0].JobID, ExpiresAt: got[0].ExpiresAt}, nil
}
