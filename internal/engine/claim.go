package engine

import (
	"context"
	"errors"

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
}

// Claim leases up to limit runnable steps of queue in one statement, then loads the
// inboxes and children the claimed steps need with at most one statement each for the
// whole batch (none when no claimed step has signals or just joined its children).
// A claim that lost a cross-process race on a concurrency key, gate or bucket is retried
// a few times; contended counts those retries.
func (e *Engine) Claim(ctx context.Context, queue string, limit int) (steps []Step, contended int, err error) {
	var claimed []pg.ClaimedJob
	for {
		claimed, err = e.db.JobClaimBatch(ctx, pg.JobClaimParams{Queue: queue, Limit: limit,
			LeaseTTL: e.cfg.LeaseTTL, Owner: e.cfg.Owner, SignalCap: e.cfg.SignalCap})
		if !errors.Is(err, ErrRetryable) || contended >= 3 {
			break
		}
		contended++
	}
	if err != nil || len(claimed) == 0 {
		return nil, contended, err
	}
	steps = make([]Step, len(claimed))
	for i, c := range claimed {
		steps[i] = Step{ClaimedJob: c}
	}
	return steps, contended, e.enrich(ctx, steps)
}

// ExtendLeases extends the leases of in-flight steps in one statement and returns the
// ones still held.
func (e *Engine) ExtendLeases(ctx context.Context, leases []pg.Lease) ([]pg.LeaseExtended, error) {
	if len(leases) == 0 {
		return nil, nil
	}
	return e.db.LeaseExtendMany(ctx, leases, e.cfg.LeaseTTL)
}

// Heartbeat extends one lease (the asynchronous-step API); ErrLeaseLost when the token
// is not the job's current one.
func (e *Engine) Heartbeat(ctx context.Context, jobID int64, token string) (pg.LeaseExtended, error) {
	got, err := e.db.LeaseExtendMany(ctx, []pg.Lease{{JobID: jobID, Token: token}}, e.cfg.LeaseTTL)
	if err != nil {
		return pg.LeaseExtended{}, err
	}
	if len(got) == 0 {
		return pg.LeaseExtended{}, ErrLeaseLost
	}
	return got[0], nil
}
