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
)

// citusUnsupported names what an item asks for that gendurable does not run on Citus yet
// (docs/citus.md, "Guarantees"): the field and why, or "" when the item can be inserted.
func citusUnsupported(it *JobInsert) (field, why string) {
	// (A rate limit beside a fairness key, a debounce key or a concurrency key runs: the
	// job lives where they place it, and its bucket is remote; so do several rate limits,
	// all remote: citus_remote_buckets.go. A debounce key beside a fairness key or a
	// concurrency key runs displaced: citusDebounce. A fairness key beside a concurrency
	// key runs where the concurrency key places it: citusPlacement.)
	switch {
	case it.ConcurrencyKey != nil && it.ParentID != nil:
		return "concurrency_key", "on Citus a concurrency key is exact only for a job it places: not with a parent"
	case it.Debounce != nil && it.ParentID != nil:
		return "debounce", "on Citus a debounced job lives at its debounce key's placement: not with a parent"
	}
	return "", ""
}

// FairnessPlacement is where the jobs of fairness key key live on Citus (docs/citus.md,
// "Fair share"): on one shard, where a claim counts the key's executing steps against its
// cap. gendurable_enqueue computes the same in SQL (migrations/citus/0030).
func FairnessPlacement(key string) int {
	return PlacementOfKey("fairness " + key)
}

// placedByFairnessKey reports whether item it has a fairness key that places it: any but
// the default key "", whose jobs spread as unkeyed ones do (it takes no cap).
func placedByFairnessKey(it *JobInsert) bool {
	return it.FairnessKey != nil && *it.FairnessKey != ""
}

// RateBucketPlacement is where the bucket of rate limit name for key lives on Citus, and
// every job that draws from it (docs/citus.md, "Rate limits"). Names hold no space, so
// the string is one per bucket; gendurable_placement_of_key computes the same in SQL.
func RateBucketPlacement(name, key string) int {
	return PlacementOfKey("rate_limit " + name + " " + key)
}

// citusRatePlacement is where the bucket of item it lives when its claimer debits it
// (citus_remote_buckets.go): when the item lives elsewhere (placement: something placed it
// before its rate limit could), and whenever it names several limits (all of them paid
// by its claimer, or none); -1: no rate limit, or one whose bucket is at the item's own
// placement, debited by the claim.
func citusRatePlacement(it *JobInsert, placement int) int {
	if it.RateLimit == nil {
		return -1
	}
	if b := RateBucketPlacement(*it.RateLimit, valueOr(it.RateKey, "")); b != placement || len(it.ExtraRateLimits) > 0 {
		return b
	}
	return -1
}

// citusPlacement is where item it lives (docs/citus.md, "Placement"): its parent's, its
// concurrency key's (K=1 is exact only where every job of the key lives), its fairness
// key's (where the key's cap counts its steps; a job a concurrency key placed elsewhere
// counts against the cap on its own shard), its key's (unless something above or a rate
// limit places it: the key is displaced, citus_keys.go), its debounce key's (displaced by
// the concurrency key and the fairness key: citusDebounce), its rate-limit bucket's, its
// idempotency key's, or next (the batch's shard).
func citusPlacement(l *citusLayout, it *JobInsert, next int) int {
	switch {
	case it.ParentID != nil:
		return l.PlacementOfID(*it.ParentID)
	case it.ConcurrencyKey != nil:
		return PlacementOfKey(*it.ConcurrencyKey)
	case placedByFairnessKey(it):
		return FairnessPlacement(*it.FairnessKey)
	case it.Key != nil && it.RateLimit == nil:
		return PlacementOfKey(*it.Key)
	case it.Debounce != nil:
		return PlacementOfKey(it.Debounce.Key)
	case it.RateLimit != nil:
		return RateBucketPlacement(*it.RateLimit, valueOr(it.RateKey, ""))
	case it.IdempotencyKey != nil:
		return PlacementOfKey(*it.IdempotencyKey)
	}
	return next
}

// errCitusInsertRaced: a concurrent insert took a live key this insert's idempotency key
// was claimed for, between the two statements; the transaction is rolled back and the
// insert run again (it then answers the holder).
var errCitusInsertRaced = fmt.Errorf("pg: a live key was taken by a concurrent insert: %w", ErrRetryable)

// citusInsert is JobInsertManyWith on Citus: the queues new to this process, then one
// transaction (citusInsertTx) rolled back when an item names an unknown handler, then the
// wake-up on the coordinator. An item whose live key or idempotency key is held answers
// its holder (Deduplicated); debounced items answer the job of their key (Debounced).
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
	if slices.ContainsFunc(items, func(it JobInsert) bool { return it.RateLimit != nil }) {
		// An unknown limit or a weight above its burst (JobInsert does not check them on
		// Citus): refused before anything is written, as on plain PostgreSQL.
		if problems, err := db.insertProblems(ctx, items); err != nil || len(problems) > 0 {
			if err != nil {
				return nil, err
			}
			return nil, &InsertRefusedError{Problems: problems}
		}
	}
	if opts.IdempotencyWindow <= 0 {
		opts.IdempotencyWindow = DefaultIdempotencyWindow
	}
	l, err := db.layout(ctx)
	if err != nil {
		return nil, err
	}
	next := l.nextPlacement()
	placements := make([]int, len(items))
	var queues []string
	for i := range items {
		placements[i] = citusPlacement(l, &items[i], next)
		if _, known := db.knownQueues.Load(items[i].Queue); !known && !slices.Contains(queues, items[i].Queue) {
			queues = append(queues, items[i].Queue)
		}
	}
	for attempt := 1; ; attempt++ {
		var out []JobInserted
		var woken []citusWake
		err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
			var err error
			out, woken, err = db.citusInsertTx(ctx, tx, items, placements, queues, opts)
			return err
		})
		if errors.Is(err, errCitusInsertRaced) && attempt < 3 {
			continue
		}
		if err != nil {
			return nil, translate(err)
		}
		for _, q := range queues {
			db.knownQueues.Store(q, true)
		}
		for i := range woken {
			woken[i].tag = notifyTag(opts.Claimer)
		}
		return out, db.citusNotify(ctx, woken)
	}
}

// citusInsertTx inserts items in tx and answers them in request order, with the queues
// of the jobs it made. A batch with no idempotency key and no debounce is one JobInsert
// (sql/citus/jobs.sql), its rows matched to the items by the order of their ids. Otherwise
// the ids are drawn first (JobIDsDraw), each idempotency key is claimed for its first
// item's id and each debounce key upserts its job (sql/citus/keys.sql, router statements
// sent together), and JobInsert takes the items that are still to insert.
func (db *DB) citusInsertTx(ctx context.Context, tx pgx.Tx, items []JobInsert, placements []int, queues []string,
	opts JobInsertOptions) ([]JobInserted, []citusWake, error) {
	q := dbcitus.New(tx)
	n := len(items)
	out := make([]JobInserted, n)
	done := make([]bool, n)
	toInsert := make([]bool, n)
	var ids []int64
	var woken []citusWake
	answerByID := map[int]int64{}    // item → the id of the job it answers, read in full at the end
	madeByDebounce := map[int]bool{} // debounced items that made the job they answer
	keyed := false
	var keys []string
	for i := range items {
		it := &items[i]
		keyed = keyed || it.IdempotencyKey != nil || it.Debounce != nil || displacedKey(it, placements[i])
		toInsert[i] = true
		if it.Key != nil && it.Debounce == nil {
			keys = append(keys, *it.Key)
		}
	}
	// The live holders of the batch's keys, their locks held to the commit: an item whose
	// key is held answers its holder (below and in citusClaimIdempotencyKeys).
	var held map[string]int64
	if len(keys) > 0 {
		l, err := db.layout(ctx)
		if err != nil {
			return nil, nil, err
		}
		if held, err = db.citusKeysHeld(ctx, tx, l, keys); err != nil {
			return nil, nil, err
		}
	}
	if len(queues) > 0 {
		// A reference table: a write goes to every node (a two-phase commit), so only for
		// queues new to this process; in the transaction, so that a refused insert (an
		// unknown handler) leaves no queue behind; after the keys' locks, which every
		// writer of keyed jobs takes before anything else.
		if err := dbsqlc.New(tx).QueueEnsureMany(ctx, queues); err != nil {
			return nil, nil, err
		}
	}
	if keyed {
		var err error
		if ids, err = db.citusDrawIDs(ctx, q, placements); err != nil {
			return nil, nil, err
		}
		maxAttempts, fair, err := citusDebounceDefaults(ctx, q, items)
		if err != nil {
			return nil, nil, err
		}
		if err := db.citusClaimIdempotencyKeys(ctx, tx, items, placements, ids, held, opts, toInsert, answerByID); err != nil {
			return nil, nil, err
		}
		// A debounced job waits a period: nothing to wake.
		if err := db.citusDebounce(ctx, tx, items, placements, ids, maxAttempts, fair, opts, toInsert, answerByID, madeByDebounce); err != nil {
			return nil, nil, err
		}
	}
	p := dbcitus.JobInsertParams{Placements: make([]int, 0, n), Queues: make([]string, 0, n), Handlers: make([]string, 0, n),
		Inputs: make([]string, 0, n), Keys: make([]string, 0, n), Priorities: make([]int, 0, n), RunAts: make([]time.Time, 0, n),
		DelaysMs: make([]int64, 0, n), ConcurrencyKeys: make([]string, 0, n), MaxAttempts: make([]int, 0, n),
		ParentIds: make([]int64, 0, n), ScheduleNames: make([]string, 0, n), ScheduleTicks: make([]time.Time, 0, n),
		Ids: make([]int64, 0, n), TraceContexts: make([]string, 0, n), FairnessKeys: make([]string, 0, n)}
	// An item whose key is held answers the holder; of the items of one free key, the
	// first is inserted and the others answer it (answerByID -1 - first), as one unique
	// index does on plain PostgreSQL. An item with an idempotency key that repeats an
	// earlier item's key had its idempotency key claimed for its own id, which is not
	// inserted: the batch fails as retryable (errCitusInsertRaced), as it did before keys
	// could be displaced. (An item whose key is held claimed nothing: it answers the
	// holder, citusClaimIdempotencyKeys.)
	firstOfKey := map[string]int{}
	for i := range items {
		it := &items[i]
		if !toInsert[i] || it.Key == nil {
			continue
		}
		h, isHeld := held[*it.Key]
		f, repeated := firstOfKey[*it.Key]
		switch {
		case (isHeld || repeated) && it.IdempotencyKey != nil:
			return nil, nil, errCitusInsertRaced
		case isHeld:
			toInsert[i], answerByID[i] = false, h
		case repeated:
			toInsert[i], answerByID[i] = false, int64(-1-f)
		default:
			firstOfKey[*it.Key] = i
		}
	}
	var order []int // the items of p, in request order
	for i := range items {
		if !toInsert[i] {
			continue
		}
		it := &items[i]
		order = append(order, i)
		p.Placements = append(p.Placements, placements[i])
		p.Queues, p.Handlers, p.Inputs = append(p.Queues, it.Queue), append(p.Handlers, it.Handler), append(p.Inputs, string(it.Input))
		p.Keys, p.ConcurrencyKeys = append(p.Keys, valueOr(it.Key, "")), append(p.ConcurrencyKeys, valueOr(it.ConcurrencyKey, ""))
		p.Priorities, p.MaxAttempts = append(p.Priorities, valueOr(it.Priority, -1)), append(p.MaxAttempts, valueOr(it.MaxAttempts, 0))
		p.RunAts, p.DelaysMs = append(p.RunAts, valueOr(it.RunAt, time.Time{})), append(p.DelaysMs, valueOr(it.DelayMS, 0))
		p.ParentIds = append(p.ParentIds, valueOr(it.ParentID, 0))
		p.TraceContexts = append(p.TraceContexts, valueOr(it.TraceContext, ""))
		p.FairnessKeys = append(p.FairnessKeys, valueOr(it.FairnessKey, ""))
		p.ScheduleNames, p.ScheduleTicks = append(p.ScheduleNames, ""), append(p.ScheduleTicks, time.Time{})
		p.RateLimits, p.RateKeys = append(p.RateLimits, valueOr(it.RateLimit, "")), append(p.RateKeys, valueOr(it.RateKey, ""))
		p.RateWeights = append(p.RateWeights, valueOr(it.RateWeight, 0))
		p.RatePlacements = append(p.RatePlacements, citusRatePlacement(it, placements[i]))
		p.ExtraRateLimits = append(p.ExtraRateLimits, extraRateLimitsJSON(it))
		if ids != nil {
			p.Ids = append(p.Ids, ids[i])
		} else {
			p.Ids = append(p.Ids, 0)
		}
	}
	if len(order) > 0 {
		if err := citusMintBuckets(ctx, q, items, order); err != nil {
			return nil, nil, err
		}
		rows, err := q.JobInsert(ctx, p)
		if err != nil {
			return nil, nil, err
		}
		inserted := citusMatchInserted(items, order, p.Placements, ids, rows)
		// Every keyed job is named its key's holder, displaced or not: a caller of
		// gendurable_enqueue in a REPEATABLE READ transaction whose snapshot missed this
		// job then meets the row's new version, a serialization failure, wherever its own
		// job lives (TestSQLEnqueueUnderRepeatableReadMeetsTheKeysLaterHolder).
		var heldKeys []string
		var holderIDs []int64
		for _, i := range inserted {
			if it := &items[i.item]; it.Key != nil && it.Debounce == nil {
				heldKeys, holderIDs = append(heldKeys, *it.Key), append(holderIDs, rows[i.row].ID)
			}
		}
		if err := citusPutKeyHolders(ctx, q, heldKeys, holderIDs); err != nil {
			return nil, nil, err
		}
		for _, i := range inserted {
			r := &rows[i.row]
			j := Job{ID: r.ID, Queue: r.Queue, Handler: r.Handler, Status: r.Status, Priority: r.Priority,
				EligibleAt: finiteTime(r.EligibleAt), Input: r.Input, MaxAttempts: r.MaxAttempts, Key: r.Key,
				RateWeight: r.RateWeight, LeaseOwner: r.LeaseOwner, CreatedAt: r.CreatedAt, UpdatedAt: r.CreatedAt}
			requestedPart(&j, &items[i.item])
			out[i.item], done[i.item] = JobInserted{Job: j}, true
			woken = append(woken, citusWake{queue: r.Queue, placement: int(r.Placement), priority: &r.Priority})
		}
	}
	// An item with an idempotency key that a later item of the batch repeats: the later
	// one answers the earlier one's job (answerByID holds the earlier item as -1 - index).
	for i, id := range answerByID {
		if id < 0 {
			first := int(-1 - id)
			if !done[first] {
				// Left out by the insert: an unknown handler (the batch is refused), or a
				// key taken by a concurrent insert.
				problems, err := db.insertProblems(ctx, items)
				if err != nil || len(problems) > 0 {
					return nil, nil, cmp.Or(err, error(&InsertRefusedError{Problems: problems}))
				}
				return nil, nil, errCitusInsertRaced
			}
			answerByID[i] = out[first].ID
		}
	}
	for i := range items {
		if done[i] {
			continue
		}
		if id, ok := answerByID[i]; ok {
			j, err := db.citusJobByID(ctx, q, id)
			if err != nil {
				return nil, nil, err
			}
			out[i], done[i] = JobInserted{Job: j, Deduplicated: items[i].Debounce == nil, Debounced: items[i].Debounce != nil}, true
			continue
		}
		it := &items[i]
		if it.Key != nil {
			h, err := db.citusLiveByKey(ctx, q, *it.Key)
			if err == nil {
				if it.IdempotencyKey != nil && toInsert[i] && keyed {
					// Its idempotency key was claimed for a job that a concurrent insert
					// of the key kept out: run again, to answer the holder.
					return nil, nil, errCitusInsertRaced
				}
				out[i], done[i] = JobInserted{Job: h, Deduplicated: true}, true
				continue
			}
		}
		problems, err := db.insertProblems(ctx, items)
		if err != nil {
			return nil, nil, err
		}
		if len(problems) > 0 {
			return nil, nil, &InsertRefusedError{Problems: problems}
		}
		return nil, nil, fmt.Errorf("pg: item %d neither inserted nor found holding its key", i)
	}
	// The first item of a debounce key that made its job is the one that made it.
	for i := range madeByDebounce {
		out[i].Debounced = false
	}
	return out, woken, nil
}

// citusMintBuckets mints the buckets that the items of order draw from, each at its own
// placement (RateBucketMint; the item's, unless something else placed the item and the
// bucket is remote: citusRatePlacement), before the jobs that name them are written.
func citusMintBuckets(ctx context.Context, q *dbcitus.Queries, items []JobInsert, order []int) error {
	var m dbcitus.RateBucketMintParams
	seen := map[[2]string]bool{}
	for _, i := range order {
		it := &items[i]
		if it.RateLimit == nil {
			continue
		}
		buckets := [][2]string{{*it.RateLimit, valueOr(it.RateKey, "")}}
		for _, x := range it.ExtraRateLimits {
			buckets = append(buckets, [2]string{x.Name, x.Key})
		}
		for _, b := range buckets {
			if seen[b] {
				continue
			}
			seen[b] = true
			m.Names, m.Keys, m.Placements = append(m.Names, b[0]), append(m.Keys, b[1]), append(m.Placements, RateBucketPlacement(b[0], b[1]))
		}
	}
	if len(m.Names) == 0 {
		return nil
	}
	return q.RateBucketMint(ctx, m)
}

// citusInserted pairs an item with the row JobInsert made for it.
type citusInserted struct{ item, row int }

// citusMatchInserted pairs the items JobInsert was given (order, in request order, at
// placements) with the rows it made. With ids given, by id; otherwise the ids were drawn
// in request order, so the rows sorted by sequence follow the items, less the items left
// out (a held key, an unknown handler), recognised by handler, placement and key.
func citusMatchInserted(items []JobInsert, order []int, placements []int, ids []int64, rows []dbcitus.JobInsertRow) []citusInserted {
	var out []citusInserted
	if ids != nil {
		row := make(map[int64]int, len(rows))
		for k := range rows {
			row[rows[k].ID] = k
		}
		for _, i := range order {
			if k, ok := row[ids[i]]; ok {
				out = append(out, citusInserted{item: i, row: k})
			}
		}
		return out
	}
	slices.SortFunc(rows, func(a, b dbcitus.JobInsertRow) int { return cmp.Compare(a.ID/Placements, b.ID/Placements) })
	next := 0
	for k, i := range order {
		it := &items[i]
		if next < len(rows) && rows[next].Handler == it.Handler && rows[next].Placement == placements[k] &&
			(it.Key == nil) == (rows[next].Key == nil) {
			out = append(out, citusInserted{item: i, row: next})
			next++
		}
	}
	return out
}

// citusDrawIDs draws an id for each item at its placement (JobIDsDraw on the coordinator).
func (db *DB) citusDrawIDs(ctx context.Context, q *dbcitus.Queries, placements []int) ([]int64, error) {
	seqs, err := q.JobIDsDraw(ctx, len(placements))
	if err != nil {
		return nil, err
	}
	ids := make([]int64, len(placements))
	for i, seq := range seqs {
		ids[i] = seq*Placements + int64(placements[i])
	}
	return ids, nil
}

// citusDebounceDefaults reads what the debounced items take when they do not say (one
// statement on the coordinator, nothing when no item is debounced): their handlers'
// max_attempts (an unknown handler is left out: JobInsert or the check after it refuses
// the batch) and which of their queues are fair.
func citusDebounceDefaults(ctx context.Context, q *dbcitus.Queries, items []JobInsert) (maxAttempts map[string]int,
	fair []string, err error) {
	var names, queues []string
	for i := range items {
		if items[i].Debounce != nil {
			names, queues = append(names, items[i].Handler), append(queues, items[i].Queue)
		}
	}
	if len(names) == 0 {
		return nil, nil, nil
	}
	return citusInsertDefaults(ctx, q, names, queues)
}

// citusInsertDefaults reads the max_attempts of handlers and which of queues are fair
// (InsertDefaults, one statement on the coordinator).
func citusInsertDefaults(ctx context.Context, q *dbcitus.Queries, handlers, queues []string) (maxAttempts map[string]int,
	fair []string, err error) {
	rows, err := q.InsertDefaults(ctx, dbcitus.InsertDefaultsParams{Handlers: handlers, Queues: queues})
	if err != nil {
		return nil, nil, err
	}
	maxAttempts = make(map[string]int, len(rows))
	for _, r := range rows {
		if r.Kind == "fair" {
			fair = append(fair, r.Name)
		} else {
			maxAttempts[r.Name] = r.MaxAttempts
		}
	}
	return maxAttempts, fair, nil
}

// citusClaimIdempotencyKeys claims the idempotency key of each item that names one, for
// the item's id (IdempotencyClaim at the key's placement, the claims sent together). An
// item whose key is held answers the holder (answerByID, toInsert false); a later item
// repeating a key of the batch answers the first item of the key (answerByID -1 - first).
// An item whose live key is held claims nothing and answers that job, as on plain
// PostgreSQL.
func (db *DB) citusClaimIdempotencyKeys(ctx context.Context, tx pgx.Tx, items []JobInsert, placements []int, ids []int64,
	held map[string]int64, opts JobInsertOptions, toInsert []bool, answerByID map[int]int64) error {
	q := dbcitus.New(tx)
	first := map[string]int{}
	var claims []int
	batch := &pgx.Batch{}
	for i := range items {
		it := &items[i]
		if it.IdempotencyKey == nil {
			continue
		}
		if f, ok := first[*it.IdempotencyKey]; ok {
			toInsert[i], answerByID[i] = false, int64(-1-f)
			continue
		}
		first[*it.IdempotencyKey] = i
		if it.Key != nil {
			if h, ok := held[*it.Key]; ok {
				toInsert[i], answerByID[i] = false, h
				continue
			}
		}
		claims = append(claims, i)
		batch.Queue(dbcitus.IdempotencyClaim, *it.IdempotencyKey, PlacementOfKey(*it.IdempotencyKey), ids[i], opts.AsOf,
			opts.IdempotencyWindow.Milliseconds())
	}
	if len(claims) == 0 {
		return nil
	}
	results := tx.SendBatch(ctx, batch)
	var taken []int // items whose idempotency key another job holds
	for _, i := range claims {
		var id int64
		err := results.QueryRow().Scan(&id)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			taken = append(taken, i)
		case err != nil:
			_ = results.Close()
			return err
		}
	}
	if err := results.Close(); err != nil {
		return err
	}
	for _, i := range taken {
		key := *items[i].IdempotencyKey
		id, err := q.IdempotencyHolder(ctx, dbcitus.IdempotencyHolderParams{Placement: PlacementOfKey(key), IdempotencyKey: key, AsOf: opts.AsOf})
		if errors.Is(err, pgx.ErrNoRows) {
			return errCitusInsertRaced // expired between the two statements
		}
		if err != nil {
			return err
		}
		toInsert[i], answerByID[i] = false, id
	}
	return nil
}

// citusDebounce gives each debounce key of the batch its job, with the last item of the
// key (its input, its id and placement, which its own keys decided), and answers every
// item of the key with that job (answerByID); made names the items whose job this insert
// made (the first of their key). A job of a fair queue without a fairness key gets the
// default one (among fair). Nothing is woken: a debounced job waits a period.
//
// A debounce key's one pending job lives at the key's placement unless the job's fairness
// key or concurrency key placed it elsewhere (displaced: docs/citus.md, "Displaced
// keys"), where debounce_holders, at the key's placement, names it. So every debounced
// insert takes its keys' locks and reads their holder rows (one round trip), then, when
// a row names a job or a job would be displaced, the keys' pending jobs (one more); a
// pending job found elsewhere than at the insert's own placement is given the insert
// (JobDebounceHit), and the other keys upsert their job (JobDebounceUpsert, which finds
// a pending job at the insert's placement) and, displaced, write its holder row.
func (db *DB) citusDebounce(ctx context.Context, tx pgx.Tx, items []JobInsert, placements []int, ids []int64,
	maxAttempts map[string]int, fair []string, opts JobInsertOptions, toInsert []bool, answerByID map[int]int64,
	made map[int]bool) error {
	last := map[string]int{}
	firstOf := map[string]int{}
	var keys []string
	for i := range items {
		if d := items[i].Debounce; d != nil {
			toInsert[i] = false
			if _, ok := last[d.Key]; !ok {
				keys = append(keys, d.Key)
				firstOf[d.Key] = i
			}
			last[d.Key] = i
		}
	}
	if len(keys) == 0 {
		return nil
	}
	pending, err := db.citusDebouncePending(ctx, tx, keys, func(key string) int { return placements[last[key]] })
	if err != nil {
		return err
	}
	jobOf := map[string]int64{}
	if len(pending) > 0 {
		batch := &pgx.Batch{}
		var hit []string
		for _, key := range keys {
			if job, ok := pending[key]; ok {
				it := &items[last[key]]
				batch.Queue(dbcitus.JobDebounceHit, debounceInput(it), it.TraceContext, job.placement, opts.AsOf,
					it.Debounce.Period.Milliseconds(), job.id)
				hit = append(hit, key)
			}
		}
		results := tx.SendBatch(ctx, batch)
		for _, key := range hit {
			var id int64
			switch err := results.QueryRow().Scan(&id); {
			case err == nil:
				jobOf[key] = id
			case !errors.Is(err, pgx.ErrNoRows): // (no row: claimed meanwhile, the key is free)
				_ = results.Close()
				return err
			}
		}
		if err := results.Close(); err != nil {
			return err
		}
	}
	// The other keys make their jobs (or meet a pending one at their own placement), and
	// their buckets are minted first, as an insert's (a debounced job's bucket is remote
	// unless it shares the job's placement, where the claim then reads it).
	var upsert []string
	var rated []int
	for _, key := range keys {
		if _, ok := jobOf[key]; !ok {
			upsert, rated = append(upsert, key), append(rated, last[key])
		}
	}
	if len(upsert) > 0 {
		if err := citusMintBuckets(ctx, dbcitus.New(tx), items, rated); err != nil {
			return err
		}
		batch := &pgx.Batch{}
		for _, key := range upsert {
			src := last[key]
			it := &items[src]
			fairnessKey := it.FairnessKey
			if fairnessKey == nil {
				fairnessKey = fairnessDefault(fair, it.Queue)
			}
			batch.Queue(dbcitus.JobDebounceUpsert, ids[src], placements[src], it.Queue, it.Handler, debounceInput(it),
				valueOr(it.Priority, 5), opts.AsOf, it.Debounce.Period.Milliseconds(),
				valueOr(it.MaxAttempts, maxAttempts[it.Handler]), key, it.Debounce.MaxWait.Milliseconds(), it.TraceContext,
				fairnessKey, it.RateLimit, it.RateKey, max(valueOr(it.RateWeight, 1), 1),
				citusRatePlacement(it, placements[src]), extraRateLimitsJSON(it), it.ConcurrencyKey)
		}
		results := tx.SendBatch(ctx, batch)
		var holders dbcitus.DebounceHoldersPutParams
		for _, key := range upsert {
			var id int64
			if err := results.QueryRow().Scan(&id); err != nil {
				_ = results.Close()
				return err
			}
			jobOf[key] = id
			if id == ids[last[key]] {
				made[firstOf[key]] = true
			}
			if at := PlacementOfKey(key); placements[last[key]] != at {
				holders.Placements, holders.Keys, holders.JobIds = append(holders.Placements, at), append(holders.Keys, key),
					append(holders.JobIds, id)
			}
		}
		if err := results.Close(); err != nil {
			return err
		}
		if len(holders.Keys) > 0 {
			if err := dbcitus.New(tx).DebounceHoldersPut(ctx, holders); err != nil {
				return err
			}
		}
	}
	for i := range items {
		if d := items[i].Debounce; d != nil {
			answerByID[i] = jobOf[d.Key]
		}
	}
	return nil
}

// debounceInput is the input a debounced item gives its job ({} when it gives none).
func debounceInput(it *JobInsert) json.RawMessage {
	if len(it.Input) == 0 {
		return json.RawMessage(`{}`)
	}
	return it.Input
}

// citusPendingJob is where a debounce key's pending job lives.
type citusPendingJob struct {
	placement int
	id        int64
}

// citusDebouncePending takes the locks of debounce keys (in tx, on the coordinator, held
// to its end) and answers the pending job of each key that has one where the insert's own
// upsert (at placementOf(key)) would not find it: at the key's placement when the insert's
// job would live elsewhere, or the job the key's holder row names. One round trip (the
// locks and the holder rows), and one more when a row names a job or a key is displaced.
func (db *DB) citusDebouncePending(ctx context.Context, tx pgx.Tx, keys []string,
	placementOf func(key string) int) (map[string]citusPendingJob, error) {
	at := make([]int, len(keys))
	for i, k := range keys {
		at[i] = PlacementOfKey(k)
	}
	batch := &pgx.Batch{}
	batch.Queue(dbcitus.KeysLock, lockDebounceKeys, keys)
	batch.Queue(dbcitus.DebounceHoldersGet, at, keys)
	results := tx.SendBatch(ctx, batch)
	if _, err := results.Exec(); err != nil {
		_ = results.Close()
		return nil, err
	}
	rows, err := results.Query()
	if err != nil {
		_ = results.Close()
		return nil, err
	}
	holderOf, err := pgx.CollectRows(rows, pgx.RowToStructByPos[dbcitus.DebounceHolder])
	if err != nil {
		_ = results.Close()
		return nil, err
	}
	if err := results.Close(); err != nil {
		return nil, err
	}
	l, err := db.layout(ctx)
	if err != nil {
		return nil, err
	}
	// Where to look: each displaced key's own placement, and the placement of each job a
	// holder row names (only a key's own placement answers for it).
	named := map[string]int64{}
	var look dbcitus.DebouncePendingParams
	for i, k := range keys {
		if placementOf(k) != at[i] {
			look.Placements, look.Keys = append(look.Placements, at[i]), append(look.Keys, k)
		}
	}
	for _, h := range holderOf {
		if h.Placement == PlacementOfKey(h.DebounceKey) {
			named[h.DebounceKey] = h.JobID
			look.Placements, look.Keys = append(look.Placements, l.PlacementOfID(h.JobID)), append(look.Keys, h.DebounceKey)
		}
	}
	pending := map[string]citusPendingJob{}
	if len(look.Keys) == 0 {
		return pending, nil
	}
	found, err := dbcitus.New(tx).DebouncePending(ctx, look)
	if err != nil {
		return nil, err
	}
	for _, j := range found {
		atKey := j.Placement == PlacementOfKey(j.DebounceKey)
		if (atKey || named[j.DebounceKey] == j.ID) && j.Placement != placementOf(j.DebounceKey) {
			pending[j.DebounceKey] = citusPendingJob{placement: j.Placement, id: j.ID}
		}
	}
	return pending, nil
}

// citusJobByID reads job id at its placement (JobGet, a router statement).
func (db *DB) citusJobByID(ctx context.Context, q *dbcitus.Queries, id int64) (Job, error) {
	l, err := db.layout(ctx)
	if err != nil {
		return Job{}, err
	}
	r, err := q.JobGet(ctx, dbcitus.JobGetParams{Placement: l.PlacementOfID(id), ID: id})
	if err != nil {
		return Job{}, err
	}
	return citusJob(r.Job), nil
}

// insertProblems names each item's problem as JobInsertProblems sees it (unknown
// handlers, impossible rate limits).
func (db *DB) insertProblems(ctx context.Context, items []JobInsert) ([]InsertProblem, error) {
	p := insertArrays(items)
	rows, err := db.q.JobInsertProblems(ctx, dbsqlc.JobInsertProblemsParams{Handlers: p.Handlers,
		RateLimits: p.RateLimits, RateWeights: p.RateWeights, ExtraRateLimits: p.ExtraRateLimits, Queues: p.Queues})
	if err != nil {
		return nil, translate(err)
	}
	return convertAll(rows, func(r dbsqlc.JobInsertProblemsRow) InsertProblem {
		return InsertProblem{Index: r.Ord, Field: r.Field, Message: r.Message}
	}), nil
}

// citusScheduleFire is ScheduleFire on Citus (sql/citus/schedules.sql), one transaction:
// the compare-and-set on the schedule (a reference table: written on every node), whether
// its latest job is live, and its job for the tick at the schedule's placement; then the
// wake-up on the coordinator.
func (db *DB) citusScheduleFire(ctx context.Context, f ScheduleFire) (ScheduleFired, error) {
	var fired ScheduleFired
	var queue string
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		q := dbcitus.New(tx)
		s, err := q.ScheduleAdvance(ctx, dbcitus.ScheduleAdvanceParams{NextRunAt: f.NextRunAt, Tick: f.Tick, Name: f.Name, DueAt: f.DueAt})
		if err != nil {
			return err
		}
		handlers, err := q.HandlerMaxAttempts(ctx, []string{s.Handler})
		if err != nil {
			return err
		}
		fired.HandlerKnown = len(handlers) == 1
		placement := PlacementOfKey(s.Name)
		if s.Overlap == "skip" {
			if fired.Skipped, err = q.ScheduleLatestLive(ctx, dbcitus.ScheduleLatestLiveParams{Placement: placement, Name: s.Name}); err != nil {
				return err
			}
		}
		if fired.Skipped || !fired.HandlerKnown {
			return nil
		}
		if err := dbsqlc.New(tx).QueueEnsureMany(ctx, []string{s.Queue}); err != nil {
			return err
		}
		rows, err := q.JobInsert(ctx, dbcitus.JobInsertParams{Placements: []int{placement}, Queues: []string{s.Queue},
			Handlers: []string{s.Handler}, Inputs: []string{string(s.Input)}, Keys: []string{""}, Priorities: []int{-1},
			RunAts: []time.Time{{}}, DelaysMs: []int64{0}, ConcurrencyKeys: []string{""}, MaxAttempts: []int{0},
			ParentIds: []int64{0}, ScheduleNames: []string{s.Name}, ScheduleTicks: []time.Time{f.Tick}, Ids: []int64{0},
			TraceContexts: []string{valueOr(f.TraceContext, "")}})
		if err != nil {
			return err
		}
		if len(rows) == 1 {
			fired.JobID, queue = rows[0].ID, rows[0].Queue
		}
		return nil
	})
	if err != nil {
		return ScheduleFired{}, translate(err)
	}
	if queue == "" {
		return fired, nil
	}
	return fired, db.citusNotify(ctx, []citusWake{{queue: queue, placement: PlacementOfKey(f.Name)}})
}

// fairnessDefault is the fairness key of a job of queue that has none: "" when queue is
// among the fair ones, else none.
func fairnessDefault(fair []string, queue string) *string {
	if slices.Contains(fair, queue) {
		return new(string)
	}
	return nil
}
