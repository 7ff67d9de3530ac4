package pg

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gendurable/gendurable/internal/pg/dbcitus"
	"github.com/gendurable/gendurable/internal/pg/dbsqlc"
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
	EligibleAt     *time.Time
	Input          json.RawMessage
	State          json.RawMessage
	Result         json.RawMessage
	Error          json.RawMessage
	Step           int
	Attempt        int
	MaxAttempts    int
	Key            *string
	ConcurrencyKey *string
	RateLimit      *string
	RateKey        *string
	RateWeight     int
	// ExtraRateLimits are the rate limits after the first (RateLimit) of a job naming
	// several; nil otherwise.
	ExtraRateLimits []RateLimitUse
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
	// ScheduleName and ScheduleTick name the schedule and the tick that made the job
	// (nil for a job inserted by a client).
	ScheduleName *string
	ScheduleTick *time.Time
	// DebounceKey is the debounce key the job was inserted with, and DebounceDeadline
	// the latest its debounced inserts may push it to (nil: none).
	DebounceKey      *string
	DebounceDeadline *time.Time
	// TraceContext is the job's W3C trace context: a traceparent, then a space and the
	// tracestate when there is one (nil: the job came without one and tracing was off).
	TraceContext *string
	// RerunOf is the job this one reran (POST /v1/jobs/{id}/rerun); nil otherwise.
	RerunOf *int64
	// FairnessKey is whose work the job is in a fair queue (nil: none; '' the default key).
	FairnessKey *string
}

// RateLimitUse is one rate limit a job draws from: Weight tokens of the bucket of Key
// ("" for the limit's shared bucket) of rate limit Name. It is stored as a member of
// jobs.extra_rate_limits.
type RateLimitUse struct {
	Name   string `json:"name"`
	Key    string `json:"key"`
	Weight int    `json:"weight"`
}

// decodeRateLimits reads jobs.extra_rate_limits (nil for NULL); the column is written
// only by JobInsertMany and gendurable_enqueue, as an array of RateLimitUse.
func decodeRateLimits(raw json.RawMessage) []RateLimitUse {
	if len(raw) == 0 {
		return nil
	}
	var out []RateLimitUse
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil
	}
	return out
}

// jobFromRow maps a jobs row to the API's view of it (the lease token and the claim's
// bookkeeping stay in the database).
func jobFromRow(r dbsqlc.Job) Job {
	return Job{ExtraRateLimits: decodeRateLimits(r.ExtraRateLimits), ID: r.ID, Queue: r.Queue, Handler: r.Handler, Status: r.Status, Priority: r.Priority,
		EligibleAt: finiteTime(r.EligibleAt), Input: r.Input, State: r.State, Result: r.Result, Error: r.Error,
		Step: r.Step, Attempt: r.Attempt, MaxAttempts: r.MaxAttempts, Key: r.Key, ConcurrencyKey: r.ConcurrencyKey,
		RateLimit: r.RateLimit, RateKey: r.RateKey, RateWeight: r.RateWeight, ParentID: r.ParentID,
		PendingChildren: r.PendingChildren, Awaiting: r.Awaiting, Wake: r.Wake, InboxSeq: r.InboxSeq,
		ConsumedSeq: r.ConsumedSeq, LeaseExpiresAt: r.LeaseExpiresAt, LeaseOwner: r.LeaseOwner,
		AttemptedAt: r.AttemptedAt, CancelRequested: r.CancelRequested, CreatedAt: r.CreatedAt,
		UpdatedAt: r.UpdatedAt, FinishedAt: r.FinishedAt, ScheduleName: r.ScheduleName, ScheduleTick: r.ScheduleTick,
		DebounceKey: r.DebounceKey, DebounceDeadline: r.DebounceDeadline, TraceContext: r.TraceContext,
		RerunOf: r.RerunOf, FairnessKey: r.FairnessKey}
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
	// ExtraRateLimits are the job's rate limits after the first (RateLimit): a step runs
	// only when every bucket it names holds its weight, and takes them all at once.
	ExtraRateLimits []RateLimitUse `json:"extra_rate_limits,omitempty"`
	MaxAttempts     *int           `json:"max_attempts,omitempty"`
	ParentID        *int64         `json:"parent_id,omitempty"`
	// IdempotencyKey, when set, makes a repeat within the idempotency window answer the
	// job it first made, whatever that job's status (table idempotency_keys).
	IdempotencyKey *string `json:"idempotency_key,omitempty"`
	// Debounce, when set, collapses inserts of one key into the one runnable,
	// never-claimed job holding it (never with Key, IdempotencyKey, RunAt or DelayMS).
	Debounce *Debounce `json:"debounce,omitempty"`
	// TraceContext is the job's W3C trace context (Job.TraceContext; nil: none).
	TraceContext *string `json:"trace_context,omitempty"`
	// FairnessKey is whose work the job is in a fair queue (nil: none, which a fair queue
	// stores as ''; a spawned child without one inherits its parent's).
	FairnessKey *string `json:"fairness_key,omitempty"`
}

// Debounce says how an insert collapses into the pending job of its key: the job runs
// once Period has passed with no new insert of the key, or MaxWait (0: no bound) after
// the insert that made it, with the latest insert's input.
type Debounce struct {
	Key     string        `json:"key"`
	Period  time.Duration `json:"period"`
	MaxWait time.Duration `json:"max_wait,omitempty"`
}

// DefaultIdempotencyWindow is how long an idempotency key answers its job when the
// caller gives no window.
const DefaultIdempotencyWindow = 24 * time.Hour

// JobInsertOptions tunes JobInsertManyWith.
type JobInsertOptions struct {
	// IdempotencyWindow is how long a new idempotency key answers its job (0: the default, 24h).
	IdempotencyWindow time.Duration
	// AsOf, when set, is the time idempotency keys are judged by and debounce periods
	// count from (default: the database's now()); tests set it ahead to pass a window
	// without waiting.
	AsOf *time.Time
	// Claimer, when set, names the process that will claim the new jobs at once
	// (WorkNotice): the other processes' dispatchers need not wake for them.
	Claimer string
}

// JobInserted is the answer for one JobInsert: the new job, or the live job that already
// held its key (Deduplicated), or the pending job its debounced insert collapsed into
// (Debounced: made by an earlier insert of its debounce key, possibly of the same batch).
type JobInserted struct {
	Job
	Deduplicated bool
	Debounced    bool
}

// InsertProblem says why one item of a refused batch cannot be inserted.
type InsertProblem struct {
	Index   int    // the item's position in the request
	Field   string // "handler", "rate_limit/name", "rate_limit/weight", "rate_limits/N/name", "rate_limits/N/weight"
	Message string
}

// InsertRefusedError lists what made JobInsertMany refuse a batch; nothing was written.
type InsertRefusedError struct{ Problems []InsertProblem }

func (e *InsertRefusedError) Error() string {
	return fmt.Sprintf("insert refused: %d problem(s), first: %s", len(e.Problems), e.Problems[0].Message)
}

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *InsertRefusedError) Unwrap() error { return ErrInvalid }

// JobInsertMany inserts jobs with the default options (JobInsertManyWith).
func (db *DB) JobInsertMany(ctx context.Context, items []JobInsert) ([]JobInserted, error) {
	return db.JobInsertManyWith(ctx, items, JobInsertOptions{})
}

// JobInsertManyWith inserts jobs in one statement (JobInsertPlain when no item has a
// key, an idempotency key, a debounce key or a rate limit, JobInsertMany otherwise, in
// sql/jobs.sql) and answers in request order. An item whose live key or unexpired
// idempotency key is already held answers the job holding it (Deduplicated). A batch
// naming an unknown handler or an impossible rate limit writes nothing and returns
// *InsertRefusedError.
func (db *DB) JobInsertManyWith(ctx context.Context, items []JobInsert, opts JobInsertOptions) ([]JobInserted, error) {
	return db.jobInsertManyWith(ctx, items, opts, true)
}

// jobInsertManyWith is JobInsertManyWith; a plain batch goes to JobInsertPlain only when
// plainFirst (tests compare the two statements).
func (db *DB) jobInsertManyWith(ctx context.Context, items []JobInsert, opts JobInsertOptions, plainFirst bool) ([]JobInserted, error) {
	if len(items) == 0 {
		return nil, nil
	}
	if db.citus != nil {
		return db.citusInsert(ctx, items, opts)
	}
	if opts.IdempotencyWindow <= 0 {
		opts.IdempotencyWindow = DefaultIdempotencyWindow
	}
	p := insertArrays(items)
	p.NotifyTag = notifyTag(opts.Claimer)
	if plainFirst && plainBatch(p) {
		return db.jobInsertPlain(ctx, items, p)
	}
	p.AsOf, p.IdempotencyWindowMs = opts.AsOf, opts.IdempotencyWindow.Milliseconds()
	rows, err := db.jobInsertMany(ctx, p)
	if err != nil {
		return nil, translate(err)
	}
	out := make([]JobInserted, len(items))
	done := make([]bool, len(items))
	inserted := 0
	liveIDs, idempotentIDs := map[string]int64{}, map[string]int64{}
	debounced := map[int]int64{} // item → the job of its debounce key
	fresh := map[string]bool{}   // debounce keys whose job this batch made
	for i := range rows {
		r := &rows[i]
		switch {
		case r.Origin == "inserted" && int(r.Ord) < len(items):
			out[r.Ord], done[r.Ord] = JobInserted{Job: insertedJob(&items[r.Ord], r)}, true
			inserted++
		case (r.Origin == "debounce_new" || r.Origin == "debounce_hit") && int(r.Ord) < len(items):
			debounced[int(r.Ord)] = r.ID
			inserted++
			if r.Origin == "debounce_new" && r.DebounceKey.Valid {
				fresh[r.DebounceKey.String] = true
			}
		case r.Origin == "idempotent" && r.IdempotencyKey.Valid:
			idempotentIDs[r.IdempotencyKey.String] = r.ID
		case r.Key.Valid:
			liveIDs[r.Key.String] = r.ID
		}
	}
	full, err := db.jobsByID(ctx, liveIDs, idempotentIDs, debounced)
	if err != nil {
		return nil, err
	}
	live, idempotent := map[string]Job{}, map[string]Job{}
	for key, id := range liveIDs {
		if j, ok := full[id]; ok {
			live[key] = j
		}
	}
	for key, id := range idempotentIDs {
		if j, ok := full[id]; ok {
			idempotent[key] = j
		}
	}
	for i, id := range debounced {
		if j, ok := full[id]; ok {
			out[i], done[i] = JobInserted{Job: j, Debounced: true}, true
		}
	}
	// The first item of a debounce key that made a new job is the one that made it; every
	// other item of the key collapsed into that job.
	for i, it := range items {
		if it.Debounce != nil && fresh[it.Debounce.Key] {
			out[i].Debounced, fresh[it.Debounce.Key] = false, false
		}
	}
	// Walk the request: an item not inserted answers the job holding its idempotency key
	// or live key, found before the statement or inserted by an earlier item of the batch.
	unresolved := []int{}
	for i, it := range items {
		if done[i] {
			if it.IdempotencyKey != nil {
				idempotent[*it.IdempotencyKey] = out[i].Job
			}
			if it.Key != nil {
				live[*it.Key] = out[i].Job
			}
			continue
		}
		if it.IdempotencyKey != nil {
			if j, ok := idempotent[*it.IdempotencyKey]; ok {
				out[i], done[i] = JobInserted{Job: j, Deduplicated: true}, true
				continue
			}
		}
		if it.Key != nil {
			if j, ok := live[*it.Key]; ok {
				out[i], done[i] = JobInserted{Job: j, Deduplicated: true}, true
				continue
			}
		}
		unresolved = append(unresolved, i)
	}
	if len(unresolved) == 0 {
		return out, nil
	}
	if inserted == 0 {
		if err := db.insertRefused(ctx, p); err != nil {
			return nil, err
		}
	}
	// A key taken by a concurrent insert that committed after this statement's snapshot:
	// the row is there now, look it up (rare path, one statement per such key).
	for _, i := range unresolved {
		it := items[i]
		var j Job
		err := fmt.Errorf("pg: insert answered fewer rows than requested")
		if it.IdempotencyKey != nil {
			var r dbsqlc.Job
			r, err = db.q.JobGetByIdempotencyKey(ctx, dbsqlc.JobGetByIdempotencyKeyParams{IdempotencyKey: *it.IdempotencyKey, AsOf: opts.AsOf})
			j, err = jobFromRow(r), translate(err)
		}
		if it.Key != nil && (it.IdempotencyKey == nil || err != nil) {
			j, err = db.JobGetLiveByKey(ctx, *it.Key)
		}
		if err != nil {
			return nil, fmt.Errorf("pg: item %d neither inserted nor found holding its key: %w", i, err)
		}
		out[i] = JobInserted{Job: j, Deduplicated: true}
	}
	return out, nil
}

// insertRefused explains why a batch that inserted nothing was refused: an
// *InsertRefusedError naming each item's problem, or nil when no item has one (JobInsertProblems).
func (db *DB) insertRefused(ctx context.Context, p dbsqlc.JobInsertManyParams) error {
	rows, err := db.q.JobInsertProblems(ctx, dbsqlc.JobInsertProblemsParams{Handlers: p.Handlers,
		RateLimits: p.RateLimits, RateWeights: p.RateWeights, ExtraRateLimits: p.ExtraRateLimits, Queues: p.Queues})
	if err != nil {
		return translate(err)
	}
	problems := convertAll(rows, func(r dbsqlc.JobInsertProblemsRow) InsertProblem {
		return InsertProblem{Index: r.Ord, Field: r.Field, Message: r.Message}
	})
	if len(problems) > 0 {
		return &InsertRefusedError{Problems: problems}
	}
	return nil
}

// plainBatch reports whether no item of the batch laid out in p has a live key, an
// idempotency key, a debounce key or a rate limit (insertArrays leaves the arrays of a
// column no item sets nil): such a batch goes to JobInsertPlain.
func plainBatch(p dbsqlc.JobInsertManyParams) bool {
	return p.Keys == nil && p.IdempotencyKeys == nil && p.DebounceKeys == nil && p.RateLimits == nil &&
		p.RateKeys == nil && p.RateWeights == nil && p.ExtraRateLimits == nil
}

// jobInsertPlain inserts a plain batch (plainBatch) with JobInsertPlain: every item is
// inserted, or none when the batch names an unknown handler (*InsertRefusedError).
func (db *DB) jobInsertPlain(ctx context.Context, items []JobInsert, p dbsqlc.JobInsertManyParams) ([]JobInserted, error) {
	rows, err := db.pool.Query(ctx, dbsqlc.JobInsertPlain, p.Handlers, p.Queues, p.Inputs, p.Priorities, p.RunAts,
		p.DelaysMs, p.MaxAttempts, p.ConcurrencyKeys, p.ParentIds, p.TraceContexts, p.FairnessKeys, p.NotifyTag)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	out := make([]JobInserted, len(items))
	eligible := make([]time.Time, len(items)) // the answers' EligibleAt, one allocation
	inserted := 0
	var r insertManyRow // one row read at a time: no pointer into it is kept
	for rows.Next() {
		if err := rows.Scan(&r.ID, oneOf{&r.Status, jobStatuses}, &r.Priority, &r.EligibleAt, &r.Input,
			&r.MaxAttempts, &r.RateWeight, &r.CreatedAt, &r.LeaseOwner); err != nil {
			return nil, translate(err)
		}
		if inserted == len(items) {
			return nil, fmt.Errorf("pg: the plain insert answered more rows than the %d items", len(items))
		}
		j := &out[inserted]
		j.Job = storedPart(&r)
		if j.EligibleAt != nil {
			eligible[inserted] = *j.EligibleAt
			j.EligibleAt = &eligible[inserted]
		}
		r.Input = nil // the next row's input is a copy of its own
		inserted++
	}
	if err := rows.Err(); err != nil {
		return nil, translate(err)
	}
	if inserted == len(items) {
		// The ids were drawn in request order: item k's job is the k-th smallest id. The
		// rows come back in the insert's order, which is the request's.
		byID := func(a, b JobInserted) int { return cmp.Compare(a.ID, b.ID) }
		if !slices.IsSortedFunc(out, byID) {
			slices.SortFunc(out, byID)
		}
		for k := range out {
			requestedPart(&out[k].Job, &items[k])
		}
		return out, nil
	}
	if inserted == 0 {
		if err := db.insertRefused(ctx, p); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("pg: the plain insert answered %d of %d items", inserted, len(items))
}

// insertArrays lays the items out as JobInsertMany's typed arrays, one element per item;
// an absent value is the empty string (text), 0 (weights, attempts, parent ids, delays), -1 (priority)
// or the zero time (run_at), which the statement reads as NULL; extra rate limits are a
// JSON array (NULL when none). An optional column no item of the batch sets is sent as a
// NULL array: ROWS FROM pads a shorter unnest with NULLs, so the statement reads the same
// NULLs without n placeholders to encode, send and parse (15 of the 18 arrays of a batch
// of plain jobs).
func insertArrays(items []JobInsert) dbsqlc.JobInsertManyParams {
	n := len(items)
	p := dbsqlc.JobInsertManyParams{Queues: make([]string, n), Handlers: make([]string, n), Inputs: make([]string, n)}
	for i := range items {
		it := &items[i]
		p.Queues[i], p.Handlers[i], p.Inputs[i] = it.Queue, it.Handler, string(it.Input) // nil: "", NULL
		setOptional(&p.Keys, n, i, it.Key, "")
		setOptional(&p.Priorities, n, i, it.Priority, -1)
		setOptional(&p.RunAts, n, i, it.RunAt, time.Time{})
		setOptional(&p.DelaysMs, n, i, it.DelayMS, 0)
		setOptional(&p.ConcurrencyKeys, n, i, it.ConcurrencyKey, "")
		setOptional(&p.RateLimits, n, i, it.RateLimit, "")
		setOptional(&p.RateKeys, n, i, it.RateKey, "")
		setOptional(&p.RateWeights, n, i, it.RateWeight, 0)
		setOptional(&p.MaxAttempts, n, i, it.MaxAttempts, 0)
		setOptional(&p.ParentIds, n, i, it.ParentID, 0)
		setOptional(&p.TraceContexts, n, i, it.TraceContext, "")
		setOptional(&p.FairnessKeys, n, i, it.FairnessKey, "")
		setOptional(&p.IdempotencyKeys, n, i, it.IdempotencyKey, "")
		if extra := extraRateLimitsJSON(it); extra != "" {
			setOptional(&p.ExtraRateLimits, n, i, &extra, "")
		}
		if d := it.Debounce; d != nil {
			period, maxWait := d.Period.Milliseconds(), d.MaxWait.Milliseconds()
			setOptional(&p.DebounceKeys, n, i, &d.Key, "")
			setOptional(&p.DebouncePeriodsMs, n, i, &period, 0)
			setOptional(&p.DebounceMaxWaitsMs, n, i, &maxWait, 0)
		}
	}
	return p
}

// setOptional sets item i's element of an optional column to *v, making the column (its
// earlier items absent) at the first item that sets it; a nil v leaves an unmade column
// nil and writes absent into a made one.
// extraRateLimitsJSON is item it's extra_rate_limits as the statements take it ("": none).
func extraRateLimitsJSON(it *JobInsert) string {
	if len(it.ExtraRateLimits) == 0 {
		return ""
	}
	b, _ := json.Marshal(it.ExtraRateLimits) // plain structs: cannot fail
	return string(b)
}

func setOptional[V any](col *[]V, n, i int, v *V, absent V) {
	switch {
	case v != nil && *col == nil:
		*col = make([]V, n)
		for k := range i {
			(*col)[k] = absent
		}
		(*col)[i] = *v
	case v != nil:
		(*col)[i] = *v
	case *col != nil:
		(*col)[i] = absent
	}
}

// insertedJob is the stored row of an inserted item: what the statement answered (the
// id and every value it decided) with the item's own values and the table's defaults.
func insertedJob(it *JobInsert, r *insertManyRow) Job {
	j := storedPart(r)
	requestedPart(&j, it)
	return j
}

// storedPart is the part of an inserted job the statement answered.
func storedPart(r *insertManyRow) Job {
	j := Job{ID: r.ID, Status: r.Status, Priority: int(r.Priority.Int16), Input: r.Input,
		MaxAttempts: int(r.MaxAttempts.Int32), Key: textOrNil(r.Key), RateWeight: int(r.RateWeight.Int32),
		LeaseOwner: textOrNil(r.LeaseOwner)}
	if r.EligibleAt.Valid {
		j.EligibleAt = &r.EligibleAt.Time
	}
	if r.CreatedAt.Valid {
		j.CreatedAt, j.UpdatedAt = r.CreatedAt.Time, r.CreatedAt.Time
	}
	return j
}

// requestedPart fills in the part of an inserted job its request item gave.
func requestedPart(j *Job, it *JobInsert) {
	j.Queue, j.Handler, j.ConcurrencyKey, j.RateLimit, j.RateKey, j.ParentID, j.TraceContext, j.FairnessKey = it.Queue, it.Handler,
		it.ConcurrencyKey, it.RateLimit, it.RateKey, it.ParentID, it.TraceContext, it.FairnessKey
	if len(it.ExtraRateLimits) > 0 {
		j.ExtraRateLimits = it.ExtraRateLimits
	}
}

// insertManyRow is a row of JobInsertMany's answer (the columns of
// dbsqlc.JobInsertManyRow) read into value types: the generated row's pointers were 7
// allocations a row, 5 ms of server CPU in a 5 000-job call. Origin and Status are
// among the statement's constants and read without allocating.
type insertManyRow struct {
	Origin                           string
	Ord                              int32
	IdempotencyKey, Key, DebounceKey pgtype.Text
	ID                               int64
	Status                           string
	Priority                         pgtype.Int2
	EligibleAt                       pgtype.Timestamptz
	Input                            json.RawMessage
	MaxAttempts, RateWeight          pgtype.Int4
	CreatedAt                        pgtype.Timestamptz
	LeaseOwner                       pgtype.Text
}

// insertOrigins and jobStatuses are the values insertManyRow's Origin and Status take.
var (
	insertOrigins = []string{"inserted", "existing", "idempotent", "debounce_new", "debounce_hit"}
	jobStatuses   = []string{"runnable", "executing", "awaiting", "done", "failed", "cancelled"}
)

// jobInsertMany runs JobInsertMany (its arguments in dbsqlc.JobInsertMany's order).
func (db *DB) jobInsertMany(ctx context.Context, p dbsqlc.JobInsertManyParams) ([]insertManyRow, error) {
	rows, err := db.pool.Query(ctx, dbsqlc.JobInsertMany, insertManyArgs(p)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make([]insertManyRow, 0, len(p.Handlers))
	for rows.Next() {
		out = append(out, insertManyRow{})
		r := &out[len(out)-1]
		if err := rows.Scan(oneOf{&r.Origin, insertOrigins}, &r.Ord, &r.IdempotencyKey, &r.ID, &r.Key, &r.DebounceKey,
			oneOf{&r.Status, jobStatuses}, &r.Priority, &r.EligibleAt, &r.Input, &r.MaxAttempts, &r.RateWeight,
			&r.CreatedAt, &r.LeaseOwner); err != nil {
			return nil, err
		}
	}
	return out, rows.Err()
}

// insertManyArgs are JobInsertMany's positional arguments, in its $n order.
func insertManyArgs(p dbsqlc.JobInsertManyParams) []any {
	return []any{p.Queues, p.Handlers, p.Inputs, p.Keys, p.Priorities, p.RunAts, p.DelaysMs, p.ConcurrencyKeys,
		p.RateLimits, p.RateKeys, p.RateWeights, p.MaxAttempts, p.ParentIds, p.IdempotencyKeys, p.ExtraRateLimits,
		p.DebounceKeys, p.DebouncePeriodsMs, p.DebounceMaxWaitsMs, p.TraceContexts, p.FairnessKeys, p.AsOf, p.IdempotencyWindowMs, p.NotifyTag}
}

// oneOf reads a text column into *dst: one of known when the value is, without
// allocating; a copy otherwise, and "" for NULL.
type oneOf struct {
	dst   *string
	known []string
}

func (o oneOf) ScanBytes(b []byte) error {
	for _, k := range o.known {
		if string(b) == k {
			*o.dst = k
			return nil
		}
	}
	*o.dst = string(b)
	return nil
}

// seenText reads a text column into *dst, sharing the string with an equal value read
// before (kept in *seen, at most maxSeenTexts of them): for the columns of an answer
// that hold a few distinct values over its rows.
type seenText struct {
	dst  *string
	seen *[]*string
}

const maxSeenTexts = 32

func (t seenText) ScanBytes(b []byte) error {
	*t.dst = *sharedText(t.seen, b)
	return nil
}

// seenTextPtr is seenText for a nullable column: an equal value read before shares its
// pointer too (the claim's handler columns repeat the handler's values on every row;
// nothing writes through them).
type seenTextPtr struct {
	dst  **string
	seen *[]*string
}

func (t seenTextPtr) ScanBytes(b []byte) error {
	if b == nil {
		*t.dst = nil
		return nil
	}
	*t.dst = sharedText(t.seen, b)
	return nil
}

// sharedText is the string of b kept in *seen, added to it when it is not there (while
// *seen holds fewer than maxSeenTexts).
func sharedText(seen *[]*string, b []byte) *string {
	for _, s := range *seen {
		if string(b) == *s {
			return s
		}
	}
	s := string(b)
	if len(*seen) < maxSeenTexts {
		*seen = append(*seen, &s)
	}
	return &s
}

// seenIntPtr reads a nullable integer column into *dst, sharing the pointer of an equal
// value read before (kept in *seen).
type seenIntPtr struct {
	dst  **int
	seen *[]*int
}

func (t seenIntPtr) ScanInt64(v pgtype.Int8) error {
	if !v.Valid {
		*t.dst = nil
		return nil
	}
	for _, p := range *t.seen {
		if int64(*p) == v.Int64 {
			*t.dst = p
			return nil
		}
	}
	n := int(v.Int64)
	*t.dst = &n
	if len(*t.seen) < maxSeenTexts {
		*t.seen = append(*t.seen, &n)
	}
	return nil
}

// textOrNil is t's string, or nil for NULL.
func textOrNil(t pgtype.Text) *string {
	if !t.Valid {
		return nil
	}
	return &t.String
}

// jobsByID reads in full the jobs the insert answered by id only: those holding a
// requested live key or idempotency key, and those of debounced items (one statement,
// none when no item was deduplicated or debounced).
func (db *DB) jobsByID(ctx context.Context, liveIDs, idempotentIDs map[string]int64, debounced map[int]int64) (map[int64]Job, error) {
	ids := make([]int64, 0, len(liveIDs)+len(idempotentIDs)+len(debounced))
	for _, m := range []map[string]int64{liveIDs, idempotentIDs} {
		for _, id := range m {
			ids = append(ids, id)
		}
	}
	for _, id := range debounced {
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := db.q.JobGetMany(ctx, ids)
	if err != nil {
		return nil, translate(err)
	}
	byID := make(map[int64]Job, len(rows))
	for _, r := range rows {
		byID[r.ID] = jobFromRow(r)
	}
	return byID, nil
}

// JobGetLiveByKey returns the live job holding key (jobs_live_key).
func (db *DB) JobGetLiveByKey(ctx context.Context, key string) (Job, error) {
	if db.citus != nil {
		j, err := db.citusLiveByKey(ctx, dbcitus.New(db.pool), key)
		return j, translate(err)
	}
	j, err := db.q.JobGetLiveByKey(ctx, key)
	return jobFromRow(j), translate(err)
}

// JobDetail is a job with its children counts.
type JobDetail struct {
	Job
	ChildrenTotal    int
	ChildrenFinished int
}

// JobGet returns one job by id.
func (db *DB) JobGet(ctx context.Context, id int64) (JobDetail, error) {
	if db.citus != nil {
		placement, err := db.citusPlacementOf(ctx, id)
		if err != nil {
			return JobDetail{}, err
		}
		r, err := dbcitus.New(db.pool).JobGet(ctx, dbcitus.JobGetParams{Placement: placement, ID: id})
		return JobDetail{Job: citusJob(r.Job), ChildrenTotal: int(r.ChildrenTotal), ChildrenFinished: int(r.ChildrenFinished)}, translate(err)
	}
	r, err := db.q.JobGet(ctx, id)
	return JobDetail{Job: jobFromRow(r.Job), ChildrenTotal: int(r.ChildrenTotal), ChildrenFinished: int(r.ChildrenFinished)}, translate(err)
}

// JobListParams filters a listing; nil fields do not filter. Before is the keyset cursor
// (list ids below it).
type JobListParams struct {
	Queue, Status, Handler, Key *string
	Schedule                    *string // the jobs of the schedule of this name
	FairnessKey                 *string // the jobs of this fairness key
	ParentID                    *int64
	Before                      *int64
	// MinID is the least id listed (the start of a search's window, from JobIDAt).
	MinID *int64
	// CreatedAfter (inclusive) and CreatedBefore (exclusive) bound created_at exactly.
	CreatedAfter, CreatedBefore *time.Time
	// InputContains and ResultContains keep the jobs whose input or result contains
	// them (jsonb @>); nil does not filter.
	InputContains, ResultContains json.RawMessage
	Limit                         int
}

// JobList lists jobs newest first.
func (db *DB) JobList(ctx context.Context, p JobListParams) ([]Job, error) {
	js, err := db.q.JobList(ctx, dbsqlc.JobListParams{Queue: p.Queue, Status: p.Status, Handler: p.Handler, JobKey: p.Key,
		BeforeID: p.Before, ParentID: p.ParentID, ScheduleName: p.Schedule, MinID: p.MinID, CreatedAfter: p.CreatedAfter,
		CreatedBefore: p.CreatedBefore, InputContains: p.InputContains, ResultContains: p.ResultContains, FairnessKey: p.FairnessKey,
		MaxRows: p.Limit})
	return convertAll(js, jobFromRow), translate(err)
}

// JobIDAt returns the least id of the jobs created at or after t, as a binary search of
// jobs_pkey probes (JobFirstFrom: ids grow with time) finds it: about log2(ids) probes,
// 20 at a million jobs. Ids are drawn in the inserting statement and created_at is its
// transaction's start, so the order is exact only up to the time an inserting transaction
// stays open; callers search from a little before the time they mean and filter
// created_at exactly. With no job created at or after t, it answers one past the last id.
func (db *DB) JobIDAt(ctx context.Context, t time.Time) (int64, error) {
	b, err := db.q.JobIDBounds(ctx)
	if err != nil {
		return 0, translate(err)
	}
	lo, hi := b.MinID, b.MaxID+1 // the answer is in [lo, hi]
	for lo < hi {
		mid := lo + (hi-lo)/2
		r, err := db.q.JobFirstFrom(ctx, mid)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			hi = mid
		case err != nil:
			return 0, translate(err)
		case r.CreatedAt.Before(t):
			lo = r.ID + 1
		default:
			hi = mid
		}
	}
	return lo, nil
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
	Bodies     *StepBodies // nil: the attempt's queue did not keep them
}

// StepList returns a job's history, oldest first.
func (db *DB) StepList(ctx context.Context, jobID int64, limit int) ([]Step, error) {
	var rows []dbsqlc.StepListRow
	var err error
	if db.citus != nil {
		var placement int
		if placement, err = db.citusPlacementOf(ctx, jobID); err != nil {
			return nil, err
		}
		var crows []dbcitus.StepListRow
		crows, err = dbcitus.New(db.pool).StepList(ctx, dbcitus.StepListParams{Placement: placement, JobID: jobID, MaxRows: limit})
		rows = convertAll(crows, func(r dbcitus.StepListRow) dbsqlc.StepListRow { return dbsqlc.StepListRow(r) })
	} else {
		rows, err = db.q.StepList(ctx, dbsqlc.StepListParams{JobID: jobID, MaxRows: limit})
	}
	if err != nil {
		return nil, translate(err)
	}
	out := make([]Step, len(rows))
	for i, r := range rows {
		out[i] = Step{ID: r.ID, Step: r.Step, Attempt: r.Attempt, Outcome: r.Outcome, HTTPStatus: r.HttpStatus,
			StartedAt: r.StartedAt, FinishedAt: r.FinishedAt, Error: r.Error}
		if len(r.Bodies) > 0 {
			var b StepBodies
			if err := json.Unmarshal(r.Bodies, &b); err != nil {
				return nil, fmt.Errorf("pg: the bodies of step %d: %w", r.ID, err)
			}
			out[i].Bodies = &b
		}
	}
	return out, nil
}

// finiteTime reads a timestamptz as a *time.Time, ±infinity (and NULL) as nil.
func finiteTime(v pgtype.Timestamptz) *time.Time {
	if !v.Valid || v.InfinityModifier != pgtype.Finite {
		return nil
	}
	return &v.Time
}
