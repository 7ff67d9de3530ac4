package pg

// OutcomeArgs are the positional arguments of JobApplyOutcomes for recs, in the order of
// its $n (the order sqlc's generated method passes them), for tests that EXPLAIN it.
func OutcomeArgs(recs []OutcomeRecord) []any {
	p, err := outcomeArrays(recs)
	if err != nil {
		panic(err)
	}
	return []any{p.Ids, p.Tokens, p.Kinds, p.Labels, p.States, p.Results, p.Errors, p.DelaysMs, p.TimeoutsMs,
		p.Awaitings, p.Children, p.HttpStatuses}
}

// InsertArgs are the positional arguments of JobInsertMany for items, in its $n order.
func InsertArgs(items []JobInsert) []any {
	p := insertArrays(items)
	return []any{p.Queues, p.Handlers, p.Inputs, p.Keys, p.Priorities, p.RunAts, p.DelaysMs, p.ConcurrencyKeys,
		p.RateLimits, p.RateKeys, p.RateWeights, p.MaxAttempts, p.ParentIds}
}

// StatementNames lists the statements of the table.
func StatementNames() []string {
	var names []string
	for name := range statements {
		names = append(names, name)
	}
	return names
}
