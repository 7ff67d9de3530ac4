package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
)

// What a limit shared by many jobs costs on Citus (docs/citus.md, "Measured"). Every job of
// a rate limit's bucket, or of a gated concurrency key, lives at the bucket's or the key's
// placement, so the claim that admits it reads and debits the bucket, or counts the gate's
// slots, in its own router statement. The price is that such a limit's jobs are on one
// shard, one worker: the shared-limit drains measure that (every job of the drain names one
// bucket, or one gated key, that never binds), beside plain PostgreSQL and the spread
// drains. A job that its concurrency key places elsewhere keeps its bucket remote: the
// claim leases it and the claimer debits the bucket after, one router statement per bucket
// and claim (the third drain: each job its own concurrency key and the one bucket). Doing
// both in one transaction would make every such claim a transaction on two shards: the
// two-shard transactions measure what that would add, beside the same writes on one shard.

// sharedLimitName is the rate limit and the gated concurrency key of the shared-limit drains.
const sharedLimitName = "bench-shared"

// SharedLimitDrains is one shared-limit drain on each side.
type SharedLimitDrains struct {
	// Limit is what every job of the drain names: "one rate limit" or "one gated key".
	Limit string     `json:"limit"`
	Plain NodesDrain `json:"postgresql"`
	Citus NodesDrain `json:"citus"`
}

// ShardTransactionCost is one kind of write transaction run back to back through the
// coordinator, on one connection, each sent as one request.
type ShardTransactionCost struct {
	Kind         string  `json:"kind"`
	Transactions int     `json:"transactions"`
	MillisPerTx  float64 `json:"ms_per_transaction"`
	// CPU and WAL by node, per transaction (coordinator first).
	Nodes []NodeCost `json:"nodes"`
}

// sharedLimits runs the shared-limit drains of jobs one-step jobs, a rate limit's then a
// gated key's, each on plain PostgreSQL then on Citus.
func sharedLimits(ctx context.Context, o options, plain, cs nodesSide, jobs int) ([]SharedLimitDrains, error) {
	// Limits that never bind: what is measured is where the jobs are, and the bookkeeping.
	for _, api := range []string{plain.api, cs.api} {
		if err := call(api, "PUT", "/v1/rate-limits/"+sharedLimitName, `{"rate": 1000000, "burst": 1000000}`); err != nil {
			return nil, err
		}
		if err := call(api, "PUT", "/v1/gates/"+sharedLimitName, fmt.Sprintf(`{"limit": %d}`, o.maxInFlight)); err != nil {
			return nil, err
		}
	}
	kinds := []struct{ limit, queue, extra string }{
		{"one rate limit", "shared-rate", fmt.Sprintf(`,"rate_limit":{"name":%q}`, sharedLimitName)},
		{"one gated key", "shared-gate", fmt.Sprintf(`,"concurrency_key":%q`, sharedLimitName)},
		// each job its own concurrency key, which places it (spread over the shards on
		// Citus), and the one bucket: remote from most of them, debited by each claimer
		{"one rate limit, a concurrency key each", "shared-rate-spread",
			fmt.Sprintf(`,"rate_limit":{"name":%q},"concurrency_key":"customer-{n}"`, sharedLimitName)},
	}
	var out []SharedLimitDrains
	for _, k := range kinds {
		d := SharedLimitDrains{Limit: k.limit}
		var err error
		if d.Plain, err = nodesDrainWith(ctx, o, plain, k.queue, 0, jobs, 1, o.insertBatch, k.extra); err != nil {
			return out, fmt.Errorf("the PostgreSQL drain with %s: %w", k.limit, err)
		}
		if d.Citus, err = nodesDrainWith(ctx, o, cs, k.queue, 0, jobs, 1, o.citusInsertBatch, k.extra); err != nil {
			return out, fmt.Errorf("the Citus drain with %s: %w", k.limit, err)
		}
		out = append(out, d)
	}
	return out, nil
}

// shardTransactions measures, on the Citus side, n write transactions of each kind: one
// row updated by one statement (a claim's own debit), two rows of one shard in one
// transaction, and two rows on shards of two workers in one transaction (committed with
// two-phase commit). The rows are in a table of the bench's, colocated with jobs.
func shardTransactions(ctx context.Context, cs nodesSide, coordinatorURL string, n int) ([]ShardTransactionCost, error) {
	coord := cs.nodes[0].db
	if _, err := coord.Exec(ctx, `CREATE TABLE IF NOT EXISTS bench_buckets (placement int PRIMARY KEY, tokens float8 NOT NULL)`); err != nil {
		return nil, err
	}
	if _, err := coord.Exec(ctx, `-- probe
		SELECT create_distributed_table('bench_buckets', 'placement', colocate_with => 'jobs')
		WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = 'bench_buckets'::regclass)`); err != nil {
		return nil, err
	}
	// Three placements: a and a2 on one shard, b on a shard of another worker.
	rows, err := coord.QueryStrings(ctx, `-- probe
		WITH p AS (SELECT v AS placement, get_shard_id_for_distribution_column('jobs', v) AS shard FROM generate_series(0, 1023) v),
		     n AS (SELECT p.placement, p.shard, (SELECT nodeport FROM pg_dist_shard_placement sp WHERE sp.shardid = p.shard LIMIT 1) AS port FROM p),
		     a AS (SELECT placement, shard, port FROM n ORDER BY placement LIMIT 1)
		SELECT a.placement::text,
		       (SELECT min(n.placement) FROM n WHERE n.shard = a.shard AND n.placement <> a.placement)::text,
		       (SELECT min(n.placement) FROM n WHERE n.port <> a.port)::text
		FROM a`)
	if err != nil {
		return nil, err
	}
	if len(rows) != 1 || rows[0][1] == "" || rows[0][2] == "" {
		return nil, fmt.Errorf("no two placements of one shard and one of another worker: %v", rows)
	}
	a, a2, b := rows[0][0], rows[0][1], rows[0][2]
	if _, err := coord.Exec(ctx, fmt.Sprintf(`INSERT INTO bench_buckets VALUES (%s, 1e12), (%s, 1e12), (%s, 1e12) ON CONFLICT DO NOTHING`, a, a2, b)); err != nil {
		return nil, err
	}
	// The transactions' own connection: its backend's CPU counts, the probes' does not.
	tx, err := pg.Open(ctx, coordinatorURL, pg.Options{MaxConns: 1})
	if err != nil {
		return nil, err
	}
	defer tx.Close()
	debit := func(p string) string {
		return fmt.Sprintf(`UPDATE bench_buckets SET tokens = tokens - 1 WHERE placement = %s;`, p)
	}
	kinds := []struct{ kind, sql string }{
		{"one statement, one shard", debit(a)},
		{"two rows of one shard, one transaction", "BEGIN;" + debit(a) + debit(a2) + "COMMIT;"},
		{"two rows on two workers, one transaction (2PC)", "BEGIN;" + debit(a) + debit(b) + "COMMIT;"},
	}
	var out []ShardTransactionCost
	for _, k := range kinds {
		for range 50 { // the connections to the workers opened, the plans cached
			if _, err := tx.Exec(ctx, k.sql); err != nil {
				return nil, fmt.Errorf("%s: %w", k.kind, err)
			}
		}
		excl := make([]map[int]bool, len(cs.nodes))
		lsn0 := make([]string, len(cs.nodes))
		for i, nd := range cs.nodes {
			excl[i] = probeBackends(ctx, nd.db)
			if lsn0[i], err = currentLSN(ctx, nd.db); err != nil {
				return nil, err
			}
		}
		cpu0 := nodesCPU(cs, excl)
		started := time.Now()
		for range n {
			if _, err := tx.Exec(ctx, k.sql); err != nil {
				return nil, fmt.Errorf("%s: %w", k.kind, err)
			}
		}
		secs := time.Since(started).Seconds()
		cpu1 := nodesCPU(cs, excl)
		c := ShardTransactionCost{Kind: k.kind, Transactions: n, MillisPerTx: secs * 1000 / float64(n)}
		for i, nd := range cs.nodes {
			lsn1, err := currentLSN(ctx, nd.db)
			if err != nil {
				return nil, err
			}
			wal, err := nd.db.QueryInt(ctx, `-- probe
				SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::bigint`, lsn1, lsn0[i])
			if err != nil {
				return nil, err
			}
			c.Nodes = append(c.Nodes, NodeCost{Node: nd.name, CPUMicros: ticksToMicros(cpu1.nodes[i]-cpu0.nodes[i], n),
				WALBytes: float64(wal) / float64(n)})
		}
		out = append(out, c)
	}
	return out, nil
}

// printSharedLimits prints the shared-limit drains beside the spread one-step drains, and
// the two-shard transactions.
func printSharedLimits(out io.Writer, r *CitusReport) {
	if len(r.Shared) == 0 && len(r.ShardTransactions) == 0 {
		return
	}
	dbCPU := func(d NodesDrain) string {
		parts := make([]string, 0, len(d.Nodes))
		for _, n := range d.Nodes {
			parts = append(parts, fmt.Sprintf("%.0f", n.CPUMicros))
		}
		return strings.Join(parts, " / ")
	}
	if len(r.Shared) > 0 {
		fmt.Fprintf(out, "\nshared limits: every job of a one-step drain names one rate limit's bucket (rate and burst 10^6) or one concurrency key "+
			"gated at max_in_flight, limits that never bind; on Citus those jobs all live at the limit's placement, one shard\n\n")
		w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(w, "every job names\tPostgreSQL steps/s\tCitus steps/s\tCitus ÷ PostgreSQL\tjobs by worker (shards)\t"+
			"PostgreSQL CPU µs/step\tCitus CPU µs/step (coordinator / workers)\t")
		row := func(label string, p, c NodesDrain) {
			fmt.Fprintf(w, "%s\t%.0f\t%.0f\t%.2f\t%s\t%s\t%s\t\n", label, p.PerSecond, c.PerSecond, c.PerSecond/p.PerSecond,
				jobsWhere(c), dbCPU(p), dbCPU(c))
		}
		if len(r.Plain) > 0 && len(r.Citus) > 0 {
			row("nothing (the pairs' last)", r.Plain[len(r.Plain)-1], r.Citus[len(r.Citus)-1])
		}
		for _, d := range r.Shared {
			row(d.Limit, d.Plain, d.Citus)
		}
		_ = w.Flush()
	}
	if len(r.ShardTransactions) > 0 {
		fmt.Fprintf(out, "\nwhat a bucket on another shard would add to each claim: %d write transactions of each kind back to back through the "+
			"coordinator, one connection, each one request\n\n", r.ShardTransactions[0].Transactions)
		w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		header := "transaction\tms each\t"
		for _, n := range r.ShardTransactions[0].Nodes {
			header += n.Node + " CPU µs\t" + n.Node + " WAL B\t"
		}
		fmt.Fprintln(w, header)
		for _, c := range r.ShardTransactions {
			line := fmt.Sprintf("%s\t%.2f\t", c.Kind, c.MillisPerTx)
			for _, n := range c.Nodes {
				line += fmt.Sprintf("%.0f\t%.0f\t", n.CPUMicros, n.WALBytes)
			}
			fmt.Fprintln(w, line)
		}
		_ = w.Flush()
	}
}
