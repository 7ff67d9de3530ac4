package pg

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gendurable/gendurable/internal/pg/dbcitus"
)

// Placements is the size of the placement space: jobs, signals, steps and idempotency
// records are distributed by a placement in [0, Placements) on Citus (docs/citus.md). It is
// fixed: a key's placement never changes when shards move or split.
const Placements = 1024

// citusLayout is where a Citus database keeps each placement: the shard that holds it,
// read from the coordinator's metadata, and the ids that route to placement 0 (the jobs
// that existed when the tables were distributed). Nil on plain PostgreSQL.
type citusLayout struct {
	mu sync.RWMutex
	// loadedAt is when the layout was last read (zero: never; the tables may not be
	// distributed yet).
	loadedAt    time.Time
	legacyMaxID int64
	// shardOf maps a placement to its index in shards.
	shardOf [Placements]int
	// shards are the distinct shards of jobs, each with its placements in order.
	shards []citusShard
	// next is the round robin of placements for jobs that no key places.
	next atomic.Uint64
}

// citusShard is one shard of jobs and the placements that hash into it.
type citusShard struct {
	ID         int64
	Placements []int
	// Group is the group id (pg_dist_placement.groupid) of the worker that holds it: the
	// circuit it is passed over by when that worker does not answer (citus_circuit.go).
	Group int32
	// Tables names its tables on its worker (CitusRouteShards); nil: its statements name
	// the distributed tables.
	Tables shardTableNames
}

// layoutMaxAge is how long a read layout is trusted before it is read again: a shard
// split makes new shards, whose placements the dispatcher then claims from.
const layoutMaxAge = time.Minute

// layoutRetry is how soon a layout that could not be read again is tried again.
const layoutRetry = 5 * time.Second

// Citus reports whether the database is on a Citus coordinator (the citus extension
// exists): the server then runs the Citus dialect of its statements.
func (db *DB) Citus() bool { return db.citus != nil }

// detectCitus sets db.citus when the database has the citus extension.
func (db *DB) detectCitus(ctx context.Context) error {
	var citus bool
	err := db.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')`).Scan(&citus)
	if err != nil {
		return translate(err)
	}
	if citus {
		db.citus = &citusLayout{}
	}
	return nil
}

// layout answers the Citus layout, read from the coordinator when it was never read or
// is older than layoutMaxAge. A layout that cannot be read again (the coordinator down)
// is answered as it was, and read again layoutRetry later: the statements of a shard go
// on reaching the workers (citus_direct.go), which route one whose shard has moved.
func (db *DB) layout(ctx context.Context) (*citusLayout, error) {
	l := db.citus
	l.mu.RLock()
	read := !l.loadedAt.IsZero()
	fresh := read && time.Since(l.loadedAt) < layoutMaxAge
	l.mu.RUnlock()
	if fresh {
		return l, nil
	}
	rows, err := dbcitus.New(db.pool).CitusLayout(ctx)
	if err != nil && read && ctx.Err() == nil {
		l.mu.Lock()
		l.loadedAt = time.Now().Add(layoutRetry - layoutMaxAge)
		l.mu.Unlock()
		return l, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pg: read the citus layout (are the tables distributed? the server's migrations do it): %w", translate(err))
	}
	if len(rows) != Placements {
		return nil, fmt.Errorf("pg: the citus layout has %d placements, not %d", len(rows), Placements)
	}
	index := map[int64]int{}
	var shards []citusShard
	var shardOf [Placements]int
	for _, r := range rows {
		i, ok := index[r.ShardID]
		if !ok {
			i = len(shards)
			index[r.ShardID] = i
			shards = append(shards, citusShard{ID: r.ShardID})
		}
		shards[i].Placements = append(shards[i].Placements, int(r.Placement))
		shardOf[r.Placement] = i
	}
	ids := make([]int64, len(shards))
	for i, sh := range shards {
		ids[i] = sh.ID
	}
	// Metadata of the coordinator, read by hand: sqlc knows no Citus catalog.
	groups, err := db.pool.Query(ctx, `SELECT shardid, groupid FROM pg_dist_placement WHERE shardid = ANY ($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("pg: read the citus layout's workers: %w", translate(err))
	}
	for groups.Next() {
		var id int64
		var group int32
		if err := groups.Scan(&id, &group); err != nil {
			groups.Close()
			return nil, translate(err)
		}
		shards[index[id]].Group = group
	}
	if groups.Close(); groups.Err() != nil {
		return nil, fmt.Errorf("pg: read the citus layout's workers: %w", translate(groups.Err()))
	}
	if db.workers.shardTables {
		// Without the names (a catalog that cannot be read), the statements go on the
		// distributed tables, through Citus on the worker.
		if names, err := readShardTables(ctx, db.pool, ids); err == nil {
			for i := range shards {
				shards[i].Tables = names[shards[i].ID]
			}
		}
	}
	db.refreshWorkerPools(ctx)
	l.mu.Lock()
	l.shards, l.shardOf, l.legacyMaxID, l.loadedAt = shards, shardOf, rows[0].LegacyMaxID, time.Now()
	l.mu.Unlock()
	return l, nil
}

// PlacementOfID is the placement of job id: id mod Placements, or 0 for the jobs that
// existed when the tables were distributed.
func (l *citusLayout) PlacementOfID(id int64) int {
	l.mu.RLock()
	legacy := l.legacyMaxID
	l.mu.RUnlock()
	if id <= legacy {
		return 0
	}
	return int(id % Placements)
}

// PlacementOfKey is the placement of every job that a key places (a live key, a
// debounce key, an idempotency key, a schedule's name, a concurrency key): FNV-1a of the
// key's bytes, mod Placements. It must never change: rows already placed by it are found by it.
func PlacementOfKey(key string) int {
	h := fnv.New64a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum64() % Placements)
}

// nextPlacement is the placement of a job no key places: the least placement of the next
// shard, in turn, so that such jobs spread evenly over the shards.
func (l *citusLayout) nextPlacement() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	s := l.shards[l.next.Add(1)%uint64(len(l.shards))]
	return s.Placements[0]
}

// shardCount is the number of shards of jobs.
func (l *citusLayout) shardCount() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return len(l.shards)
}

// allShards answers the index of every shard, in order.
func (l *citusLayout) allShards() []int {
	all := make([]int, l.shardCount())
	for i := range all {
		all[i] = i
	}
	return all
}

// shardPlacements answers shard i's placements (i taken mod the shard count).
func (l *citusLayout) shardPlacements(i int) []int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.shards[i%len(l.shards)].Placements
}

// shardIndex is the index in shards of the shard that holds placement p.
func (l *citusLayout) shardIndex(p int) int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return int(l.shardOf[p])
}

// shardGroup is the worker group of shard i (i taken mod the shard count).
func (l *citusLayout) shardGroup(i int) int32 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.shards[i%len(l.shards)].Group
}

// shardTableNames answers shard i's table names on its worker (i taken mod the shard
// count); nil when they are not known.
func (l *citusLayout) shardTableNames(i int) shardTableNames {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.shards[i%len(l.shards)].Tables
}

// expire makes the next statement read the layout again (a shard moved).
func (l *citusLayout) expire() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.loadedAt.IsZero() {
		l.loadedAt = time.Now().Add(-layoutMaxAge)
	}
}

// shardIDAt is the id of shard i (i taken mod the shard count).
func (l *citusLayout) shardIDAt(i int) int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.shards[i%len(l.shards)].ID
}

// shardID is the id of the shard that holds placement p; ok is false before the layout
// was first read.
func (l *citusLayout) shardID(p int) (id int64, ok bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if len(l.shards) == 0 {
		return 0, false
	}
	return l.shards[l.shardOf[p]].ID, true
}

// byShard groups the indexes 0..n-1 by the shard of placement(i), in shard order: what a
// batch is split into so that each part is one router statement.
func (l *citusLayout) byShard(n int, placement func(i int) int) [][]int {
	groups := map[int][]int{}
	var order []int
	for i := 0; i < n; i++ {
		s := l.shardIndex(placement(i))
		if _, ok := groups[s]; !ok {
			order = append(order, s)
		}
		groups[s] = append(groups[s], i)
	}
	slices.Sort(order)
	out := make([][]int, 0, len(order))
	for _, s := range order {
		out = append(out, groups[s])
	}
	return out
}
