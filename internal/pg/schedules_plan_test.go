package pg_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// rowsRead sums the rows every executed scan of relation read (returned plus filtered out).
func rowsRead(plan pgtest.PlanNode, relation string) float64 {
	var rows float64
	plan.Walk(func(n pgtest.PlanNode) {
		if n.RelationName == relation && strings.Contains(n.NodeType, "Scan") {
			rows += (n.ActualRows + n.RowsRemovedFilter) * n.ActualLoops
		}
	})
	return rows
}

// seedSchedules makes 10 000 running schedules due in a day or more, 2 000 paused ones
// long overdue, and 5 running ones due at due (sched-due-1 … 5, overlap skip), each due
// one with 1 000 finished jobs of past ticks.
func seedSchedules(t *testing.T, db *pg.DB, due time.Time) {
	t.Helper()
	ctx := context.Background()
	for _, sql := range []string{
		`INSERT INTO handlers (name, url, secret) VALUES ('h', 'http://example.test/', 'whsec_x')`,
		`INSERT INTO schedules (name, cron, handler, next_run_at)
		 SELECT 'sched-' || i, '@every 1h', 'h', now() + interval '1 day' + i * interval '1 second' FROM generate_series(1, 10000) i`,
		`INSERT INTO schedules (name, cron, handler, paused, next_run_at)
		 SELECT 'paused-' || i, '@every 1h', 'h', true, now() - interval '1 day' FROM generate_series(1, 2000) i`,
		`INSERT INTO schedules (name, cron, handler, overlap, next_run_at)
		 SELECT 'sched-due-' || i, '@every 1h', 'h', 'skip', $1::timestamptz - i * interval '1 minute' FROM generate_series(1, 5) i`,
		`INSERT INTO jobs (queue, handler, max_attempts, status, finished_at, schedule_name, schedule_tick)
		 SELECT 'default', 'h', 5, 'done', now(), 'sched-due-' || (1 + i % 5), now() - i * interval '1 hour'
		 FROM generate_series(1, 5000) i`,
		`ANALYZE`,
	} {
		var args []any
		if strings.Contains(sql, "$1") {
			args = append(args, due)
		}
		if _, err := db.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%v\n%s", err, sql)
		}
	}
}

// The scheduler's wake-up reads the due schedules and the first one not due, whatever the
// number of schedules: 5 due of 12 005 read about 7 rows of schedules_due (paused ones
// are not in it), in a custom and in a generic plan.
func TestScheduleListDueReadsTheDueOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.Open(t, pgtest.NewDatabase(t), pg.Options{MaxConns: 1})
	now, err := db.DatabaseNow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	seedSchedules(t, db, now)
	for _, r := range customAndGenericPlans(t, db, pg.Statement("ScheduleListDue"), "due", "timestamptz, int",
		"'"+now.Format(time.RFC3339Nano)+"', 100", now, 100) {
		generic, raw, plan := r.generic, r.raw, r.plan
		read := rowsRead(plan, "schedules")
		t.Logf("generic %v: %.0f rows of schedules read for 5 due of 12 005", generic, read)
		if read > 8 || plan.HasSeqScan("schedules") || !plan.Uses("schedules_due") {
			t.Fatalf("generic %v: %.0f rows of schedules read for 5 due:\n%s", generic, read, raw)
		}
	}
	due, err := db.ScheduleListDue(ctx, now, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(due) != 6 || due[0].Name != "sched-due-5" || due[4].Name != "sched-due-1" || due[5].Name != "sched-1" {
		t.Fatalf("the due schedules then the next: %+v", due)
	}
	// A batch smaller than the due set stops at the batch, then the first not due.
	if due, err = db.ScheduleListDue(ctx, now, 2); err != nil || len(due) != 3 || due[2].Name != "sched-1" {
		t.Fatalf("a batch of 2: %+v (%v)", due, err)
	}
}

// Firing a tick reads one schedule and one entry of its jobs (the overlap probe), with
// 12 005 schedules and 1 000 jobs of the schedule: primary-key and jobs_schedule_tick
// lookups, in a custom and in a generic plan.
func TestScheduleFireReadsOneScheduleAndItsLatestJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.Open(t, pgtest.NewDatabase(t), pg.Options{MaxConns: 1})
	now, err := db.DatabaseNow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	now = now.Truncate(time.Microsecond)
	seedSchedules(t, db, now)
	dueAt := now.Add(-time.Minute) // sched-due-1's tick
	ts := func(t time.Time) string { return "'" + t.Format(time.RFC3339Nano) + "'" }
	for _, r := range customAndGenericPlans(t, db, pg.Statement("ScheduleFire"), "fire", "timestamptz, timestamptz, text, timestamptz, text",
		ts(now.Add(time.Hour))+", "+ts(dueAt)+", 'sched-due-1', "+ts(dueAt)+", NULL", now.Add(time.Hour), dueAt, "sched-due-1", dueAt, nil) {
		generic, raw, plan := r.generic, r.raw, r.plan
		schedules, jobs := rowsRead(plan, "schedules"), rowsRead(plan, "jobs")
		t.Logf("generic %v: %.0f rows of schedules and %.0f of jobs read", generic, schedules, jobs)
		if schedules > 2 || jobs > 2 || plan.HasSeqScan("schedules") || plan.HasSeqScan("jobs") {
			t.Fatalf("generic %v: firing one tick read %.0f rows of schedules and %.0f of jobs:\n%s", generic, schedules, jobs, raw)
		}
		if !strings.Contains(string(raw), "jobs_schedule_tick") {
			t.Fatalf("generic %v: the overlap probe does not ride jobs_schedule_tick:\n%s", generic, raw)
		}
	}
	// And it fires: the previous run is finished, so the tick makes its job.
	fired, err := db.ScheduleFire(ctx, pg.ScheduleFire{Name: "sched-due-1", DueAt: dueAt, Tick: dueAt, NextRunAt: now.Add(time.Hour)})
	if err != nil || fired.JobID == 0 || fired.Skipped {
		t.Fatalf("the fire: %+v (%v)", fired, err)
	}
}
