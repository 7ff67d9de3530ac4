package engine

import (
	"context"
	"errors"

	"github.com/gendurable/gendurable/internal/pg"
)

// Fairness settings of a queue (Queue.Fairness; docs/fairness.md).
const (
	// FairnessNone: claims take runnable jobs by priority and age, whoever they are for.
	FairnessNone = pg.FairnessNone
	// FairnessRoundRobin: the fairness keys with runnable work take turns in every
	// claim, each by its weight, within its share of a server's slots and its cap.
	FairnessRoundRobin = pg.FairnessRoundRobin
)

// MaxFairnessWeight is the largest weight a fairness key may have.
const MaxFairnessWeight = 1000

// FairnessKey is one fairness key of a queue: its settings and live counts.
type FairnessKey = pg.FairnessKey

// ClaimFair leases up to limit runnable steps of a fair queue in one round trip (the
// lock of the queue's row and pg.JobClaimFair): the queue's fairness keys take turns by
// weight, each held to its share of slots (this process's steps in flight for the
// queue at most, cut by own: the steps of each key this process runs) and to its cap. Then, as Claim, it loads what the steps are shown.
func (e *Engine) ClaimFair(ctx context.Context, queue string, limit, slots int, own map[string]int) ([]Step, error) {
	p := pg.FairClaimParams{Slots: slots, Own: own, JobClaimParams: pg.JobClaimParams{Queue: queue, Limit: limit,
		LeaseTTL: e.cfg.LeaseTTL, Owner: e.cfg.Owner, SignalCap: e.cfg.SignalCap}}
	claimed, err := e.db.JobClaimFair(ctx, p)
	for retry := 0; errors.Is(err, ErrRetryable) && retry < 3; retry++ {
		claimed, err = e.db.JobClaimFair(ctx, p)
	}
	if err != nil || len(claimed) == 0 {
		return nil, err
	}
	return e.withWhatTheyAreShown(ctx, claimed)
}

// FairClaimVisitsShards reports whether a fair claim is a round trip per shard holding
// the queue's keys (on Citus), not one statement: a claim for a step or two then costs as
// much as one for a batch, so the dispatcher waits for a batch's worth of free slots.
func (e *Engine) FairClaimVisitsShards() bool { return e.db.Citus() }

// SetFairnessKey sets a key's weight (nil: 1) and cap (nil: none) in a queue, all of
// them, and answers the key with its counts. A *ValidationError for values out of range.
func (e *Engine) SetFairnessKey(ctx context.Context, queue, key string, weight, maxInFlight *int) (FairnessKey, error) {
	v := &validator{}
	v.name("name", queue)
	if key == "" || len(key) > 512 {
		v.add("key", "must be 1 to 512 bytes")
	}
	if weight != nil && (*weight < 1 || *weight > MaxFairnessWeight) {
		v.add("weight", "must be between 1 and %d, got %d", MaxFairnessWeight, *weight)
	}
	if maxInFlight != nil && (*maxInFlight < 1 || *maxInFlight > 1_000_000) {
		v.add("max_in_flight", "must be between 1 and 1000000, got %d", *maxInFlight)
	}
	if err := v.err(); err != nil {
		return FairnessKey{}, err
	}
	if err := e.queueExists(ctx, queue); err != nil {
		return FairnessKey{}, err
	}
	return e.db.FairnessKeyPut(ctx, queue, key, weight, maxInFlight)
}

// GetFairnessKey answers one key of a queue (weight 1 and no cap when it has no settings
// of its own); ErrNotFound only for an unknown queue.
func (e *Engine) GetFairnessKey(ctx context.Context, queue, key string) (FairnessKey, error) {
	if err := e.queueExists(ctx, queue); err != nil {
		return FairnessKey{}, err
	}
	return e.db.FairnessKeyGet(ctx, queue, key)
}

// DeleteFairnessKey drops a key's settings; ErrNotFound when it has none.
func (e *Engine) DeleteFairnessKey(ctx context.Context, queue, key string) error {
	return e.db.FairnessKeyDelete(ctx, queue, key)
}

// FairnessKeyPage asks for a page of a queue's fairness keys.
type FairnessKeyPage = pg.FairnessKeyListParams

// ListFairnessKeys lists a page of a queue's keys with live work or settings, with their
// counts (next is the cursor of the next page, nil at the end or when sorted by runnable).
func (e *Engine) ListFairnessKeys(ctx context.Context, p FairnessKeyPage) (keys []FairnessKey, next *string, err error) {
	if err := e.queueExists(ctx, p.Queue); err != nil {
		return nil, nil, err
	}
	if p.Limit <= 0 {
		p.Limit = 50
	}
	keys, more, err := e.db.FairnessKeyList(ctx, p)
	if err != nil {
		return nil, nil, err
	}
	if more && len(keys) > 0 {
		next = &keys[len(keys)-1].Key
	}
	return keys, next, nil
}

// queueExists is nil for a queue that exists, else ErrNotFound.
func (e *Engine) queueExists(ctx context.Context, name string) error {
	qs, err := e.db.QueueList(ctx)
	if err != nil {
		return err
	}
	for _, q := range qs {
		if q.Name == name {
			return nil
		}
	}
	return ErrNotFound
}
