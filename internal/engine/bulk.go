package engine

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
)

// MaxBulkLimit is the most jobs one batch of a bulk cancel or retry takes (its `limit`);
// DefaultBulkLimit is the batch when the request names none.
const (
	MaxBulkLimit     = 10000
	DefaultBulkLimit = 1000
)

// BulkFilter selects the jobs of a bulk cancel or retry. Every set field narrows the
// selection; a filter that sets none is refused unless All says so explicitly.
type BulkFilter struct {
	// All acts on every job the action applies to; it may not be combined with a field.
	All bool
	// Statuses narrows to these statuses (cancel: runnable, executing, awaiting; retry:
	// failed, cancelled). Nil: every status the action applies to.
	Statuses      []string
	Queue         *string
	Handler       *string
	CreatedAfter  *time.Time // created at or after
	CreatedBefore *time.Time // created before
	KeyPrefix     *string    // jobs whose key starts with it
}

// BulkResult is what one batch of a bulk action did: Changed jobs (a cancel counts the
// descendants it cancelled with their roots), and More when matching jobs remain, to be
// taken by calling again.
type BulkResult struct {
	Changed int
	More    bool
}

// CancelJobs cancels up to limit live jobs matching f (0: DefaultBulkLimit), oldest
// first, each with its live descendants, as Cancel does for one: at once when runnable
// or parked, at its step's outcome when executing (flagged, and not counted again by a
// later call). One statement.
func (e *Engine) CancelJobs(ctx context.Context, f BulkFilter, limit int) (BulkResult, error) {
	filter, limit, err := f.validate(limit, []string{"runnable", "executing", "awaiting"})
	if err != nil {
		return BulkResult{}, err
	}
	r, err := e.db.JobCancelMany(ctx, filter, limit)
	return BulkResult{Changed: r.Changed, More: r.More}, err
}

// RetryJobs retries up to limit failed or cancelled jobs matching f (0:
// DefaultBulkLimit), oldest first, each as Retry does for one. A job whose key a live
// job holds is left alone (not counted, and not in More). One statement.
func (e *Engine) RetryJobs(ctx context.Context, f BulkFilter, limit int) (BulkResult, error) {
	filter, limit, err := f.validate(limit, []string{"failed", "cancelled"})
	if err != nil {
		return BulkResult{}, err
	}
	r, err := e.db.JobRetryMany(ctx, filter, limit)
	return BulkResult{Changed: r.Changed, More: r.More}, err
}

// validate checks a bulk request (fields named as in its body: "filter/…", "limit")
// whose action applies to the statuses allowed.
func (f BulkFilter) validate(limit int, allowed []string) (pg.JobFilter, int, error) {
	v := &validator{}
	if limit == 0 {
		limit = DefaultBulkLimit
	}
	if limit < 1 || limit > MaxBulkLimit {
		v.add("limit", "must be between 1 and %d, got %d", MaxBulkLimit, limit)
	}
	narrowed := f.Statuses != nil || f.Queue != nil || f.Handler != nil || f.CreatedAfter != nil ||
		f.CreatedBefore != nil || f.KeyPrefix != nil
	switch {
	case f.All && narrowed:
		v.add("filter/all", "acts on every job: give it alone, or drop it and keep the other filters")
	case !f.All && !narrowed:
		v.add("filter", `is empty: name a queue, handler, status, created_after, created_before or key_prefix, or set "all": true to act on every job`)
	}
	if f.Statuses != nil && len(f.Statuses) == 0 {
		v.add("filter/status", "must hold at least one status")
	}
	for i, s := range f.Statuses {
		if !slices.Contains(allowed, s) {
			v.add("filter/status/"+strconv.Itoa(i), "%q is not a status this action applies to (%v)", s, allowed)
		}
	}
	if f.Queue != nil {
		v.name("filter/queue", *f.Queue)
	}
	if f.Handler != nil {
		v.name("filter/handler", *f.Handler)
	}
	v.keyText("filter/key_prefix", f.KeyPrefix)
	if f.CreatedAfter != nil && f.CreatedBefore != nil && !f.CreatedBefore.After(*f.CreatedAfter) {
		v.add("filter/created_before", "must be later than created_after")
	}
	if err := v.err(); err != nil {
		return pg.JobFilter{}, 0, err
	}
	return pg.JobFilter{Statuses: f.Statuses, Queue: f.Queue, Handler: f.Handler, CreatedAfter: f.CreatedAfter,
		CreatedBefore: f.CreatedBefore, KeyPrefix: f.KeyPrefix}, limit, nil
}
