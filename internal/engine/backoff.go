package engine

import (
	"math"
	"math/rand/v2"
	"time"
)

// The retry policy lives here, in Go, and not in the database: a changed curve is a
// code change, not a migration. The statements that schedule a retry (the outcome, the
// reaper) take each row's delay as an argument.

// unregisteredRetryDelay is the delay before the next attempt of a step whose handler is
// not registered: a flat second, so the job spends its attempts soon (each one records
// "handler_missing") without hammering the database.
const unregisteredRetryDelay = time.Second

// maxBackoffDoublings bounds the exponent of the curve; past it base·2^n exceeds any cap
// a handler may have (24 h) for every base but 0.
const maxBackoffDoublings = 40

// RetryDelay is how long to wait before running a step again after its attempt-th
// attempt (counted from 1) failed: base·2^(attempt-1), capped at maxDelay, then a uniform
// draw in [½, 1] of that, so the retries of a burst of failures spread out instead of
// arriving together. Attempts below 1 count as 1; base 0 retries at once.
func RetryDelay(attempt int, base, maxDelay time.Duration) time.Duration {
	return retryDelay(attempt, base, maxDelay, rand.Float64())
}

// retryDelay is RetryDelay with the jitter given: u in [0, 1) picks the point of
// [½, 1] of the capped delay (0: half of it).
func retryDelay(attempt int, base, maxDelay time.Duration, u float64) time.Duration {
	doublings := min(maxBackoffDoublings, max(attempt-1, 0))
	capped := math.Min(float64(maxDelay), float64(base)*math.Pow(2, float64(doublings)))
	return time.Duration(capped * (0.5 + u/2))
}

// RetryBackoff is what the delay of a retry without its own delay is computed from.
type RetryBackoff struct {
	// Attempt is the attempt that failed (the step's attempt, counted from 1).
	Attempt int
	// Base and Max are the handler's backoff_base and backoff_max; nil when no handler
	// is registered under the job's name (the delay is then a flat second).
	Base, Max *time.Duration
}

// Delay draws the delay before the next attempt.
func (b RetryBackoff) Delay() time.Duration {
	if b.Base == nil || b.Max == nil {
		return unregisteredRetryDelay
	}
	return RetryDelay(b.Attempt, *b.Base, *b.Max)
}

// backoffOf reads the handler's settings as the claim and the reaper return them (in
// milliseconds, nil when the handler is not registered).
func backoffOf(attempt int, baseMS, maxMS *int) RetryBackoff {
	b := RetryBackoff{Attempt: attempt}
	if baseMS != nil && maxMS != nil {
		b.Base, b.Max = ptr(time.Duration(*baseMS)*time.Millisecond), ptr(time.Duration(*maxMS)*time.Millisecond)
	}
	return b
}
