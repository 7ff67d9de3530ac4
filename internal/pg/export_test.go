package pg

import "encoding/json"

// OutcomeArgs are the arguments of JobApplyOutcomes for recs, for tests that EXPLAIN it.
func OutcomeArgs(recs []OutcomeRecord) []any {
	b, err := json.Marshal(recs)
	if err != nil {
		panic(err)
	}
	return []any{b}
}

// InsertArgs are the positional arguments of JobInsertMany for items, in its $n order.
func InsertArgs(items []JobInsert) []any {
	p := insertArrays(items)
	return []any{p.Queues, p.Handlers, p.Inputs, p.Keys, p.Priorities, p.RunAts, p.DelaysMs, p.ConcurrencyKeys,
		p.RateLimits, p.RateKeys, p.RateWeights, p.MaxAttempts, p.ParentIds, p.IdempotencyKeys, p.ExtraRateLimits, p.DebounceKeys, p.DebouncePeriodsMs, p.DebounceMaxWaitsMs,
		p.AsOf, int64(DefaultIdempotencyWindow.Milliseconds())}
}

// StatementNames lists the statements of the table.
func StatementNames() []string {
	var names []string
	for name := range statements {
		names = append(names, name)
	}
	return names
}
