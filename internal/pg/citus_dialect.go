package pg

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gendurable/gendurable/internal/pg/dbcitus"
	"github.com/gendurable/gendurable/internal/pg/dbsqlc"
	"github.com/jackc/pgx/v5"
)

// The Citus dialect (docs/citus.md): what each DB method runs when the database is on a
// Citus coordinator. Every statement on jobs, signals and steps names the placements of one
// shard, so that Citus routes it whole to the worker holding the shard; a batch is split
// by shard; what Citus cannot route in one statement (an INSERT beside an UPDATE, a NOTIFY
// the coordinator must hear) is a statement of its own, sent with the others in one
// transaction and one round trip where they do not depend on each other's answers.

// citusClaimCursor remembers, per queue, the shard a claim starts from: the last one that
// had work, so that a process's steps in flight gather on few shards and its outcome
// batches stay large (one statement per shard of a batch).
type citusClaimCursor struct {
	mu    sync.Mutex
	start map[string]int
}

// citusClaim claims up to p.Limit steps of p.Queue, shard after shard from the queue's
// cursor until the batch is full or every shard was tried once: one router statement per
// shard tried (JobClaim in sql/citus/claim.sql). It passes over the shards where a claim
// came back short and nothing has warmed since (citusWarmth); when only shards whose cold
// marks expired are left, one fan-out probe (JobReadyExists) asks first whether the queue
// has due work at all. A shard whose statement fails (its worker is down) is passed over
// and chilled: the claim goes on with the others and answers what they gave, and fails
// only when they gave nothing (TestCitusWorkerDownDuringADrain: stopping at the first
// failure stopped the claims of every shard, and dropped the rows already claimed, whose
// leases then had to expire).
func (db *DB) citusClaim(ctx context.Context, p JobClaimParams) (claimed []ClaimedJob, keyed int, err error) {
	l, err := db.layout(ctx)
	if err != nil {
		return nil, 0, err
	}
	db.claimCursor.mu.Lock()
	if db.claimCursor.start == nil {
		db.claimCursor.start = map[string]int{}
	}
	start := db.claimCursor.start[p.Queue]
	db.claimCursor.mu.Unlock()
	nonce := make([]byte, 16)
	if _, err := rand.Read(nonce); err != nil {
		return nil, 0, err
	}
	args := dbcitus.JobClaimParams{Nonce: hex.EncodeToString(nonce), LeaseTtlMs: p.LeaseTTL.Milliseconds(),
		LeaseOwner: p.Owner, SignalCap: int64(p.SignalCap), Queue: p.Queue}
	visit, versions := db.citusShardsToClaim(ctx, l, p.Queue, start)
	if len(visit) == 0 {
		return nil, 0, nil
	}
	db.urgency.order(p.Queue, l, visit, versions) // urgent work first, across shards
	last := start
	var failed error                 // the first shard's failure
	var draws map[int64][]remoteDraw // the claimed steps whose claimer debits their buckets
	for k := 0; k < len(visit) && len(claimed) < p.Limit; k++ {
		shard := visit[k]
		tried := time.Now()
		args.Placements, args.MaxRows = l.shardPlacements(shard), p.Limit-len(claimed)
		// Read by hand: the handler's columns are NULL for a job whose handler is not
		// registered (a LEFT JOIN that sqlc reads as NOT NULL).
		var got []ClaimedJob
		gotKeyed, worst := 0, 0 // worst: the worst priority taken
		err := db.onShard(ctx, l, shard, func(ctx context.Context, q shardQuerier) error {
			rows, err := q.Query(ctx, dbcitus.JobClaim, args.Nonce, args.LeaseTtlMs, args.LeaseOwner, args.SignalCap,
				args.Placements, args.Queue, args.MaxRows)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var c ClaimedJob
				var isKeyed bool
				var ratePlacement *int
				var rateLimit *string
				var rateKey string
				var rateWeight int
				var extraRateLimits []byte
				var priority int
				if err := rows.Scan(&c.ID, &c.Queue, &c.Handler, &c.Key, &c.Step, &c.Attempt, &c.MaxAttempts, &c.Input,
					&c.State, &c.CreatedAt, &c.LeaseToken, &c.LeaseExpiresAt, &c.ClaimedAt, &c.Wake, &c.ConsumedSeq,
					&c.ClaimInboxSeq, &c.InboxSeq, &c.PendingChildren, &c.Trace, &c.HandlerURL, &c.Secret, &c.PreviousSecret,
					&c.PreviousSecretExpiresAt, &c.TimeoutMS, &c.BackoffBaseMS, &c.BackoffMaxMS, &c.BreakerState,
					&c.ConsecutiveFailures, &c.BreakerNextProbeAt, &c.HandlerPausedAt, &isKeyed,
					&ratePlacement, &rateLimit, &rateKey, &rateWeight, &extraRateLimits, &priority); err != nil {
					return err
				}
				worst = max(worst, priority)
				if ratePlacement != nil && rateLimit != nil {
					if draws == nil {
						draws = map[int64][]remoteDraw{}
					}
					d := []remoteDraw{{remoteBucket{*ratePlacement, *rateLimit, rateKey}, rateWeight}}
					for _, x := range decodeRateLimits(extraRateLimits) {
						d = append(d, remoteDraw{remoteBucket{RateBucketPlacement(x.Name, x.Key), x.Name, x.Key}, max(x.Weight, 1)})
					}
					draws[c.ID] = d
				}
				got = append(got, c)
				if isKeyed {
					gotKeyed++
				}
				if rateLimit != nil {
					db.warmth.rated(p.Queue, l.shardIDAt(shard), tried)
				}
			}
			return rows.Err()
		})
		if err != nil {
			if ctx.Err() != nil {
				return claimed, keyed, translate(err)
			}
			// The statement failed, timed out, or was not sent (its worker's circuit is
			// open): its rows are not leased, or (its answer lost after the commit) are
			// left to lease expiry, never run without their lease.
			failed = cmp.Or(failed, translate(err))
			db.warmth.chill(p.Queue, l.shardIDAt(shard), tried, versions[k])
			continue
		}
		claimed, keyed = append(claimed, got...), keyed+gotKeyed
		if len(got) > 0 {
			last = shard
		}
		full := len(got) == int(args.MaxRows)
		if !full {
			db.warmth.chill(p.Queue, l.shardIDAt(shard), tried, versions[k]) // nothing more to claim there now
		}
		db.urgency.claimed(p.Queue, l.shardIDAt(shard), full, worst, db.warmth.version(l.shardIDAt(shard)) != versions[k])
	}
	if last != start {
		db.claimCursor.mu.Lock()
		db.claimCursor.start[p.Queue] = last
		db.claimCursor.mu.Unlock()
	}
	if len(claimed) == 0 && failed != nil {
		return nil, 0, failed
	}
	claimed, keyed = db.citusTakeRemoteBuckets(ctx, l, p.Queue, claimed, draws, keyed)
	return claimed, keyed, nil
}

// citusShardsToClaim answers the shards a claim of queue visits from start, with their
// warmth versions (citusShardsToVisit): none when every shard came back short a moment
// ago and nothing warmed it, or when only shards whose cold marks expired are left and
// one fan-out probe (citusReadyExists) says the queue has no due work (they are chilled
// again).
func (db *DB) citusShardsToClaim(ctx context.Context, l *citusLayout, queue string, start int) (visit []int, versions []uint64) {
	visit, versions, onlyExpired := db.citusShardsToVisit(l, queue, start, l.shardCount())
	db.warmth.setVisitedNone(queue, len(visit) == 0)
	if len(visit) == 0 || !onlyExpired {
		return visit, versions
	}
	probed := time.Now()
	if ready, err := db.citusReadyExists(ctx, queue); err == nil && !ready {
		for k, shard := range visit {
			db.warmth.chill(queue, l.shardIDAt(shard), probed, versions[k])
		}
		return nil, nil
	}
	return visit, versions
}

// citusExpiredPerClaim is how many shards whose cold marks expired a claim that also has
// warm shards to visit looks at again: a busy queue claims often, so every shard is
// looked at again within a few claims, and its claims do not each pay a statement on
// every shard once a second (which spaced the grants of a bucket of 20 a second by half
// a second each time).
const citusExpiredPerClaim = 4

// citusShardsToVisit answers the shards a claim of queue visits: the warm ones in turn
// from start, then those whose cold marks expired, the longest cold first (at most
// citusExpiredPerClaim of them when there are warm ones), each with its warmth version
// (what the claim chills it against); onlyExpired is set when no warm shard is among them.
func (db *DB) citusShardsToVisit(l *citusLayout, queue string, start, n int) (visit []int, versions []uint64, onlyExpired bool) {
	now := time.Now()
	type expiredShard struct {
		shard   int
		version uint64
		since   time.Time
	}
	var expired []expiredShard
	for k := range n {
		shard := (start + k) % n
		id := l.shardIDAt(shard)
		version := db.warmth.version(id)
		since := db.warmth.coldSince(queue, id)
		switch {
		case since.IsZero():
			visit, versions = append(visit, shard), append(versions, version)
		case now.Sub(since) >= citusColdFor:
			expired = append(expired, expiredShard{shard, version, since})
		}
	}
	onlyExpired = len(visit) == 0
	if !onlyExpired && len(expired) > citusExpiredPerClaim {
		slices.SortStableFunc(expired, func(a, b expiredShard) int { return a.since.Compare(b.since) })
		expired = expired[:citusExpiredPerClaim]
	}
	for _, e := range expired {
		visit, versions = append(visit, e.shard), append(versions, e.version)
	}
	return visit, versions, onlyExpired
}

// citusReadyExists is JobReadyExists on every shard at once (a fan-out statement). It
// answers true with no statement right after a claim of queue that visited no shard
// (every one cold), and while a claim of queue took a rate-limited step less than
// citusRatedFor ago: the dispatcher then polls at its shortest interval, and those claims
// cost nothing until a shard is warmed or a cold mark expires, or one statement on the
// shards whose buckets refill. The probe after each claim that found nothing ran on
// every shard each time: 0.2-0.3 s on the test cluster, which spaced the grants of a
// bucket of 20 a second by that much.
func (db *DB) citusReadyExists(ctx context.Context, queue string) (bool, error) {
	if db.warmth.visitedNone(queue) || db.warmth.ratedWithin(queue, time.Now()) {
		return true, nil
	}
	// A fan-out waits on every worker: one that does not answer must not hold the claim
	// (which then visits the shards, passing over that worker's: citus_circuit.go).
	ctx, cancel := context.WithTimeout(ctx, db.shardTimeout)
	defer cancel()
	ok, err := dbcitus.New(db.pool).JobReadyExists(ctx, queue)
	return ok, translate(err)
}

// citusByShard splits ids by the shard of their placement: the parts of a batch that are
// each one router statement.
func (db *DB) citusByShard(ctx context.Context, n int, id func(i int) int64) ([][]int, *citusLayout, error) {
	l, err := db.layout(ctx)
	if err != nil {
		return nil, nil, err
	}
	return l.byShard(n, func(i int) int { return l.PlacementOfID(id(i)) }), l, nil
}

// citusApplyOutcomes writes a batch of outcomes, one transaction per shard of the batch,
// each one round trip: the job UPDATE (plain or general), the history INSERT ... SELECT
// of what it applied, and a spawn's children; then one NOTIFY on the coordinator for the
// queues that got runnable work. queues (may be nil) are created first, in the
// transaction, which is rolled back when nothing applied (a refused outcome writes
// nothing). A shard whose transaction fails (its worker is down) does not keep the
// others' outcomes from being written: the call answers every outcome applied and the
// first shard's error (TestCitusWorkerDownDuringADrain: the outcomes of the shards after
// a failed one were never tried, and their steps ran again after their leases expired).
func (db *DB) citusApplyOutcomes(ctx context.Context, recs []OutcomeRecord, queues []string) ([]OutcomeApplied, error) {
	if err := checkRetryDelays(recs); err != nil {
		return nil, err
	}
	groups, l, err := db.citusByShard(ctx, len(recs), func(i int) int64 { return recs[i].ID })
	if err != nil {
		return nil, err
	}
	if err := citusRefusedSpawn(recs); err != nil {
		return nil, err
	}
	if recs, err = db.citusKeptBodies(ctx, l, recs); err != nil {
		return nil, err
	}
	var applied []OutcomeApplied
	var wake []citusWake
	var failed error
	for _, g := range groups {
		part := make([]OutcomeRecord, len(g))
		for k, i := range g {
			part[k] = recs[i]
		}
		shard := l.shardIndex(l.PlacementOfID(part[0].ID))
		placements := l.shardPlacements(shard)
		var got []OutcomeApplied
		var woken []string
		var remoteWakes []citusWake
		var remoteEnds bool
		err := db.onShard(ctx, l, shard, func(ctx context.Context, q shardQuerier) (err error) {
			got, woken, remoteWakes, remoteEnds, err = db.citusApplyShard(ctx, q, placements, part, queues)
			return err
		})
		if err != nil {
			failed = cmp.Or(failed, err)
			continue
		}
		if len(got) > 0 {
			// A next step runnable now, a K=1 key or a gate slot given back: this
			// process's claims visit the shard again (citusWarmth).
			db.warmPlacements("", defaultPriority, placements[:1])
		}
		applied = append(applied, got...)
		wake = append(wake, citusWakes(woken, placements[0])...)
		wake = append(wake, remoteWakes...)
		if remoteEnds {
			wake = append(wake, db.remoteChildEndsNow(ctx, l, shard)...)
		}
	}
	return applied, cmp.Or(failed, db.citusNotify(ctx, wake))
}

// citusRefusedSpawn refuses a spawn whose child names a rate limit (docs/citus.md,
// "Guarantees"). A child whose own concurrency key or fairness key places it away from its
// parent lives there, a remote child (citus_family.go; a concurrency key places it before
// a fairness key, its own or its parent's); a child's key is held from the key's placement
// when it is elsewhere (a displaced key: citusApplyShard).
func citusRefusedSpawn(recs []OutcomeRecord) error {
	for _, r := range recs {
		if r.Kind != KindSpawn || len(r.Children) == 0 {
			continue
		}
		var children []JobInsert
		if err := json.Unmarshal(r.Children, &children); err != nil {
			return fmt.Errorf("%w: the children of job %d: %w", ErrInvalid, r.ID, err)
		}
		for _, c := range children {
			if c.RateLimit != nil || len(c.ExtraRateLimits) > 0 {
				return fmt.Errorf("%w: on Citus a spawned child cannot have a rate limit yet "+
					"(its bucket would not be checked across the cluster: docs/citus.md)", ErrInvalid)
			}
		}
	}
	return nil
}

// citusApplyShard writes the outcomes of one shard (placements) in one transaction.
// q is the pool of the shard's worker (or the coordinator's); with queues to create (a
// reference table, written on every node) or children with keys, the coordinator's. A
// child's key is checked as an insert's is (citusKeysHeld: the key's lock, then its
// holders): a key held by a live job, or named twice, refuses the spawn (ErrConflict, as
// the unique index does on plain PostgreSQL); a key away from the child's placement (its
// parent's) is named its key's holder (citus_keys.go).
func (db *DB) citusApplyShard(ctx context.Context, q shardQuerier, placements []int, recs []OutcomeRecord, queues []string) (
	applied []OutcomeApplied, woken []string, remoteWakes []citusWake, remoteEnds bool, err error) {
	plain := plainOutcomes(recs)
	children, remote, childQueues, err := db.citusChildren(ctx, recs)
	if err != nil {
		return nil, nil, nil, false, err
	}
	// One round trip: a pgx batch is one implicit transaction. With queues to create, an
	// explicit one instead, rolled back when nothing applied.
	var send interface {
		SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
	} = q
	var tx pgx.Tx
	keyed := children.keyed() || remote.keyed()
	// A remote child is made at its own placement after the spawn's outcome is read, in
	// the same transaction: the coordinator's.
	if len(queues) > 0 || keyed || remote != nil {
		if tx, err = db.pool.Begin(ctx); err != nil {
			return nil, nil, nil, false, translate(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
		send = tx
	}
	var holders citusChildKeyHolders
	if keyed {
		if holders, err = db.citusChildKeys(ctx, tx, children, remote); err != nil {
			return nil, nil, nil, false, err
		}
	}
	b := &pgx.Batch{}
	if remote != nil {
		// The remote children's insert copies rows to several shards: over the transaction's
		// one connection per worker, not a new one per shard (citus_family.go).
		b.Queue(citusSequentialModify)
	}
	if tx == nil {
		// An explicit block: Citus runs the statements of a pipeline without one each in
		// its own transaction on the worker (the job's new status was seen committed
		// before its history row).
		b.Queue("BEGIN")
	}
	if len(queues) > 0 {
		b.Queue(dbsqlc.QueueEnsureMany, queues)
	}
	if plain {
		p := plainArrays(recs)
		b.Queue(dbcitus.JobApplyPlainOutcomes, p.Ids, p.Tokens, p.Kinds, p.Labels, p.Attempts, p.HttpStatuses,
			p.Payloads, p.DelaysMs, p.Bodies, placements)
	} else {
		doc, err := json.Marshal(recs)
		if err != nil {
			return nil, nil, nil, false, err
		}
		b.Queue(dbcitus.JobApplyOutcomes, doc, placements)
	}
	h, err := historyArrays(recs)
	if err != nil {
		return nil, nil, nil, false, err
	}
	b.Queue(citusWithPlacements(dbcitus.StepInsertApplied, 8, placements), h.Ids, h.Tokens, h.Kinds, h.Labels,
		h.HttpStatuses, h.Errors, h.Bodies)
	if children != nil {
		c := children
		b.Queue(citusWithPlacements(dbcitus.JobInsertChildren, 16, placements), c.ParentIds, c.ParentTokens, c.Seqs,
			c.Queues, c.Handlers, c.Inputs, c.Keys, c.Priorities, c.RunAts, c.DelaysMs, c.ConcurrencyKeys, c.MaxAttempts,
			c.TraceContexts, c.FairnessKeys, c.FairDefaults)
	}
	if remote != nil {
		queueRemoteChildStubs(b, placements, remote)
	}
	if tx == nil {
		b.Queue("COMMIT")
	}
	br := send.SendBatch(ctx, b)
	defer br.Close() //nolint:errcheck // the error is Exec's or Query's, read below
	if remote != nil {
		if _, err := br.Exec(); err != nil { // citusSequentialModify
			return nil, nil, nil, false, translate(err)
		}
	}
	if tx == nil {
		if _, err := br.Exec(); err != nil { // BEGIN
			return nil, nil, nil, false, translate(err)
		}
	}
	if len(queues) > 0 {
		if _, err := br.Exec(); err != nil {
			return nil, nil, nil, false, translate(err)
		}
	}
	rows, err := br.Query()
	if err != nil {
		return nil, nil, nil, false, translate(err)
	}
	var statuses, qs, handlers, labels []*string
	for rows.Next() {
		var a OutcomeApplied
		var w []string
		var remoteEnd bool
		if plain {
			var ord int64
			err = rows.Scan(&a.ID, &ord, seenText{&a.Status, &statuses}, seenText{&a.Queue, &qs}, &a.Ready,
				seenText{&a.Handler, &handlers}, seenText{&a.Label, &labels}, &a.StartedAt, &a.FinishedAt, &w, &remoteEnd)
			if err == nil && (ord < 1 || ord > int64(len(recs))) {
				err = fmt.Errorf("pg: JobApplyPlainOutcomes answered outcome %d of %d", ord, len(recs))
			}
			if err == nil {
				a.Token = recs[ord-1].Token
			}
		} else {
			err = rows.Scan(&a.ID, &a.Token, &a.Status, &a.Queue, &a.Ready, &a.Handler, &a.Label, &a.StartedAt, &a.FinishedAt, &w, &remoteEnd)
		}
		if err != nil {
			rows.Close()
			return nil, nil, nil, false, translate(err)
		}
		applied = append(applied, a)
		remoteEnds = remoteEnds || remoteEnd
		woken = w // the same on every row
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, nil, false, translate(err)
	}
	if _, err := br.Exec(); err != nil { // the history
		return nil, nil, nil, false, translate(err)
	}
	if children != nil {
		if _, err := br.Exec(); err != nil {
			return nil, nil, nil, false, translate(err)
		}
		woken = append(woken, childQueues...)
	}
	var made []dbcitus.RemoteChildStubsMadeRow
	if remote != nil {
		if made, err = readRemoteChildStubs(br); err != nil {
			return nil, nil, nil, false, translate(err)
		}
	}
	if tx == nil {
		if _, err := br.Exec(); err != nil { // COMMIT
			return nil, nil, nil, false, translate(err)
		}
	}
	if tx != nil {
		// The queues must not outlive a refused outcome.
		if err := br.Close(); err != nil {
			return nil, nil, nil, false, translate(err)
		}
		if len(applied) == 0 {
			return nil, nil, nil, false, translate(tx.Rollback(ctx))
		}
		// A holder row of a child that was not made (its spawn was stale) names no job,
		// and so holds nothing.
		if remote != nil {
			if remoteWakes, err = insertRemoteChildren(ctx, tx, remote, made); err != nil {
				return nil, nil, nil, false, translate(err)
			}
		}
		if err := citusPutKeyHolders(ctx, dbcitus.New(tx), holders.keys, holders.ids); err != nil {
			return nil, nil, nil, false, translate(err)
		}
		if err := tx.Commit(ctx); err != nil {
			return nil, nil, nil, false, translate(err)
		}
	}
	return applied, woken, remoteWakes, remoteEnds, nil
}

// citusChildKeyHolders are the displaced keys of a batch's children, and the ids of the
// children that hold them.
type citusChildKeyHolders struct {
	keys []string
	ids  []int64
}

// citusChildKeys takes the locks of the children's keys in tx and reads their holders: a
// key held by a live job, or named by two children, refuses the spawn with ErrConflict.
// It answers the children's keys with the ids the children will have (seq * 1024 + their
// placement: their parent's, or a remote child's own), each named its key's holder (every
// keyed job is: citusInsertTx).
func (db *DB) citusChildKeys(ctx context.Context, tx pgx.Tx, sets ...*citusSpawnChildren) (citusChildKeyHolders, error) {
	var out citusChildKeyHolders
	l, err := db.layout(ctx)
	if err != nil {
		return out, err
	}
	var keys []string
	for _, c := range sets {
		if c == nil {
			continue
		}
		for _, k := range c.Keys {
			if k != "" {
				keys = append(keys, k)
			}
		}
	}
	// A key's lock held long (a caller's open transaction around gendurable_enqueue)
	// must not keep the outcome past the shard's deadline, which would open the worker's
	// circuit: the wait is cut at half of it, and the outcome is written again later
	// (lock_not_available is ErrRetryable).
	if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`,
		fmt.Sprintf("%dms", max(db.shardTimeout.Milliseconds()/2, 1))); err != nil {
		return out, translate(err)
	}
	held, err := db.citusKeysHeld(ctx, tx, l, keys)
	if err != nil {
		return out, translate(err)
	}
	seen := make(map[string]bool, len(keys))
	for _, c := range sets {
		if c == nil {
			continue
		}
		for i, k := range c.Keys {
			if k == "" {
				continue
			}
			if _, ok := held[k]; ok || seen[k] {
				return out, fmt.Errorf("%w: a live job holds the key %q", ErrConflict, k)
			}
			seen[k] = true
			out.keys, out.ids = append(out.keys, k), append(out.ids, c.Seqs[i]*Placements+int64(c.At[i]))
		}
	}
	return out, nil
}

// citusSpawnChildren is JobInsertChildren's arrays.
type citusSpawnChildren struct {
	ParentIds                                       []int64
	ParentTokens                                    []string
	Seqs                                            []int64
	Queues, Handlers, Inputs, Keys, ConcurrencyKeys []string
	TraceContexts                                   []string  // "" for none: the parent's
	FairnessKeys                                    []*string // nil for none: the parent's
	FairDefaults                                    []*string // "" when the child names a fair queue
	Priorities, MaxAttempts                         []int
	RunAts                                          []time.Time
	DelaysMs                                        []int64
	At                                              []int // each child's placement: its parent's, or a remote child's own
}

// keyed reports whether a child of c has a key.
func (c *citusSpawnChildren) keyed() bool {
	return c != nil && slices.ContainsFunc(c.Keys, func(k string) bool { return k != "" })
}

// citusChildren lays out the children of the spawns among recs: those that live at their
// parent's placement for JobInsertChildren, and the remote
// ones, whose own concurrency key or fairness key places them elsewhere
// (citusChildPlacement), for RemoteChildStubsInsert and JobInsertRemoteChildren; nil when
// there is none. Their ids are drawn from the coordinator's sequence (one statement, only
// when a spawn is there). childQueues are the queues the children name (to wake).
func (db *DB) citusChildren(ctx context.Context, recs []OutcomeRecord) (
	local, remote *citusSpawnChildren, childQueues []string, err error) {
	if !slices.ContainsFunc(recs, func(r OutcomeRecord) bool { return r.Kind == KindSpawn && len(r.Children) > 0 }) {
		return nil, nil, nil, nil
	}
	l, err := db.layout(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	var sets [2]citusSpawnChildren // local, remote
	var queues []string
	for _, r := range recs {
		if r.Kind != KindSpawn || len(r.Children) == 0 {
			continue
		}
		var children []JobInsert
		if err := json.Unmarshal(r.Children, &children); err != nil {
			return nil, nil, nil, err
		}
		parentAt := l.PlacementOfID(r.ID)
		for _, ch := range children {
			at := citusChildPlacement(parentAt, &ch)
			c := &sets[0]
			if at != parentAt {
				c = &sets[1]
			}
			c.At = append(c.At, at)
			c.ParentIds = append(c.ParentIds, r.ID)
			c.ParentTokens = append(c.ParentTokens, r.Token)
			c.Queues = append(c.Queues, ch.Queue)
			c.Handlers = append(c.Handlers, ch.Handler)
			c.Inputs = append(c.Inputs, string(ch.Input))
			c.Keys = append(c.Keys, valueOr(ch.Key, ""))
			c.ConcurrencyKeys = append(c.ConcurrencyKeys, valueOr(ch.ConcurrencyKey, ""))
			c.TraceContexts = append(c.TraceContexts, valueOr(ch.TraceContext, ""))
			c.FairnessKeys = append(c.FairnessKeys, ch.FairnessKey)
			c.Priorities = append(c.Priorities, valueOr(ch.Priority, -1))
			c.MaxAttempts = append(c.MaxAttempts, valueOr(ch.MaxAttempts, 0))
			c.RunAts = append(c.RunAts, valueOr(ch.RunAt, time.Time{}))
			c.DelaysMs = append(c.DelaysMs, valueOr(ch.DelayMS, 0))
			if ch.Queue != "" {
				queues = append(queues, ch.Queue)
			}
		}
	}
	n := len(sets[0].ParentIds) + len(sets[1].ParentIds)
	if n == 0 {
		return nil, nil, nil, nil
	}
	seqs, err := dbcitus.New(db.pool).JobIDsDraw(ctx, n)
	if err != nil {
		return nil, nil, nil, translate(err)
	}
	// A child that names a fair queue and has no fairness key, nor a parent with one, gets
	// the default key "" (its parent's queue, when it names none, is fair only if the
	// parent has a key, which it then inherits).
	var handlerNames []string
	for k := range sets {
		handlerNames = append(handlerNames, sets[k].Handlers...)
	}
	handlers, fair, err := citusInsertDefaults(ctx, dbcitus.New(db.pool), handlerNames, queues)
	if err != nil {
		return nil, nil, nil, translate(err)
	}
	for k := range sets {
		c := &sets[k]
		c.Seqs, seqs = seqs[:len(c.ParentIds)], seqs[len(c.ParentIds):]
		c.FairDefaults = make([]*string, len(c.Queues))
		for i, q := range c.Queues {
			c.FairDefaults[i] = fairnessDefault(fair, q)
		}
		for i, name := range c.Handlers {
			if c.MaxAttempts[i] > 0 {
				continue
			}
			c.MaxAttempts[i] = 5 // an unregistered handler: the column's default, as the plain statement
			if m, ok := handlers[name]; ok {
				c.MaxAttempts[i] = m
			}
		}
	}
	if len(sets[0].ParentIds) > 0 {
		local = &sets[0]
	}
	if len(sets[1].ParentIds) > 0 {
		remote = &sets[1]
	}
	return local, remote, queues, nil
}

// valueOr is *p, or or when p is nil.
func valueOr[T any](p *T, or T) T {
	if p == nil {
		return or
	}
	return *p
}

// plainArrays lays out plain outcomes as JobApplyPlainOutcomes' arrays.
func plainArrays(recs []OutcomeRecord) dbsqlc.JobApplyPlainOutcomesParams {
	n := len(recs)
	p := dbsqlc.JobApplyPlainOutcomesParams{Ids: make([]int64, n), Tokens: make([]string, n), Kinds: make([]string, n),
		Labels: make([]string, n), Attempts: make([]int, n), HttpStatuses: make([]int, n),
		Payloads: make([]string, n), DelaysMs: make([]int64, n), Bodies: make([]string, n)}
	for i, r := range recs {
		p.Ids[i], p.Tokens[i], p.Kinds[i], p.Labels[i] = r.ID, r.Token, r.Kind, r.Label
		p.Attempts[i], p.HttpStatuses[i] = r.Attempt, *r.HTTPStatus
		if r.Kind == KindDone {
			p.Payloads[i] = string(r.Result)
		} else {
			p.Payloads[i] = string(r.State)
		}
		if r.DelayMS != nil {
			p.DelaysMs[i] = *r.DelayMS
		}
		if r.Bodies != nil {
			b, _ := json.Marshal(r.Bodies)
			p.Bodies[i] = string(b)
		}
	}
	return p
}

// historyArrays lays out recs as StepInsertApplied's arrays.
func historyArrays(recs []OutcomeRecord) (dbcitus.StepInsertAppliedParams, error) {
	n := len(recs)
	h := dbcitus.StepInsertAppliedParams{Ids: make([]int64, n), Tokens: make([]string, n), Kinds: make([]string, n),
		Labels: make([]string, n), HttpStatuses: make([]int, n), Errors: make([]string, n), Bodies: make([]string, n)}
	for i, r := range recs {
		h.Ids[i], h.Tokens[i], h.Kinds[i], h.Labels[i] = r.ID, r.Token, r.Kind, r.Label
		if r.HTTPStatus != nil {
			h.HttpStatuses[i] = *r.HTTPStatus
		}
		if r.Kind == KindFail || r.Kind == KindRetry {
			h.Errors[i] = string(r.Error)
		}
		if r.Bodies != nil {
			b, err := json.Marshal(r.Bodies)
			if err != nil {
				return h, err
			}
			h.Bodies[i] = string(b)
		}
	}
	return h, nil
}

// citusWake says that queue got runnable work at placement (-1: anywhere), to be claimed
// by the process tag names (notifyTag; "": any); an insert's says its job's priority
// (nil: not said), which the claims put first across shards when better than the default
// (citusUrgency).
type citusWake struct {
	queue, tag string
	placement  int
	priority   *int
}

// citusWakes are the wake-ups of queues, all for work at placement.
func citusWakes(queues []string, placement int) []citusWake {
	out := make([]citusWake, len(queues))
	for i, q := range queues {
		out[i] = citusWake{queue: q, placement: placement}
	}
	return out
}

// citusNotify wakes the dispatchers of the queues in wakes, on the coordinator (one NOTIFY
// per queue, naming the shards of its work: citusWorkPayload), after warming those shards
// for this process's own claims (citusWarmth), which must not wait for the NOTIFY to come
// back (an engine without a listener, a claim that runs first).
func (db *DB) citusNotify(ctx context.Context, wakes []citusWake) error {
	if len(wakes) == 0 {
		return nil
	}
	type notice struct{ queue, tag string }
	var order []notice
	placements := map[notice][]int{}
	anywhere := map[notice]bool{}
	best := map[notice]int{} // the best priority a wake-up of the notice said
	for _, w := range wakes {
		n := notice{w.queue, w.tag}
		if _, seen := placements[n]; !seen && !anywhere[n] {
			order = append(order, n)
			placements[n] = nil
			best[n] = defaultPriority
		}
		if w.placement < 0 {
			anywhere[n] = true
		} else {
			placements[n] = append(placements[n], w.placement)
			if w.priority != nil {
				best[n] = min(best[n], *w.priority)
			}
		}
	}
	payloads := make([]string, 0, len(order))
	for _, n := range order {
		if anywhere[n] {
			db.warmth.warm(n.queue)
			payloads = append(payloads, n.queue+n.tag)
			continue
		}
		db.warmPlacements(n.queue, best[n], placements[n])
		payloads = append(payloads, db.citus.workPayload(n.queue, n.tag, placements[n])+urgentSuffix(best[n]))
	}
	return translate(dbcitus.New(db.pool).WorkNotify(ctx, payloads))
}

// citusLeases runs fn once per shard of leases with that shard's placements and leases. A
// shard whose fn fails (its worker is down) does not keep the others from running: the
// first error is answered once every shard was tried (a heartbeat that stopped there
// extended no lease on the shards after it, and every step of the process ran again once
// its lease expired: TestCitusAWorkerDownStopsOnlyItsShards).
func (db *DB) citusLeases(ctx context.Context, leases []Lease, fn func(ctx context.Context, q shardQuerier, placements []int, part []Lease) error) error {
	groups, l, err := db.citusByShard(ctx, len(leases), func(i int) int64 { return leases[i].JobID })
	if err != nil {
		return err
	}
	var failed error
	for _, g := range groups {
		part := make([]Lease, len(g))
		for k, i := range g {
			part[k] = leases[i]
		}
		shard := l.shardIndex(l.PlacementOfID(part[0].JobID))
		failed = cmp.Or(failed, db.onShard(ctx, l, shard, func(ctx context.Context, q shardQuerier) error {
			return fn(ctx, q, l.shardPlacements(shard), part)
		}))
	}
	return failed
}

// citusExtendLeases is LeaseExtendMany, a router statement per shard.
func (db *DB) citusExtendLeases(ctx context.Context, leases []Lease, ttl time.Duration) ([]LeaseExtended, error) {
	var out []LeaseExtended
	err := db.citusLeases(ctx, leases, func(ctx context.Context, q shardQuerier, placements []int, part []Lease) error {
		ids, tokens := leaseArrays(part)
		rows, err := dbcitus.New(q).LeaseExtendMany(ctx, dbcitus.LeaseExtendManyParams{Placements: placements,
			Ids: ids, Tokens: tokens, LeaseTtlMs: ttl.Milliseconds()})
		for _, r := range rows {
			out = append(out, LeaseExtended{JobID: r.ID, ExpiresAt: *r.ExpiresAt})
		}
		return translate(err)
	})
	return out, err
}

// citusReleaseLeases is LeaseReleaseMany, a router statement per shard, then the wake-ups.
func (db *DB) citusReleaseLeases(ctx context.Context, leases []Lease) ([]int64, error) {
	var out []int64
	var wake []citusWake
	err := db.citusLeases(ctx, leases, func(ctx context.Context, q shardQuerier, placements []int, part []Lease) error {
		ids, tokens := leaseArrays(part)
		rows, err := dbcitus.New(q).LeaseReleaseMany(ctx, dbcitus.LeaseReleaseManyParams{Placements: placements,
			Ids: ids, Tokens: tokens, DelaysMs: make([]int64, len(ids))}) // runnable at once
		for _, r := range rows {
			out = append(out, r.ID)
			wake = append(wake, citusWake{queue: r.Queue, placement: placements[0]})
		}
		return translate(err)
	})
	return out, cmp.Or(err, db.citusNotify(ctx, wake)) // what the live shards did is notified
}

// citusGetBackoffs is LeaseGetBackoffs, a router statement per shard.
func (db *DB) citusGetBackoffs(ctx context.Context, leases []Lease) ([]LeaseBackoff, error) {
	var out []LeaseBackoff
	err := db.citusLeases(ctx, leases, func(ctx context.Context, q shardQuerier, placements []int, part []Lease) error {
		ids, tokens := leaseArrays(part)
		rows, err := dbcitus.New(q).LeaseGetBackoffs(ctx, dbcitus.LeaseGetBackoffsParams{Placements: placements,
			Ids: ids, Tokens: tokens})
		for _, r := range rows {
			out = append(out, LeaseBackoff{Lease: Lease{JobID: r.ID, Token: r.LeaseToken}, Attempt: r.Attempt,
				BackoffBaseMS: r.BackoffBaseMs, BackoffMaxMS: r.BackoffMaxMs})
		}
		return translate(err)
	})
	return out, err
}

// citusReaperShards answers the shards (indexes of l) a reaper statement visits: those
// holding a placement that probe, a fan-out statement, answered, in the order of l. A
// sweep of a cluster with nothing to reap is then one statement on the coordinator (its
// tasks one descent of a partial index on each shard), where one statement per shard
// cost 64 statements a second on the coordinator per server process. Every shard, in
// turn, when the probe fails or a worker's circuit is open: a fan-out waits on every
// worker, and the statements per shard pass over the shards of the one that does not
// answer.
func (db *DB) citusReaperShards(ctx context.Context, l *citusLayout, probe func(ctx context.Context) ([]int, error)) []int {
	if db.circuits.anyOpen() {
		return l.allShards()
	}
	pctx, cancel := context.WithTimeout(ctx, db.shardTimeout)
	defer cancel()
	placements, err := probe(pctx)
	if err != nil {
		return l.allShards()
	}
	seen := make([]bool, l.shardCount())
	for _, p := range placements {
		seen[l.shardIndex(p)] = true
	}
	var shards []int
	for i, due := range seen {
		if due {
			shards = append(shards, i)
		}
	}
	return shards
}

// citusListExpiredLeases is JobListExpiredLeases on each shard that holds an expired
// lease (citusReaperShards) until limit rows. A shard whose statement fails (its worker
// is down) is passed over, as in citusClaim: the leases that expired on the others are
// taken back meanwhile; it fails only when the others had none.
func (db *DB) citusListExpiredLeases(ctx context.Context, limit int, asOf *time.Time) ([]ExpiredLease, error) {
	l, err := db.layout(ctx)
	if err != nil {
		return nil, err
	}
	shards := db.citusReaperShards(ctx, l, func(ctx context.Context) ([]int, error) {
		return dbcitus.New(db.pool).JobExpiredLeasePlacements(ctx, dbcitus.JobExpiredLeasePlacementsParams{AsOf: asOf, MaxRows: limit})
	})
	var out []ExpiredLease
	var failed error
	for _, i := range shards {
		if len(out) >= limit {
			break
		}
		var rows []dbcitus.JobListExpiredLeasesRow
		err := db.onShard(ctx, l, i, func(ctx context.Context, q shardQuerier) (err error) {
			rows, err = dbcitus.New(q).JobListExpiredLeases(ctx, dbcitus.JobListExpiredLeasesParams{
				Placements: l.shardPlacements(i), AsOf: asOf, MaxRows: limit - len(out)})
			return err
		})
		if err != nil {
			if ctx.Err() != nil {
				return out, translate(err)
			}
			failed = cmp.Or(failed, translate(err))
			continue
		}
		for _, r := range rows {
			out = append(out, ExpiredLease{Lease: Lease{JobID: r.ID, Token: r.LeaseToken}, Attempt: r.Attempt,
				BackoffBaseMS: r.BackoffBaseMs, BackoffMaxMS: r.BackoffMaxMs})
		}
	}
	if len(out) == 0 {
		return nil, failed
	}
	return out, nil
}

// citusReapExpiredLeases is JobReapExpiredLeases per shard, each one transaction with the
// history of what it took back (StepInsertApplied), then the wake-ups.
func (db *DB) citusReapExpiredLeases(ctx context.Context, reaps []LeaseReap, asOf *time.Time) ([]Reaped, error) {
	leases := make([]Lease, len(reaps))
	delays := map[int64]int64{}
	for i, r := range reaps {
		leases[i] = r.Lease
		delays[r.JobID] = r.Delay.Milliseconds()
	}
	var out []Reaped
	var wake []citusWake
	err := db.citusLeases(ctx, leases, func(ctx context.Context, q shardQuerier, placements []int, part []Lease) error {
		ids, tokens := leaseArrays(part)
		ds := make([]int64, len(part))
		labels, kinds, empty := make([]string, len(part)), make([]string, len(part)), make([]string, len(part))
		for i, l := range part {
			ds[i], labels[i], kinds[i] = delays[l.JobID], "lease_expired", KindRetry
		}
		b := &pgx.Batch{}
		b.Queue("BEGIN") // one transaction: see citusApplyShard
		b.Queue(dbcitus.JobReapExpiredLeases, ids, tokens, ds, placements, asOf)
		b.Queue(citusWithPlacements(dbcitus.StepInsertApplied, 8, placements), ids, tokens, kinds, labels,
			make([]int, len(part)), empty, empty)
		b.Queue("COMMIT")
		br := q.SendBatch(ctx, b)
		defer br.Close() //nolint:errcheck
		if _, err := br.Exec(); err != nil {
			return translate(err)
		}
		rows, err := br.Query()
		if err != nil {
			return translate(err)
		}
		for rows.Next() {
			var r dbcitus.JobReapExpiredLeasesRow
			if err := rows.Scan(&r.ID, &r.Token, &r.Status, &r.Queue, &r.Handler, &r.StartedAt, &r.FinishedAt, &r.Woken); err != nil {
				rows.Close()
				return translate(err)
			}
			out = append(out, Reaped{JobID: r.ID, Status: r.Status, Queue: r.Queue, Handler: r.Handler,
				StartedAt: r.StartedAt, FinishedAt: r.FinishedAt})
			if r.Status == "runnable" {
				wake = append(wake, citusWake{queue: r.Queue, placement: placements[0]})
			}
			wake = append(wake, citusWakes(r.Woken, placements[0])...)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return translate(err)
		}
		for range 2 { // the history, COMMIT
			if _, err := br.Exec(); err != nil {
				return translate(err)
			}
		}
		return nil
	})
	return out, cmp.Or(err, db.citusNotify(ctx, wake)) // what the live shards did is notified
}

// citusWakeExpiredAwaits is JobWakeExpiredAwaits on each shard that holds an await past
// its deadline (citusReaperShards) until limit rows. A shard whose statement fails (its
// worker is down) is passed over, as in citusClaim, and its error answered once the
// others' awaits are woken and notified.
func (db *DB) citusWakeExpiredAwaits(ctx context.Context, limit int, asOf *time.Time) (int, error) {
	l, err := db.layout(ctx)
	if err != nil {
		return 0, err
	}
	shards := db.citusReaperShards(ctx, l, func(ctx context.Context) ([]int, error) {
		return dbcitus.New(db.pool).JobDueAwaitPlacements(ctx, dbcitus.JobDueAwaitPlacementsParams{AsOf: asOf, MaxRows: limit})
	})
	var wake []citusWake
	var failed error
	n := 0
	for _, i := range shards {
		if n >= limit || ctx.Err() != nil {
			break
		}
		placements := l.shardPlacements(i)
		var rows []dbcitus.JobWakeExpiredAwaitsRow
		err := db.onShard(ctx, l, i, func(ctx context.Context, q shardQuerier) (err error) {
			rows, err = dbcitus.New(q).JobWakeExpiredAwaits(ctx, dbcitus.JobWakeExpiredAwaitsParams{
				Placements: placements, AsOf: asOf, MaxRows: limit - n})
			return err
		})
		if err != nil {
			failed = cmp.Or(failed, translate(err))
			continue
		}
		n += len(rows)
		for _, r := range rows {
			wake = append(wake, citusWake{queue: r.Queue, placement: placements[0]})
		}
	}
	return n, cmp.Or(failed, db.citusNotify(ctx, wake))
}

// citusInboxes is SignalLoadInboxes per shard of the windows.
func (db *DB) citusInboxes(ctx context.Context, windows []InboxWindow) ([]Signal, error) {
	groups, l, err := db.citusByShard(ctx, len(windows), func(i int) int64 { return windows[i].JobID })
	if err != nil {
		return nil, err
	}
	var out []Signal
	for _, g := range groups {
		p := dbcitus.SignalLoadInboxesParams{Placements: l.shardPlacements(l.shardIndex(l.PlacementOfID(windows[g[0]].JobID)))}
		for _, i := range g {
			w := windows[i]
			p.JobIds, p.AfterSeqs, p.UptoSeqs = append(p.JobIds, w.JobID), append(p.AfterSeqs, w.After), append(p.UptoSeqs, w.Upto)
		}
		rows, err := dbcitus.New(db.pool).SignalLoadInboxes(ctx, p)
		if err != nil {
			return out, translate(err)
		}
		for _, r := range rows {
			out = append(out, Signal{ID: r.ID, JobID: r.JobID, Seq: r.Seq, Name: r.Name, Payload: r.Payload, CreatedAt: r.CreatedAt,
				TraceContext: r.TraceContext})
		}
	}
	return out, nil
}

// citusChildrenForJoin is ChildLoadForJoin per shard of the parents.
func (db *DB) citusChildrenForJoin(ctx context.Context, parents []int64, limit int) ([]Child, map[int64]int, error) {
	groups, l, err := db.citusByShard(ctx, len(parents), func(i int) int64 { return parents[i] })
	if err != nil {
		return nil, nil, err
	}
	var out []Child
	totals := map[int64]int{}
	for _, g := range groups {
		p := dbcitus.ChildLoadForJoinParams{Placements: l.shardPlacements(l.shardIndex(l.PlacementOfID(parents[g[0]]))), PerParent: limit}
		for _, i := range g {
			p.ParentIds = append(p.ParentIds, parents[i])
		}
		rows, err := dbcitus.New(db.pool).ChildLoadForJoin(ctx, p)
		if err != nil {
			return out, totals, translate(err)
		}
		for _, r := range rows {
			totals[r.ParentID] = int(r.Total)
			out = append(out, Child{ID: r.ID, ParentID: r.ParentID, Handler: r.Handler, Key: r.Key, Status: r.Status, Result: r.Result, Error: r.Error})
		}
	}
	return out, totals, nil
}

// citusPlacementOf is the placement of job id.
func (db *DB) citusPlacementOf(ctx context.Context, id int64) (int, error) {
	l, err := db.layout(ctx)
	if err != nil {
		return 0, err
	}
	return l.PlacementOfID(id), nil
}

// citusJob maps a Citus jobs row to the API's view of it.
func citusJob(r dbcitus.Job) Job {
	return jobFromRow(dbsqlc.Job{ID: r.ID, Queue: r.Queue, Handler: r.Handler, Status: r.Status, Priority: r.Priority,
		EligibleAt: r.EligibleAt, Input: r.Input, State: r.State, Result: r.Result, Error: r.Error, Step: r.Step,
		Attempt: r.Attempt, MaxAttempts: r.MaxAttempts, Key: r.Key, ConcurrencyKey: r.ConcurrencyKey,
		RateLimit: r.RateLimit, RateKey: r.RateKey, RateWeight: r.RateWeight, ParentID: r.ParentID,
		PendingChildren: r.PendingChildren, Awaiting: r.Awaiting, Wake: r.Wake, InboxSeq: r.InboxSeq,
		ConsumedSeq: r.ConsumedSeq, ClaimInboxSeq: r.ClaimInboxSeq, LeaseToken: r.LeaseToken,
		LeaseExpiresAt: r.LeaseExpiresAt, LeaseOwner: r.LeaseOwner, AttemptedAt: r.AttemptedAt, GateShard: r.GateShard,
		CancelRequested: r.CancelRequested, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, FinishedAt: r.FinishedAt,
		LateSignals: r.LateSignals, CancelledWhile: r.CancelledWhile, ScheduleName: r.ScheduleName,
		ScheduleTick: r.ScheduleTick, ExtraRateLimits: r.ExtraRateLimits, DebounceKey: r.DebounceKey,
		DebounceDeadline: r.DebounceDeadline, TraceContext: r.TraceContext, RerunOf: r.RerunOf, FairnessKey: r.FairnessKey})
}

// citusSignal delivers a signal at the target's placement: SignalDeliver, then (when
// delivered) SignalInsert with the new inbox_seq, in one transaction, then the wake-up.
func (db *DB) citusSignal(ctx context.Context, id *int64, key *string, name string, payload []byte, traceContext *string) (SignalDelivered, error) {
	l, err := db.layout(ctx)
	if err != nil {
		return SignalDelivered{}, err
	}
	placement := 0
	if id != nil {
		placement = l.PlacementOfID(*id)
	} else if key != nil {
		placement = PlacementOfKey(*key)
	}
	var out SignalDelivered
	var queue *string
	err = pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		q := dbcitus.New(tx)
		d, err := q.SignalDeliver(ctx, dbcitus.SignalDeliverParams{Placement: placement, JobID: id, JobKey: key, Name: name,
			TraceContext: traceContext})
		if err != nil {
			return err
		}
		out = SignalDelivered{JobID: d.JobID, JobStatus: d.JobStatus, Woke: d.Woke}
		if d.InboxSeq == nil {
			return nil // finished: nothing delivered
		}
		sid, err := q.SignalInsert(ctx, dbcitus.SignalInsertParams{JobID: d.JobID, Seq: *d.InboxSeq, Name: name,
			Payload: payload, Placement: placement, TraceContext: traceContext})
		out.SignalID, queue = &sid, d.Queue
		return err
	})
	if err != nil {
		return SignalDelivered{}, translate(err)
	}
	if out.Woke && queue != nil {
		return out, db.citusNotify(ctx, []citusWake{{queue: *queue, placement: placement}})
	}
	return out, nil
}

// citusInlined caches the statements whose last parameter, the placements of a shard, is
// written into the text instead (citusWithPlacements).
var citusInlined sync.Map // [2]string{sql, placements} -> string

// citusWithPlacements is sql with its last parameter ($n, the shard's placements) written
// as a literal: Citus prunes an INSERT ... SELECT to one shard from a literal array, not
// from a parameter (it planned StepInsertApplied and JobInsertChildren as 32 tasks, one
// per shard, with the array a parameter). One text per shard, each prepared once per
// connection.
func citusWithPlacements(sql string, n int, placements []int) string {
	lit := make([]byte, 0, 8*len(placements))
	lit = append(lit, "'{"...)
	for i, p := range placements {
		if i > 0 {
			lit = append(lit, ',')
		}
		lit = strconv.AppendInt(lit, int64(p), 10)
	}
	lit = append(lit, "}'"...)
	key := [2]string{sql, string(lit)}
	if s, ok := citusInlined.Load(key); ok {
		return s.(string)
	}
	s := strings.ReplaceAll(sql, "$"+strconv.Itoa(n)+"::int[]", string(lit)+"::int[]")
	citusInlined.Store(key, s)
	return s
}

// citusKeptBodies decides, for each outcome whose bodies follow its queue's setting (an
// outcome reported through the API), whether they are kept, as JobApplyOutcomes decides it
// in its statement on plain PostgreSQL: 'all', or 'failures' for a retry or a fail. One
// router statement per such outcome; recs is copied when one changes.
func (db *DB) citusKeptBodies(ctx context.Context, l *citusLayout, recs []OutcomeRecord) ([]OutcomeRecord, error) {
	copied := false
	for i, r := range recs {
		if r.Bodies == nil || !r.Bodies.ByQueue {
			continue
		}
		setting, err := dbcitus.New(db.pool).JobStepBodiesSetting(ctx, dbcitus.JobStepBodiesSettingParams{
			Placement: l.PlacementOfID(r.ID), ID: r.ID})
		if err != nil && translate(err) != ErrNotFound {
			return nil, translate(err)
		}
		if !copied {
			recs, copied = slices.Clone(recs), true
		}
		keep := setting == "all" || setting == "failures" && (r.Kind == KindRetry || r.Kind == KindFail)
		if keep {
			b := *r.Bodies
			b.ByQueue = false
			recs[i].Bodies = &b
		} else {
			recs[i].Bodies = nil
		}
	}
	return recs, nil
}
