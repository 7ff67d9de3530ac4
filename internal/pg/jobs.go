package pg

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Job is one row of jobs, as the API shows it (the lease token is never exposed).
type Job struct {
	ID       int64
	Queue    string
	Handler  string
	Status   string
	Priority int
	// EligibleAt is when a runnable job may run, or an awaiting job's deadline; nil for
	// an await without a deadline.
	EligibleAt      *time.Time
	Input           json.RawMessage
	State           json.RawMessage
	Result          json.RawMessage
	Error           json.RawMessage
	Step            int
	Attempt         int
	MaxAttempts     int
	Key             *string
	ConcurrencyKey  *string
	RateLimit       *string
	RateKey         *string
	RateWeight      int
	ParentID        *int64
	PendingChildren int
	Awaiting        []string
	Wake            *string
	InboxSeq        int64
	ConsumedSeq     int64
	LeaseExpiresAt  *time.Time
	LeaseOwner      *string
	AttemptedAt     *time.Time
	CancelRequested bool
	CreatedAt       time.Time
	UpdatedAt       time.Time
	FinishedAt      *time.Time
}

func (j *Job) scanTargets() []any {
	return []any{&j.ID, &j.Queue, &j.Handler, &j.Status, &j.Priority, &finiteTime{&j.EligibleAt},
		&j.Input, &j.State, &j.Result, &j.Error, &j.Step, &j.Attempt, &j.MaxAttempts, &j.Key,
		&j.ConcurrencyKey, &j.RateLimit, &j.RateKey, &j.RateWeight, &j.ParentID,
		&j.PendingChildren, &j.Awaiting, &j.Wake, &j.InboxSeq, &j.ConsumedSeq,
		&j.LeaseExpiresAt, &j.LeaseOwner, &j.AttemptedAt, &j.CancelRequested,
		&j.CreatedAt, &j.UpdatedAt, &j.FinishedAt}
}

// JobInsert is one job to insert. Nil fields take the column or handler default.
type JobInsert struct {
	Queue          string          `json:"queue,omitempty"`
	Handler        string          `json:"handler"`
	Input          json.RawMessage `json:"input,omitempty"`
	Key            *string         `json:"key,omitempty"`
	Priority       *int            `json:"priority,omitempty"`
	RunAt          *time.Time      `json:"run_at,omitempty"`
	DelayMS        *int64          `json:"delay_ms,omitempty"`
	ConcurrencyKey *string         `json:"concurrency_key,omitempty"`
	RateLimit      *string         `json:"rate_limit,omitempty"`
	RateKey        *string         `json:"rate_key,omitempty"`
	RateWeight     *int            `json:"rate_weight,omitempty"`
	MaxAttempts    *int            `json:"max_attempts,omitempty"`
	ParentID       *int64          `json:"parent_id,omitempty"`
}

// JobInserted is the answer for one JobInsert: the new job, or the live job that already
// held its key (Deduplicated).
type JobInserted struct {
	Job
	Deduplicated bool
}

// InsertProblem says why one item of a refused batch cannot be inserted.
type InsertProblem struct {
	Index   int    // the item's position in the request
	Field   string // "handler", "rate_limit/name", "rate_limit/weight"
	Message string
}

// InsertRefusedError lists what made JobInsertMany refuse a batch; nothing was written.
type InsertRefusedError struct{ Problems []InsertProblem }

func (e *InsertRefusedError) Error() string {
	return fmt.Sprintf("insert refused: %d problem(s), first: %s", len(e.Problems), e.Problems[0].Message)
}

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *InsertRefusedError) Unwrap() error { return ErrInvalid }

// JobInsertMany inserts jobs in one statement (JobInsertMany in sql/jobs.sql) and
// answers in request order. A batch naming an unknown handler or an impossible rate limit writes nothing and
// returns *InsertRefusedError.
func (db *DB) JobInsertMany(ctx context.Context, items []JobInsert) ([]JobInserted, error) {
	if len(items) == 0 {
		return nil, nil
	}
	type record struct {
		Ord int `json:"ord"`
		JobInsert
	}
	recs := make([]record, len(items))
	for i, it := range items {
		recs[i] = record{Ord: i, JobInsert: it}
	}
	payload, err := json.Marshal(recs)
	if err != nil {
		return nil, err
	}
	var inserted []Job
	existing := map[string]Job{}
	rows, err := db.pool.Query(ctx, stmt("JobInsertMany"), payload)
	if err != nil {
		return nil, translate(err)
	}
	for rows.Next() {
		var origin string
		var j Job
		if err := rows.Scan(append([]any{&origin}, j.scanTargets()...)...); err != nil {
			rows.Close()
			return nil, translate(err)
		}
		if origin == "inserted" {
			inserted = append(inserted, j)
		} else if j.Key != nil {
			existing[*j.Key] = j
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, translate(err)
	}
	// Inserted rows carry ids in request order (INSERT … SELECT … ORDER BY ord). Walk the
	// request: a keyed item whose key a pre-existing or earlier item holds is a dedup.
	out := make([]JobInserted, len(items))
	unresolved := []int{}
	next := 0
	sortByID(inserted)
	for i, it := range items {
		if it.Key != nil {
			if j, ok := existing[*it.Key]; ok {
				out[i] = JobInserted{Job: j, Deduplicated: true}
				continue
			}
		}
		if next < len(inserted) && sameKey(inserted[next].Key, it.Key) {
			out[i] = JobInserted{Job: inserted[next]}
			if it.Key != nil {
				existing[*it.Key] = inserted[next]
			}
			next++
			continue
		}
		unresolved = append(unresolved, i)
	}
	if len(unresolved) == 0 {
		return out, nil
	}
	if len(inserted) == 0 {
		problems, err := collect(ctx, db, stmt("JobInsertProblems"), func(r pgx.Rows) (InsertProblem, error) {
			var p InsertProblem
			return p, r.Scan(&p.Index, &p.Field, &p.Message)
		}, payload)
		if err != nil {
			return nil, err
		}
		if len(problems) > 0 {
			return nil, &InsertRefusedError{Problems: problems}
		}
	}
	// A key taken by a concurrent insert that committed after this statement's snapshot:
	// the row is live now, look it up (rare path, one statement per such key).
	for _, i := range unresolved {
		it := items[i]
		if it.Key == nil {
			return nil, fmt.Errorf("pg: insert answered fewer rows than requested")
		}
		j, err := db.JobGetLiveByKey(ctx, *it.Key)
		if err != nil {
			return nil, fmt.Errorf("pg: key %q neither inserted nor found live: %w", *it.Key, err)
		}
		out[i] = JobInserted{Job: j, Deduplicated: true}
	}
	return out, nil
}

func sameKey(a, b *string) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

func sortByID(js []Job) {
	slices.SortFunc(js, func(a, b Job) int { return cmp.Compare(a.ID, b.ID) })
}

// JobGetLiveByKey returns the live job holding key (jobs_live_key).
func (db *DB) JobGetLiveByKey(ctx context.Context, key string) (Job, error) {
	var j Job
	err := db.pool.QueryRow(ctx, stmt("JobGetLiveByKey"), key).Scan(j.scanTargets()...)
	return j, translate(err)
}

// JobDetail is a job with its children counts.
type JobDetail struct {
	Job
	ChildrenTotal    int
	ChildrenFinished int
}

// JobGet returns one job by id.
func (db *DB) JobGet(ctx context.Context, id int64) (JobDetail, error) {
	var d JobDetail
	err := db.pool.QueryRow(ctx, stmt("JobGet"), id).Scan(append(d.scanTargets(), &d.ChildrenTotal, &d.ChildrenFinished)...)
	return d, translate(err)
}

// JobListParams filters a listing; nil fields do not filter. Before is the keyset cursor
// (list ids below it).
type JobListParams struct {
	Queue, Status, Handler, Key *string
	ParentID                    *int64
	Before                      *int64
	Limit                       int
}

// JobList lists jobs newest first.
func (db *DB) JobList(ctx context.Context, p JobListParams) ([]Job, error) {
	return collect(ctx, db, stmt("JobList"), func(r pgx.Rows) (Job, error) {
		var j Job
		return j, r.Scan(j.scanTargets()...)
	}, p.Queue, p.Status, p.Handler, p.Key, p.Before, p.Limit, p.ParentID)
}

// Step is one attempt of a job's step, from the steps history.
type Step struct {
	ID         int64
	Step       int
	Attempt    int
	Outcome    string
	HTTPStatus *int
	StartedAt  time.Time
	FinishedAt time.Time
	Error      json.RawMessage
}

// StepList returns a job's history, oldest first.
func (db *DB) StepList(ctx context.Context, jobID int64, limit int) ([]Step, error) {
	return collect(ctx, db, stmt("StepList"), func(r pgx.Rows) (Step, error) {
		var s Step
		return s, r.Scan(&s.ID, &s.Step, &s.Attempt, &s.Outcome, &s.HTTPStatus, &s.StartedAt, &s.FinishedAt, &s.Error)
	}, jobID, limit)
}

// finiteTime scans a timestamptz into a *time.Time, reading ±infinity (and NULL) as nil.
type finiteTime struct{ dst **time.Time }

// ScanTimestamptz implements pgtype.TimestamptzScanner.
func (f *finiteTime) ScanTimestamptz(v pgtype.Timestamptz) error {
	if !v.Valid || v.InfinityModifier != pgtype.Finite {
		*f.dst = nil
		return nil
	}
	t := v.Time
	*f.dst = &t
	return nil
}
