package pg_test

import (
	"context"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// A shard's statements (claims, outcomes, heartbeats) go to the worker that holds it, past
// the coordinator: the server keeps a pool on each worker (CitusWorkersReached), and the
// workers see its connections (application_name gendurable; the coordinator's own are
// citus_internal). By default (CitusRouteWorkers) they name the distributed tables,
// planned by Citus on the worker; with CitusRouteShards the shard's own tables; with
// CitusRouteCoordinator every statement goes to the coordinator. The same steps run.
func TestCitusShardStatementsGoToTheirWorker(t *testing.T) {
	t.Parallel()
	citusOnly(t)
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	direct := pgtest.Open(t, url, pg.Options{CitusRoute: pg.CitusRouteShards})
	viaWorkers := pgtest.Open(t, url, pg.Options{})
	viaCoordinator := pgtest.Open(t, url, pg.Options{CitusRoute: pg.CitusRouteCoordinator})
	if _, err := direct.HandlerUpsert(ctx, pg.HandlerUpsert{Name: "h", URL: "http://example.test/", NewSecret: "whsec_x"}); err != nil {
		t.Fatal(err)
	}
	name, err := direct.QueryStrings(ctx, `SELECT current_database()`)
	if err != nil {
		t.Fatal(err)
	}
	cluster := pgtest.CitusCluster()
	serverConnsOn := func(node int) int64 {
		t.Helper()
		w := pgtest.Open(t, cluster.Nodes[node].TCPURL(name[0][0]), pg.Options{MaxConns: 1, CitusRoute: pg.CitusRouteCoordinator})
		n, err := w.QueryInt(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'gendurable' AND pid <> pg_backend_pid()`)
		if err != nil {
			t.Fatal(err)
		}
		w.Close()
		return n
	}
	drain := func(db *pg.DB) {
		t.Helper()
		for range 64 { // one job a call: each call lands on the next shard
			if _, err := db.JobInsertMany(ctx, []pg.JobInsert{{Queue: "q", Handler: "h"}}); err != nil {
				t.Fatal(err)
			}
		}
		claimed, err := db.JobClaimBatch(ctx, pg.JobClaimParams{Queue: "q", Limit: 128, LeaseTTL: time.Minute, Owner: "t", SignalCap: 100})
		if err != nil || len(claimed) != 64 {
			t.Fatalf("claimed %d (%v), want 64", len(claimed), err)
		}
		leases := make([]pg.Lease, len(claimed))
		recs := make([]pg.OutcomeRecord, len(claimed))
		ok := 200
		for i, c := range claimed {
			leases[i] = pg.Lease{JobID: c.ID, Token: c.LeaseToken}
			recs[i] = pg.OutcomeRecord{ID: c.ID, Token: c.LeaseToken, Kind: pg.KindDone, Label: "done", Attempt: 1, HTTPStatus: &ok}
		}
		if extended, err := db.LeaseExtendMany(ctx, leases, time.Minute); err != nil || len(extended) != 64 {
			t.Fatalf("heartbeat: %d extended (%v), want 64", len(extended), err)
		}
		applied, err := db.JobApplyOutcomes(ctx, recs, false)
		if err != nil || len(applied) != 64 {
			t.Fatalf("outcomes: %d applied (%v), want 64", len(applied), err)
		}
	}

	for route, db := range map[string]*pg.DB{"shard tables": direct, "worker": viaWorkers} {
		drain(db)
		if reached, workers, err := db.CitusWorkersReached(ctx); err != nil || reached != 2 || workers != 2 {
			t.Fatalf("routed to workers (%s): %d of %d reached (%v), want 2 of 2", route, reached, workers, err)
		}
		if kind, err := db.CitusShardQuerier(ctx, 0); err != nil || kind != route {
			t.Fatalf("shard 0's statements run on %q (%v), want %q", kind, err, route)
		}
	}
	for _, node := range []int{1, 2} {
		if n := serverConnsOn(node); n == 0 {
			t.Fatalf("worker %d has no connection of the server: its shards' statements did not go to it", node)
		}
	}

	drain(viaCoordinator)
	if kind, err := viaCoordinator.CitusShardQuerier(ctx, 0); err != nil || kind != "coordinator" {
		t.Fatalf("shard 0's statements run on %q (%v), want the coordinator", kind, err)
	}
	if reached, workers, err := viaCoordinator.CitusWorkersReached(ctx); err != nil || reached != 0 || workers != 2 {
		t.Fatalf("routed through the coordinator: %d of %d reached (%v), want 0 of 2", reached, workers, err)
	}
	if done, err := direct.QueryInt(ctx, `SELECT count(*) FROM jobs WHERE status = 'done'`); err != nil || done != 192 {
		t.Fatalf("%d jobs done (%v), want 192", done, err)
	}
}
