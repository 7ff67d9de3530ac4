package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// topStatements is how many statements the side-by-side lists per side.
const topStatements = 8

// printComparison prints the River side by side: the pairs and their ratio, CPU per
// step by process, the busiest statements of each side, and the bulk inserts.
func printComparison(out io.Writer, c Comparison, o options) {
	if len(c.Ours) == 0 && len(c.River) == 0 {
		return
	}
	fmt.Fprintf(out, "\nRiver side by side — %d alternating pairs of a %d-job one-step drain, concurrency %d "+
		"(gendurable max_in_flight %d batch %d, outcome batch %d; River v0.51.2 MaxWorkers %d, FetchCooldown %s), "+
		"step body: probe %d B, last of the drains %d B ours, %d B River's, one PostgreSQL, one receiver process\n\n",
		o.pairs, o.jobs, c.Concurrency, o.maxInFlight, o.batch, o.outcomeBatch, o.maxInFlight, o.riverCooldown, c.BodyBytes, c.OursBody, c.RiverBody)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "pair\tgendurable steps/s\tRiver jobs/s\tratio\t")
	var ratios, ourRates, riverRates []float64
	for i := range max(len(c.Ours), len(c.River)) {
		g, r := "—", "—"
		ratio := "—"
		if i < len(c.Ours) {
			g = fmt.Sprintf("%.0f", c.Ours[i].PerSecond)
			ourRates = append(ourRates, c.Ours[i].PerSecond)
		}
		if i < len(c.River) {
			r = fmt.Sprintf("%.0f", c.River[i].PerSecond)
			riverRates = append(riverRates, c.River[i].PerSecond)
		}
		if i < len(c.Ours) && i < len(c.River) {
			v := c.Ours[i].PerSecond / c.River[i].PerSecond
			ratios = append(ratios, v)
			ratio = fmt.Sprintf("%.2f", v)
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t\n", i+1, g, r, ratio)
	}
	fmt.Fprintf(w, "median\t%s\t%s\t%s\t\n", optf(median(ourRates), 0), optf(median(riverRates), 0), optf(median(ratios), 2))
	_ = w.Flush()
	if len(ratios) > 0 {
		fmt.Fprintf(out, "\nmedian ratio (gendurable steps/s ÷ River jobs/s, per pair): %.2f\n", median(ratios))
	}

	// CPU and database cost per step, medians over the pairs.
	type column struct {
		name   string
		drains []Drain
	}
	cols := []column{}
	if len(c.Ours) > 0 {
		cols = append(cols, column{"gendurable", c.Ours})
	}
	if len(c.River) > 0 {
		cols = append(cols, column{"River", c.River})
	}
	if c.FiveStep != nil {
		cols = append(cols, column{"gendurable 5-step", []Drain{*c.FiveStep}})
	}
	fmt.Fprintf(out, "\nper step, median of the drains (CPU: utime+stime from /proc over the drain window; "+
		"PostgreSQL: every postmaster child but the bench's probe; statements: pg_stat_statements of the side's database)\n\n")
	w = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	header := "\t"
	for _, col := range cols {
		header += col.name + "\t"
	}
	fmt.Fprintln(w, header)
	row := func(label string, prec int, f func(d Drain) float64) {
		line := label + "\t"
		for _, col := range cols {
			v := make([]float64, len(col.drains))
			for i, d := range col.drains {
				v[i] = f(d)
			}
			line += optf(median(v), prec) + "\t"
		}
		fmt.Fprintln(w, line)
	}
	row("CPU µs: server / River process", 0, func(d Drain) float64 { return d.CPUMicros[procEngine] })
	row("CPU µs: PostgreSQL, all backends", 0, func(d Drain) float64 { return d.CPUMicros[procPostgres] })
	row("CPU µs: receiver", 0, func(d Drain) float64 { return d.CPUMicros[procReceiver] })
	row("CPU µs: total", 0, func(d Drain) float64 {
		return d.CPUMicros[procEngine] + d.CPUMicros[procPostgres] + d.CPUMicros[procReceiver]
	})
	row("statements", 3, func(d Drain) float64 { return d.StatementsStep })
	row("statement exec µs", 1, func(d Drain) float64 { return d.ExecMicrosStep })
	row("WAL bytes", 0, func(d Drain) float64 { return d.WALBytesStep })
	row("context switches (machine)", 1, func(d Drain) float64 { return d.SwitchesStep })
	row("steps/s", 0, func(d Drain) float64 { return d.PerSecond })
	_ = w.Flush()

	for _, col := range cols {
		steps := 0
		for _, d := range col.drains {
			steps += d.Steps
		}
		fmt.Fprintf(out, "\ntop statements, %s (pg_stat_statements summed over %d drain(s), %d steps)\n", col.name, len(col.drains), steps)
		w = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(w, "statement\tcalls\trows\trows/call\tcalls/step\texec µs/step\tplan µs/step\tWAL B/step\t")
		for i, st := range mergeStatements(col.drains) {
			if i == topStatements {
				break
			}
			rowsPerCall := 0.0
			if st.Calls > 0 {
				rowsPerCall = float64(st.Rows) / float64(st.Calls)
			}
			fmt.Fprintf(w, "%s\t%d\t%d\t%.1f\t%.4f\t%.1f\t%.1f\t%.0f\t\n", strings.TrimSpace(st.Name), st.Calls, st.Rows, rowsPerCall,
				float64(st.Calls)/float64(steps), st.ExecMS*1000/float64(steps), st.PlanMS*1000/float64(steps), float64(st.WALBytes)/float64(steps))
		}
		_ = w.Flush()
	}

	if len(c.OursInsert) > 0 || len(c.RiverInsert) > 0 {
		fmt.Fprintf(out, "\nbulk insert, one client, %d jobs per call (the inserts before each paired drain, one call a side at a time)\n\n", c.InsertBatch)
		w = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(w, "\tcalls\tjobs/s\tmedian call ms\tslowest call ms\t")
		bulk := func(label string, calls []float64) {
			if len(calls) == 0 {
				return
			}
			var total, slowest float64
			for _, s := range calls {
				total += s
				slowest = max(slowest, s)
			}
			fmt.Fprintf(w, "%s\t%d\t%.0f\t%.1f\t%.1f\t\n", label, len(calls), float64(c.InsertJobs)/total,
				median(calls)*1000, slowest*1000)
		}
		bulk("gendurable POST /v1/jobs/batch", c.OursInsert)
		bulk("River InsertMany", c.RiverInsert)
		_ = w.Flush()
		if r := callRatios(c.RiverInsert, c.OursInsert); len(r) > 0 {
			fmt.Fprintf(out, "River's call / ours, call by call: median %.2f over %d pairs of calls (lowest %.2f)\n", median(r), len(r), slices.Min(r))
		}
	}
}

// callRatios are river[i] / ours[i] for the calls both sides made, in order.
func callRatios(river, ours []float64) []float64 {
	n := min(len(river), len(ours))
	r := make([]float64, 0, n)
	for i := range n {
		if ours[i] > 0 {
			r = append(r, river[i]/ours[i])
		}
	}
	return r
}

func optf(v float64, prec int) string {
	if v == 0 {
		return "—"
	}
	return fmt.Sprintf("%.*f", prec, v)
}
