package pg

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gendurable/gendurable/internal/pg/dbsqlc"
)

// Outcome kinds understood by JobApplyOutcomes (see gendurable_outcome_status).
const (
	KindNext  = "next"
	KindAwait = "await"
	KindSpawn = "spawn"
	KindDone  = "done"
	KindFail  = "fail"
	KindRetry = "retry"
)

// OutcomeRecord is one step's outcome, fenced by its lease token.
type OutcomeRecord struct {
	ID    int64  `json:"id"`
	Token string `json:"token"`
	// Kind is one of the Kind constants; Label is what the history row records
	// ("next", "retry", "error", "timeout"…).
	Kind  string `json:"kind"`
	Label string `json:"label"`

	State  json.RawMessage `json:"state,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  json.RawMessage `json:"error,omitempty"`
	// DelayMS delays a next (nil: none) or a retry (required: the caller computes the
	// backoff, see engine.RetryDelay); TimeoutMS bounds an await (nil: no deadline).
	DelayMS   *int64 `json:"delay_ms,omitempty"`
	TimeoutMS *int64 `json:"timeout_ms,omitempty"`
	// Awaiting lists the signal names an await waits for (nil: any).
	Awaiting []string `json:"awaiting,omitempty"`
	// Children is the JSON array of JobInsert-shaped children of a spawn.
	Children   json.RawMessage `json:"children,omitempty"`
	HTTPStatus *int            `json:"http_status,omitempty"`
	// Bodies is what the history row keeps of the attempt's request and answer (the
	// steps.bodies document of migration 0014); nil, and absent from the batch, for an
	// attempt whose queue does not keep them.
	Bodies *StepBodies `json:"bodies,omitempty"`
	// Attempt is the step's attempt as claimed (0: not known). A batch of `next` and
	// `done` outcomes that all know it is written by the plain statement
	// (JobApplyPlainOutcomes); the general one reads it from the row.
	Attempt int `json:"-"`
}

// StepBodies is the request and response bodies of one attempt, as the history keeps them.
type StepBodies struct {
	Request  *StepBody `json:"request,omitempty"`
	Response *StepBody `json:"response,omitempty"`
	// ByQueue, in an outcome record only: the outcome statement keeps the bodies if the
	// job's queue's step_bodies setting asks for them (an outcome reported through the
	// API), and stores them without this flag. False: the caller decided (the dispatcher
	// knows its queue's setting).
	ByQueue bool `json:"by_queue,omitempty"`
}

// StepBody is one body: its text (valid UTF-8 without NUL, at most the server's cap),
// its size as sent or received, and whether Text holds less than that.
type StepBody struct {
	Text      string `json:"text"`
	Size      int    `json:"size"`
	Truncated bool   `json:"truncated"`
}

// OutcomeApplied reports one applied outcome; records missing from the answer were
// fenced off (their lease token is no longer current).
type OutcomeApplied struct {
	ID int64
	// Token is the lease token of the outcome that applied (a batch may also hold a
	// stale outcome of the same job, which did not).
	Token  string
	Status string
	Queue  string
	// Ready: the job is runnable now (a feeder may claim it at once).
	Ready bool
	// Handler, Label, StartedAt and FinishedAt are the attempt's, as its history row
	// holds them.
	Handler, Label        string
	StartedAt, FinishedAt time.Time
}

// checkRetryDelays refuses a retry without its delay: the retry policy is the caller's.
func checkRetryDelays(recs []OutcomeRecord) error {
	for _, r := range recs {
		if r.Kind == KindRetry && r.DelayMS == nil {
			return fmt.Errorf("pg: the retry outcome of job %d has no delay (the retry policy is the caller's)", r.ID)
		}
	}
	return nil
}

// JobApplyOutcomes applies a batch of outcomes in one statement (sql/job_outcome.sql).
// creditGates selects the variant that also gives back gate slots: it must be true when
// any step of the batch may hold one.
func (db *DB) JobApplyOutcomes(ctx context.Context, recs []OutcomeRecord, creditGates bool) ([]OutcomeApplied, error) {
	if db.citus != nil {
		return db.citusApplyOutcomes(ctx, recs, nil)
	}
	if err := checkRetryDelays(recs); err != nil {
		return nil, err
	}
	if !creditGates && plainOutcomes(recs) {
		return db.jobApplyPlainOutcomes(ctx, recs)
	}
	return db.jobApplyOutcomes(ctx, recs, creditGates)
}

// JobApplyOutcomesCreatingQueues is JobApplyOutcomes for a batch whose spawns name
// queues that may not exist yet: one transaction creates the queues (QueueEnsureMany)
// and writes the outcomes, and is rolled back when no outcome applied, so that an
// outcome refused for its lease token creates no queue. (A batch that applies keeps
// every queue named, also one that only a stale spawn beside it named.) The queues go
// first: Citus refuses a write to a reference table after a multi-shard write in the
// same transaction.
func (db *DB) JobApplyOutcomesCreatingQueues(ctx context.Context, recs []OutcomeRecord, creditGates bool,
	queues []string) ([]OutcomeApplied, error) {
	if db.citus != nil {
		return db.citusApplyOutcomes(ctx, recs, queues)
	}
	if err := checkRetryDelays(recs); err != nil {
		return nil, err
	}
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		return nil, translate(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	q := db.q.WithTx(tx)
	if err := q.QueueEnsureMany(ctx, queues); err != nil {
		return nil, translate(err)
	}
	applied, err := jobApplyOutcomesWith(ctx, q, recs, creditGates)
	if err != nil || len(applied) == 0 {
		return nil, translate(err) // rolled back
	}
	return applied, translate(tx.Commit(ctx))
}

// jobApplyOutcomes writes recs with the general statement (JobApplyOutcomes, or its
// crediting variant).
func (db *DB) jobApplyOutcomes(ctx context.Context, recs []OutcomeRecord, creditGates bool) ([]OutcomeApplied, error) {
	applied, err := jobApplyOutcomesWith(ctx, db.q, recs, creditGates)
	return applied, translate(err)
}

// jobApplyOutcomesWith is jobApplyOutcomes through q; the error is the driver's.
func jobApplyOutcomesWith(ctx context.Context, q *dbsqlc.Queries, recs []OutcomeRecord, creditGates bool) ([]OutcomeApplied, error) {
	batch, err := json.Marshal(recs)
	if err != nil {
		return nil, err
	}
	var rows []dbsqlc.JobApplyOutcomesRow
	if creditGates {
		var credited []dbsqlc.JobApplyOutcomesCreditingRow
		credited, err = q.JobApplyOutcomesCrediting(ctx, batch)
		rows = convertAll(credited, func(r dbsqlc.JobApplyOutcomesCreditingRow) dbsqlc.JobApplyOutcomesRow {
			return dbsqlc.JobApplyOutcomesRow(r)
		})
	} else {
		rows, err = q.JobApplyOutcomes(ctx, batch)
	}
	return convertAll(rows, outcomeApplied), err
}

// outcomeApplied is the answer of one applied outcome, from either general outcome statement
// (their rows have the same columns; the plain one is read by hand: readPlainOutcomes).
func outcomeApplied(r dbsqlc.JobApplyOutcomesRow) OutcomeApplied {
	return OutcomeApplied{ID: r.ID, Token: r.Token, Status: r.Status, Queue: r.Queue, Ready: r.Ready,
		Handler: r.Handler, Label: r.Label, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt}
}

// plainOutcomes reports whether JobApplyPlainOutcomes writes recs as JobApplyOutcomes
// would: every one a `next` or a `done` with its attempt and HTTP status known, no
// error, and bodies (if any) the caller chose to keep.
func plainOutcomes(recs []OutcomeRecord) bool {
	for _, r := range recs {
		if r.Kind != KindNext && r.Kind != KindDone || r.Attempt <= 0 || r.HTTPStatus == nil ||
			r.Error != nil || r.Bodies != nil && r.Bodies.ByQueue {
			return false
		}
	}
	return len(recs) > 0
}

// jobApplyPlainOutcomes writes a batch of plain outcomes (plainOutcomes) with
// JobApplyPlainOutcomes.
func (db *DB) jobApplyPlainOutcomes(ctx context.Context, recs []OutcomeRecord) ([]OutcomeApplied, error) {
	n := len(recs)
	p := dbsqlc.JobApplyPlainOutcomesParams{Ids: make([]int64, n), Tokens: make([]string, n), Kinds: make([]string, n),
		Labels: make([]string, n), Attempts: make([]int, n), HttpStatuses: make([]int, n),
		Payloads: make([]string, n), DelaysMs: make([]int64, n), Bodies: make([]string, n)}
	for i, r := range recs {
		p.Ids[i], p.Tokens[i], p.Kinds[i], p.Labels[i] = r.ID, r.Token, r.Kind, r.Label
		p.Attempts[i], p.HttpStatuses[i] = r.Attempt, *r.HTTPStatus
		if r.Kind == KindDone {
			p.Payloads[i] = string(r.Result) // nil: "", NULL
		} else {
			p.Payloads[i] = string(r.State)
		}
		if r.DelayMS != nil {
			p.DelaysMs[i] = *r.DelayMS // none and 0 are the same delay
		}
		if r.Bodies != nil {
			b, err := json.Marshal(r.Bodies)
			if err != nil {
				return nil, err
			}
			p.Bodies[i] = string(b)
		}
	}
	return db.readPlainOutcomes(ctx, p, recs)
}

// readPlainOutcomes runs JobApplyPlainOutcomes and reads its answer by hand: each row
// names its outcome by its place in recs, whose token it takes, and its status, queue,
// handler and label (a few values in a batch) are shared strings instead of a copy each
// (the generated method made five strings a row and appended the rows to a growing
// slice, copied again into OutcomeApplied).
func (db *DB) readPlainOutcomes(ctx context.Context, p dbsqlc.JobApplyPlainOutcomesParams, recs []OutcomeRecord) ([]OutcomeApplied, error) {
	rows, err := db.pool.Query(ctx, dbsqlc.JobApplyPlainOutcomes, p.Ids, p.Tokens, p.Kinds, p.Labels, p.Attempts,
		p.HttpStatuses, p.Payloads, p.DelaysMs, p.Bodies)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	applied := make([]OutcomeApplied, 0, len(recs))
	var a OutcomeApplied
	var ord int64
	var statuses, queues, handlers, labels []*string
	dest := []any{&a.ID, &ord, seenText{&a.Status, &statuses}, seenText{&a.Queue, &queues}, &a.Ready,
		seenText{&a.Handler, &handlers}, seenText{&a.Label, &labels}, &a.StartedAt, &a.FinishedAt}
	for rows.Next() {
		a = OutcomeApplied{}
		if err := rows.Scan(dest...); err != nil {
			return nil, translate(err)
		}
		if ord < 1 || ord > int64(len(recs)) {
			return nil, fmt.Errorf("JobApplyPlainOutcomes answered outcome %d of %d", ord, len(recs))
		}
		a.Token = recs[ord-1].Token
		applied = append(applied, a)
	}
	return applied, translate(rows.Err())
}
