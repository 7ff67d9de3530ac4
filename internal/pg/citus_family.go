package pg

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/gendurable/gendurable/internal/pg/dbcitus"
)

// A child away from its parent on Citus (docs/citus.md, "A child away from its parent";
// migrations/citus/0036). A spawned child lives at its parent's placement, so that a
// family's statements stay on one shard, unless its own concurrency key or fairness key
// places it elsewhere: K=1 and a key's cap are exact only where every job of the key
// lives. Such a remote child lives at its key's placement, and its parent keeps a stub of
// it at the parent's placement (remote_children), which the family's statements there
// read as a child: the join's children, the counts, the live children a retry or a replay
// checks.
//
//   - The spawn writes the stubs with the parent's outcome, then the children at their
//     placements, in one transaction on the coordinator (citusApplyShard).
//   - A remote child's end does not join its parent in the statement that ends it (the
//     parent is on another shard): the child keeps parent_join = 'pending', and its end is
//     carried to the stub and the parent in a transaction of its own, the child's mark and
//     the parent's count together, so an end is joined once.
//   - A retry or replay of a joined remote child marks it 'relive', and the carry makes
//     its stub live again and its waiting parent count it, as JobRetry does at one
//     placement.
//   - A cancel that reaches a stub marks it, and the carry cancels the child where it
//     lives (JobCancel there, which cascades to the child's own family).
//
// The process whose statement owes the carry makes it at once: an outcome batch
// (remoteChildEndsNow), a cancel, retry or replay by id (carryRemoteChildrenNow), a bulk
// action (citusBulk). The reaper's turn (RemoteChildrenSweep) carries what they could not
// and the ends of its own expired leases.

// citusSequentialModify makes Citus write the shards a statement of the transaction reaches
// over one connection per worker, the connections the transaction's router statements
// opened, where a multi-shard insert opens one per shard in parallel.
const citusSequentialModify = `SET LOCAL citus.multi_shard_modify_mode TO 'sequential'`

// citusChildPlacement is where child ch of a parent at parentAt lives: where its own
// concurrency key or fairness key places it (citusPlacement), else its parent's.
func citusChildPlacement(parentAt int, ch *JobInsert) int {
	switch {
	case ch.ConcurrencyKey != nil:
		return PlacementOfKey(*ch.ConcurrencyKey)
	case placedByFairnessKey(ch):
		return FairnessPlacement(*ch.FairnessKey)
	}
	return parentAt
}

// queueRemoteChildStubs queues the stubs of remote's children at their parents' shard
// (placements) and the read of those made, after the spawns' outcome in the same
// transaction: RemoteChildStubsInsert makes a stub only for a spawn that parked its job.
func queueRemoteChildStubs(b *pgx.Batch, placements []int, remote *citusSpawnChildren) {
	ids := remote.ids()
	b.Queue(citusWithPlacements(dbcitus.RemoteChildStubsInsert, 6, placements), remote.ParentIds, remote.ParentTokens,
		ids, remote.Handlers, remote.Keys)
	b.Queue(citusWithPlacements(dbcitus.RemoteChildStubsMade, 2, placements), ids)
}

// readRemoteChildStubs reads the answers of what queueRemoteChildStubs queued.
func readRemoteChildStubs(br pgx.BatchResults) ([]dbcitus.RemoteChildStubsMadeRow, error) {
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (r dbcitus.RemoteChildStubsMadeRow, err error) {
		err = row.Scan(&r.ChildID, &r.Queue, &r.TraceContext, &r.FairnessKey)
		return r, err
	})
}

// ids answers the ids c's children get: seq * 1024 + their placement.
func (c *citusSpawnChildren) ids() []int64 {
	ids := make([]int64, len(c.Seqs))
	for i, seq := range c.Seqs {
		ids[i] = seq*Placements + int64(c.At[i])
	}
	return ids
}

// insertRemoteChildren makes the remote children whose stubs were made (made: a spawn that
// was fenced off or cancelled makes none), each at its placement, with what it takes from
// its parent: the queue it names or its parent's, its trace context or its parent's, its
// fairness key or its parent's or the fair queue's default. It answers their wake-ups. A
// child placed by its concurrency key keeps its fairness key, its own or its parent's,
// away from that key's placement: its shard's fair claim counts it against the key's cap
// there, as an insert with both is counted.
func insertRemoteChildren(ctx context.Context, tx pgx.Tx, remote *citusSpawnChildren,
	made []dbcitus.RemoteChildStubsMadeRow) ([]citusWake, error) {
	parents := make(map[int64]dbcitus.RemoteChildStubsMadeRow, len(made))
	for _, m := range made {
		parents[m.ChildID] = m
	}
	var p dbcitus.JobInsertRemoteChildrenParams
	var fairnessKeys []*string
	var wakes []citusWake
	for i, id := range remote.ids() {
		m, ok := parents[id]
		if !ok {
			continue
		}
		fairnessKey := remote.FairnessKeys[i]
		if fairnessKey == nil {
			fairnessKey = cmp.Or(m.FairnessKey, remote.FairDefaults[i])
		}
		queue := remote.Queues[i]
		if queue == "" {
			queue = m.Queue
		}
		trace := remote.TraceContexts[i]
		if trace == "" {
			trace = valueOr(m.TraceContext, "")
		}
		p.Ids, p.Placements, p.ParentIds = append(p.Ids, id), append(p.Placements, remote.At[i]), append(p.ParentIds, remote.ParentIds[i])
		p.Queues, p.Handlers, p.Inputs = append(p.Queues, queue), append(p.Handlers, remote.Handlers[i]), append(p.Inputs, remote.Inputs[i])
		p.Keys, p.Priorities, p.RunAts = append(p.Keys, remote.Keys[i]), append(p.Priorities, remote.Priorities[i]), append(p.RunAts, remote.RunAts[i])
		p.DelaysMs, p.ConcurrencyKeys = append(p.DelaysMs, remote.DelaysMs[i]), append(p.ConcurrencyKeys, remote.ConcurrencyKeys[i])
		p.MaxAttempts, p.TraceContexts = append(p.MaxAttempts, remote.MaxAttempts[i]), append(p.TraceContexts, trace)
		fairnessKeys = append(fairnessKeys, fairnessKey)
		wakes = append(wakes, citusWake{queue: queue, placement: remote.At[i]})
	}
	if len(p.Ids) == 0 {
		return nil, nil
	}
	// The fairness keys go as an array with NULLs (no key), which the generated method's
	// []string cannot carry.
	_, err := tx.Exec(ctx, dbcitus.JobInsertRemoteChildren, p.Ids, p.Placements, p.ParentIds, p.Queues, p.Handlers,
		p.Inputs, p.Keys, p.Priorities, p.RunAts, p.DelaysMs, p.ConcurrencyKeys, p.MaxAttempts, p.TraceContexts, fairnessKeys)
	return wakes, err
}

// RemoteChildrenSweep carries what a family spread over shards owes across them (Citus
// only; nothing on plain PostgreSQL, where a family lives in one database): the cancels
// that reached a remote child's stub, to the child; then the ends of remote children, and
// their revivals, to their stubs and parents. Each shard's share is one transaction on the
// coordinator, the child's side and the parent's together. It answers how many it carried.
// One fan-out probe (two statements, one round trip) when nothing is owed.
//
// A worker that does not answer must not hold up the rest: the probe and each transaction
// have the shard deadline; when the probe fails, every shard is visited; a shard whose
// transaction fails is passed over, and so are the other shards of its worker for this
// sweep, which answers the first error after doing what it could.
func (db *DB) RemoteChildrenSweep(ctx context.Context, limit int) (int, error) {
	if db.citus == nil {
		return 0, nil
	}
	l, err := db.layout(ctx)
	if err != nil {
		return 0, err
	}
	workShards, cancelShards, probeErr := db.remoteChildShards(ctx, l, limit)
	carried, err := db.carryRemoteChildren(ctx, l, cancelShards, workShards, limit)
	return carried, cmp.Or(err, probeErr)
}

// carryRemoteChildrenNow carries at once what a cancel, a retry or a replay at placement
// owes across shards (its statement said so), so that a remote child is cancelled, or its
// parent counts it again, without waiting for the reaper's turn: the stubs a cancel marked
// there (cancels: a retry or a replay marks none), then the ends and revivals of the
// remote children there and of those it cancelled. Best effort, as remoteChildEndsNow:
// what fails here the reaper's turn carries.
func (db *DB) carryRemoteChildrenNow(ctx context.Context, placement int, cancels bool) {
	l, err := db.layout(ctx)
	if err != nil {
		return
	}
	shard := []int{l.shardIndex(placement)}
	var cancelShards []int
	if cancels {
		cancelShards = shard
	}
	_, _ = db.carryRemoteChildren(ctx, l, cancelShards, shard, remoteChildEndsNowLimit)
}

// carryRemoteChildren is RemoteChildrenSweep's work on the shards (indexes of l) that the
// probe named: the cancels of cancelShards' stubs, then the turns of workShards and of the
// shards of the children cancelled, and the wake-ups.
func (db *DB) carryRemoteChildren(ctx context.Context, l *citusLayout, cancelShards, workShards []int, limit int) (int, error) {
	carried := 0
	var wakes []citusWake
	var failed error
	down := map[int32]bool{} // the workers of the shards that failed
	visit := func(shard int, fn func(ctx context.Context) error) {
		if down[l.shardGroup(shard)] {
			return
		}
		sctx, cancel := context.WithTimeout(ctx, db.shardTimeout)
		defer cancel()
		if err := fn(sctx); err != nil {
			down[l.shardGroup(shard)] = true
			if failed == nil {
				failed = fmt.Errorf("pg: carrying remote children on shard %d: %w", l.shardIDAt(shard), err)
			}
		}
	}
	for _, shard := range cancelShards {
		visit(shard, func(ctx context.Context) error {
			n, at, w, err := db.remoteChildCancels(ctx, l, shard, limit)
			carried += n
			wakes = append(wakes, w...)
			for _, p := range at { // the cancelled children's ends, joined below
				workShards = append(workShards, l.shardIndex(p))
			}
			return err
		})
	}
	slices.Sort(workShards)
	for _, shard := range slices.Compact(workShards) {
		visit(shard, func(ctx context.Context) error {
			n, w, err := db.remoteChildTurns(ctx, l, shard, limit)
			carried += n
			wakes = append(wakes, w...)
			return err
		})
	}
	if err := db.citusNotify(ctx, wakes); err != nil && failed == nil {
		failed = err
	}
	return carried, failed
}

// remoteChildShards answers the shards (indexes of l) with remote children to carry and
// those with stubs whose cancel is to reach their children: one round trip of two fan-out
// probes, with the shard deadline. When the probe fails, every shard, and its error.
func (db *DB) remoteChildShards(ctx context.Context, l *citusLayout, limit int) (work, cancels []int, err error) {
	pctx, cancel := context.WithTimeout(ctx, db.shardTimeout)
	defer cancel()
	b := &pgx.Batch{}
	b.Queue(dbcitus.RemoteChildWorkPlacements, limit)
	b.Queue(dbcitus.RemoteChildCancelPlacements, limit)
	br := db.pool.SendBatch(pctx, b)
	scan := func() ([]int, error) {
		rows, err := br.Query()
		if err != nil {
			return nil, err
		}
		placements, err := pgx.CollectRows(rows, pgx.RowTo[int])
		var shards []int
		for _, p := range placements {
			shards = append(shards, l.shardIndex(p))
		}
		slices.Sort(shards)
		return slices.Compact(shards), err
	}
	work, err = scan()
	if err == nil {
		cancels, err = scan()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return l.allShards(), l.allShards(), fmt.Errorf("pg: the probe of remote children: %w", translate(err))
	}
	return work, cancels, nil
}

// remoteChildEndsNow carries at once to their parents the ends of the remote children that
// an outcome batch on shard just ended (the statement answers remote_end), so that a
// parent runs after its last child without waiting for the reaper's turn. Best effort: on
// failure the reaper's turn carries them, as it does the ends of its own expired leases.
func (db *DB) remoteChildEndsNow(ctx context.Context, l *citusLayout, shard int) []citusWake {
	sctx, cancel := context.WithTimeout(ctx, db.shardTimeout)
	defer cancel()
	_, wakes, err := db.remoteChildTurns(sctx, l, shard, remoteChildEndsNowLimit)
	if err != nil {
		return nil
	}
	return wakes
}

// remoteChildEndsNowLimit bounds what remoteChildEndsNow takes: the ends of one outcome
// batch, and any the reaper's turn has not carried yet.
const remoteChildEndsNowLimit = 1000

// remoteChildCancels cancels, where they live, the remote children whose stubs on shard a
// cancel reached (RemoteChildCancelsList, then JobCancel at each child's placement, then
// RemoteChildCancelsClear: the child locked before its stub), in one transaction: n of
// them, at their placements, and the wake-ups of the parents their cancels woke there.
func (db *DB) remoteChildCancels(ctx context.Context, l *citusLayout, shard, limit int) (n int, at []int, wakes []citusWake, err error) {
	err = pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		q := dbcitus.New(tx)
		placements := l.shardPlacements(shard)
		stubs, err := q.RemoteChildCancelsList(ctx, dbcitus.RemoteChildCancelsListParams{Placements: placements, MaxRows: limit})
		if err != nil || len(stubs) == 0 {
			return err
		}
		var clear dbcitus.RemoteChildCancelsClearParams
		for _, s := range stubs {
			placement := l.PlacementOfID(s.ChildID)
			r, err := q.JobCancel(ctx, dbcitus.JobCancelParams{Placement: placement, ID: s.ChildID})
			if err != nil {
				return err
			}
			at = append(at, placement)
			wakes = append(wakes, citusWakes(r.Woken, placement)...)
			clear.ParentIds, clear.ChildIds = append(clear.ParentIds, s.ParentID), append(clear.ChildIds, s.ChildID)
		}
		clear.Placements = placements
		n = len(stubs)
		return q.RemoteChildCancelsClear(ctx, clear)
	})
	if err != nil {
		return 0, nil, nil, translate(err)
	}
	return n, at, wakes, nil
}

// remoteChildTurns carries the ends and revivals of up to limit remote children of shard
// to their parents (RemoteChildTurnsTake, then RemoteChildrenRelive and RemoteChildrenEnd
// at each parent's shard), in one transaction: the children of one parent there make one
// update of it. It answers how many, and the wake-ups of the parents it woke.
func (db *DB) remoteChildTurns(ctx context.Context, l *citusLayout, shard, limit int) (n int, wakes []citusWake, err error) {
	err = pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		q := dbcitus.New(tx)
		turns, err := q.RemoteChildTurnsTake(ctx, dbcitus.RemoteChildTurnsTakeParams{
			Placements: l.shardPlacements(shard), MaxRows: limit})
		if err != nil {
			return err
		}
		n = len(turns)
		ends := map[int]*dbcitus.RemoteChildrenEndParams{}
		relives := map[int]*dbcitus.RemoteChildrenReliveParams{}
		var parentShards []int
		for _, t := range turns {
			if t.ParentID == nil {
				continue // its parent is gone (GC): nothing waits for it
			}
			ps := l.shardIndex(l.PlacementOfID(*t.ParentID))
			if ends[ps] == nil {
				ends[ps], relives[ps] = &dbcitus.RemoteChildrenEndParams{}, &dbcitus.RemoteChildrenReliveParams{}
				parentShards = append(parentShards, ps)
			}
			if t.Was == "relive" {
				r := relives[ps]
				r.ParentIds, r.ChildIds = append(r.ParentIds, *t.ParentID), append(r.ChildIds, t.ID)
				continue
			}
			e := ends[ps]
			e.ParentIds, e.ChildIds, e.Statuses = append(e.ParentIds, *t.ParentID), append(e.ChildIds, t.ID), append(e.Statuses, t.Status)
			e.Results, e.Errors = append(e.Results, string(t.Result)), append(e.Errors, string(t.Error))
		}
		slices.Sort(parentShards)
		for _, ps := range parentShards {
			placements := l.shardPlacements(ps)
			if r := relives[ps]; len(r.ChildIds) > 0 {
				r.Placements = placements
				if err := q.RemoteChildrenRelive(ctx, *r); err != nil {
					return err
				}
			}
			if e := ends[ps]; len(e.ChildIds) > 0 {
				e.Placements = placements
				woken, err := q.RemoteChildrenEnd(ctx, *e)
				if err != nil {
					return err
				}
				wakes = append(wakes, citusWakes(woken, placements[0])...)
			}
		}
		return nil
	})
	if err != nil {
		return 0, nil, translate(err)
	}
	return n, wakes, nil
}
