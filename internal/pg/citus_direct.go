package pg

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Statements on one shard go to the worker that holds it (docs/citus.md, "Routed to the
// workers"). Citus keeps its metadata on every node (since Citus 11 a worker plans and runs
// a distributed statement as the coordinator would), so a claim, an outcome batch, a
// heartbeat or a reap of one shard, sent to the worker of that shard, is planned there and
// run on the local shard, with no coordinator in the step path: the coordinator's CPU a
// step was its largest cost (planning each router statement, then a round trip to the
// worker). What stays on the coordinator: the API's statements, the inserts (their ids
// come from the coordinator's sequence), a spawn's child ids, the fan-out probes, writes of
// reference tables (a queue created with an outcome), LISTEN and the NOTIFYs.
//
// A worker is reached with the coordinator URL's settings and credentials, at the host
// and port its pg_dist_node row names. A worker that cannot be reached so (not listening
// there, refused, not yet in sync) is served through the coordinator, and tried again when
// the layout is next read (a minute). A shard that moved since is still served where its
// statement lands: every node routes it on.

// CitusRoute says where a Citus cluster's statements on one shard are sent.
type CitusRoute string

const (
	// CitusRouteAuto is CitusRouteWorkers, or CitusRouteCoordinator behind a
	// transaction-mode pooler (which the worker connections would go around).
	CitusRouteAuto CitusRoute = ""
	// CitusRouteShards sends them to the worker that holds the shard, on the shard's own
	// tables (citus_shard_tables.go): PostgreSQL plans and runs them, not Citus. Not the
	// default: a process's first pass over the shards opens a backend per shard on each
	// worker (docs/citus.md, "On the shard's own tables").
	CitusRouteShards CitusRoute = "shards"
	// CitusRouteWorkers sends them to the worker that holds the shard, on the distributed
	// tables: Citus plans them there and runs them on the local shard.
	CitusRouteWorkers CitusRoute = "workers"
	// CitusRouteCoordinator sends every statement to the coordinator.
	CitusRouteCoordinator CitusRoute = "coordinator"
)

// ParseCitusRoute reads a CitusRoute's name ("" and "auto" are CitusRouteAuto).
func ParseCitusRoute(s string) (CitusRoute, error) {
	switch r := CitusRoute(s); r {
	case "", "auto":
		return CitusRouteAuto, nil
	case CitusRouteShards, CitusRouteWorkers, CitusRouteCoordinator:
		return r, nil
	}
	return "", fmt.Errorf("pg: citus route %q is not auto, shards, workers or coordinator", s)
}

// citusWorkerPools are the pools on the workers, by group (pg_dist_node.groupid).
type citusWorkerPools struct {
	// refresh serialises refreshWorkerPools: the claims of several queues may read an
	// expired layout at once, and each would open the pools again and close the others'.
	refresh sync.Mutex
	mu      sync.RWMutex
	// config is the coordinator pool's configuration, copied for each worker; nil when
	// statements go to the coordinator only.
	config  *pgxpool.Config
	byGroup map[int32]*citusWorkerPool
	// shardTables: the statements name the shard's own tables (CitusRouteShards).
	shardTables bool
}

type citusWorkerPool struct {
	node citusWorkerNode
	pool *pgxpool.Pool
	// byShard are the pools of each shard's statements on its own tables, by shard id
	// (CitusRouteShards), opened at first use: a statement prepared on a connection is
	// planned once there, and each shard's statements name its own tables, so a
	// connection serves one shard (its dozen statements prepared once) instead of every
	// shard of the worker (each statement prepared, planned and kept once per shard:
	// a claim's generic plan is ~0.7 MB and ~1.6 ms of planning).
	mu      sync.Mutex
	byShard map[int64]*pgxpool.Pool
	closed  bool
}

// shardPoolConns caps a shard's pool: a claim, an outcome batch and a heartbeat or a
// reap of one shard at once (more wait their turn, each a few milliseconds).
const shardPoolConns = 3

// shardPoolIdle is how long a shard's idle connection is kept (a shard moved away, or
// idle, gives its connections back).
const shardPoolIdle = time.Minute

// forShard answers shard id's pool, opened at first use with the worker pool's settings
// (nil when the worker pool is closed or cannot make one: the caller uses the worker pool).
func (w *citusWorkerPool) forShard(id int64) *pgxpool.Pool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if p := w.byShard[id]; p != nil || w.closed {
		return p
	}
	cfg := w.pool.Config()
	cfg.MaxConns, cfg.MinConns, cfg.MaxConnIdleTime = min(cfg.MaxConns, shardPoolConns), 0, shardPoolIdle
	p, err := pgxpool.NewWithConfig(context.Background(), cfg) // connects on first use
	if err != nil {
		return nil
	}
	if w.byShard == nil {
		w.byShard = map[int64]*pgxpool.Pool{}
	}
	w.byShard[id] = p
	return p
}

// close closes the worker's pools, waiting for the statements still running on them.
func (w *citusWorkerPool) close() {
	w.mu.Lock()
	w.closed = true
	shards := w.byShard
	w.byShard = nil
	w.mu.Unlock()
	for _, p := range shards {
		p.Close()
	}
	w.pool.Close()
}

// workerPingTimeout bounds the check of a worker's new pool.
const workerPingTimeout = 2 * time.Second

// citusWorkerNode is a worker's row of pg_dist_node.
type citusWorkerNode struct {
	group int32
	host  string
	port  uint16
}

// shardQuerier answers what runs shard i's statements: its worker's pool on the shard's
// own tables (CitusRouteShards, when the layout has their names), its worker's pool on
// the distributed tables (CitusRouteWorkers), or the coordinator's.
func (db *DB) shardQuerier(l *citusLayout, i int) shardQuerier {
	group := l.shardGroup(i)
	w := &db.workers
	w.mu.RLock()
	defer w.mu.RUnlock()
	p := w.byGroup[group]
	if p == nil {
		return db.pool
	}
	if names := l.shardTableNames(i); w.shardTables && names != nil {
		id := l.shardIDAt(i)
		if sp := p.forShard(id); sp != nil {
			return shardTables{pool: sp, shard: id, names: names}
		}
	}
	return p.pool
}

// refreshWorkerPools opens a pool on each worker of nodes that has none (or moved), and
// closes those of workers no longer there. Called when the layout is read. When the
// workers cannot be read, the pools stay as they are (a worker without one is served
// through the coordinator).
func (db *DB) refreshWorkerPools(ctx context.Context) {
	w := &db.workers
	if w.config == nil {
		return
	}
	w.refresh.Lock()
	defer w.refresh.Unlock()
	// Metadata of the coordinator, read by hand: sqlc knows no Citus catalog.
	rows, err := db.pool.Query(ctx, `SELECT groupid, nodename, nodeport FROM pg_dist_node
		WHERE noderole = 'primary' AND isactive AND hasmetadata AND metadatasynced AND groupid > 0`)
	if err != nil {
		return
	}
	var nodes []citusWorkerNode
	for rows.Next() {
		var n citusWorkerNode
		var port int32
		if err := rows.Scan(&n.group, &n.host, &port); err != nil {
			rows.Close()
			return
		}
		n.port = uint16(port)
		nodes = append(nodes, n)
	}
	if rows.Close(); rows.Err() != nil {
		return
	}
	w.mu.RLock()
	keep := map[int32]*citusWorkerPool{}
	var open []citusWorkerNode
	for _, n := range nodes {
		if p := w.byGroup[n.group]; p != nil && p.node == n {
			keep[n.group] = p
		} else {
			open = append(open, n)
		}
	}
	w.mu.RUnlock()
	for _, n := range open {
		if p := db.openWorkerPool(ctx, n); p != nil {
			keep[n.group] = p
		}
	}
	w.mu.Lock()
	old := w.byGroup
	w.byGroup = keep
	w.mu.Unlock()
	for g, p := range old {
		if keep[g] != p {
			go p.close() // waits for the statements still running on it
		}
	}
}

// openWorkerPool opens and checks a pool on worker n; nil when it does not answer (its
// shards' statements then go through the coordinator).
func (db *DB) openWorkerPool(ctx context.Context, n citusWorkerNode) *citusWorkerPool {
	cfg := db.workers.config.Copy()
	cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Fallbacks = n.host, n.port, nil
	if db.workers.shardTables {
		// Plain PostgreSQL statements on the shard's tables: generic plans, as on a plain
		// primary (the coordinator's pool plans each execution: Citus prunes there).
		cfg.ConnConfig.RuntimeParams = maps.Clone(cfg.ConnConfig.RuntimeParams)
		cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	}
	if cfg.ConnConfig.TLSConfig != nil {
		cfg.ConnConfig.TLSConfig = cfg.ConnConfig.TLSConfig.Clone()
		cfg.ConnConfig.TLSConfig.ServerName = n.host
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, workerPingTimeout)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil
	}
	return &citusWorkerPool{node: n, pool: pool}
}

// CitusWorkersReached answers how many workers this process sends their shards'
// statements to directly, of how many hold shards (0 of 0 on plain PostgreSQL), reading
// the layout first when it was never read.
func (db *DB) CitusWorkersReached(ctx context.Context) (reached, workers int, err error) {
	if db.citus == nil {
		return 0, 0, nil
	}
	l, err := db.layout(ctx)
	if err != nil {
		return 0, 0, err
	}
	groups := map[int32]bool{}
	for i := range l.shardCount() {
		if g := l.shardGroup(i); g > 0 {
			groups[g] = true
		}
	}
	db.workers.mu.RLock()
	defer db.workers.mu.RUnlock()
	for g := range groups {
		if db.workers.byGroup[g] != nil {
			reached++
		}
	}
	return reached, len(groups), nil
}

// closeWorkerPools closes every worker pool.
func (db *DB) closeWorkerPools() {
	w := &db.workers
	w.mu.Lock()
	old := w.byGroup
	w.byGroup = nil
	w.mu.Unlock()
	for _, p := range old {
		p.close()
	}
}
