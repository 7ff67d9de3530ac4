// Command historygc measures the GC of the step history at scale, before and after its
// partitioning (migration 0011), on a PostgreSQL of its own (durable: fsync and full-page
// writes on, so the WAL is what production writes; autovacuum off, so the dead tuples a
// GC leaves are counted and their VACUUM is timed as part of its cost).
//
// Each layout gets its own database with -rows history rows over -days days (-steps rows
// a job, every job finished), loaded with generate_series. Then, while a writer keeps
// inserting history rows (-insert-batch per statement, as the outcome statement does),
// the GC removes everything past -retention:
//
//   - before: as on main, JobGCSelect then a JobGCDelete that deletes each batch's steps
//     by job_id with its jobs, 1 000 jobs a batch; then VACUUM of steps (the cost the
//     deletes leave behind);
//   - after: the same job batches without steps, then one HistoryPartitions pass that
//     drops the partitions past retention.
//
// It reports wall time, WAL bytes (pg_current_wal_lsn difference over the GC, so with the
// writer's rows in it unless -insert-batch 0), table + index size of steps before and
// after, dead tuples, and the concurrent writer's rows and latencies.
//
//	flock /tmp/gendurable-heavy.lock go run ./bench/historygc            # 10 000 000 rows
//	go run ./bench/historygc -rows 1000000                                # a quicker look
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/pg"
)

// gcDeleteOnMain is JobGCDelete as it was before migration 0011: the steps of each batch
// deleted by job_id in the same statement as the jobs.
const gcDeleteOnMain = `
WITH steps_deleted AS (
    DELETE FROM steps WHERE job_id = ANY ($1::bigint[])
),
signals_deleted AS (
    DELETE FROM signals WHERE job_id = ANY ($1::bigint[])
),
keys_deleted AS (
    DELETE FROM idempotency_keys WHERE job_id = ANY ($1::bigint[])
)
DELETE FROM jobs
WHERE id = ANY ($1::bigint[]) AND status IN ('done', 'failed', 'cancelled')
RETURNING id`

// stepsUnpartitioned is the steps table of migrations 0001 and 0003, which "before" runs on.
const stepsUnpartitioned = `
DROP TABLE steps;
CREATE TABLE steps (
    job_id bigint NOT NULL, id bigint GENERATED ALWAYS AS IDENTITY, step integer NOT NULL,
    attempt integer NOT NULL, outcome text NOT NULL, http_status integer,
    started_at timestamptz NOT NULL, finished_at timestamptz NOT NULL, error jsonb, queue text,
    PRIMARY KEY (job_id, id));
CREATE INDEX steps_queue_finished ON steps (queue, finished_at)`

type options struct {
	rows, stepsPerJob, insertBatch int
	days, retention                time.Duration
	only                           string
}

// result is one layout's measurement.
type result struct {
	layout                             string
	load                               time.Duration
	sizeBefore, sizeAfterGC, sizeAfter int64
	rowsBefore, rowsAfter, deadAfterGC int64
	jobsDeleted                        int
	gcWall, jobsWall, historyWall      time.Duration
	gcWAL, vacuumWAL                   int64
	vacuumWall                         time.Duration
	writerRows                         int64
	writerP50, writerP99, writerMax    time.Duration
	droppedPartitions, keptPartitions  int
}

func main() {
	var o options
	flag.IntVar(&o.rows, "rows", 10_000_000, "history rows loaded")
	flag.IntVar(&o.stepsPerJob, "steps", 10, "history rows per job")
	flag.IntVar(&o.insertBatch, "insert-batch", 100, "rows per statement of the concurrent writer (0: no writer, so the GC WAL is the GC's alone)")
	flag.DurationVar(&o.days, "span", 14*24*time.Hour, "time the history spans, ending now")
	flag.DurationVar(&o.retention, "retention", 7*24*time.Hour, "GC retention")
	flag.StringVar(&o.only, "only", "", "run one layout: before or after")
	flag.Parse()
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "historygc:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	dir, err := os.MkdirTemp("", "historygc")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	c, err := pg.StartCluster(ctx, pg.ClusterOptions{Dir: dir})
	if err != nil {
		return err
	}
	defer c.Stop()
	admin, err := pg.Open(ctx, c.URL("postgres"), pg.Options{MaxConns: 2})
	if err != nil {
		return err
	}
	defer admin.Close()
	for _, s := range []string{`ALTER SYSTEM SET autovacuum = off`, `ALTER SYSTEM SET max_wal_size = '8GB'`,
		`ALTER SYSTEM SET maintenance_work_mem = '256MB'`, `SELECT pg_reload_conf()`} {
		if _, err := admin.Exec(ctx, s); err != nil {
			return err
		}
	}
	var results []result
	for _, layout := range []string{"before", "after"} {
		if o.only != "" && o.only != layout {
			continue
		}
		if _, err := admin.Exec(ctx, `CREATE DATABASE `+pg.QuoteIdent("historygc_"+layout)); err != nil {
			return err
		}
		db, err := pg.Open(ctx, c.URL("historygc_"+layout), pg.Options{MaxConns: 4})
		if err != nil {
			return err
		}
		r, err := measure(ctx, db, layout, o)
		db.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", layout, err)
		}
		results = append(results, r)
		report([]result{r}, o, false)
	}
	report(results, o, true)
	return nil
}

func measure(ctx context.Context, db *pg.DB, layout string, o options) (result, error) {
	r := result{layout: layout}
	if _, err := db.Migrate(ctx); err != nil {
		return r, err
	}
	eng, err := engine.New(db, engine.Config{}, nil)
	if err != nil {
		return r, err
	}
	now, err := db.DatabaseNow(ctx)
	if err != nil {
		return r, err
	}
	if layout == "before" {
		if _, err := db.Exec(ctx, stepsUnpartitioned); err != nil {
			return r, err
		}
	} else {
		// The partitions the server would have made over the span, and ahead of now.
		past, err := eng.NewHistoryPartitions(engine.HistoryConfig{Ahead: o.days + 48*time.Hour,
			Now: func(context.Context) (time.Time, error) { return now.Add(-o.days), nil }})
		if err != nil {
			return r, err
		}
		if _, err := past.Pass(ctx); err != nil {
			return r, err
		}
	}
	began := time.Now()
	jobs := o.rows / o.stepsPerJob
	for _, s := range []string{
		`INSERT INTO handlers (name, url, secret) VALUES ('h', 'http://example.test/', 'whsec_x')`,
		`INSERT INTO queues (name) VALUES ('q')`,
		fmt.Sprintf(`INSERT INTO jobs (queue, handler, max_attempts, status, attempt, step, created_at, finished_at)
			SELECT 'q', 'h', 5, 'done', 1, %[2]d, f - interval '1 minute', f
			FROM (SELECT now() - %[3]d * interval '1 microsecond' + i * (%[3]d / %[1]d) * interval '1 microsecond' AS f
			      FROM generate_series(1, %[1]d) i) t`, jobs, o.stepsPerJob, o.days.Microseconds()),
		fmt.Sprintf(`INSERT INTO steps (job_id, queue, step, attempt, outcome, http_status, started_at, finished_at)
			SELECT j.id, j.queue, s, 1, CASE WHEN s = %[1]d THEN 'done' ELSE 'next' END, 200,
			       j.finished_at - (%[1]d - s + 1) * interval '1 second', j.finished_at - (%[1]d - s) * interval '1 second'
			FROM jobs j CROSS JOIN generate_series(1, %[1]d) s ORDER BY j.id, s`, o.stepsPerJob),
		`VACUUM ANALYZE`, `CHECKPOINT`,
	} {
		if _, err := db.Exec(ctx, s); err != nil {
			return r, err
		}
	}
	r.load = time.Since(began)
	if r.sizeBefore, r.rowsBefore, _, err = stepsSize(ctx, db); err != nil {
		return r, err
	}

	writerCtx, stopWriter := context.WithCancel(ctx)
	defer stopWriter()
	var writer sync.WaitGroup
	var latencies []time.Duration
	var writerErr error
	if o.insertBatch > 0 {
		writer.Add(1)
		go func() {
			defer writer.Done()
			latencies, writerErr = write(writerCtx, db, o.insertBatch)
		}()
	}

	lsn0, err := db.QueryInt(ctx, `SELECT pg_current_wal_lsn() - '0/0'`)
	if err != nil {
		return r, err
	}
	gcStart := time.Now()
	for {
		ids, err := db.JobGCSelect(ctx, o.retention, 1000)
		if err != nil {
			return r, err
		}
		if len(ids) == 0 {
			break
		}
		var n int
		if layout == "before" {
			rows, err := db.QueryStrings(ctx, gcDeleteOnMain, ids)
			if err != nil {
				return r, err
			}
			n = len(rows)
		} else if n, err = db.JobGCDelete(ctx, ids); err != nil {
			return r, err
		}
		r.jobsDeleted += n
	}
	r.jobsWall = time.Since(gcStart)
	if layout == "after" {
		h, err := eng.NewHistoryPartitions(engine.HistoryConfig{Retention: o.retention, LockTimeout: 5 * time.Second})
		if err != nil {
			return r, err
		}
		hStart := time.Now()
		done, err := h.Pass(ctx)
		if err != nil {
			return r, err
		}
		r.historyWall = time.Since(hStart)
		r.droppedPartitions, r.keptPartitions = len(done.Dropped), len(done.Kept)
	}
	r.gcWall = time.Since(gcStart)
	lsn1, err := db.QueryInt(ctx, `SELECT pg_current_wal_lsn() - '0/0'`)
	if err != nil {
		return r, err
	}
	r.gcWAL = lsn1 - lsn0
	stopWriter()
	writer.Wait()
	if writerErr != nil {
		return r, writerErr
	}
	r.writerRows = int64(len(latencies) * o.insertBatch)
	if len(latencies) > 0 {
		sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
		r.writerP50 = latencies[len(latencies)/2]
		r.writerP99 = latencies[len(latencies)*99/100]
		r.writerMax = latencies[len(latencies)-1]
	}
	if r.sizeAfterGC, r.rowsAfter, r.deadAfterGC, err = stepsSize(ctx, db); err != nil {
		return r, err
	}
	// What the deletes leave to do: VACUUM of steps (autovacuum would do it later, with
	// the same I/O); after partitioning there is nothing dead to vacuum.
	vStart := time.Now()
	if _, err := db.Exec(ctx, `VACUUM steps`); err != nil {
		return r, err
	}
	r.vacuumWall = time.Since(vStart)
	lsn2, err := db.QueryInt(ctx, `SELECT pg_current_wal_lsn() - '0/0'`)
	if err != nil {
		return r, err
	}
	r.vacuumWAL = lsn2 - lsn1
	r.sizeAfter, _, _, err = stepsSize(ctx, db)
	return r, err
}

// write inserts batch history rows per statement until ctx ends (the outcome statement's
// INSERT into steps, without the rest), and returns each statement's latency.
func write(ctx context.Context, db *pg.DB, batch int) ([]time.Duration, error) {
	var lat []time.Duration
	for ctx.Err() == nil {
		t := time.Now()
		_, err := db.Exec(ctx, `INSERT INTO steps (job_id, queue, step, attempt, outcome, http_status, started_at, finished_at)
			SELECT (SELECT max(id) FROM jobs) - i, 'q', 1, 1, 'next', 200, now(), now() FROM generate_series(1, $1) i`, batch)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, context.Canceled) {
				break
			}
			return lat, err
		}
		lat = append(lat, time.Since(t))
	}
	return lat, nil
}

// stepsSize is the table + index size of steps (all its partitions), its rows and its
// dead tuples (after a stats flush).
func stepsSize(ctx context.Context, db *pg.DB) (size, live, dead int64, err error) {
	rows, err := db.QueryStrings(ctx, `SELECT pg_stat_force_next_flush()`)
	_ = rows
	if err != nil {
		return 0, 0, 0, err
	}
	got, err := db.QueryStrings(ctx, `
		WITH leaves AS (
		    SELECT c.oid AS relid FROM pg_class c WHERE c.oid = 'steps'::regclass AND c.relkind = 'r'
		    UNION ALL
		    SELECT t.relid FROM pg_partition_tree('steps') t WHERE t.isleaf AND t.relid <> 'steps'::regclass)
		SELECT coalesce(sum(pg_total_relation_size(l.relid)), 0)::bigint,
		       (SELECT count(*) FROM steps), coalesce(sum(s.n_dead_tup), 0)::bigint
		FROM leaves l LEFT JOIN pg_stat_user_tables s ON s.relid = l.relid`)
	if err != nil {
		return 0, 0, 0, err
	}
	_, err = fmt.Sscan(got[0][0]+" "+got[0][1]+" "+got[0][2], &size, &live, &dead)
	return size, live, dead, err
}

func report(rs []result, o options, final bool) {
	mb := func(b int64) string { return fmt.Sprintf("%.0f MB", float64(b)/(1<<20)) }
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	if final {
		fmt.Printf("\n%d history rows (%d a job) over %s, retention %s, writer %d rows a statement\n\n",
			o.rows, o.stepsPerJob, o.days, o.retention, o.insertBatch)
	}
	fmt.Println("| | before (row DELETE) | after (partition drop) |")
	fmt.Println("|---|---|---|")
	row := func(name string, f func(r result) string) {
		fmt.Printf("| %s |", name)
		for _, layout := range []string{"before", "after"} {
			cell := "—"
			for _, r := range rs {
				if r.layout == layout {
					cell = f(r)
				}
			}
			fmt.Printf(" %s |", cell)
		}
		fmt.Println()
	}
	row("load (generate_series)", func(r result) string { return ms(r.load) })
	row("jobs deleted by GC", func(r result) string { return fmt.Sprint(r.jobsDeleted) })
	row("GC wall time", func(r result) string { return ms(r.gcWall) })
	row("… of which job batches", func(r result) string { return ms(r.jobsWall) })
	row("… of which partition pass", func(r result) string {
		return fmt.Sprintf("%s (%d dropped, %d kept)", ms(r.historyWall), r.droppedPartitions, r.keptPartitions)
	})
	row("GC WAL", func(r result) string { return mb(r.gcWAL) })
	row("steps size before GC", func(r result) string { return mb(r.sizeBefore) })
	row("steps size after GC", func(r result) string { return mb(r.sizeAfterGC) })
	row("dead tuples after GC", func(r result) string { return fmt.Sprint(r.deadAfterGC) })
	row("VACUUM steps after GC", func(r result) string { return ms(r.vacuumWall) + ", " + mb(r.vacuumWAL) + " WAL" })
	row("steps size after VACUUM", func(r result) string { return mb(r.sizeAfter) })
	row("live rows before → after", func(r result) string { return fmt.Sprintf("%d → %d", r.rowsBefore, r.rowsAfter) })
	row("concurrent writer during GC", func(r result) string {
		return fmt.Sprintf("%d rows, p50 %s, p99 %s, max %s", r.writerRows, r.writerP50.Round(10*time.Microsecond),
			r.writerP99.Round(10*time.Microsecond), ms(r.writerMax))
	})
	fmt.Println()
}
