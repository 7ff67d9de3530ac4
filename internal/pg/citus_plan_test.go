package pg_test

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/dbcitus"
	"github.com/gendurable/gendurable/internal/pg/dbsqlc"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// Every statement of the step path and of the API's reads and writes by id is a router
// query on Citus: Citus sends it whole to the one shard it names (EXPLAIN: "Task Count:
// 1"), under custom and generic plans (Citus prunes a parameter's shard at execution).
// The few that may not are listed with what bounds them: the batch insert (evaluated on
// the coordinator, each row copied to its shard, bounded by the batch), and the fan-outs
// (the ready probe, a page of the jobs list, the queue counts, the reaper's probes, the
// probes of what a family spread over shards owes), each task bounded. A spawn's remote
// children (JobInsertRemoteChildren) are inserted as the batch insert is, through the
// coordinator, bounded by the spawn.
func TestCitusHotStatementsAreRouterQueries(t *testing.T) {
	t.Parallel()
	citusOnly(t)
	db := pgtest.NewDB(t)
	ctx := context.Background()
	placements, err := pg.CitusShardPlacements(ctx, db, 0)
	if err != nil {
		t.Fatal(err)
	}
	p := placements[0]
	shards, err := db.QueryInt(ctx, `SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = 'jobs'::regclass`)
	if err != nil {
		t.Fatal(err)
	}
	ids := []int64{int64(1024 + p)}
	var none *time.Time
	// The statements of one shard (the step path), then the API's by id and the bulk ones.
	router := append(citusShardStatements(placements), []citusStatement{
		{"SignalDeliver", dbcitus.SignalDeliver, []any{p, ids[0], nil, "go", nil}},
		{"SignalDeliver by key", dbcitus.SignalDeliver, []any{pg.PlacementOfKey("user-7"), nil, "user-7", "go", nil}},
		{"SignalInsert", dbcitus.SignalInsert, []any{ids[0], int64(1), "go", nil, p, nil}},
		{"SignalLoadInboxes", dbcitus.SignalLoadInboxes, []any{ids, []int64{0}, []int64{5}, placements}},
		{"SignalList", dbcitus.SignalList, []any{p, ids[0], 100}},
		{"JobGet", dbcitus.JobGet, []any{p, ids[0]}},
		{"JobGetLiveByKey", dbcitus.JobGetLiveByKey, []any{pg.PlacementOfKey("user-7"), "user-7"}},
		{"ChildLoadForJoin", dbcitus.ChildLoadForJoin, []any{placements, ids, 50}},
		{"StepList", dbcitus.StepList, []any{p, ids[0], 100}},
		{"JobCancel", dbcitus.JobCancel, []any{p, ids[0]}},
		{"JobRetry", dbcitus.JobRetry, []any{p, ids[0]}},
		// bulk by filter: one router statement per shard, sent in turn (citusBulk)
		{"JobCancelMany", dbcitus.JobCancelMany, []any{100, placements, nil, "default", nil, none, none, nil}},
		{"JobRetryManyKeys", dbcitus.JobRetryManyKeys, []any{placements, nil, "default", nil, none, none, nil, []string{"user-8"}, 100}},
		{"JobRetryMany", dbcitus.JobRetryMany, []any{placements, nil, "default", nil, none, none, nil, []string{"user-7"}, 100}},
		// a key's two holders, at the key's placement, and the job a holder row names
		{"KeysLive", dbcitus.KeysLive, []any{[]int{pg.PlacementOfKey("user-7")}, []string{"user-7"}}},
		{"KeyHoldersGet", dbcitus.KeyHoldersGet, []any{[]int{pg.PlacementOfKey("user-7")}, []string{"user-7"}}},
		{"JobsLiveByID", dbcitus.JobsLiveByID, []any{[]int{p}, ids}},
		{"JobKey", dbcitus.JobKey, []any{p, ids[0]}},
		// a debounce key's holder row, its pending job at one placement, and the insert
		// given to it (displaced debounce keys)
		{"DebounceHoldersGet", dbcitus.DebounceHoldersGet, []any{[]int{pg.PlacementOfKey("sync-7")}, []string{"sync-7"}}},
		{"DebouncePending", dbcitus.DebouncePending, []any{[]int{p}, []string{"sync-7"}}},
		{"JobDebounceHit", dbcitus.JobDebounceHit, []any{[]byte(`{}`), nil, p, none, int64(1000), ids[0]}},
		// a child away from its parent: its stub at the parent's shard, and the reaper's
		// turn carrying its end, its revival and a cancel between the two shards
		{"RemoteChildStubsInsert", pg.CitusWithPlacements(dbcitus.RemoteChildStubsInsert, 6, placements),
			[]any{ids, []string{"00000000-0000-0000-0000-000000000001"}, []int64{2048 + 7}, []string{"h"}, []string{""}}},
		{"RemoteChildStubsMade", pg.CitusWithPlacements(dbcitus.RemoteChildStubsMade, 2, placements), []any{[]int64{2048 + 7}}},
		{"RemoteChildTurnsTake", dbcitus.RemoteChildTurnsTake, []any{placements, 100}},
		{"RemoteChildrenEnd", dbcitus.RemoteChildrenEnd, []any{ids, []int64{2048 + 7}, []string{"done"}, []string{"{}"}, []string{""}, placements}},
		{"RemoteChildrenRelive", dbcitus.RemoteChildrenRelive, []any{ids, []int64{2048 + 7}, placements}},
		{"RemoteChildCancelsList", dbcitus.RemoteChildCancelsList, []any{placements, 100}},
		{"RemoteChildCancelsClear", dbcitus.RemoteChildCancelsClear, []any{placements, ids, []int64{2048 + 7}}},
		{"JobReplay", dbcitus.JobReplay, []any{p, ids[0], 0, nil}},
	}...)
	tasks := regexp.MustCompile(`Task Count: (\d+)`)
	explain := func(sql string, args []any) (string, error) {
		rows, err := db.QueryStrings(ctx, "EXPLAIN "+sql, args...)
		out := ""
		for _, r := range rows {
			out += r[0] + "\n"
		}
		return out, err
	}
	for _, s := range router {
		for run := 0; run < 7; run++ { // past the custom plans of a prepared statement
			plan, err := explain(s.sql, s.args)
			if err != nil {
				t.Fatalf("%s: %v", s.name, err)
			}
			m := tasks.FindAllStringSubmatch(plan, -1)
			if len(m) != 1 || m[0][1] != "1" {
				t.Fatalf("%s is not a single-task router query (run %d):\n%s", s.name, run, plan)
			}
		}
	}
	// The listed exceptions, and what bounds them. The batch insert is evaluated on the
	// coordinator, which copies each row to its shard (Citus plans it at execution: EXPLAIN
	// of it with parameters answers "could not create distributed plan"): a batch of keyed
	// jobs lands each at its key's placement.
	if _, err := db.HandlerUpsert(ctx, pg.HandlerUpsert{Name: "h", URL: "http://127.0.0.1:9/"}); err != nil {
		t.Fatal(err)
	}
	keys := []string{"user-1", "user-2", "user-3", "user-4"}
	var items []pg.JobInsert
	for i := range keys {
		items = append(items, pg.JobInsert{Queue: "default", Handler: "h", Key: &keys[i]})
	}
	inserted, err := db.JobInsertMany(ctx, items)
	if err != nil {
		t.Fatal(err)
	}
	for i, j := range inserted {
		if got, want := int(j.ID%pg.Placements), pg.PlacementOfKey(keys[i]); got != want {
			t.Fatalf("job %d of key %s: placement %d (from its id), want the key's %d", j.ID, keys[i], got, want)
		}
		n, err := db.QueryInt(ctx, `SELECT count(*) FROM jobs WHERE placement = $1 AND id = $2`, pg.PlacementOfKey(keys[i]), j.ID)
		if err != nil || n != 1 {
			t.Fatalf("job %d is not at its key's placement (%d rows, %v)", j.ID, n, err)
		}
	}
	// The fan-outs, one task per shard, and what bounds each task: the ready probe stops
	// at its first due entry; a page of the jobs list takes at most its limit from each
	// shard (the LIMIT pushed into every task, the coordinator merging them newest first);
	// the queue counts are grouped on each shard (a row per status comes back from each);
	// the reaper's probes take at most a sweep's batch from each shard.
	limit := 50
	fanOuts := []struct {
		name, sql string
		args      []any
		bound     *regexp.Regexp // in the plan of the task shown
	}{
		{"JobReadyExists", dbcitus.JobReadyExists, []any{"default"}, regexp.MustCompile(`Limit|Result`)},
		{"JobList", dbsqlc.JobList, []any{"default", nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, limit}, regexp.MustCompile(`->\s+Limit`)},
		{"QueueCounts", dbsqlc.QueueCounts, []any{"default"}, regexp.MustCompile(`Aggregate`)},
		// the reaper's probes: each task stops at the sweep's batch
		{"JobExpiredLeasePlacements", dbcitus.JobExpiredLeasePlacements, []any{none, 100}, regexp.MustCompile(`->\s+Limit`)},
		{"JobDueAwaitPlacements", dbcitus.JobDueAwaitPlacements, []any{none, 100}, regexp.MustCompile(`->\s+Limit`)},
		{"RemoteChildWorkPlacements", dbcitus.RemoteChildWorkPlacements, []any{100}, regexp.MustCompile(`->\s+Limit`)},
		{"RemoteChildCancelPlacements", dbcitus.RemoteChildCancelPlacements, []any{100}, regexp.MustCompile(`->\s+Limit`)},
		// a page of a fair queue's keys (the dashboard): each task counts the queue's live
		// keyed jobs by key, an aggregate over index entries, merged on the coordinator
		{"FairnessKeyList", dbcitus.FairnessKeyList, []any{"default", "", nil, limit}, regexp.MustCompile(`Aggregate`)},
		{"FairnessKeyTop", dbcitus.FairnessKeyTop, []any{"default", "", limit}, regexp.MustCompile(`Aggregate`)},
	}
	for _, f := range fanOuts {
		plan, err := explain(f.sql, f.args)
		if m := tasks.FindStringSubmatch(plan); err != nil || m == nil || m[1] != strconv.FormatInt(shards, 10) {
			t.Fatalf("%s: want one task per shard (%d) (%v):\n%s", f.name, shards, err, plan)
		}
		if task := plan[strings.Index(plan, "Task Count"):]; !f.bound.MatchString(task) {
			t.Fatalf("%s: its tasks are not bounded (%s):\n%s", f.name, f.bound, plan)
		}
	}
}
