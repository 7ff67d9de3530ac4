package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
)

// FairnessRun is one run of the tenants scenario (docs/fairness.md): tenant A inserts a
// backlog, a second later tenants B… insert a few jobs each, in a queue with fair share
// off or on.
type FairnessRun struct {
	Fairness string `json:"fairness"`
	// Others' time from insert to done, over every job of B…: p50, p99 and the last.
	OthersP50, OthersP99, OthersMax float64
	// A's steps a second between its queue's resume and the moment B… were all done.
	ABacklogPerSecond float64
	// A's jobs done when B… were all done.
	ADoneWhenOthersDone int64
}

// FairnessWeights is the 3:1 run: two keys of weight 3 and 1, each with a backlog.
type FairnessWeights struct {
	Heavy, Light int64   // steps claimed of each while both had work
	Ratio        float64 // Heavy / Light
}

// FairnessReport is the bench's fair share part.
type FairnessReport struct {
	Backlog, Tenants, PerTenant int
	Runs                        []FairnessRun
	Weights                     *FairnessWeights
	// The cost of fair share on: one backlog drained in a fair queue (its jobs spread
	// over Tenants+1 keys) against the same in a queue without fairness.
	PlainPerSecond, FairPerSecond float64
}

// runFairness runs the tenants scenario with fair share off and on, the 3:1 weights,
// and a drain of each kind for what fair share costs.
func runFairness(ctx context.Context, o options, db *pg.DB, api string) (*FairnessReport, error) {
	r := &FairnessReport{Backlog: o.fairBacklog, Tenants: o.fairTenants, PerTenant: o.fairPerTenant}
	for _, mode := range []string{"none", "round_robin"} {
		run, err := tenantsRun(ctx, o, db, api, mode)
		if err != nil {
			return nil, fmt.Errorf("tenants, fairness %s: %w", mode, err)
		}
		r.Runs = append(r.Runs, run)
	}
	w, err := weightsRun(ctx, o, db, api)
	if err != nil {
		return nil, fmt.Errorf("weights: %w", err)
	}
	r.Weights = w
	for _, mode := range []string{"none", "round_robin"} {
		rate, err := fairnessCost(ctx, o, db, api, mode)
		if err != nil {
			return nil, fmt.Errorf("cost, fairness %s: %w", mode, err)
		}
		if mode == "none" {
			r.PlainPerSecond = rate
		} else {
			r.FairPerSecond = rate
		}
	}
	return r, nil
}

// keyedInsert inserts n one-step jobs of fairness key into queue, per jobs a call.
func keyedInsert(api, queue, key string, n, per int) error {
	for done := 0; done < n; done += per {
		k := min(per, n-done)
		var b bytes.Buffer
		b.WriteString(`{"jobs":[`)
		for i := range k {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"handler":"bench","queue":%q,"fairness_key":%q,"input":{"steps":1}}`, queue, key)
		}
		b.WriteString(`]}`)
		if err := call(api, "POST", "/v1/jobs/batch", b.String()); err != nil {
			return err
		}
	}
	return nil
}

func fairQueueSettings(o options, mode string, paused bool) string {
	return fmt.Sprintf(`{"paused": %t, "max_in_flight": %d, "batch": %d, "fairness": %q}`, paused, o.maxInFlight, o.batch, mode)
}

// stopQueue pauses queue and cancels its runnable jobs (what is left of a backlog).
func stopQueue(ctx context.Context, db *pg.DB, api, queue string) error {
	if err := call(api, "PUT", "/v1/queues/"+queue, `{"paused": true}`); err != nil {
		return err
	}
	_, err := db.Exec(ctx, `-- probe
		UPDATE jobs SET status = 'cancelled', finished_at = now() WHERE queue = $1 AND status = 'runnable'`, queue)
	return err
}

func tenantsRun(ctx context.Context, o options, db *pg.DB, api, mode string) (FairnessRun, error) {
	run := FairnessRun{Fairness: mode}
	queue := "tenants-" + strings.ReplaceAll(mode, "_", "-")
	if err := call(api, "PUT", "/v1/queues/"+queue, fairQueueSettings(o, mode, true)); err != nil {
		return run, err
	}
	if err := keyedInsert(api, queue, "A", o.fairBacklog, 10000); err != nil {
		return run, err
	}
	if err := vacuumAnalyze(ctx, o, db, "jobs"); err != nil {
		return run, err
	}
	resumed := time.Now()
	if err := resumeQueue(api, queue); err != nil {
		return run, err
	}
	time.Sleep(time.Second)
	for t := range o.fairTenants {
		if err := keyedInsert(api, queue, fmt.Sprintf("T%02d", t+1), o.fairPerTenant, o.fairPerTenant); err != nil {
			return run, err
		}
	}
	others := int64(o.fairTenants * o.fairPerTenant)
	deadline := time.Now().Add(10 * time.Minute)
	for {
		n, err := db.QueryInt(ctx, `-- probe
			SELECT count(*) FROM jobs WHERE queue = $1 AND fairness_key <> 'A' AND status = 'done'`, queue)
		if err != nil {
			return run, err
		}
		if n == others {
			break
		}
		if time.Now().After(deadline) {
			return run, fmt.Errorf("%d of %d of the other tenants' jobs done after 10 minutes", n, others)
		}
		time.Sleep(20 * time.Millisecond)
	}
	took := time.Since(resumed).Seconds()
	aDone, err := db.QueryInt(ctx, `-- probe
		SELECT count(*) FROM jobs WHERE queue = $1 AND fairness_key = 'A' AND status = 'done'`, queue)
	if err != nil {
		return run, err
	}
	run.ADoneWhenOthersDone, run.ABacklogPerSecond = aDone, float64(aDone)/took
	rows, err := db.QueryStrings(ctx, `-- probe
		SELECT extract(epoch FROM finished_at - created_at)::text FROM jobs
		WHERE queue = $1 AND fairness_key <> 'A' AND status = 'done'`, queue)
	if err != nil {
		return run, err
	}
	var secs []float64
	for _, r := range rows {
		var v float64
		if _, err := fmt.Sscan(r[0], &v); err == nil {
			secs = append(secs, v)
		}
	}
	sort.Float64s(secs)
	run.OthersP50, run.OthersP99, run.OthersMax = quantile(secs, 0.5), quantile(secs, 0.99), secs[len(secs)-1]
	return run, stopQueue(ctx, db, api, queue)
}

// weightsRun drains two equal backlogs of weights 3 and 1 in one fair queue and counts
// each key's claimed steps when the heavy key's reach 80 % of its backlog: both still
// have work then (the light key is near 27 %).
func weightsRun(ctx context.Context, o options, db *pg.DB, api string) (*FairnessWeights, error) {
	const queue = "tenants-weights"
	n := max(o.fairBacklog/5, 4000)
	if err := call(api, "PUT", "/v1/queues/"+queue, fairQueueSettings(o, "round_robin", true)); err != nil {
		return nil, err
	}
	if err := call(api, "PUT", "/v1/queues/"+queue+"/fairness-keys/heavy", `{"weight": 3}`); err != nil {
		return nil, err
	}
	for _, key := range []string{"heavy", "light"} {
		if err := keyedInsert(api, queue, key, n, 10000); err != nil {
			return nil, err
		}
	}
	if err := vacuumAnalyze(ctx, o, db, "jobs"); err != nil {
		return nil, err
	}
	if err := resumeQueue(api, queue); err != nil {
		return nil, err
	}
	claimed := func(key string) (int64, error) {
		return db.QueryInt(ctx, `-- probe
			SELECT count(*) FROM jobs WHERE queue = $1 AND fairness_key = $2 AND attempt > 0`, queue, key)
	}
	deadline := time.Now().Add(10 * time.Minute)
	for {
		h, err := claimed("heavy")
		if err != nil {
			return nil, err
		}
		if h >= int64(n)*8/10 {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d of the heavy key's %d steps claimed after 10 minutes", h, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := call(api, "PUT", "/v1/queues/"+queue, `{"paused": true}`); err != nil {
		return nil, err
	}
	h, err := claimed("heavy")
	if err != nil {
		return nil, err
	}
	l, err := claimed("light")
	if err != nil {
		return nil, err
	}
	w := &FairnessWeights{Heavy: h, Light: l}
	if l > 0 {
		w.Ratio = float64(h) / float64(l)
	}
	return w, stopQueue(ctx, db, api, queue)
}

// fairnessCost drains -jobs one-step jobs spread over fairTenants+1 keys in a queue with
// fairness mode, and answers its steps a second.
func fairnessCost(ctx context.Context, o options, db *pg.DB, api, mode string) (float64, error) {
	queue := "tenants-cost-" + strings.ReplaceAll(mode, "_", "-")
	if err := call(api, "PUT", "/v1/queues/"+queue, fairQueueSettings(o, mode, true)); err != nil {
		return 0, err
	}
	keys := o.fairTenants + 1
	for k := range keys {
		if err := keyedInsert(api, queue, fmt.Sprintf("K%02d", k), o.jobs/keys, 5000); err != nil {
			return 0, err
		}
	}
	total := int64(o.jobs / keys * keys)
	if err := vacuumAnalyze(ctx, o, db, "jobs"); err != nil {
		return 0, err
	}
	started := time.Now()
	if err := resumeQueue(api, queue); err != nil {
		return 0, err
	}
	deadline := started.Add(10 * time.Minute)
	for {
		n, err := db.QueryInt(ctx, `-- probe
			SELECT count(*) FROM jobs WHERE queue = $1 AND status = 'done'`, queue)
		if err != nil {
			return 0, err
		}
		if n == total {
			break
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%d of %d done after 10 minutes", n, total)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return float64(total) / time.Since(started).Seconds(), nil
}

func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

func printFairness(out io.Writer, r *FairnessReport, where string) {
	fmt.Fprintf(out, "\n## Fair share across tenants%s (docs/fairness.md)\n\n", where)
	fmt.Fprintf(out, "Tenant A inserts %d one-step jobs; a second after its queue starts, %d tenants insert %d each.\n\n",
		r.Backlog, r.Tenants, r.PerTenant)
	fmt.Fprintln(out, "| fairness | others insert→done p50 s | p99 s | last s | A's steps/s meanwhile | A done by then |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|")
	for _, x := range r.Runs {
		fmt.Fprintf(out, "| %s | %.3f | %.3f | %.3f | %.0f | %d |\n", x.Fairness, x.OthersP50, x.OthersP99, x.OthersMax,
			x.ABacklogPerSecond, x.ADoneWhenOthersDone)
	}
	if w := r.Weights; w != nil {
		fmt.Fprintf(out, "\nWeights 3:1, both keys with a backlog: %d and %d steps claimed, ratio %.3f (%.1f %% from 3).\n",
			w.Heavy, w.Light, w.Ratio, 100*math.Abs(w.Ratio-3)/3)
	}
	if r.PlainPerSecond > 0 {
		fmt.Fprintf(out, "\nA drain over %d keys: %.0f steps/s without fairness, %.0f with round_robin (%.2f×).\n",
			r.Tenants+1, r.PlainPerSecond, r.FairPerSecond, r.FairPerSecond/r.PlainPerSecond)
	}
}
