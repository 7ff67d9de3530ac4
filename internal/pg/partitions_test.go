package pg_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// Migration 0011 on a database whose steps table holds rows: the rows become the
// partition steps_legacy untouched (same count, same ids), ids go on past the old ones,
// a job's history reads as before, and new rows go to the DEFAULT partition until the
// server makes partitions (which takes them over).
// schemaBefore takes db back to the schema just before migration version, from the
// migration files themselves, and returns that migration (not applied).
func schemaBefore(t *testing.T, db *pg.DB, version int) pg.Migration {
	t.Helper()
	ctx := context.Background()
	all, err := pg.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `DROP SCHEMA public CASCADE; CREATE SCHEMA public`); err != nil {
		t.Fatal(err)
	}
	for _, m := range all {
		if m.Version == version {
			return m
		}
		if _, err := db.Exec(ctx, m.SQL); err != nil {
			t.Fatalf("%s: %v", m.Name, err)
		}
	}
	t.Fatalf("no migration %04d", version)
	return pg.Migration{}
}

func TestMigrationPartitionsAPopulatedHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	partitioning := schemaBefore(t, db, 11)
	if _, err := db.Exec(ctx, `INSERT INTO handlers (name, url, secret) VALUES ('h', 'http://example.test/', 'whsec_x')`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `INSERT INTO jobs (queue, handler, max_attempts, status, finished_at, created_at)
		SELECT 'q', 'h', 5, 'done', now() - i * interval '1 minute', now() - interval '30 days' FROM generate_series(1, 1000) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `INSERT INTO steps (job_id, queue, step, attempt, outcome, started_at, finished_at)
		SELECT j.id, j.queue, s, 1, 'next', j.finished_at - (11 - s) * interval '1 second', j.finished_at - (10 - s) * interval '1 second'
		FROM jobs j CROSS JOIN generate_series(1, 10) s`); err != nil {
		t.Fatal(err)
	}
	// (Read by hand: StepList reads columns of later migrations.)
	const history = `SELECT id::text, finished_at::text FROM steps WHERE job_id = 500 ORDER BY id`
	before, err := db.QueryStrings(ctx, history)
	if err != nil || len(before) != 10 {
		t.Fatalf("before: %d steps (%v)", len(before), err)
	}
	maxID, err := db.QueryInt(ctx, `SELECT max(id) FROM steps`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `BEGIN; `+partitioning.SQL+`; COMMIT`); err != nil {
		t.Fatalf("0011 on a populated database: %v", err)
	}
	if n, err := db.QueryInt(ctx, `SELECT count(*) FROM steps_legacy`); err != nil || n != 10000 {
		t.Fatalf("steps_legacy holds %d rows (%v)", n, err)
	}
	// The migrations after 0011 apply to the populated, partitioned history too.
	all, err := pg.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range all {
		if m.Version > 11 {
			if _, err := db.Exec(ctx, m.SQL); err != nil {
				t.Fatalf("%s after 0011: %v", m.Name, err)
			}
		}
	}
	after, err := db.QueryStrings(ctx, history)
	if err != nil || len(after) != len(before) {
		t.Fatalf("after: %d steps (%v)", len(after), err)
	}
	for i := range after {
		if after[i][0] != before[i][0] || after[i][1] != before[i][1] {
			t.Fatalf("step %d changed: %v, was %v", i, after[i], before[i])
		}
	}
	if listed, err := db.StepList(ctx, 500, 100); err != nil || len(listed) != len(before) {
		t.Fatalf("StepList after: %d steps (%v)", len(listed), err)
	}
	parts, err := db.StepPartitionList(ctx)
	if err != nil || len(parts) != 2 || !parts[0].Default || parts[1].Name != "steps_legacy" || !parts[1].From.IsZero() {
		t.Fatalf("partitions %+v (%v)", parts, err)
	}
	if _, err := db.Exec(ctx, `INSERT INTO steps (job_id, queue, step, attempt, outcome, started_at, finished_at)
		VALUES (500, 'q', 11, 1, 'done', now(), now())`); err != nil {
		t.Fatal(err)
	}
	if id, err := db.QueryInt(ctx, `SELECT id FROM steps_default WHERE job_id = 500`); err != nil || id <= maxID {
		t.Fatalf("the new row's id %d is not past the old ones' %d (%v)", id, maxID, err)
	}
	now, err := db.DatabaseNow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	moved, err := db.StepPartitionCreate(ctx, parts[1].To, now.Add(time.Hour), time.Second)
	if err != nil || moved != 1 {
		t.Fatalf("moved %d (%v)", moved, err)
	}
	// The legacy partition holds rows of kept jobs: it stays.
	if dropped, err := db.StepPartitionDrop(ctx, "steps_legacy", time.Second); err != nil || dropped {
		t.Fatalf("dropped %v (%v)", dropped, err)
	}
	if _, err := db.StepPartitionDrop(ctx, "steps_default", time.Second); !errors.Is(err, pg.ErrInvalid) {
		t.Fatalf("the DEFAULT partition: %v", err)
	}
	// (The migrations after 0011 ran above.) Every statement prepares.
	if err := db.CheckStatements(ctx); err != nil {
		t.Fatal(err)
	}
}

// On a fresh database the migration leaves no legacy partition: only the DEFAULT one.
func TestMigrationPartitionsAnEmptyHistory(t *testing.T) {
	t.Parallel()
	parts, err := pgtest.NewDB(t).StepPartitionList(context.Background())
	if err != nil || len(parts) != 1 || !parts[0].Default || parts[0].Name != "steps_default" {
		t.Fatalf("partitions %+v (%v)", parts, err)
	}
}

// A partition drop waits at most its lock timeout behind a reader of steps, then reports
// ErrPartitionBusy and changes nothing.
func TestStepPartitionDropGivesWayToALongReader(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	db := pgtest.Open(t, url, pg.Options{})
	now, err := db.DatabaseNow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	old := now.Add(-48 * time.Hour).Truncate(time.Hour)
	if _, err := db.StepPartitionCreate(ctx, old, old.Add(time.Hour), time.Second); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	reader, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Rollback(ctx) //nolint:errcheck
	if _, err := reader.Exec(ctx, `SELECT count(*) FROM steps`); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if _, err := db.StepPartitionDrop(ctx, pg.StepPartitionName(old), 100*time.Millisecond); !errors.Is(err, pg.ErrPartitionBusy) {
		t.Fatalf("drop behind a reader: %v", err)
	}
	t.Logf("gave way after %s", time.Since(began))
	if err := reader.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if dropped, err := db.StepPartitionDrop(ctx, pg.StepPartitionName(old), time.Second); err != nil || !dropped {
		t.Fatalf("dropped %v (%v)", dropped, err)
	}
}

// The outcome statement's history row goes to one partition without reading any: with 48
// partitions and the DEFAULT, its plan scans no partition of steps. It logs what a batch of
// 50 outcomes costs per step against the unpartitioned table of before migration 0011.
func TestOutcomeHistoryInsertIntoPartitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	perStep := map[string]time.Duration{}
	for _, layout := range []string{"unpartitioned", "partitioned"} {
		db := pgtest.NewDB(t)
		if layout == "unpartitioned" {
			if _, err := db.Exec(ctx, `DROP TABLE steps; CREATE TABLE steps (
				job_id bigint NOT NULL, id bigint GENERATED ALWAYS AS IDENTITY, step integer NOT NULL,
				attempt integer NOT NULL, outcome text NOT NULL, http_status integer,
				started_at timestamptz NOT NULL, finished_at timestamptz NOT NULL, error jsonb, queue text, handler text,
				bodies jsonb, PRIMARY KEY (job_id, id))`); err != nil {
				t.Fatal(err)
			}
		} else {
			now, err := db.DatabaseNow(ctx)
			if err != nil {
				t.Fatal(err)
			}
			from := now.Add(-24 * time.Hour).Truncate(time.Hour)
			for h := range 48 {
				if _, err := db.StepPartitionCreate(ctx, from.Add(time.Duration(h)*time.Hour), from.Add(time.Duration(h+1)*time.Hour), time.Second); err != nil {
					t.Fatal(err)
				}
			}
		}
		const batches, batch = 20, 50
		seedJobs(t, db, "q", batches*batch+batch, "")
		apply := func(explain bool) time.Duration {
			claimed, err := db.JobClaimBatch(ctx, pg.JobClaimParams{Queue: "q", Limit: batch, LeaseTTL: time.Minute, Owner: "t", SignalCap: 10})
			if err != nil || len(claimed) != batch {
				t.Fatalf("claimed %d (%v)", len(claimed), err)
			}
			recs := make([]pg.OutcomeRecord, len(claimed))
			for i, c := range claimed {
				recs[i] = pg.OutcomeRecord{ID: c.ID, Token: c.LeaseToken, Kind: pg.KindNext, Label: "next"}
			}
			if explain {
				raw, err := db.ExplainAnalyze(ctx, pg.Statement("JobApplyOutcomes"), pg.OutcomeArgs(recs)...)
				if err != nil {
					t.Fatal(err)
				}
				plan, _ := pgtest.ParsePlan(raw)
				plan.Walk(func(n pgtest.PlanNode) {
					if strings.HasPrefix(n.RelationName, "steps") && strings.Contains(n.NodeType, "Scan") {
						t.Fatalf("%s: the outcome statement scans %s:\n%s", layout, n.RelationName, raw)
					}
				})
			}
			began := time.Now()
			if _, err := db.JobApplyOutcomes(ctx, recs, false); err != nil {
				t.Fatal(err)
			}
			return time.Since(began)
		}
		apply(true) // warm: plans cached, the explain checked
		var total time.Duration
		for range batches {
			total += apply(false)
		}
		perStep[layout] = total / (batches * batch)
		if n, err := db.QueryInt(ctx, `SELECT count(*) FROM steps`); err != nil || n != (batches+1)*batch {
			t.Fatalf("%s: %d history rows (%v)", layout, n, err)
		}
	}
	t.Logf("JobApplyOutcomes, batches of 50 next outcomes: %s a step unpartitioned, %s with 48 partitions + DEFAULT",
		perStep["unpartitioned"], perStep["partitioned"])
}

// A job's history is read from the partitions since the job was created only: the older
// ones are pruned at run time (the job's created_at is an initplan's value).
func TestStepListReadsThePartitionsSinceTheJobOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	now, err := db.DatabaseNow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	day := 24 * time.Hour
	today := now.UTC().Truncate(day)
	for d := -10; d < 2; d++ {
		if _, err := db.StepPartitionCreate(ctx, today.Add(time.Duration(d)*day), today.Add(time.Duration(d+1)*day), time.Second); err != nil {
			t.Fatal(err)
		}
	}
	seedJobs(t, db, "q", 1, "")
	if _, err := db.Exec(ctx, `INSERT INTO steps (job_id, step, attempt, outcome, started_at, finished_at)
		SELECT 1, 0, 1, 'next', now(), now() UNION ALL
		SELECT 2, 0, 1, 'next', now() - d * interval '1 day', now() - d * interval '1 day' FROM generate_series(1, 9) d`); err != nil {
		t.Fatal(err)
	}
	raw, err := db.ExplainAnalyze(ctx, pg.Statement("StepList"), int64(1), 100)
	if err != nil {
		t.Fatal(err)
	}
	plan, _ := pgtest.ParsePlan(raw)
	var read []string
	plan.Walk(func(n pgtest.PlanNode) {
		if strings.HasPrefix(n.RelationName, "steps") && strings.Contains(n.NodeType, "Scan") && n.ActualLoops > 0 {
			read = append(read, n.RelationName)
		}
	})
	// Today's and tomorrow's partitions, and the DEFAULT (it has no range to prune by).
	if len(read) > 3 {
		t.Fatalf("StepList read %d partitions for a job created today: %v\n%s", len(read), read, raw)
	}
	t.Logf("StepList read %v of 12 partitions and the DEFAULT", read)
	steps, err := db.StepList(ctx, 1, 100)
	if err != nil || len(steps) != 1 {
		t.Fatalf("steps %+v (%v)", steps, err)
	}
}

// Two processes that both listed the partitions before either made the next one: the
// second to take the lock finds it made and does nothing (it once failed with "relation
// already exists", logged as an error by every process but the first at start).
func TestStepPartitionCreateTwiceIsDoneOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	now, err := db.DatabaseNow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	from := now.Add(30 * 24 * time.Hour).Truncate(24 * time.Hour)
	errs := make(chan error, 8)
	for range cap(errs) {
		go func() {
			for {
				_, err := db.StepPartitionCreate(ctx, from, from.Add(24*time.Hour), 5*time.Second)
				if errors.Is(err, pg.ErrPartitionBusy) {
					continue // the lock is taken: the service tries again on its next pass
				}
				errs <- err
				return
			}
		}()
	}
	for range cap(errs) {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	parts, err := db.StepPartitionList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	made := 0
	for _, p := range parts {
		if p.Name == pg.StepPartitionName(from) {
			made++
		}
	}
	if made != 1 {
		t.Fatalf("%d partitions named %s: %+v", made, pg.StepPartitionName(from), parts)
	}
}
