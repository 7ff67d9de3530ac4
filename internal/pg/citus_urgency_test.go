package pg_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// Priorities across shards on Citus (docs/citus.md, "Dispatch per shard"): a job inserted
// at a better priority than another shard's backlog is claimed by the next claim of every
// process that heard its wake-up, though that process's claims were draining the backlog
// of another shard. Process A inserts; process B listens and claims.
func TestCitusAnUrgentJobIsClaimedBeforeAnotherShardsBacklog(t *testing.T) {
	citusOnly(t)
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	a := pgtest.Open(t, url, pg.Options{})
	if _, err := a.HandlerUpsert(ctx, pg.HandlerUpsert{Name: "h", URL: "http://127.0.0.1:1/"}); err != nil {
		t.Fatal(err)
	}
	for range 6 { // each batch on the next shard
		backlog := make([]pg.JobInsert, 20)
		for i := range backlog {
			backlog[i] = pg.JobInsert{Queue: "q", Handler: "h"}
		}
		if _, err := a.JobInsertMany(ctx, backlog); err != nil {
			t.Fatal(err)
		}
	}

	b := pgtest.Open(t, url, pg.Options{})
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	heard := make(chan string, 100)
	go b.Listen(lctx, pg.JobsChannel, func(payload string) { heard <- payload }, nil)
	for p := range heard { // the first call, at LISTEN
		if p == "" {
			break
		}
	}
	claim := func(db *pg.DB) []pg.ClaimedJob {
		t.Helper()
		claimed, err := db.JobClaimBatch(ctx, pg.JobClaimParams{Queue: "q", Limit: 5, LeaseTTL: time.Minute, Owner: "b", SignalCap: 100})
		if err != nil || len(claimed) != 5 {
			t.Fatalf("a claim of 5: %d (%v)", len(claimed), err)
		}
		return claimed
	}
	shardOf := func(id int64) int64 {
		t.Helper()
		s, err := a.QueryInt(ctx, `SELECT get_shard_id_for_distribution_column('jobs', $1::int)`, id%pg.Placements)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	draining := shardOf(claim(b)[0].ID) // B's claims stay on this shard while it has work

	// Urgent jobs, one a batch, until one lives away from the shard B drains.
	var urgent []int64
	for len(urgent) == 0 || shardOf(urgent[len(urgent)-1]) == draining {
		if len(urgent) == 4 {
			t.Fatal("4 urgent jobs in a row landed on the shard being drained")
		}
		made, err := a.JobInsertMany(ctx, []pg.JobInsert{{Queue: "q", Handler: "h", Priority: intp(0)}})
		if err != nil {
			t.Fatal(err)
		}
		urgent = append(urgent, made[0].ID)
	}
	for said := 0; said < len(urgent); {
		select {
		case p := <-heard:
			if strings.HasPrefix(p, "q") {
				said++
			}
		case <-time.After(30 * time.Second):
			t.Fatal("B did not hear the urgent jobs' wake-ups")
		}
	}

	claimed := claim(b)
	var ids []int64
	for _, c := range claimed {
		ids = append(ids, c.ID)
	}
	for _, u := range urgent {
		if !slices.Contains(ids, u) {
			t.Fatalf("B's claim after the wake-ups took %v, without urgent job %d (urgent: %v)", ids, u, urgent)
		}
	}
	// Then B goes on with the backlog.
	for _, c := range claim(b) {
		if slices.Contains(urgent, c.ID) {
			t.Fatalf("urgent job %d claimed twice", c.ID)
		}
	}
}
