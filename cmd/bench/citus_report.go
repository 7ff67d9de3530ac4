package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
)

// printCitus prints the -citus mode: the pairs and their ratio beside the plain pairs'
// medians (and River's), then per step and per node: CPU, WAL, statements and round trips,
// medians over the drains; then each node's busiest statements.
func printCitus(out io.Writer, r *CitusReport, cmp Comparison, o options) {
	if len(r.Plain) == 0 && len(r.Citus) == 0 {
		printSharedLimits(out, r)
		if r.Fairness != nil {
			printFairness(out, r.Fairness, ", on Citus")
		}
		return
	}
	fmt.Fprintf(out, "\nCitus %s — a coordinator and %d workers on this host (%d shards of jobs), %d alternating pairs of a %d-job one-step drain "+
		"(plain PostgreSQL on the first server, then Citus on a second server after one unmeasured drain that warms its connections; Citus jobs inserted %d a call, each call on the next shard), "+
		"then a %d-job five-step drain of each; max_in_flight %d batch %d, outcome batch %d\n\n",
		r.Version, r.Workers, r.ShardCount, o.citusPairs, o.jobs, r.InsertBatch, o.fiveStepJobs, o.maxInFlight, o.batch, o.outcomeBatch)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "pair\tPostgreSQL steps/s\tCitus steps/s\tCitus ÷ PostgreSQL\tjobs by worker (shards)\t")
	var pr, cr, ratios []float64
	for i := range max(len(r.Plain), len(r.Citus)) {
		p, c, ratio, where := "—", "—", "—", ""
		if i < len(r.Plain) {
			p = fmt.Sprintf("%.0f", r.Plain[i].PerSecond)
			pr = append(pr, r.Plain[i].PerSecond)
		}
		if i < len(r.Citus) {
			c = fmt.Sprintf("%.0f", r.Citus[i].PerSecond)
			cr = append(cr, r.Citus[i].PerSecond)
			where = jobsWhere(r.Citus[i])
		}
		if i < len(r.Plain) && i < len(r.Citus) {
			v := r.Citus[i].PerSecond / r.Plain[i].PerSecond
			ratios = append(ratios, v)
			ratio = fmt.Sprintf("%.2f", v)
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t\n", i+1, p, c, ratio, where)
	}
	fmt.Fprintf(w, "median\t%s\t%s\t%s\t\t\n", optf(median(pr), 0), optf(median(cr), 0), optf(median(ratios), 2))
	if r.Plain5 != nil && r.Citus5 != nil {
		fmt.Fprintf(w, "five-step\t%.0f\t%.0f\t%.2f\t%s\t\n", r.Plain5.PerSecond, r.Citus5.PerSecond,
			r.Citus5.PerSecond/r.Plain5.PerSecond, jobsWhere(*r.Citus5))
	}
	_ = w.Flush()
	var ours, river []float64
	for _, d := range cmp.Ours {
		ours = append(ours, d.PerSecond)
	}
	for _, d := range cmp.River {
		river = append(river, d.PerSecond)
	}
	if len(ours) > 0 {
		fmt.Fprintf(out, "earlier in this run, the River side by side's one-step drains: gendurable median %.0f steps/s, River median %s jobs/s\n",
			median(ours), optf(median(river), 0))
	}

	type column struct {
		name   string
		drains []NodesDrain
	}
	cols := []column{{"PostgreSQL", r.Plain}, {"Citus", r.Citus}}
	if r.Plain5 != nil {
		cols = append(cols, column{"PostgreSQL 5-step", []NodesDrain{*r.Plain5}})
	}
	if r.Citus5 != nil {
		cols = append(cols, column{"Citus 5-step", []NodesDrain{*r.Citus5}})
	}
	nodes := 1 + r.Workers
	fmt.Fprintf(out, "\nper step, median of the drains (CPU: utime+stime from /proc over the drain window, each node its postmaster and "+
		"every child but the bench's probe; WAL: pg_current_wal_lsn() after − before on each node; statements: pg_stat_statements calls on each "+
		"node but BEGIN and COMMIT; round trips: the requests that reached the node, see docs/citus.md)\n\n")
	w = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	header := "\t"
	for _, c := range cols {
		header += c.name + "\t"
	}
	fmt.Fprintln(w, header)
	row := func(label string, prec int, f func(d NodesDrain) (float64, bool)) {
		line := label + "\t"
		for _, c := range cols {
			var v []float64
			for _, d := range c.drains {
				if x, ok := f(d); ok {
					v = append(v, x)
				}
			}
			if len(v) == 0 {
				line += "—\t"
				continue
			}
			line += fmt.Sprintf("%.*f\t", prec, median(v))
		}
		fmt.Fprintln(w, line)
	}
	node := func(i int, f func(n NodeCost) float64) func(d NodesDrain) (float64, bool) {
		return func(d NodesDrain) (float64, bool) {
			if i >= len(d.Nodes) {
				return 0, false
			}
			return f(d.Nodes[i]), true
		}
	}
	sum := func(from int, f func(n NodeCost) float64) func(d NodesDrain) (float64, bool) {
		return func(d NodesDrain) (float64, bool) {
			if from >= len(d.Nodes) {
				return 0, false
			}
			t := 0.0
			for _, n := range d.Nodes[from:] {
				t += f(n)
			}
			return t, true
		}
	}
	nodeName := func(i int) string {
		if i == 0 {
			return "PostgreSQL / coordinator"
		}
		return fmt.Sprintf("worker %d", i)
	}
	cpu := func(n NodeCost) float64 { return n.CPUMicros }
	wal := func(n NodeCost) float64 { return n.WALBytes }
	stmts := func(n NodeCost) float64 { return n.Statements }
	trips := func(n NodeCost) float64 { return n.RoundTrips }
	row("steps/s", 0, func(d NodesDrain) (float64, bool) { return d.PerSecond, true })
	row("CPU µs: server", 0, func(d NodesDrain) (float64, bool) { return d.ServerMicros, true })
	row("CPU µs: receiver", 0, func(d NodesDrain) (float64, bool) { return d.ReceiverMicros, true })
	for i := range nodes {
		row("CPU µs: "+nodeName(i), 0, node(i, cpu))
	}
	row("CPU µs: workers", 0, sum(1, cpu))
	row("CPU µs: all database nodes", 0, sum(0, cpu))
	row("CPU µs: total", 0, func(d NodesDrain) (float64, bool) {
		t, _ := sum(0, cpu)(d)
		return t + d.ServerMicros + d.ReceiverMicros, true
	})
	for i := range nodes {
		row("WAL B: "+nodeName(i), 0, node(i, wal))
	}
	row("WAL B: all nodes", 0, sum(0, wal))
	row("WAL B of statements: PostgreSQL / coordinator", 0, node(0, func(n NodeCost) float64 { return n.StatementWALBytes }))
	row("WAL B of statements: workers", 0, sum(1, func(n NodeCost) float64 { return n.StatementWALBytes }))
	for i := range nodes {
		row("statements: "+nodeName(i), 3, node(i, stmts))
	}
	row("round trips: server → PostgreSQL / coordinator", 3, node(0, trips))
	for i := 1; i < nodes; i++ {
		row(fmt.Sprintf("round trips: to worker %d (from the server and the coordinator)", i), 3, node(i, trips))
	}
	row("round trips: to the workers", 3, sum(1, trips))
	row("statement exec µs: PostgreSQL / coordinator", 1, node(0, func(n NodeCost) float64 { return n.ExecMicros }))
	row("statement exec µs: workers", 1, sum(1, func(n NodeCost) float64 { return n.ExecMicros }))
	row("statement plan µs: PostgreSQL / coordinator", 1, node(0, func(n NodeCost) float64 { return n.PlanMicros }))
	row("statement plan µs: workers", 1, sum(1, func(n NodeCost) float64 { return n.PlanMicros }))
	_ = w.Flush()

	for _, idle := range []struct {
		label string
		c     *IdleCost
	}{{"every queue paused (the reaper's sweeps, Citus's daemons)", r.Paused},
		{"one empty queue served (its feeder's empty claims too)", r.Idle}} {
		if idle.c == nil {
			continue
		}
		fmt.Fprintf(out, "\nCitus idle, %s, %.1f s: server CPU %.0f µs/s\n\n", idle.label, idle.c.Seconds, idle.c.ServerMicros)
		w = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(w, "node\tCPU µs/s\tWAL B/s\tstatements/s\tround trips/s\tbusiest\t")
		for _, n := range idle.c.Nodes {
			busiest := ""
			for k, st := range n.Stats {
				if k == 3 {
					break
				}
				busiest += fmt.Sprintf("%s %.1f/s; ", strings.TrimSpace(st.Name), float64(st.Calls)/idle.c.Seconds)
			}
			fmt.Fprintf(w, "%s\t%.0f\t%.0f\t%.1f\t%.1f\t%s\t\n", n.Node, n.CPUMicros, n.WALBytes, n.Statements, n.RoundTrips, busiest)
		}
		_ = w.Flush()
	}

	for _, c := range cols[1:] {
		if !strings.HasPrefix(c.name, "Citus") {
			continue
		}
		steps := 0
		for _, d := range c.drains {
			steps += d.Steps
		}
		for i := range nodes {
			var ns []NodeCost
			for _, d := range c.drains {
				if i < len(d.Nodes) {
					ns = append(ns, d.Nodes[i])
				}
			}
			if len(ns) == 0 {
				continue
			}
			fmt.Fprintf(out, "\ntop statements, %s, %s (pg_stat_statements summed over %d drain(s), %d steps)\n", c.name, ns[0].Node, len(c.drains), steps)
			w = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(w, "statement\tcalls\tplans\trows/call\tcalls/step\texec µs/step\tplan µs/step\tWAL B/step\t")
			for k, st := range mergeNodeStatements(ns) {
				if k == 2*topStatements {
					break
				}
				rowsPerCall := 0.0
				if st.Calls > 0 {
					rowsPerCall = float64(st.Rows) / float64(st.Calls)
				}
				fmt.Fprintf(w, "%s\t%d\t%d\t%.1f\t%.4f\t%.1f\t%.1f\t%.0f\t\n", strings.TrimSpace(st.Name), st.Calls, st.Plans, rowsPerCall,
					float64(st.Calls)/float64(steps), st.ExecMS*1000/float64(steps), st.PlanMS*1000/float64(steps), float64(st.WALBytes)/float64(steps))
			}
			_ = w.Flush()
		}
	}
	printSharedLimits(out, r)
	if r.Fairness != nil {
		printFairness(out, r.Fairness, ", on Citus")
	}
}

// jobsWhere says where a Citus drain's jobs lived: jobs by worker, and the shards.
func jobsWhere(d NodesDrain) string {
	if len(d.JobsByNode) == 0 {
		return ""
	}
	names := make([]string, 0, len(d.JobsByNode))
	for n := range d.JobsByNode {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %d", n, d.JobsByNode[n]))
	}
	return fmt.Sprintf("%s (%d shards)", strings.Join(parts, ", "), d.Shards)
}

// mergeNodeStatements sums one node's statements over several drains, most calls first.
func mergeNodeStatements(ns []NodeCost) []StatementStat {
	by := map[string]*StatementStat{}
	for _, n := range ns {
		for _, st := range n.StatementStats {
			t := by[st.Name]
			if t == nil {
				t = &StatementStat{Name: st.Name}
				by[st.Name] = t
			}
			t.Calls += st.Calls
			t.Rows += st.Rows
			t.ExecMS += st.ExecMS
			t.PlanMS += st.PlanMS
			t.Plans += st.Plans
			t.WALBytes += st.WALBytes
			t.WALRecords += st.WALRecords
		}
	}
	out := make([]StatementStat, 0, len(by))
	for _, t := range by {
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Calls > out[j].Calls })
	return out
}
