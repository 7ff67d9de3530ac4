package main

import (
	"context"
	"fmt"
)

// sabotage breaks the database the way the invariants guard against, after the drain
// and before the checks, so that a run with -sabotage shows that each check can fail:
// a stuck job, a lost one, a doubled outcome, a wrong result, an unconsumed signal. It
// returns the names of the invariants that must then report violations.
func sabotage(ctx context.Context, p *postgres, ins *inserter) ([]string, error) {
	ins.mu.Lock()
	var lostID int64
	for id := range ins.acked {
		if lostID == 0 || id < lostID {
			lostID = id
		}
	}
	ins.mu.Unlock()
	stmts := []struct{ want, sql string }{
		{"0 lost (every acknowledged job exists and is done)",
			fmt.Sprintf(`DELETE FROM jobs WHERE id = %d`, lostID)},
		{"every job done", `UPDATE jobs SET status = 'awaiting', finished_at = NULL
			WHERE id = (SELECT max(id) FROM jobs WHERE status = 'done')`},
		{"at most one accepted outcome per (job, step)", `INSERT INTO steps (job_id, queue, step, attempt, outcome, started_at, finished_at)
			SELECT job_id, queue, step, attempt + 1, outcome, started_at, finished_at FROM steps
			WHERE outcome = 'next' AND job_id = (SELECT min(id) + 1 FROM jobs WHERE status = 'done') LIMIT 1`},
		{"result equals what the handler computed (its final answer, a chain of its answers, the expected sum)", `UPDATE jobs
			SET result = jsonb_set(result, '{sum}', to_jsonb((result->>'sum')::bigint + 1))
			WHERE id = (SELECT min(id) + 2 FROM jobs WHERE status = 'done')`},
		{"every signal consumed (seq <= consumed_seq, inbox_seq = signals delivered)", `UPDATE jobs SET consumed_seq = consumed_seq - 1
			WHERE id = (SELECT max(job_id) FROM signals)`},
	}
	var want []string
	for _, s := range stmts {
		if _, err := p.pool.Exec(ctx, s.sql); err != nil {
			return nil, fmt.Errorf("sabotage %q: %w", s.want, err)
		}
		want = append(want, s.want)
	}
	want = append(want, "accepted steps of a done job are exactly 0..step-1")
	return want, nil
}
