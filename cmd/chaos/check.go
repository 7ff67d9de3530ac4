package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// acceptedOutcomes are the steps-history outcomes that complete a step (step+1, signals
// consumed); every other row (retry, http_error, timeout, lease_expired, …) records an
// attempt that changed nothing but the attempt count. The harness never answers fail.
const acceptedOutcomes = `('next', 'await', 'spawn', 'done', 'fail')`

// invariant is one checked property: its violations, with up to 10 examples.
type invariant struct {
	Name       string   `json:"name"`
	Violations int      `json:"violations"`
	Examples   []string `json:"examples,omitempty"`
}

func (iv *invariant) fail(format string, args ...any) {
	iv.Violations++
	if len(iv.Examples) < 10 {
		iv.Examples = append(iv.Examples, fmt.Sprintf(format, args...))
	}
}

// acceptedStep is one claim that the history says completed its step, with the labels
// of its accepted rows (one, unless the history holds duplicates: the doubled invariant
// counts those; the record-level checks look at each claim once).
type acceptedStep struct {
	step, attempt int
	outcomes      []string
}

type dbSignal struct {
	id, job, v int64
	name       string
}

// check runs the invariants over the database (servers stopped) and the webhook's records.
func check(ctx context.Context, p *postgres, ins *inserter, recv *receiver) (*summary, error) {
	s := &summary{Statuses: map[string]int64{}, Outcomes: map[string]int64{}}
	var (
		terminal    = &invariant{Name: "every job done"}
		lost        = &invariant{Name: "0 lost (every acknowledged job exists and is done)"}
		doubled     = &invariant{Name: "at most one accepted outcome per (job, step)"}
		perClaim    = &invariant{Name: "one history row per claim (job, step, attempt)"}
		complete    = &invariant{Name: "accepted steps of a done job are exactly 0..step-1"}
		genuine     = &invariant{Name: "every accepted history row of a claim names the answer the handler gave that claim"}
		chain       = &invariant{Name: "the history's accepted claims ran each on the previous one's answer, and built the result"}
		result      = &invariant{Name: "result equals what the handler computed (its final answer, a chain of its answers, the expected sum)"}
		consumed    = &invariant{Name: "every signal consumed (seq <= consumed_seq, inbox_seq = signals delivered)"}
		exactlyOnce = &invariant{Name: "every signal shown exactly once to the accepted steps of its job"}
		ackedSig    = &invariant{Name: "every acknowledged signal is in its job's inbox"}
		wakeups     = &invariant{Name: "no lost wakeup (no timeout wake of an await whose go had arrived)"}
	)
	s.Invariants = []*invariant{terminal, lost, doubled, perClaim, complete, genuine, chain, result, consumed, exactlyOnce, ackedSig, wakeups}

	// Statuses, and the jobs that are not done.
	if err := each(ctx, p, `SELECT status, count(*) FROM jobs GROUP BY status`, func(rows pgx.Rows) error {
		var st string
		var n int64
		if err := rows.Scan(&st, &n); err != nil {
			return err
		}
		s.Statuses[st] = n
		s.Jobs += n
		return nil
	}); err != nil {
		return nil, err
	}
	if err := each(ctx, p, `SELECT id, status, step, attempt, coalesce(wake, ''), coalesce(awaiting::text, ''),
		inbox_seq, consumed_seq, claim_inbox_seq, eligible_at, coalesce(lease_owner, ''), coalesce(error::text, '')
		FROM jobs WHERE status <> 'done' ORDER BY id`, func(rows pgx.Rows) error {
		var id, inbox, cons, claim int64
		var st, wake, awaiting, owner, errText string
		var step, attempt int
		var eligible time.Time
		if err := rows.Scan(&id, &st, &step, &attempt, &wake, &awaiting, &inbox, &cons, &claim, &eligible, &owner, &errText); err != nil {
			return err
		}
		terminal.fail("job %d %s at step %d attempt %d wake=%q awaiting=%s inbox_seq=%d consumed_seq=%d claim_inbox_seq=%d eligible_at=%s owner=%q error=%s",
			id, st, step, attempt, wake, awaiting, inbox, cons, claim, eligible.Format(time.RFC3339Nano), owner, errText)
		return nil
	}); err != nil {
		return nil, err
	}

	// History-level invariants, in SQL.
	sqlViolations := func(iv *invariant, q string) error {
		err := each(ctx, p, q, func(rows pgx.Rows) error {
			var line string
			if err := rows.Scan(&line); err != nil {
				return err
			}
			iv.fail("%s", line)
			return nil
		})
		if err != nil {
			return fmt.Errorf("%s: %w", iv.Name, err)
		}
		return nil
	}
	if err := sqlViolations(doubled, `SELECT format('job %s step %s: %s accepted outcomes (%s)', job_id, step, count(*),
			string_agg(outcome || ' at attempt ' || attempt, ', ' ORDER BY id))
		FROM steps WHERE outcome IN `+acceptedOutcomes+` GROUP BY job_id, step HAVING count(*) > 1`); err != nil {
		return nil, err
	}
	if err := sqlViolations(perClaim, `SELECT format('job %s step %s attempt %s: %s rows (%s)', job_id, step, attempt, count(*),
			string_agg(outcome, ', ' ORDER BY id))
		FROM steps GROUP BY job_id, step, attempt HAVING count(*) > 1`); err != nil {
		return nil, err
	}
	if err := sqlViolations(complete, `SELECT format('job %s: step %s but %s accepted rows over steps %s..%s', j.id, j.step,
			coalesce(a.n, 0), a.lo, a.hi)
		FROM jobs j LEFT JOIN (SELECT job_id, count(*) AS n, min(step) AS lo, max(step) AS hi
		                       FROM steps WHERE outcome IN `+acceptedOutcomes+` GROUP BY job_id) a ON a.job_id = j.id
		WHERE j.status = 'done' AND (coalesce(a.n, 0) <> j.step OR a.lo <> 0 OR a.hi <> j.step - 1)`); err != nil {
		return nil, err
	}
	if err := sqlViolations(consumed, `SELECT format('job %s (%s): signal %s seq %s %s not consumed (consumed_seq %s)',
			j.id, j.status, s.id, s.seq, s.name, j.consumed_seq)
		FROM signals s JOIN jobs j ON j.id = s.job_id WHERE s.seq > j.consumed_seq
		UNION ALL
		SELECT format('job %s: inbox_seq %s but %s signals (max seq %s)', j.id, j.inbox_seq, coalesce(c.n, 0), c.m)
		FROM jobs j LEFT JOIN (SELECT job_id, count(*) AS n, max(seq) AS m FROM signals GROUP BY job_id) c ON c.job_id = j.id
		WHERE j.inbox_seq <> coalesce(c.n, 0) OR j.inbox_seq <> coalesce(c.m, 0)`); err != nil {
		return nil, err
	}
	if err := each(ctx, p, `SELECT outcome, count(*) FROM steps GROUP BY outcome`, func(rows pgx.Rows) error {
		var o string
		var n int64
		if err := rows.Scan(&o, &n); err != nil {
			return err
		}
		s.Outcomes[o] = n
		s.HistoryRows += n
		return nil
	}); err != nil {
		return nil, err
	}

	// Load what the record-level invariants need.
	type jobRow struct {
		status string
		step   int
		input  jobInput
		result string
	}
	jobs := map[int64]*jobRow{}
	if err := each(ctx, p, `SELECT id, status, step, input::text, coalesce(result::text, '') FROM jobs`, func(rows pgx.Rows) error {
		var id int64
		var in, res string
		j := &jobRow{}
		if err := rows.Scan(&id, &j.status, &j.step, &in, &res); err != nil {
			return err
		}
		_ = json.Unmarshal([]byte(in), &j.input)
		j.result = canon([]byte(res))
		jobs[id] = j
		return nil
	}); err != nil {
		return nil, err
	}
	accepted := map[int64][]acceptedStep{}
	if err := each(ctx, p, `SELECT job_id, step, attempt, outcome FROM steps WHERE outcome IN `+acceptedOutcomes+`
		ORDER BY job_id, step, attempt, id`, func(rows pgx.Rows) error {
		var id int64
		var a acceptedStep
		var outcome string
		if err := rows.Scan(&id, &a.step, &a.attempt, &outcome); err != nil {
			return err
		}
		s.AcceptedSteps++
		if l := accepted[id]; len(l) > 0 && l[len(l)-1].step == a.step && l[len(l)-1].attempt == a.attempt {
			l[len(l)-1].outcomes = append(l[len(l)-1].outcomes, outcome)
			return nil
		}
		a.outcomes = []string{outcome}
		accepted[id] = append(accepted[id], a)
		return nil
	}); err != nil {
		return nil, err
	}
	signals := map[int64][]dbSignal{}
	allSignals := map[int64]bool{}
	if err := each(ctx, p, `SELECT id, job_id, name, coalesce((payload->>'v')::bigint, 0) FROM signals ORDER BY job_id, seq`, func(rows pgx.Rows) error {
		var g dbSignal
		if err := rows.Scan(&g.id, &g.job, &g.name, &g.v); err != nil {
			return err
		}
		signals[g.job] = append(signals[g.job], g)
		allSignals[g.id] = true
		s.Signals++
		return nil
	}); err != nil {
		return nil, err
	}

	// Lost: acknowledged but missing or not done.
	ins.mu.Lock()
	for id, n := range ins.acked {
		j, ok := jobs[id]
		switch {
		case !ok:
			lost.fail("job %d (ordinal %d) was acknowledged and is not in the database", id, n)
		case j.status != "done":
			lost.fail("job %d (ordinal %d) is %s", id, n, j.status)
		}
	}
	s.Acknowledged = int64(len(ins.acked))
	ins.mu.Unlock()
	s.Lost = int64(lost.Violations)
	s.Doubled = int64(doubled.Violations)

	recv.mu.Lock()
	defer recv.mu.Unlock()
	for sigID, job := range recv.acked {
		if !allSignals[sigID] {
			ackedSig.fail("signal %d to job %d was acknowledged (202) and is not in the inbox", sigID, job)
		}
	}
	byWebhook := make(map[string]*claimRecord, len(recv.claims))
	for _, rec := range recv.claims {
		byWebhook[rec.webhookID] = rec
	}
	ids := make([]int64, 0, len(jobs))
	for id := range jobs {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(a, b int) bool { return ids[a] < ids[b] })
	for _, id := range ids {
		j := jobs[id]
		if j.status != "done" {
			continue // reported above; its chain is incomplete
		}
		steps := accepted[id]
		prevOut := "null" // the state of a fresh job
		seen := map[int64]int{}
		var trail []string
		var sigOrder []int64
		broken := false
		for i, a := range steps {
			rec := recv.claims[claimKey{id, a.step, a.attempt}]
			labels := strings.Join(a.outcomes, ", ")
			switch {
			case rec == nil:
				genuine.fail("job %d step %d attempt %d: history %s, but the handler never saw that claim", id, a.step, a.attempt, labels)
				broken = true
			case rec.status != 200:
				genuine.fail("job %d step %d attempt %d: history %s, but the handler answered %d", id, a.step, a.attempt, labels, rec.status)
				broken = true
			default:
				for _, o := range a.outcomes {
					if o != rec.kind {
						genuine.fail("job %d step %d attempt %d: history %s, but the handler answered %s", id, a.step, a.attempt, labels, rec.kind)
						break
					}
				}
			}
			if rec == nil || rec.status != 200 {
				continue
			}
			if rec.inState != prevOut {
				chain.fail("job %d step %d (accepted #%d): ran on state %s, the previous accepted answer was %s", id, a.step, i, rec.inState, prevOut)
			}
			prevOut = rec.outState
			trail = append(trail, rec.webhookID)
			for _, sh := range rec.shown {
				seen[sh.ID]++
				sigOrder = append(sigOrder, sh.ID)
			}
		}
		// The result: the final answer of the handler, and the expected sum.
		want := int64(0)
		for k := range j.input.Phases {
			want += work(id, k)
		}
		for _, g := range signals[id] {
			if g.name == "go" {
				want += g.v
			}
		}
		var res jobState
		_ = json.Unmarshal([]byte(j.result), &res)
		// The result against the handler's own records, whatever the history says: the
		// trail it carries names the claims whose answers built it, each ran on the
		// previous one's answer, and the last answered done with exactly this result.
		prev, resultOK := "null", true
		for i, wid := range res.Trail {
			rec := byWebhook[wid]
			switch {
			case rec == nil || rec.status != 200:
				result.fail("job %d: its result names claim %s, which the handler never answered", id, wid)
			case rec.inState != prev:
				result.fail("job %d: claim %s (#%d of its result's trail) ran on %s, not on the previous answer %s", id, wid, i, rec.inState, prev)
			case i == len(res.Trail)-1 && (rec.kind != "done" || rec.outState != j.result):
				result.fail("job %d: result %s, but the handler's final answer %s was %s %s", id, j.result, wid, rec.kind, rec.outState)
			default:
				prev = rec.outState
				continue
			}
			resultOK = false
			break
		}
		switch {
		case !resultOK:
		case len(res.Trail) == 0:
			result.fail("job %d: result %s carries no trail", id, j.result)
		case res.Sum != want:
			result.fail("job %d: sum %d, expected %d (Σ work over %d phases + Σ go payloads)", id, res.Sum, want, j.input.Phases)
		}
		// The history's accepted claims are the ones the result was built from.
		switch {
		case broken:
		case strings.Join(res.Trail, ",") != strings.Join(trail, ","):
			chain.fail("job %d: result trail %v, accepted claims in the history %v", id, res.Trail, trail)
		case fmt.Sprint(res.Sig) != fmt.Sprint(sigOrder):
			chain.fail("job %d: result signals %v, shown to the history's accepted claims %v", id, res.Sig, sigOrder)
		}
		// Every signal of the job shown exactly once to its accepted steps.
		inbox := map[int64]bool{}
		for _, g := range signals[id] {
			inbox[g.id] = true
			if n := seen[g.id]; n != 1 {
				exactlyOnce.fail("job %d: signal %d (%s) shown %d times to accepted steps", id, g.id, g.name, n)
			}
		}
		for sid := range seen {
			if !inbox[sid] {
				exactlyOnce.fail("job %d: accepted steps were shown signal %d, not in its inbox", id, sid)
			}
		}
	}

	// Evidence for the first jobs whose history holds two rows for one claim: that
	// history beside what the handler saw and answered for each of the job's claims.
	var evidenceJobs []int64
	if err := each(ctx, p, `SELECT DISTINCT job_id FROM (SELECT job_id FROM steps
		GROUP BY job_id, step, attempt HAVING count(*) > 1) d ORDER BY job_id LIMIT 3`, func(rows pgx.Rows) error {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return err
		}
		evidenceJobs = append(evidenceJobs, id)
		return nil
	}); err != nil {
		return nil, err
	}
	for _, id := range evidenceJobs {
		lines := []string{fmt.Sprintf("job %d:", id)}
		if err := each(ctx, p, `SELECT format('  history id %s: step %s attempt %s %s http %s started %s finished %s',
				id, step, attempt, outcome, coalesce(http_status::text, '-'), to_char(started_at, 'HH24:MI:SS.MS'), to_char(finished_at, 'HH24:MI:SS.MS'))
			FROM steps WHERE job_id = $1 ORDER BY id`, func(rows pgx.Rows) error {
			var l string
			if err := rows.Scan(&l); err != nil {
				return err
			}
			lines = append(lines, l)
			return nil
		}, id); err != nil {
			return nil, err
		}
		var keys []claimKey
		for k := range recv.claims {
			if k.job == id {
				keys = append(keys, k)
			}
		}
		sort.Slice(keys, func(a, b int) bool {
			return keys[a].step < keys[b].step || keys[a].step == keys[b].step && keys[a].attempt < keys[b].attempt
		})
		for _, k := range keys {
			rec := recv.claims[k]
			lines = append(lines, fmt.Sprintf("  handler: %s received %s answered %s: %d %s (slept past the lease: %v)",
				rec.webhookID, rec.received.UTC().Format("15:04:05.000"), rec.answered.UTC().Format("15:04:05.000"), rec.status, rec.kind, rec.slept))
		}
		s.Evidence = append(s.Evidence, strings.Join(lines, "\n"))
	}

	// Lost wakeups, over every claim the handler saw: a wake by timeout whose step was shown
	// a "go" that arrived well before the await's deadline.
	for key, rec := range recv.claims {
		s.Claims++
		if rec.wake != "timeout" {
			continue
		}
		var in jobState
		_ = json.Unmarshal([]byte(rec.inState), &in)
		deadline := time.UnixMilli(in.AwaitAt).Add(awaitTimeout)
		for _, sh := range rec.shown {
			if sh.Name == "go" && sh.Created.Before(deadline.Add(-time.Second)) {
				wakeups.fail("job %d step %d attempt %d: woken by timeout (deadline ≥ %s), but go %d had arrived at %s",
					key.job, key.step, key.attempt, deadline.Format(time.RFC3339Nano), sh.ID, sh.Created.Format(time.RFC3339Nano))
			}
		}
	}
	return s, nil
}

// each runs one query and calls fn for every row (closing the rows, checking their error).
func each(ctx context.Context, p *postgres, sql string, fn func(pgx.Rows) error, args ...any) error {
	rows, err := p.pool.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}
