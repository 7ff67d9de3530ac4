package pg

import (
	"context"
	"encoding/json"
	"fmt"

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
	ID    int64
	Token string
	// Kind is one of the Kind constants; Label is what the history row records
	// ("next", "retry", "error", "timeout"…).
	Kind  string
	Label string

	State  json.RawMessage
	Result json.RawMessage
	Error  json.RawMessage
	// DelayMS delays a next (nil: none) or a retry (required: the caller computes the
	// backoff, see engine.RetryDelay); TimeoutMS bounds an await (nil: no deadline).
	DelayMS   *int64
	TimeoutMS *int64
	// Awaiting lists the signal names an await waits for (nil: any).
	Awaiting []string
	// Children is the JSON array of JobInsert-shaped children of a spawn.
	Children   json.RawMessage
	HTTPStatus *int
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
}

// outcomeArrays lays a batch out as the statement's typed arrays, one element per
// record; an absent delay or timeout is -1, an absent http status 0, an absent value NULL.
func outcomeArrays(recs []OutcomeRecord) (dbsqlc.JobApplyOutcomesParams, error) {
	n := len(recs)
	p := dbsqlc.JobApplyOutcomesParams{Ids: make([]int64, n), Tokens: make([]string, n), Kinds: make([]string, n),
		Labels: make([]string, n), States: make([]json.RawMessage, n), Results: make([]json.RawMessage, n),
		Errors: make([]json.RawMessage, n), DelaysMs: make([]int64, n), TimeoutsMs: make([]int64, n),
		Awaitings: make([]json.RawMessage, n), Children: make([]json.RawMessage, n), HttpStatuses: make([]int, n)}
	for i, r := range recs {
		if r.Kind == KindRetry && r.DelayMS == nil {
			return p, fmt.Errorf("pg: the retry outcome of job %d has no delay (the retry policy is the caller's)", r.ID)
		}
		p.Ids[i], p.Tokens[i], p.Kinds[i], p.Labels[i] = r.ID, r.Token, r.Kind, r.Label
		p.States[i], p.Results[i], p.Errors[i], p.Children[i] = r.State, r.Result, r.Error, r.Children
		p.DelaysMs[i], p.TimeoutsMs[i] = valueOr(r.DelayMS, -1), valueOr(r.TimeoutMS, -1)
		p.HttpStatuses[i] = valueOr(r.HTTPStatus, 0)
		if r.Awaiting != nil {
			b, err := json.Marshal(r.Awaiting)
			if err != nil {
				return p, err
			}
			p.Awaitings[i] = b
		}
	}
	return p, nil
}

// JobApplyOutcomes applies a batch of outcomes in one statement (sql/job_outcome.sql).
// creditGates selects the variant that also gives back gate slots: it must be true when
// any step of the batch may hold one.
func (db *DB) JobApplyOutcomes(ctx context.Context, recs []OutcomeRecord, creditGates bool) ([]OutcomeApplied, error) {
	p, err := outcomeArrays(recs)
	if err != nil {
		return nil, err
	}
	var rows []dbsqlc.JobApplyOutcomesRow
	if creditGates {
		var credited []dbsqlc.JobApplyOutcomesCreditingRow
		credited, err = db.q.JobApplyOutcomesCrediting(ctx, dbsqlc.JobApplyOutcomesCreditingParams(p))
		rows = convertAll(credited, func(r dbsqlc.JobApplyOutcomesCreditingRow) dbsqlc.JobApplyOutcomesRow {
			return dbsqlc.JobApplyOutcomesRow(r)
		})
	} else {
		rows, err = db.q.JobApplyOutcomes(ctx, p)
	}
	return convertAll(rows, func(r dbsqlc.JobApplyOutcomesRow) OutcomeApplied {
		return OutcomeApplied{ID: r.ID, Token: valueOr(r.Token, ""), Status: r.Status, Queue: r.Queue, Ready: r.Ready}
	}), translate(err)
}
