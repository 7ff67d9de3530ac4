package pg

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gendurable/gendurable/internal/pg/dbcitus"
	"github.com/gendurable/gendurable/internal/pg/dbsqlc"
)

// Fair share on Citus (docs/citus.md, "Fair share"; sql/citus/fair.sql): a fair queue is
// claimed shard after shard, as every queue is, and on each shard its fairness keys take
// turns from that shard's position. A fairness key places its jobs (FairnessPlacement),
// so the key's cap counts its executing steps on one shard (per shard for its jobs that
// concurrency keys placed elsewhere). Across shards a claim is
// shared out by the weights of the keys each shard held at its last claim, in a round
// that goes on where the last claim stopped. A key's share of the process's slots counts
// the keys with work on other shards.

// citusFairShards is the round robin of each fair queue's claims over the shards on
// Citus: what each shard held at its last claim that took rows (the weights of its keys
// with due work, the default key aside, and whether the default key had due work there),
// and where the round stands (the shard whose turn it is and what is left of its turn).
type citusFairShards struct {
	mu     sync.Mutex
	queues map[string]*citusFairRound
}

type citusFairRound struct {
	found  map[int]citusFairShard
	cursor int // the shard whose turn it is
	credit int // what is left of its turn (0: a whole turn)
}

type citusFairShard struct {
	weights    int
	defaultKey bool
	// homeWeights: the weights of the keys found there whose placement is on the shard
	// (the others are jobs their concurrency keys placed there, counted at their keys' own
	// shards in the shares of the slots).
	homeWeights int
}

// round answers queue's round, made when new; the caller holds f.mu.
func (f *citusFairShards) round(queue string) *citusFairRound {
	if f.queues == nil {
		f.queues = map[string]*citusFairRound{}
	}
	r := f.queues[queue]
	if r == nil {
		r = &citusFairRound{found: map[int]citusFairShard{}}
		f.queues[queue] = r
	}
	return r
}

// elsewhere answers what the shards other than shard held at their last claims: the
// weights of their keys, the default key aside, each key counted at its own shard only,
// and whether the default key had work on any of them. A key's share of the slots is
// counted against these beside the keys found on shard (so a key whose jobs concurrency
// keys spread over many shards weighs once there, not once a shard; on a shard that holds
// such jobs it can weigh twice: found there, and at its own shard).
func (r *citusFairRound) elsewhere(shard int) (weights int, defaultKey bool) {
	for s, f := range r.found {
		if s != shard {
			weights += f.homeWeights
			defaultKey = defaultKey || f.defaultKey
		}
	}
	return weights, defaultKey
}

// weights answers each shard's weight in queue's round: the weights of the keys last
// found there (0 for a shard that gave nothing at its last claim or was never claimed:
// its turn is then 1 row, which finds out). The default key "" spreads over every
// shard, so it weighs 1 in all, shared among the shards it was found on.
func (r *citusFairRound) weights(shards []int) []float64 {
	defaults := 0
	for _, shard := range shards {
		if r.found[shard].defaultKey {
			defaults++
		}
	}
	out := make([]float64, len(shards))
	for k, shard := range shards {
		s := r.found[shard]
		out[k] = float64(s.weights)
		if s.defaultKey {
			out[k] += 1 / float64(defaults)
		}
	}
	return out
}

// citusClaimFair is JobClaimFair on Citus: per shard visited, one round trip of two router
// statements in one transaction (FairPositionLock, then JobClaimFair), the shards of a
// wave visited at once. The shards
// take turns as a shard's keys do within it (deficit round robin, as on plain PostgreSQL):
// each shard's turn is the weights of the keys it held at its last claim times the rounds
// that fill the batch, from the shard whose turn it is; the shard the batch ends in keeps
// the rest of its turn for the next claim. A shard that gives less than its turn has
// nothing more to give now (its keys are at their shares or caps, or out of due work); what
// the batch still wants is then split among the shards that gave their whole turns.
func (db *DB) citusClaimFair(ctx context.Context, p FairClaimParams) ([]ClaimedJob, error) {
	l, err := db.layout(ctx)
	if err != nil {
		return nil, err
	}
	n := l.shardCount()
	db.fairShards.mu.Lock()
	r := db.fairShards.round(p.Queue)
	cursor, credit := r.cursor%n, r.credit
	db.fairShards.mu.Unlock()
	visit, versions := db.citusShardsToClaim(ctx, l, p.Queue, cursor)
	if len(visit) == 0 {
		return nil, nil
	}
	// The shards in ring order from the one whose turn it is: a shard whose cold mark
	// expired takes its turn where it stands, not after every warm shard (where a batch
	// the warm shards fill would never reach it, and its keys would wait as long as the
	// others have work).
	order := make([]int, len(visit))
	for k := range order {
		order[k] = k
	}
	slices.SortFunc(order, func(a, b int) int {
		return cmp.Compare((visit[a]-cursor+n)%n, (visit[b]-cursor+n)%n)
	})
	ringVisit, ringVersions := make([]int, len(visit)), make([]uint64, len(visit))
	for k, i := range order {
		ringVisit[k], ringVersions[k] = visit[i], versions[i]
	}
	visit, versions = ringVisit, ringVersions
	nonce := make([]byte, 16)
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	own := make(map[string]int, len(p.Own))
	for k, v := range p.Own {
		own[k] = v
	}
	var claimed []ClaimedJob
	var failed error
	// claimWave claims up to each visit's want rows on its shard, the shards at once (each
	// a transaction of its own, on its own connection), then takes their answers in ring
	// order; full reports, for each, whether it gave all it was asked. The shards hold
	// different keys, so what one claims does not change what another may: their claims
	// read the process's keys in flight as they were before the wave.
	type fairVisit struct{ k, want int }
	type fairAnswer struct {
		got   []ClaimedJob
		found citusFairShard
		tried time.Time
		err   error
	}
	claimWave := func(wave []fairVisit) (full []bool) {
		answers := make([]fairAnswer, len(wave))
		var wg sync.WaitGroup
		at := make(chan struct{}, shardsAtOnce)
		for i, v := range wave {
			shard := visit[v.k]
			db.fairShards.mu.Lock()
			elsewhere, defaultElsewhere := db.fairShards.round(p.Queue).elsewhere(shard)
			db.fairShards.mu.Unlock()
			at <- struct{}{}
			wg.Go(func() {
				defer func() { <-at }()
				a := &answers[i]
				a.tried = time.Now()
				a.err = db.onShard(ctx, l, shard, func(ctx context.Context, q shardQuerier) (err error) {
					a.got, a.found, err = citusClaimFairShard(ctx, q, l.shardPlacements(shard), p, v.want, own, elsewhere,
						defaultElsewhere, hex.EncodeToString(nonce))
					return err
				})
			})
		}
		wg.Wait()
		full = make([]bool, len(wave))
		for i, v := range wave {
			a, shard := answers[i], visit[v.k]
			if a.err != nil {
				if ctx.Err() == nil { // (else not the shard's doing)
					failed = cmp.Or(failed, translate(a.err))
					db.warmth.chill(p.Queue, l.shardIDAt(shard), a.tried, versions[v.k])
				}
				continue
			}
			claimed = append(claimed, a.got...)
			for _, c := range a.got {
				if c.FairnessKey != nil {
					own[*c.FairnessKey]++
				}
			}
			db.fairShards.mu.Lock()
			db.fairShards.round(p.Queue).found[shard] = a.found // (nothing found when it gave nothing)
			db.fairShards.mu.Unlock()
			if len(a.got) == 0 {
				// Nothing to claim there now: its keys are out of due work, or at their
				// shares or caps until a step of theirs ends (an outcome warms the shard
				// again). A shard that gave fewer rows than asked is not passed over: its
				// keys' turns within it may have been cut short (the rest of a turn
				// carried over).
				db.warmth.chill(p.Queue, l.shardIDAt(shard), a.tried, versions[v.k])
			}
			full[i] = len(a.got) == v.want
		}
		return full
	}

	db.fairShards.mu.Lock()
	weights := db.fairShards.round(p.Queue).weights(visit)
	db.fairShards.mu.Unlock()
	total := 0.0
	for _, w := range weights {
		total += w
	}
	rounds := math.Ceil(float64(p.Limit) / math.Max(total, 1))
	nextCursor, nextCredit := cursor, credit
	var gaveAll []int // the shards that gave their whole turns
	// The shards' turns in ring order, in waves: a wave is the shards whose turns fill
	// what the batch still wants, claimed at once; a shard that gave less than its turn
	// leaves the rest to the next wave, from the shard after the last one visited.
	for next := 0; next < len(visit) && p.Limit-len(claimed) > 0 && ctx.Err() == nil; {
		var wave []fairVisit
		var turns []int
		for left := p.Limit - len(claimed); next < len(visit) && left > 0; next++ {
			turn := max(1, int(math.Round(weights[next]*rounds)))
			if next == 0 && visit[0] == cursor && credit > 0 {
				turn = credit
			}
			want := min(turn, left)
			wave, turns = append(wave, fairVisit{next, want}), append(turns, turn)
			left -= want
		}
		full := claimWave(wave)
		for i, v := range wave {
			shard := visit[v.k]
			nextCursor, nextCredit = (shard+1)%n, 0
			if full[i] && v.want < turns[i] { // the batch ended in this shard's turn: it keeps the rest
				nextCursor, nextCredit = shard, turns[i]-v.want
			}
			if full[i] {
				gaveAll = append(gaveAll, v.k)
			}
		}
		if last := len(wave) - 1; full[last] && wave[last].want < turns[last] {
			break
		}
	}
	// What the batch still wants, split among the shards that gave their whole turns by
	// the weights they hold now (their claims above found them out), claimed at once.
	if remaining := p.Limit - len(claimed); remaining > 0 && len(gaveAll) > 0 && ctx.Err() == nil {
		shards := make([]int, len(gaveAll))
		for i, k := range gaveAll {
			shards[i] = visit[k]
		}
		db.fairShards.mu.Lock()
		now := db.fairShards.round(p.Queue).weights(shards)
		db.fairShards.mu.Unlock()
		sum := 0.0
		for _, w := range now {
			sum += w
		}
		var wave []fairVisit
		for i, k := range gaveAll {
			if remaining <= 0 {
				break
			}
			part := float64(remaining) / float64(len(gaveAll)-i) // (evenly when none holds a weight)
			if sum > 0 {
				part = float64(remaining) * now[i] / sum
				sum -= now[i]
			}
			want := min(remaining, max(1, int(math.Ceil(part))))
			wave = append(wave, fairVisit{k, want})
			remaining -= want
		}
		claimWave(wave)
	}
	db.fairShards.mu.Lock()
	r = db.fairShards.round(p.Queue)
	r.cursor, r.credit = nextCursor, nextCredit
	db.fairShards.mu.Unlock()
	if ctx.Err() != nil {
		return claimed, translate(ctx.Err())
	}
	if len(claimed) == 0 && failed != nil {
		return nil, failed
	}
	return claimed, nil
}

// citusClaimFairShard runs one shard's fair claim of up to want rows: the lock of its
// position and the claim in one transaction, one round trip. It
// answers the rows and what the shard holds (when it answered rows).
func citusClaimFairShard(ctx context.Context, q shardQuerier, placements []int, p FairClaimParams, want int,
	own map[string]int, elsewhere int, defaultElsewhere bool, nonce string) (got []ClaimedJob, found citusFairShard, err error) {
	keys, counts := make([]string, 0, len(own)), make([]int, 0, len(own))
	for k, v := range own {
		keys, counts = append(keys, k), append(counts, v)
	}
	b := &pgx.Batch{}
	// An explicit block: Citus runs the statements of a pipeline without one each in its
	// own transaction on a worker, and the lock must be held through the claim.
	b.Queue("BEGIN")
	b.Queue(dbcitus.FairPositionLock, placements[0], p.Queue)
	// (in dbcitus.JobClaimFairParams' order)
	b.Queue(dbcitus.JobClaimFair, nonce, p.LeaseTTL.Milliseconds(), p.Owner, int64(p.SignalCap), placements, p.Queue,
		want, keys, elsewhere, defaultElsewhere, p.Slots, counts)
	b.Queue("COMMIT")
	br := q.SendBatch(ctx, b)
	defer func() { _ = br.Close() }()
	for range 2 { // BEGIN, the lock
		if _, err := br.Exec(); err != nil {
			return nil, found, err
		}
	}
	rows, err := br.Query()
	if err != nil {
		return nil, found, err
	}
	defer rows.Close()
	for rows.Next() {
		var c ClaimedJob
		if err := rows.Scan(&c.ID, &c.Queue, &c.Handler, &c.Key, &c.Step, &c.Attempt, &c.MaxAttempts, &c.Input,
			&c.State, &c.CreatedAt, &c.LeaseToken, &c.LeaseExpiresAt, &c.ClaimedAt, &c.Wake, &c.ConsumedSeq,
			&c.ClaimInboxSeq, &c.InboxSeq, &c.PendingChildren, &c.Trace, &c.HandlerURL, &c.Secret, &c.PreviousSecret,
			&c.PreviousSecretExpiresAt, &c.TimeoutMS, &c.BackoffBaseMS, &c.BackoffMaxMS, &c.BreakerState,
			&c.ConsecutiveFailures, &c.BreakerNextProbeAt, &c.HandlerPausedAt, &c.FairnessKey, &found.weights,
			&found.defaultKey, &found.homeWeights); err != nil {
			return nil, found, err
		}
		got = append(got, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, found, err
	}
	if _, err := br.Exec(); err != nil { // COMMIT
		return nil, found, err
	}
	return got, found, br.Close()
}

// citusFairnessKeyList is FairnessKeyList on Citus (FairnessKeyList and FairnessKeyTop in
// sql/citus/fair.sql: one fan-out aggregate over the queue's live keyed jobs each).
func (db *DB) citusFairnessKeyList(ctx context.Context, p FairnessKeyListParams) (keys []FairnessKey, more bool, err error) {
	q := dbcitus.New(db.pool)
	if p.ByRunnable {
		rows, err := q.FairnessKeyTop(ctx, dbcitus.FairnessKeyTopParams{Queue: p.Queue, Prefix: p.Prefix, PageSize: p.Limit})
		if err != nil {
			return nil, false, translate(err)
		}
		return convertAll(rows, func(r dbcitus.FairnessKeyTopRow) FairnessKey {
			return fairnessKeyOf(p.Queue, dbsqlc.FairnessKeyListRow(r))
		}), false, nil
	}
	rows, err := q.FairnessKeyList(ctx, dbcitus.FairnessKeyListParams{Queue: p.Queue, After: p.After, Prefix: p.Prefix,
		PageSize: p.Limit})
	if err != nil {
		return nil, false, translate(err)
	}
	if len(rows) > p.Limit {
		rows, more = rows[:p.Limit], true
	}
	return convertAll(rows, func(r dbcitus.FairnessKeyListRow) FairnessKey {
		return fairnessKeyOf(p.Queue, dbsqlc.FairnessKeyListRow(r))
	}), more, nil
}
