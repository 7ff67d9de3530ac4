// Command chaos drains multi-step jobs through real gendurable server processes on one
// real PostgreSQL cluster while it breaks things: kill -9 of a random server (restarted),
// PostgreSQL stopped in immediate mode and restarted, pg_terminate_backend of the
// servers' connections, max_connections exhausted by another client, an
// idle-in-transaction session holding row locks, a webhook that sometimes sleeps past the
// lease or answers 500, and signals racing parks. At the end it checks the invariants in
// SQL and against what the webhook recorded (docs/reliability.md), prints a summary and
// exits non-zero when one fails.
//
//	go run ./cmd/chaos                 # the full run (make chaos, ≤ 10 minutes)
//	go run ./cmd/chaos -mode short     # the CI run (make chaos-short, ≤ 3 minutes)
//	go run ./cmd/chaos -duration 30s -jobs 300 -keep   # a quick look, keeping the logs
//
// Everything it starts listens on loopback only and is stopped on exit, including on
// failure and Ctrl-C.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"
)

// options is the run's configuration (flags; -mode sets the defaults of the others).
type options struct {
	mode       string
	duration   time.Duration // the fault phase
	settle     time.Duration // after the faults: how long the drain may take to finish
	timeout    time.Duration // hard bound of the whole run
	jobs       int
	servers    int
	leaseTTL   time.Duration
	seed       int64
	server     string // server binary (default: built from ./cmd/server)
	keep       bool
	jsonOut    string
	killEvery  time.Duration
	pgRestarts int
	hogs       int
	verbose    bool
	sabotage   bool
	faults     map[string]bool // the faults injected (-faults)
}

func main() {
	var o options
	flag.StringVar(&o.mode, "mode", "full", "full (make chaos, ≤ 10 min) or short (make chaos-short, ≤ 3 min): the defaults of the flags below")
	flag.DurationVar(&o.duration, "duration", 0, "length of the fault phase (full 5m, short 60s)")
	flag.DurationVar(&o.settle, "settle", 0, "after the faults, how long the drain may take to finish (full 90s, short 45s)")
	flag.DurationVar(&o.timeout, "timeout", 0, "hard bound of the whole run, build included (full 9m30s, short 2m50s)")
	flag.IntVar(&o.jobs, "jobs", 0, "jobs to insert, paced over the first 70% of the fault phase (full 5000, short 800)")
	flag.IntVar(&o.servers, "servers", 3, "server processes")
	flag.DurationVar(&o.leaseTTL, "lease-ttl", 2*time.Second, "GENDURABLE_LEASE_TTL of the servers")
	flag.Int64Var(&o.seed, "seed", 0, "random seed (0: from the clock; printed, so a run can be repeated)")
	flag.StringVar(&o.server, "server", "", "gendurable server binary (default: built from ./cmd/server)")
	flag.BoolVar(&o.keep, "keep", false, "keep the cluster's data directory and the server logs (their path is printed)")
	flag.StringVar(&o.jsonOut, "json", "", "also write the summary as JSON to this file")
	flag.DurationVar(&o.killEvery, "kill-every", 0, "mean interval between kill -9 of a random server (full 5s, short 4s)")
	flag.IntVar(&o.pgRestarts, "pg-restarts", 0, "immediate PostgreSQL restarts during the fault phase (full 3, short 1)")
	flag.IntVar(&o.hogs, "conn-hogs", 0, "episodes of max_connections exhausted by another client (full 3, short 1)")
	flag.BoolVar(&o.verbose, "v", false, "log every fault and progress line")
	faultList := flag.String("faults", strings.Join(faultNames, ","), "the faults to inject, comma-separated (none: \"\"); the webhook's 500s, sleeps and the signal races are always on")
	flag.BoolVar(&o.sabotage, "sabotage", false, "after the drain, break the database (a lost, a stuck, a doubled job, a wrong result, an unconsumed signal) and pass only if the checks catch each")
	flag.Parse()
	o.faults = map[string]bool{}
	for _, name := range strings.Split(*faultList, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		if !slices.Contains(faultNames, name) {
			fmt.Fprintf(os.Stderr, "chaos: -faults: unknown fault %q (known: %s)\n", name, strings.Join(faultNames, ", "))
			os.Exit(2)
		}
		o.faults[name] = true
	}
	if err := o.applyMode(); err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	sum, err := run(ctx, o)
	if sum != nil {
		sum.print(os.Stdout)
		if o.jsonOut != "" {
			if werr := sum.writeJSON(o.jsonOut); werr != nil {
				fmt.Fprintln(os.Stderr, "chaos: writing", o.jsonOut+":", werr)
			}
		}
	}
	switch {
	case err != nil:
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(1)
	case sum == nil || !sum.ok():
		fmt.Fprintln(os.Stderr, "chaos: an invariant failed (see above)")
		os.Exit(1)
	}
}

func (o *options) applyMode() error {
	type defaults struct {
		duration, settle, timeout, killEvery time.Duration
		jobs, pgRestarts, hogs               int
	}
	var d defaults
	switch o.mode {
	case "full":
		d = defaults{5 * time.Minute, 90 * time.Second, 9*time.Minute + 30*time.Second, 5 * time.Second, 5000, 3, 3}
	case "short":
		d = defaults{60 * time.Second, 45 * time.Second, 2*time.Minute + 50*time.Second, 4 * time.Second, 800, 1, 1}
	default:
		return fmt.Errorf("-mode %q: want full or short", o.mode)
	}
	set := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	seti := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	set(&o.duration, d.duration)
	set(&o.settle, d.settle)
	set(&o.timeout, d.timeout)
	set(&o.killEvery, d.killEvery)
	seti(&o.jobs, d.jobs)
	seti(&o.pgRestarts, d.pgRestarts)
	seti(&o.hogs, d.hogs)
	if o.seed == 0 {
		o.seed = time.Now().UnixNano()
	}
	if o.servers < 1 || o.jobs < 1 {
		return errors.New("-servers and -jobs must be positive")
	}
	if o.leaseTTL < 500*time.Millisecond {
		return errors.New("-lease-ttl below 500ms leaves no room for a heartbeat")
	}
	return nil
}
