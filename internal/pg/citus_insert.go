package pg

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/gendurable/gendurable/internal/pg/dbcitus"
	"github.com/gendurable/gendurable/internal/pg/dbsqlc"
	"github.com/jackc/pgx/v5"
)

// citusUnsupported names what an item asks for that gendurable does not run on Citus yet
// (docs/citus.md, "Guarantees"): the field and why, or "" when the item can be inserted.
func citusUnsupported(it *JobInsert) (field, why string) {
	switch {
	case it.IdempotencyKey != nil:
		return "idempotency_key", "idempotency keys are not supported on Citus yet"
	case it.Debounce != nil:
		return "debounce", "debounce is not supported on Citus yet"
	case it.RateLimit != nil || len(it.ExtraRateLimits) > 0:
		return "rate_limit", "rate limits are not supported on Citus yet (a bucket shared by jobs on many shards)"
	case it.ConcurrencyKey != nil && (it.Key != nil || it.ParentID != nil):
		return "concurrency_key", "on Citus a concurrency key is exact only for a job it places: not with a key or a parent"
	}
	return "", ""
}

// citusPlacement is where item it lives (docs/citus.md, "Placement"): its parent's, its
// key's, its concurrency key's, or next (the batch's shard).
func citusPlacement(l *citusLayout, it *JobInsert, next int) int {
	switch {
	case it.ParentID != nil:
		return l.PlacementOfID(*it.ParentID)
	case it.Key != nil:
		return PlacementOfKey(*it.Key)
	case it.ConcurrencyKey != nil:
		return PlacementOfKey(*it.ConcurrencyKey)
	}
	return next
}

// citusInsert is JobInsertManyWith on Citus: the queues new to this process, then one
// JobInsert (sql/citus/jobs.sql) in a transaction that is rolled back when an item names
// an unknown handler, then the wake-up on the coordinator. An item whose live key is held
// answers its holder (Deduplicated).
func (db *DB) citusInsert(ctx context.Context, items []JobInsert, opts JobInsertOptions) ([]JobInserted, error) {
	var problems []InsertProblem
	for i := range items {
		if field, why := citusUnsupported(&items[i]); field != "" {
			problems = append(problems, InsertProblem{Index: i, Field: field, Message: why})
		}
	}
	if len(problems) > 0 {
		return nil, &InsertRefusedError{Problems: problems}
	}
	l, err := db.layout(ctx)
	if err != nil {
		return nil, err
	}
	next := l.nextPlacement()
	n := len(items)
	p := dbcitus.JobInsertParams{Placements: make([]int, n), Queues: make([]string, n), Handlers: make([]string, n),
		Inputs: make([]string, n), Keys: make([]string, n), Priorities: make([]int, n), RunAts: make([]time.Time, n),
		DelaysMs: make([]int64, n), ConcurrencyKeys: make([]string, n), MaxAttempts: make([]int, n),
		ParentIds: make([]int64, n), ScheduleNames: make([]string, n), ScheduleTicks: make([]time.Time, n)}
	var queues []string
	for i := range items {
		it := &items[i]
		p.Placements[i] = citusPlacement(l, it, next)
		p.Queues[i], p.Handlers[i], p.Inputs[i] = it.Queue, it.Handler, string(it.Input)
		p.Keys[i], p.ConcurrencyKeys[i] = valueOr(it.Key, ""), valueOr(it.ConcurrencyKey, "")
		p.Priorities[i], p.MaxAttempts[i] = valueOr(it.Priority, -1), valueOr(it.MaxAttempts, 0)
		p.RunAts[i], p.DelaysMs[i], p.ParentIds[i] = valueOr(it.RunAt, time.Time{}), valueOr(it.DelayMS, 0), valueOr(it.ParentID, 0)
		if _, known := db.knownQueues.Load(it.Queue); !known && !slices.Contains(queues, it.Queue) {
			queues = append(queues, it.Queue)
		}
	}
	if len(queues) > 0 {
		// A reference table: a write goes to every node, so only for queues new to this process.
		if err := translate(db.q.QueueEnsureMany(ctx, queues)); err != nil {
			return nil, err
		}
		for _, q := range queues {
			db.knownQueues.Store(q, true)
		}
	}
	out := make([]JobInserted, n)
	var rows []dbcitus.JobInsertRow
	err = pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		var err error
		if rows, err = dbcitus.New(tx).JobInsert(ctx, p); err != nil {
			return err
		}
		inserted := map[int]bool{}
		slices.SortFunc(rows, func(a, b dbcitus.JobInsertRow) int { return cmp.Compare(a.ID/Placements, b.ID/Placements) })
		next := 0 // the next row, in request order
		for i := range items {
			it := &items[i]
			if next < len(rows) && rows[next].Handler == it.Handler && rows[next].Placement == p.Placements[i] &&
				(it.Key == nil) == (rows[next].Key == nil) {
				r := &rows[next]
				j := Job{ID: r.ID, Queue: r.Queue, Handler: r.Handler, Status: r.Status, Priority: r.Priority,
					EligibleAt: finiteTime(r.EligibleAt), Input: r.Input, MaxAttempts: r.MaxAttempts, Key: r.Key,
					RateWeight: r.RateWeight, LeaseOwner: r.LeaseOwner, CreatedAt: r.CreatedAt, UpdatedAt: r.CreatedAt}
				requestedPart(&j, it)
				out[i] = JobInserted{Job: j}
				inserted[i] = true
				next++
			}
		}
		for i := range items {
			it := &items[i]
			if inserted[i] {
				continue
			}
			if it.Key != nil {
				h, err := dbcitus.New(tx).JobGetLiveByKey(ctx, dbcitus.JobGetLiveByKeyParams{Placement: PlacementOfKey(*it.Key), JobKey: *it.Key})
				if err == nil {
					out[i] = JobInserted{Job: citusJob(h), Deduplicated: true}
					continue
				}
			}
			problems, err := db.insertProblems(ctx, items)
			if err != nil {
				return err
			}
			if len(problems) > 0 {
				return &InsertRefusedError{Problems: problems}
			}
			return fmt.Errorf("pg: item %d neither inserted nor found holding its key", i)
		}
		return nil
	})
	if err != nil {
		return nil, translate(err)
	}
	payload := make([]string, 0, 1)
	for _, r := range rows {
		if !slices.Contains(payload, r.Queue+notifyTag(opts.Claimer)) {
			payload = append(payload, r.Queue+notifyTag(opts.Claimer))
		}
	}
	return out, db.citusNotify(ctx, payload)
}

// insertProblems names each item's problem as JobInsertProblems sees it (unknown
// handlers, impossible rate limits).
func (db *DB) insertProblems(ctx context.Context, items []JobInsert) ([]InsertProblem, error) {
	p := insertArrays(items)
	rows, err := db.q.JobInsertProblems(ctx, dbsqlc.JobInsertProblemsParams{Handlers: p.Handlers,
		RateLimits: p.RateLimits, RateWeights: p.RateWeights, ExtraRateLimits: p.ExtraRateLimits})
	if err != nil {
		return nil, translate(err)
	}
	return convertAll(rows, func(r dbsqlc.JobInsertProblemsRow) InsertProblem {
		return InsertProblem{Index: r.Ord, Field: r.Field, Message: r.Message}
	}), nil
}
