package engine

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
)

// The kinds of JobWait.
const (
	// WaitSlot: the job's concurrency key had as many holders as it admits (1, or its
	// gate's limit), all of them other jobs.
	WaitSlot = "slot"
	// WaitRateLimit: the job's (first) rate limit bucket could not have held its weight.
	WaitRateLimit = "rate_limit"
)

// Bounds of JobWaits' reads: the queue's attempts it reads, the executing holders, how far
// before the job's creation a bucket is replayed from, and how far past the job's end an
// attempt that began in its life may have finished.
const (
	waitsMaxSteps    = 5000
	waitsMaxHolders  = 1000
	waitsBucketSpan  = time.Hour
	waitsLeaseWindow = 10 * time.Minute
)

// JobWait is an interval of a job's life during which it could not have been claimed for
// a reason its own row does not record: its key's slots were held by others (WaitSlot), or
// its rate limit bucket was short (WaitRateLimit).
type JobWait struct {
	Kind       string
	Start, End time.Time
}

// JobWaits is what JobWaits derives, with what it could not see.
type JobWaits struct {
	Waits []JobWait
	// Partial: the queue's history in the window had more attempts than were read
	// (waitsMaxSteps), so some holders or grants may be missing.
	Partial bool
}

// JobWaits derives, at read time, when a job waited for a slot of its concurrency key or
// for its rate limit, from the history of the other jobs of its queue: nothing is written
// on the step path to record it. ErrNotFound when there is no such job.
//
// Slot: the attempts (steps rows, from claim to outcome) of other jobs of the same queue
// and concurrency key, and the executing ones (from their claim to now), are swept; where
// as many overlap as the key admits (its gate's limit, else 1) the key was full.
//
// Rate limit: the bucket of the job's first rate limit is replayed from full, at its
// current rate and burst, from an hour (or burst/rate, when shorter) before the job was
// created, debited by every recorded claim of a job of the queue drawing from the same
// bucket. The replay can only overstate the tokens (the bucket was at most full, and
// claims outside the history would only lower it), so where it is below the job's weight
// the real bucket was too: the intervals answered are certain, and the wait outside them
// may still have been the rate limit (its other limits, holders in other queues, settings
// changed since, history collected).
//
// Cost: the job, its gate or rate limit (a key lookup), one range of steps_queue_finished
// (at most 5 000 rows) and one statement for the holders (primary-key probes, and the
// executing rows). A job with neither a concurrency key nor a rate limit costs one read.
func (e *Engine) JobWaits(ctx context.Context, id int64) (JobWaits, error) {
	d, err := e.GetJob(ctx, id)
	if err != nil {
		return JobWaits{}, err
	}
	j := d.Job
	if j.ConcurrencyKey == nil && j.RateLimit == nil {
		return JobWaits{}, nil
	}
	now := time.Now()
	end := now
	if j.FinishedAt != nil {
		end = *j.FinishedAt
	}
	from := j.CreatedAt
	limit := 1
	var rate, burst float64
	if j.ConcurrencyKey != nil {
		if g, err := e.db.GateGet(ctx, *j.ConcurrencyKey); err == nil {
			limit = g.Limit
		} else if !errors.Is(err, pg.ErrNotFound) {
			return JobWaits{}, err
		}
	}
	if j.RateLimit != nil {
		l, err := e.db.RateLimitGet(ctx, *j.RateLimit)
		switch {
		case err == nil && l.Rate > 0:
			rate, burst = l.Rate, l.Burst
			back := min(time.Duration(burst/rate*float64(time.Second)), waitsBucketSpan)
			from = from.Add(-back)
		case err == nil, errors.Is(err, pg.ErrNotFound):
			// A zero rate (or a limit since deleted): no replay to make.
		default:
			return JobWaits{}, err
		}
	}
	spans, err := e.db.StepWindowOfQueue(ctx, j.Queue, from, end.Add(waitsLeaseWindow), waitsMaxSteps)
	if err != nil {
		return JobWaits{}, err
	}
	ids := make([]int64, 0, len(spans))
	for _, s := range spans {
		ids = append(ids, s.JobID)
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	flows, err := e.db.JobFlowList(ctx, pg.JobFlowListParams{IDs: ids, ConcurrencyKey: j.ConcurrencyKey,
		RateLimit: j.RateLimit, RateKey: j.RateKey, Limit: waitsMaxHolders})
	if err != nil {
		return JobWaits{}, err
	}
	byID := make(map[int64]pg.JobFlow, len(flows))
	for _, f := range flows {
		byID[f.ID] = f
	}
	sameKey := func(f pg.JobFlow) bool {
		return j.ConcurrencyKey != nil && f.ID != j.ID && f.ConcurrencyKey != nil && *f.ConcurrencyKey == *j.ConcurrencyKey
	}
	sameBucket := func(f pg.JobFlow) bool {
		return rate > 0 && f.RateLimit != nil && *f.RateLimit == *j.RateLimit &&
			(f.RateKey == nil) == (j.RateKey == nil) && (f.RateKey == nil || *f.RateKey == *j.RateKey)
	}
	var leases, own [][2]time.Time
	var grants []grant
	if j.Status == "executing" && j.AttemptedAt != nil {
		own = append(own, [2]time.Time{*j.AttemptedAt, now})
	}
	for _, s := range spans {
		if s.JobID == j.ID {
			own = append(own, [2]time.Time{s.StartedAt, s.FinishedAt})
		}
		f, ok := byID[s.JobID]
		if !ok {
			continue // collected since
		}
		if sameKey(f) {
			leases = append(leases, [2]time.Time{s.StartedAt, s.FinishedAt})
		}
		if sameBucket(f) {
			grants = append(grants, grant{s.StartedAt, f.RateWeight})
		}
	}
	for _, f := range flows {
		if f.Status != "executing" || f.AttemptedAt == nil {
			continue
		}
		if sameKey(f) {
			leases = append(leases, [2]time.Time{*f.AttemptedAt, now})
		}
		if sameBucket(f) {
			grants = append(grants, grant{*f.AttemptedAt, f.RateWeight})
		}
	}
	grants = slices.CompactFunc(sortGrants(grants), func(a, b grant) bool { return a == b }) // a job listed twice

	var out JobWaits
	out.Partial = len(spans) == waitsMaxSteps
	// Clipped to the job's life; a live job's rate-limit wait may end after now (the
	// replayed bucket holds its weight no sooner than that, so neither does the real one).
	window := [2]time.Time{j.CreatedAt, end}
	if j.FinishedAt == nil {
		window[1] = end.Add(waitsBucketSpan)
	}
	// On Citus the outcome's history row and the job's row take their times from
	// different statements: a job that finished within a second of its last attempt
	// finished with it (a cancel while queued ends with no attempt, long after).
	if j.FinishedAt != nil && len(own) > 0 {
		last := own[0][1]
		for _, o := range own {
			last = maxTime(last, o[1])
		}
		if d := j.FinishedAt.Sub(last); d > 0 && d < time.Second {
			own = append(own, [2]time.Time{last, *j.FinishedAt})
		}
	}
	// A wait is while the job was not running itself.
	add := func(kind string, ivs [][2]time.Time) {
		for _, iv := range ivs {
			for _, part := range without(clip(iv, window), own) {
				out.Waits = append(out.Waits, JobWait{Kind: kind, Start: part[0], End: part[1]})
			}
		}
	}
	add(WaitSlot, saturated(leases, limit))
	if rate > 0 {
		add(WaitRateLimit, bucketShort(grants, from, rate, burst, float64(max(j.RateWeight, 1))))
	}
	slices.SortFunc(out.Waits, func(a, b JobWait) int { return a.Start.Compare(b.Start) })
	return out, nil
}

type grant struct {
	at     time.Time
	weight int
}

func sortGrants(g []grant) []grant {
	slices.SortFunc(g, func(a, b grant) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.weight - b.weight
	})
	return g
}

// without answers the parts of iv outside every interval of cut (none when iv is empty).
func without(iv [2]time.Time, cut [][2]time.Time) [][2]time.Time {
	parts := [][2]time.Time{iv}
	for _, c := range cut {
		var next [][2]time.Time
		for _, p := range parts {
			if c[1].After(p[0]) && c[0].Before(p[1]) {
				next = append(next, [2]time.Time{p[0], c[0]}, [2]time.Time{c[1], p[1]})
			} else {
				next = append(next, p)
			}
		}
		parts = next
	}
	out := parts[:0]
	for _, p := range parts {
		if p[1].After(p[0]) {
			out = append(out, p)
		}
	}
	return out
}

func clip(iv, w [2]time.Time) [2]time.Time {
	if iv[0].Before(w[0]) {
		iv[0] = w[0]
	}
	if iv[1].After(w[1]) {
		iv[1] = w[1]
	}
	return iv
}

// saturated answers the intervals, in order and disjoint, during which at least limit of
// the leases overlap.
func saturated(leases [][2]time.Time, limit int) [][2]time.Time {
	type edge struct {
		at time.Time
		d  int
	}
	edges := make([]edge, 0, 2*len(leases))
	for _, l := range leases {
		if l[1].After(l[0]) {
			edges = append(edges, edge{l[0], 1}, edge{l[1], -1})
		}
	}
	// Ends before starts at the same instant: a lease handed over is not an overlap.
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.d - b.d
	})
	var out [][2]time.Time
	n := 0
	var since time.Time
	for _, e := range edges {
		was := n >= limit
		n += e.d
		switch is := n >= limit; {
		case is && !was:
			since = e.at
		case !is && was:
			if n := len(out); n > 0 && !out[n-1][1].Before(since) {
				out[n-1][1] = e.at
			} else if e.at.After(since) {
				out = append(out, [2]time.Time{since, e.at})
			}
		}
	}
	return out
}

// bucketShort replays a token bucket (rate tokens a second, at most burst) from full at
// from, debited by grants (sorted), and answers the intervals during which it held less
// than need.
func bucketShort(grants []grant, from time.Time, rate, burst, need float64) [][2]time.Time {
	var out [][2]time.Time
	tokens, at := burst, from
	for _, g := range grants {
		if g.at.Before(at) {
			g.at = at
		}
		tokens = min(burst, tokens+rate*g.at.Sub(at).Seconds())
		tokens = max(0, tokens-float64(g.weight))
		at = g.at
		if tokens < need {
			until := at.Add(time.Duration((need - tokens) / rate * float64(time.Second)))
			if n := len(out); n > 0 && !out[n-1][1].Before(at) {
				out[n-1][1] = maxTime(out[n-1][1], until)
			} else {
				out = append(out, [2]time.Time{at, until})
			}
		}
	}
	return out
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
