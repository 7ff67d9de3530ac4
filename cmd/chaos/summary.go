package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// summary is what a run reports (printed, and written with -json).
type summary struct {
	Mode     string  `json:"mode"`
	Seed     int64   `json:"seed"`
	Servers  int     `json:"servers"`
	LeaseTTL string  `json:"lease_ttl"`
	Seconds  float64 `json:"seconds"`       // the whole run, build included
	DrainSec float64 `json:"drain_seconds"` // first insert to last job done
	FaultSec float64 `json:"fault_phase_seconds"`

	Jobs          int64            `json:"jobs"` // rows in jobs
	Acknowledged  int64            `json:"jobs_acknowledged"`
	Statuses      map[string]int64 `json:"statuses"`
	Claims        int64            `json:"claims_seen_by_handler"`
	AcceptedSteps int64            `json:"accepted_steps"`
	HistoryRows   int64            `json:"history_rows"`
	Outcomes      map[string]int64 `json:"history_outcomes"`
	Signals       int64            `json:"signals"`
	Lost          int64            `json:"lost"`
	Doubled       int64            `json:"doubled"`

	Kills              int64 `json:"kills"`
	ServerRestarts     int64 `json:"server_restarts"`
	StartFailures      int64 `json:"server_start_failures"`
	Crashes            int64 `json:"server_crashes"`
	PGRestarts         int64 `json:"pg_restarts"`
	PGRestartFailures  int64 `json:"pg_restart_failures"`
	Terminations       int64 `json:"terminations"`
	TerminatedSessions int64 `json:"terminated_sessions"`
	HogEpisodes        int64 `json:"conn_hog_episodes"`
	HogLimitHit        int64 `json:"conn_hog_limit_hit"`
	HogMaxConns        int64 `json:"conn_hog_max_sessions"`
	LockEpisodes       int64 `json:"lock_episodes"`
	LockedRows         int64 `json:"locked_rows"`

	Handler struct {
		Requests, Answered500, Slept, BadSignature int64
		Next, Await, Done, Polls, Reawaits         int64
		SignalWakes, EarlyWakes, TimeoutWakes      int64
		DuplicateDeliveries                        int64
	} `json:"handler"`
	SignalsSent struct {
		Go, Noise, Acked, Woke, Errors int64
		GoWoke, GoRaced                int64
		NoiseDuringStep, GoDuringStep  int64 // waits whose noise (only) / go was delivered before the step answered
	} `json:"signals_sent"`
	InsertResends, InsertFailures, APIErrors int64

	Invariants []*invariant `json:"invariants"`
	// Evidence: for the first jobs with two history rows for one claim, their history
	// and what the handler saw of each of their claims.
	Evidence []string `json:"evidence,omitempty"`
	// MustFail (-sabotage) names the invariants the sabotage must make fail.
	MustFail []string `json:"must_fail,omitempty"`
}

func (s *summary) fill(o options, fx *faults, f *fleet, r *receiver, ins *inserter, api *apiClient, drain, faultPhase, total time.Duration) {
	s.Mode, s.Seed, s.Servers, s.LeaseTTL = o.mode, o.seed, o.servers, o.leaseTTL.String()
	s.Seconds, s.DrainSec, s.FaultSec = total.Seconds(), drain.Seconds(), faultPhase.Seconds()
	s.Kills, s.ServerRestarts = f.kills.Load(), f.restarts.Load()
	s.StartFailures, s.Crashes = f.startFailures.Load(), f.crashes.Load()
	s.PGRestarts, s.PGRestartFailures = fx.pgRestarts.Load(), fx.pgRestartFailures.Load()
	s.Terminations, s.TerminatedSessions = fx.terminations.Load(), fx.terminatedBackends.Load()
	s.HogEpisodes, s.HogLimitHit, s.HogMaxConns = fx.hogEpisodes.Load(), fx.hogLimitHit.Load(), fx.hogMaxConns.Load()
	s.LockEpisodes, s.LockedRows = fx.lockEpisodes.Load(), fx.lockedRows.Load()
	h := &s.Handler
	h.Requests, h.Answered500, h.Slept, h.BadSignature = r.st.requests.Load(), r.st.answered500.Load(), r.st.slept.Load(), r.st.badSignature.Load()
	h.Next, h.Await, h.Done, h.Polls, h.Reawaits = r.st.next.Load(), r.st.await.Load(), r.st.done.Load(), r.st.polls.Load(), r.st.reawaits.Load()
	h.SignalWakes, h.EarlyWakes, h.TimeoutWakes = r.st.signalWakes.Load(), r.st.earlyWakes.Load(), r.st.timeoutWakes.Load()
	h.DuplicateDeliveries = r.st.duplicateDeliveries.Load()
	g := &s.SignalsSent
	g.Go, g.Noise, g.Acked, g.Woke, g.Errors = r.st.goSent.Load(), r.st.noiseSent.Load(), r.st.signalAcked.Load(), r.st.signalWoke.Load(), r.st.sendErr.Load()
	g.GoWoke, g.GoRaced = r.st.goWoke.Load(), r.st.goRaced.Load()
	g.NoiseDuringStep, g.GoDuringStep = r.st.racesNoise.Load(), r.st.racesGo.Load()
	s.InsertResends, s.InsertFailures, s.APIErrors = ins.resent.Load(), ins.failed.Load(), api.errors.Load()
	s.Invariants = append(s.Invariants, &invariant{Name: "no server exited on its own once ready", Violations: int(s.Crashes)})
	if s.PGRestartFailures > 0 {
		s.Invariants = append(s.Invariants, &invariant{Name: "every PostgreSQL restart succeeded", Violations: int(s.PGRestartFailures)})
	}
	if s.InsertFailures > 0 {
		s.Invariants = append(s.Invariants, &invariant{Name: "every insert batch was answered", Violations: int(s.InsertFailures)})
	}
}

// ok reports whether every invariant held; with -sabotage, whether each sabotaged one
// reported violations.
func (s *summary) ok() bool {
	if len(s.MustFail) > 0 {
		fired := map[string]bool{}
		for _, iv := range s.Invariants {
			fired[iv.Name] = iv.Violations > 0
		}
		for _, name := range s.MustFail {
			if !fired[name] {
				return false
			}
		}
		return true
	}
	for _, iv := range s.Invariants {
		if iv.Violations > 0 {
			return false
		}
	}
	return true
}

func (s *summary) print(w io.Writer) {
	fmt.Fprintf(w, "\n=== gendurable chaos — %s run, seed %d, %d servers, lease %s, %s UTC\n", s.Mode, s.Seed, s.Servers, s.LeaseTTL,
		time.Now().UTC().Format("2006-01-02 15:04"))
	fmt.Fprintf(w, "time        %.0fs in all; drain %.0fs (fault phase %.0fs)\n", s.Seconds, s.DrainSec, s.FaultSec)
	fmt.Fprintf(w, "jobs        %d in the database (%d acknowledged): %s\n", s.Jobs, s.Acknowledged, counts(s.Statuses))
	fmt.Fprintf(w, "steps       %d accepted, %d claims seen by the handler, %d history rows: %s\n", s.AcceptedSteps, s.Claims, s.HistoryRows, counts(s.Outcomes))
	fmt.Fprintf(w, "faults      %d kill -9 (%d restarts; %d failed starts, %d crashes), %d PostgreSQL immediate restarts,\n",
		s.Kills, s.ServerRestarts, s.StartFailures, s.Crashes, s.PGRestarts)
	fmt.Fprintf(w, "            %d pg_terminate_backend rounds (%d sessions of the servers),", s.Terminations, s.TerminatedSessions)
	fmt.Fprintf(w, " %d max_connections exhaustions (limit hit %d times, up to %d sessions), %d idle-in-transaction lock holds (%d rows)\n",
		s.HogEpisodes, s.HogLimitHit, s.HogMaxConns, s.LockEpisodes, s.LockedRows)
	h := s.Handler
	fmt.Fprintf(w, "handler     %d requests: %d answered 500, %d slept past the lease; answers next %d, await %d, done %d; %d polls, %d re-awaits; bad signatures %d, duplicate deliveries %d\n",
		h.Requests, h.Answered500, h.Slept, h.Next, h.Await, h.Done, h.Polls, h.Reawaits, h.BadSignature, h.DuplicateDeliveries)
	fmt.Fprintf(w, "wakes       %d by signal (%d of them without the awaited go: early wakes by a non-matching signal), %d by timeout\n",
		h.SignalWakes, h.EarlyWakes, h.TimeoutWakes)
	g := s.SignalsSent
	fmt.Fprintf(w, "signals     %d in inboxes; sent go %d, noise %d; acknowledged %d; of the acknowledged go, %d woke a parked job and %d raced its step; %d failed tries\n",
		s.Signals, g.Go, g.Noise, g.Acked, g.GoWoke, g.GoRaced, g.Errors)
	fmt.Fprintf(w, "            waits with noise delivered during the await step %d, with go delivered during it %d\n", g.NoiseDuringStep, g.GoDuringStep)
	fmt.Fprintf(w, "client      %d insert batches re-sent after an unanswered try, %d API calls without an answer\n", s.InsertResends, s.APIErrors)
	fmt.Fprintf(w, "lost        %d\ndoubled     %d\n", s.Lost, s.Doubled)
	fmt.Fprintln(w, "invariants")
	for _, iv := range s.Invariants {
		mark := "ok  "
		if iv.Violations > 0 {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "  %s %s", mark, iv.Name)
		if iv.Violations > 0 {
			fmt.Fprintf(w, ": %d violations", iv.Violations)
		}
		fmt.Fprintln(w)
		for _, e := range iv.Examples {
			fmt.Fprintf(w, "         %s\n", e)
		}
	}
	for _, e := range s.Evidence {
		fmt.Fprintln(w, "evidence", e)
	}
	if len(s.MustFail) > 0 {
		fmt.Fprintf(w, "sabotage: these must fail: %s\n", strings.Join(s.MustFail, "; "))
	}
	if s.ok() {
		fmt.Fprintln(w, "PASS")
	} else {
		fmt.Fprintln(w, "FAIL")
	}
}

func counts(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(a, b int) bool { return m[keys[a]] > m[keys[b]] })
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

func (s *summary) writeJSON(path string) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
