package pg

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gendurable/gendurable/internal/pg/dbcitus"
)

// Remote buckets on Citus (docs/citus.md, "Rate limits"; migrations/citus/0031). A
// rate-limited job lives at its bucket's placement, where the claim that admits it debits
// the bucket in its own router statement. A job that something else placed first (its
// debounce key, where the key's one pending job is found; its concurrency key, where K=1
// and the gate's slots are exact) keeps its bucket at the bucket's placement and names it
// (rate_placement). The claim on the job's shard leases such a step without
// reading the bucket; then, before the step's webhook is called, the claimer debits the
// bucket on the bucket's shard (RateBucketTake: one router statement per bucket, the
// claim's steps of that bucket in pick order) and gives back the leases it could not pay
// for (LeaseReleaseMany with delays: the attempt uncounted, the step runnable again when
// its bucket will hold its tokens). A job naming several rate limits has all its buckets debited so
// (rate_placement names the first), all of them or none: a bucket that paid for a step
// another bucket refused gets it back (RateBucketRefund). A bucket is never overspent:
// each debit locks it, as the claims of its own shard do. A step whose bucket was debited and whose claimer then died before
// calling it has spent tokens for nothing (a bucket errs on the side of fewer calls).

// remoteDraw is what a claimed step owes a bucket on another shard.
type remoteDraw struct {
	bucket remoteBucket
	weight int
}

// remoteBucket is a bucket by its placement and its (limit, key).
type remoteBucket struct {
	placement int
	name, key string
}

// remoteBucketIdle is how long a step waits when its bucket will not hold its tokens
// until its limit is changed: a limit of rate 0, a step heavier than the burst, a limit
// deleted. A PUT of the limit wakes it before that (RateWaitsWake); past it, the step is
// claimed again and its bucket asked again (tokens a refund gave back).
const remoteBucketIdle = time.Minute

// remoteBucketRecheck is how long a step waits when its bucket's shard did not answer.
const remoteBucketRecheck = 10 * time.Second

// citusTakeRemoteBuckets debits the buckets of the claimed steps whose claimer pays them
// (draws, by job id: each step's buckets) and answers the steps every one of their buckets
// paid for, in claim order; the others are given back. The buckets are taken one after
// the other, each for the steps no bucket before it refused; a step that a later bucket
// refuses gets back what the earlier ones debited for it (RateBucketRefund), so a step
// runs only when all of its buckets pay, as on plain PostgreSQL. (Between a debit and its
// refund, another claimer may find that bucket short: it then admits less, never more.)
// keyed is lowered by the steps given back (each was keyed: it has a rate limit).
func (db *DB) citusTakeRemoteBuckets(ctx context.Context, l *citusLayout, queue string, claimed []ClaimedJob,
	draws map[int64][]remoteDraw, keyed int) ([]ClaimedJob, int) {
	if len(draws) == 0 {
		return claimed, keyed
	}
	type stepDraw struct{ step, weight int } // an index into claimed, and its weight in a bucket
	var order []remoteBucket
	steps := map[remoteBucket][]stepDraw{} // in claim order
	for i, c := range claimed {
		for _, d := range draws[c.ID] {
			if _, seen := steps[d.bucket]; !seen {
				order = append(order, d.bucket)
			}
			steps[d.bucket] = append(steps[d.bucket], stepDraw{i, d.weight})
		}
	}
	waits := map[int]time.Duration{} // the steps given back (indexes into claimed), each until its tokens are there
	paid := map[int][]remoteDraw{}   // what each step's buckets debited so far
	for _, b := range order {
		var idx []int
		var weights []int
		for _, d := range steps[b] {
			if _, refused := waits[d.step]; !refused {
				idx, weights = append(idx, d.step), append(weights, d.weight)
			}
		}
		if len(idx) == 0 {
			continue
		}
		fits, wait := db.citusTakeBucket(ctx, l, b, weights)
		for k, i := range idx {
			if fits[k] {
				paid[i] = append(paid[i], remoteDraw{b, weights[k]})
			} else {
				waits[i] = wait[k]
			}
		}
	}
	if len(waits) == 0 {
		return claimed, keyed
	}
	db.citusRefundBuckets(ctx, l, waits, paid)
	db.citusReleaseUntil(ctx, l, queue, claimed, waits)
	kept := make([]ClaimedJob, 0, len(claimed)-len(waits))
	for i, c := range claimed {
		if _, back := waits[i]; !back {
			kept = append(kept, c)
		}
	}
	return kept, keyed - len(waits)
}

// citusRefundBuckets gives back to each bucket what it debited for the steps given back
// (waits) that it paid for: one statement per bucket. A refund that fails leaves the
// tokens spent (fewer calls, never more).
func (db *DB) citusRefundBuckets(ctx context.Context, l *citusLayout, waits map[int]time.Duration, paid map[int][]remoteDraw) {
	owed := map[remoteBucket]int{}
	var order []remoteBucket
	for i := range waits {
		for _, d := range paid[i] {
			if _, seen := owed[d.bucket]; !seen {
				order = append(order, d.bucket)
			}
			owed[d.bucket] += d.weight
		}
	}
	for _, b := range order {
		_ = db.onShard(ctx, l, l.shardIndex(b.placement), func(ctx context.Context, q shardQuerier) error {
			return dbcitus.New(q).RateBucketRefund(ctx, dbcitus.RateBucketRefundParams{Placement: b.placement, Name: b.name,
				Key: b.key, Tokens: float64(owed[b])})
		})
	}
}

// citusTakeBucket debits bucket b for steps of weights (in pick order) and answers which it
// paid for, and for each of the others how long until the bucket holds its tokens (its
// weight and the weights of the unpaid steps before it, at the limit's rate). A bucket not
// there is minted full (its limit must exist) and taken again.
func (db *DB) citusTakeBucket(ctx context.Context, l *citusLayout, b remoteBucket, weights []int) (fits []bool, wait []time.Duration) {
	take := func() (dbcitus.RateBucketTakeRow, error) {
		var row dbcitus.RateBucketTakeRow
		err := db.onShard(ctx, l, l.shardIndex(b.placement), func(ctx context.Context, q shardQuerier) (err error) {
			row, err = dbcitus.New(q).RateBucketTake(ctx, dbcitus.RateBucketTakeParams{Placement: b.placement, Name: b.name,
				Key: b.key, Weights: weights})
			return err
		})
		return row, err
	}
	row, err := take()
	if errors.Is(err, pgx.ErrNoRows) {
		// Minted through the coordinator, which routes the row to its shard: a limit deleted
		// and put back mints the buckets of its live jobs at their own placements only
		// (RateBucketsRemint), and a debounced job's bucket is not minted by its insert. A
		// limit that does not exist refuses it (a foreign key): its steps wait, as a step
		// of a deleted limit waits on plain PostgreSQL.
		if err = dbcitus.New(db.pool).RateBucketMint(ctx, dbcitus.RateBucketMintParams{Names: []string{b.name},
			Keys: []string{b.key}, Placements: []int{b.placement}}); err == nil {
			row, err = take()
		}
	}
	fits, wait = make([]bool, len(weights)), make([]time.Duration, len(weights))
	if err != nil {
		// Not debited: no limit of that name (the mint's foreign key, ErrInvalid), until a
		// PUT puts it back; or the bucket's shard did not answer. Its steps wait and ask again.
		again := remoteBucketRecheck
		if errors.Is(translate(err), ErrInvalid) {
			again = remoteBucketIdle
		}
		for k := range wait {
			wait[k] = again
		}
		return fits, wait
	}
	owed := 0.0 // the weights of the unpaid steps so far
	for k, w := range weights {
		if k < len(row.Fits) && row.Fits[k] {
			fits[k] = true
			continue
		}
		owed += float64(w)
		switch {
		case row.Rate <= 0 || float64(w) > row.Burst:
			wait[k] = remoteBucketIdle
		default:
			secs := math.Max((owed-row.Tokens)/row.Rate, 0.001)
			wait[k] = time.Duration(math.Min(secs, 3600) * float64(time.Second))
		}
	}
	return fits, wait
}

// citusReleaseUntil gives back the leases of the claimed steps in waits, each runnable
// again after its wait, one statement per shard. A lease a shard does not give back (its
// worker not answering) expires, and the reaper takes the step back.
func (db *DB) citusReleaseUntil(ctx context.Context, l *citusLayout, queue string, claimed []ClaimedJob, waits map[int]time.Duration) {
	byShard := map[int][]int{}
	for i := range waits {
		s := l.shardIndex(l.PlacementOfID(claimed[i].ID))
		byShard[s] = append(byShard[s], i)
	}
	now := time.Now()
	for shard, idx := range byShard {
		p := dbcitus.LeaseReleaseManyParams{Placements: l.shardPlacements(shard)}
		soonest := time.Duration(math.MaxInt64)
		for _, i := range idx {
			p.Ids = append(p.Ids, claimed[i].ID)
			p.Tokens = append(p.Tokens, claimed[i].LeaseToken)
			p.DelaysMs = append(p.DelaysMs, max(waits[i].Milliseconds(), 1))
			soonest = min(soonest, waits[i])
		}
		err := db.onShard(ctx, l, shard, func(ctx context.Context, q shardQuerier) error {
			_, err := dbcitus.New(q).LeaseReleaseMany(ctx, p)
			return err
		})
		if err != nil {
			continue // (their leases expire)
		}
		// The shard holds rate-limited work again, due at the soonest wait: its claims
		// come back to it while a bucket refills (citusWarmth).
		db.warmth.rated(queue, l.shardIDAt(shard), now)
	}
}
