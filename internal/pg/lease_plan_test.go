package pg_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// Giving leases back (LeaseReleaseMany: the claim's follow-up reads failed;
// LeaseParkMany: the handler's breaker is open) reads the rows given back by primary key,
// however many steps are in flight: with 100 000 executing rows, 50 or 1 000 (a queue's
// largest batch) leases given back read at most 2 × that many rows of jobs in any node,
// over all its loops, and never jobs_lease, in the custom plan and in the generic plan a
// prepared statement ends up with.
//
// The statistics are those of the table before a burst of claims (gathered when nothing
// was executing; autoanalyze waits for 10 % of the table to change): Postgres then
// believes the executing set is tiny. A fence written `status = 'executing' AND
// lease_token = …` lets it read that set through the partial index jobs_lease: it read
// all 100 000 rows and hash-joined them (custom plan) or rescanned the leases once per
// row (generic plan: 5 000 000 rows compared for 50 leases). Fenced by (id, token),
// with `id = ANY (ids)`, only primary-key lookups remain.
//
// Every other lease given back holds a gate slot (the credit runs); the last one of each
// batch is stale and is fenced off. Then the statements are run for real and what they
// wrote is checked.
func TestLeaseGiveBackReadsOnlyItsRows(t *testing.T) {
	if testing.Short() {
		t.Skip("seeds 100 000 executing rows")
	}
	t.Parallel()
	ctx := context.Background()
	// One connection: the SET and PREPARE of customAndGenericPlans belong to it.
	db := pgtest.Open(t, pgtest.NewDatabase(t), pg.Options{MaxConns: 1})
	const inFlight = 100_000
	const stale = "00000000-0000-0000-0000-000000000000"
	for _, sql := range []string{
		`ALTER TABLE jobs SET (autovacuum_enabled = off)`, // the statistics stay those of before the burst
		`INSERT INTO handlers (name, url, secret) VALUES ('h', 'http://example.test/', 'whsec_x')`,
		`INSERT INTO jobs (queue, handler, max_attempts, status, finished_at)
			SELECT 'q', 'h', 5, 'done', now() - i * interval '1 second' FROM generate_series(1, 50000) i`,
		`INSERT INTO jobs (queue, handler, max_attempts, priority, eligible_at)
			SELECT 'q', 'h', 5, (i % 10)::smallint, now() FROM generate_series(1, 120000) i`,
		`VACUUM ANALYZE jobs`,
		// The burst: 100 000 claimed since the statistics were gathered.
		`UPDATE jobs SET status = 'executing', attempt = 1, lease_token = gen_random_uuid(),
				lease_expires_at = now() + interval '30 seconds', lease_owner = 'p', attempted_at = now()
			WHERE id IN (SELECT id FROM jobs WHERE status = 'runnable' ORDER BY id DESC LIMIT 100000)`,
		`INSERT INTO gates (key, "limit", shards) VALUES ('g', 2000, 1)`,
		`INSERT INTO gate_slots (key, shard, available, cap) VALUES ('g', 0, 0, 2000)`,
		`UPDATE jobs SET concurrency_key = 'g', gate_shard = 0 WHERE status = 'executing' AND id % 2 = 0`,
	} {
		if _, err := db.Exec(ctx, sql); err != nil {
			t.Fatalf("%v\n%s", err, sql)
		}
	}
	rows, err := db.QueryStrings(ctx, `SELECT id::text, lease_token::text FROM jobs WHERE status = 'executing' ORDER BY id DESC LIMIT 1000`)
	if err != nil || len(rows) != 1000 {
		t.Fatalf("%d leases (%v)", len(rows), err)
	}
	if n, err := db.QueryInt(ctx, `SELECT count(*) FROM jobs WHERE status = 'executing'`); err != nil || n != inFlight {
		t.Fatalf("%d executing (%v), want %d", n, err, inFlight)
	}
	at := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	array := func(xs []string) string { return "'{" + strings.Join(xs, ",") + "}'" }

	for _, batch := range []int{50, 1000} {
		ids, tokens, ats := make([]int64, batch), make([]string, batch), make([]time.Time, batch)
		idLits, atLits := make([]string, batch), make([]string, batch)
		for i, r := range rows[:batch] {
			id, err := strconv.ParseInt(r[0], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			ids[i], tokens[i], ats[i], idLits[i], atLits[i] = id, r[1], at, r[0], at.Format(time.RFC3339)
		}
		tokens[batch-1] = stale // the last lease is no longer held
		for _, c := range []struct {
			statement, types, literals string
			args                       []any
		}{
			{"LeaseReleaseMany", "bigint[], uuid[]", array(idLits) + ", " + array(tokens), []any{ids, tokens}},
			{"LeaseParkMany", "bigint[], uuid[], timestamptz[]", array(idLits) + ", " + array(tokens) + ", " + array(atLits),
				[]any{ids, tokens, ats}},
		} {
			name := fmt.Sprintf("%s%d", strings.ToLower(c.statement), batch)
			for _, run := range customAndGenericPlans(t, db, pg.Statement(c.statement), name, c.types, c.literals, c.args...) {
				mode := map[bool]string{false: "custom", true: "generic"}[run.generic]
				read := run.plan.MaxRowsRead("jobs")
				most, where := run.plan.LargestRead()
				t.Logf("%s, %s plan, %d leases, %d executing: gave back %.0f; at most %.0f rows of jobs read by a node; largest read %.0f (%s)",
					c.statement, mode, batch, inFlight, run.plan.ActualRows, read, most, where)
				if run.plan.ActualRows != float64(batch-1) {
					t.Errorf("%s, %s plan: %.0f leases given back, want %d (the stale one fenced off):\n%s",
						c.statement, mode, run.plan.ActualRows, batch-1, run.raw)
				}
				if read > float64(2*batch) || most > float64(2*batch) || run.plan.Uses("jobs_lease") || run.plan.HasSeqScan("jobs") {
					t.Errorf("%s, %s plan: %.0f rows of jobs read by a node (largest read %.0f, %s; jobs_lease used: %v) to give back %d leases with %d executing:\n%s",
						c.statement, mode, read, most, where, run.plan.Uses("jobs_lease"), batch, inFlight, run.raw)
				}
			}
		}
	}

	// What the statements write (every EXPLAIN above was rolled back). The four newest
	// leases: two released, two parked, two of the four (the even ids) holding the gate.
	lease := func(i int) (int64, string) {
		id, err := strconv.ParseInt(rows[i][0], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return id, rows[i][1]
	}
	id0, tok0 := lease(0)
	id1, tok1 := lease(1)
	id2, tok2 := lease(2)
	id3, tok3 := lease(3)
	id4, _ := lease(4)
	released, err := db.LeaseReleaseMany(ctx, []pg.Lease{{JobID: id0, Token: tok0}, {JobID: id1, Token: tok1}, {JobID: id4, Token: stale}})
	if err != nil || len(released) != 2 {
		t.Fatalf("released %v (%v), want the two current leases", released, err)
	}
	parked, err := db.LeaseParkMany(ctx, []pg.Park{{ID: id2, Token: tok2, At: at}, {ID: id3, Token: tok3, At: at}, {ID: id4, Token: stale, At: at}})
	if err != nil || len(parked) != 2 {
		t.Fatalf("parked %v (%v), want the two current leases", parked, err)
	}
	got, err := db.QueryStrings(ctx, `SELECT string_agg(concat_ws(':', id, status, attempt, coalesce(lease_owner, '-'), eligible_at = $2), ' ' ORDER BY id DESC)
		FROM jobs WHERE id = ANY ($1)`, []int64{id0, id1, id2, id3, id4}, at)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%d:runnable:0:-:f %d:runnable:0:-:f %d:runnable:0:breaker:h:t %d:runnable:0:breaker:h:t %d:executing:1:p:f",
		id0, id1, id2, id3, id4)
	if got[0][0] != want {
		t.Fatalf("rows after the give-backs:\n%s, want\n%s", got[0][0], want)
	}
	if n, err := db.QueryInt(ctx, `SELECT available FROM gate_slots WHERE key = 'g'`); err != nil || n != 2 {
		t.Fatalf("gate slots available: %d (%v), want the 2 the gated leases given back held", n, err)
	}
}
