package engine_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// pinnedClock is a HistoryConfig.Now that reads a time the test moves.
type pinnedClock struct{ at atomic.Int64 }

func (c *pinnedClock) set(t time.Time) { c.at.Store(t.UnixMicro()) }
func (c *pinnedClock) now(context.Context) (time.Time, error) {
	return time.UnixMicro(c.at.Load()).UTC(), nil
}

// newPinnedClock returns a clock pinned at the database's now, and that time.
func newPinnedClock(t *testing.T, te testEngine) (*pinnedClock, time.Time) {
	t.Helper()
	now, err := te.db.DatabaseNow(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c := &pinnedClock{}
	c.set(now)
	return c, now
}

func newHistory(t *testing.T, te testEngine, cfg engine.HistoryConfig) *engine.HistoryPartitions {
	t.Helper()
	h, err := te.NewHistoryPartitions(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func pass(t *testing.T, h *engine.HistoryPartitions) engine.HistoryPass {
	t.Helper()
	done, err := h.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return done
}

// partitionsOf names the partition each step row of job id sits in, in id order.
func partitionsOf(t *testing.T, te testEngine, id int64) []string {
	t.Helper()
	rows, err := te.db.QueryStrings(context.Background(), `SELECT tableoid::regclass::text FROM steps WHERE job_id = $1 ORDER BY id`, id)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range rows {
		// On Citus the row is read on a worker, in the shard of the partition (its name
		// and the shard id).
		names = append(names, citusShardSuffix.ReplaceAllString(r[0], "$1"))
	}
	return names
}

// citusShardSuffix is the shard id Citus appends to a table's name on a worker.
var citusShardSuffix = regexp.MustCompile(`^(steps_(?:default|p[0-9]{8}_[0-9]{6}))_[0-9]+$`)

// runJob inserts a job and runs it to done through claim and the outcome statement (one
// history row).
func runJob(ctx context.Context, te testEngine, queue string) (int64, error) {
	j, err := te.InsertJob(ctx, engine.NewJob{Queue: queue, Handler: "h"})
	if err != nil {
		return 0, err
	}
	for {
		steps, _, err := te.Claim(ctx, queue, 1)
		if err != nil {
			return 0, err
		}
		if len(steps) == 0 {
			return 0, fmt.Errorf("job %d was not claimable", j.ID)
		}
		if _, err := te.ApplyOutcome(ctx, engine.StepOutcome{JobID: steps[0].ID, Token: steps[0].LeaseToken,
			Outcome: engine.Outcome{Kind: pg.KindDone, Label: "done"}}); err != nil {
			return 0, err
		}
		if steps[0].ID == j.ID {
			return j.ID, nil
		}
	}
}

// Partitions exist from now's to Ahead past it, a second pass makes none, and a step
// written by the outcome statement lands in today's partition, readable by job id.
func TestHistoryPartitionsAreMadeAheadAndRowsRouted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	te := newTestEngine(t, engine.Config{})
	h := newHistory(t, te, engine.HistoryConfig{Partition: 24 * time.Hour, Ahead: 72 * time.Hour})
	now, err := te.db.DatabaseNow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first := pass(t, h)
	today := now.UTC().Truncate(24 * time.Hour)
	var want []string
	for d := today; d.Before(now.Add(72 * time.Hour)); d = d.Add(24 * time.Hour) {
		want = append(want, pg.StepPartitionName(d))
	}
	if !slices.Equal(first.Made, want) {
		t.Fatalf("made %v, want %v", first.Made, want)
	}
	if again := pass(t, h); len(again.Made)+len(again.Dropped) != 0 {
		t.Fatalf("a second pass changed %+v", again)
	}
	parts, err := te.db.StepPartitionList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != len(want)+1 || !parts[0].Default || !parts[1].From.Equal(today) || !parts[len(parts)-1].To.Equal(today.Add(time.Duration(len(want))*24*time.Hour)) {
		t.Fatalf("partitions %+v", parts)
	}
	id, err := runJob(ctx, te, "default")
	if err != nil {
		t.Fatal(err)
	}
	if got := partitionsOf(t, te, id); !slices.Equal(got, []string{pg.StepPartitionName(today)}) {
		t.Fatalf("the step row is in %v, want today's partition %s", got, pg.StepPartitionName(today))
	}
	steps, err := te.ListSteps(ctx, id, 10)
	if err != nil || len(steps) != 1 || steps[0].Outcome != "done" {
		t.Fatalf("steps %+v (%v)", steps, err)
	}
	if _, err := te.NewHistoryPartitions(engine.HistoryConfig{Partition: time.Minute}); !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("a 1m partition was accepted: %v", err)
	}
}

// Past retention, a partition whose jobs are gone is dropped, one holding the steps of a
// kept job stays (and the job's history with it), newer ones stay.
func TestHistoryPartitionPastRetentionIsDroppedUnlessAJobIsKept(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	te := newTestEngine(t, engine.Config{})
	clock, now := newPinnedClock(t, te)
	day := 24 * time.Hour
	clock.set(now.Add(-10 * day))
	h := newHistory(t, te, engine.HistoryConfig{Partition: day, Ahead: 11 * day, Retention: 7 * day, Now: clock.now})
	if made := pass(t, h).Made; len(made) < 11 {
		t.Fatalf("made %v", made)
	}
	kept, err := runJob(ctx, te, "default")
	if err != nil {
		t.Fatal(err)
	}
	gone, err := runJob(ctx, te, "default")
	if err != nil {
		t.Fatal(err)
	}
	// Their histories moved back in time: kept's to 9 days ago, gone's to 8 (as if they
	// had run then; finished_at is the partition key, so the rows move partition).
	// (In UTC, where the arithmetic is immutable: Citus refuses a stable function of a
	// column in an UPDATE.)
	if _, err := te.db.Exec(ctx, `UPDATE steps
		SET finished_at = ((finished_at AT TIME ZONE 'UTC') - CASE job_id WHEN $1 THEN interval '9 days' ELSE interval '8 days' END) AT TIME ZONE 'UTC',
		    started_at = ((started_at AT TIME ZONE 'UTC') - interval '9 days') AT TIME ZONE 'UTC'
		WHERE job_id IN ($1, $2)`, kept, gone); err != nil {
		t.Fatal(err)
	}
	if _, err := te.db.Exec(ctx, `UPDATE jobs SET created_at = ((created_at AT TIME ZONE 'UTC') - interval '10 days') AT TIME ZONE 'UTC' WHERE id = $1`, kept); err != nil {
		t.Fatal(err)
	}
	if _, err := te.db.Exec(ctx, `DELETE FROM jobs WHERE id = $1`, gone); err != nil {
		t.Fatal(err)
	}
	keptPart, gonePart := partitionsOf(t, te, kept), partitionsOf(t, te, gone)
	clock.set(now)
	done := pass(t, h)
	if !slices.Contains(done.Dropped, gonePart[0]) || !slices.Equal(done.Kept, keptPart) {
		t.Fatalf("pass %+v; kept job's partition %v, gone job's %v", done, keptPart, gonePart)
	}
	// Every partition ending 7 days ago or earlier went, but the kept one; the rest stay.
	parts, err := te.db.StepPartitionList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range parts {
		if !p.Default && !p.To.After(now.Add(-7*day)) && p.Name != keptPart[0] {
			t.Fatalf("partition %s (to %s) past retention was not dropped: %+v", p.Name, p.To, done)
		}
	}
	if len(parts) < 1+1+7 {
		t.Fatalf("%d partitions left: %+v", len(parts), parts)
	}
	steps, err := te.ListSteps(ctx, kept, 10)
	if err != nil || len(steps) != 1 {
		t.Fatalf("the kept job's steps: %+v (%v)", steps, err)
	}
	// Once the kept job goes, so does its partition.
	if _, err := te.db.Exec(ctx, `DELETE FROM jobs WHERE id = $1`, kept); err != nil {
		t.Fatal(err)
	}
	if done := pass(t, h); !slices.Equal(done.Dropped, keptPart) {
		t.Fatalf("after the job went: %+v", done)
	}
}

// Rows written while no partition covered their time wait in the DEFAULT partition and
// are moved into the partition the next pass makes for them.
func TestHistoryRowsInTheDefaultPartitionAreMovedIn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	te := newTestEngine(t, engine.Config{})
	clock, now := newPinnedClock(t, te)
	clock.set(now.Add(-5 * 24 * time.Hour)) // the server "ran" 5 days ago, then stopped
	h := newHistory(t, te, engine.HistoryConfig{Partition: 24 * time.Hour, Ahead: 24 * time.Hour, Now: clock.now})
	pass(t, h)
	id, err := runJob(ctx, te, "default")
	if err != nil {
		t.Fatal(err)
	}
	if got := partitionsOf(t, te, id); !slices.Equal(got, []string{"steps_default"}) {
		t.Fatalf("a step past the partitions made is in %v", got)
	}
	clock.set(now)
	done := pass(t, h)
	if done.Moved != 1 || len(done.Made) < 4 {
		t.Fatalf("pass %+v", done)
	}
	if got := partitionsOf(t, te, id); !slices.Equal(got, []string{pg.StepPartitionName(now.UTC().Truncate(24 * time.Hour))}) {
		t.Fatalf("the moved row is in %v", got)
	}
	if n, err := te.db.QueryInt(ctx, `SELECT count(*) FROM steps_default`); err != nil || n != 0 {
		t.Fatalf("steps_default holds %d rows (%v)", n, err)
	}
}

// While jobs run through the outcome statement, partitions are made and dropped under
// them: no statement fails, no step row of a kept job is lost, and the partitions of
// rows whose jobs are gone go.
func TestHistoryPartitionChangesUnderOutcomeLoad(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	te := newTestEngine(t, engine.Config{})
	clock, now := newPinnedClock(t, te)
	hour := time.Hour
	start := now.Add(-48 * hour)
	clock.set(start)
	h := newHistory(t, te, engine.HistoryConfig{Partition: hour, Ahead: 52 * hour, Retention: hour, Now: clock.now})
	pass(t, h)
	// History of jobs that are gone (job ids no job has) in every past hour.
	orphans := `INSERT INTO steps (job_id, step, attempt, outcome, started_at, finished_at)
		SELECT -i, 0, 1, 'done', now() - i * interval '10 minutes', now() - i * interval '10 minutes'
		FROM generate_series(7, 280) i`
	if pgtest.Citus() { // placement 0, and a history id (no default on Citus)
		orphans = `INSERT INTO steps (id, placement, job_id, step, attempt, outcome, started_at, finished_at)
		SELECT i, 0, -i, 0, 1, 'done', now() - i * interval '10 minutes', now() - i * interval '10 minutes'
		FROM generate_series(7, 280) i`
	}
	if _, err := te.db.Exec(ctx, orphans); err != nil {
		t.Fatal(err)
	}
	const workers, perWorker = 4, 40
	var wg sync.WaitGroup
	ids := make(chan int64, workers*perWorker)
	errs := make(chan error, workers)
	stop := make(chan struct{})
	for w := range workers {
		queue := fmt.Sprintf("q%d", w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perWorker {
				id, err := runJob(ctx, te, queue)
				if err != nil {
					errs <- err
					return
				}
				ids <- id
			}
		}()
	}
	passes := 0
	var dropped []string
	go func() { wg.Wait(); close(stop) }()
	for running := true; running; {
		select {
		case <-stop:
			running = false
		default:
		}
		clock.set(start.Add(time.Duration(passes) * hour))
		done := pass(t, h)
		dropped = append(dropped, done.Dropped...)
		if passes < 48 {
			passes++
		}
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	close(ids)
	var want []int64
	for id := range ids {
		want = append(want, id)
	}
	if len(want) != workers*perWorker {
		t.Fatalf("%d jobs ran", len(want))
	}
	// Catch up to now whatever the workers' pace, then every orphan row is gone.
	clock.set(now.Add(2 * hour))
	dropped = append(dropped, pass(t, h).Dropped...)
	n, err := te.db.QueryInt(ctx, `SELECT count(DISTINCT job_id) FROM steps WHERE job_id = ANY ($1)`, want)
	if err != nil || n != int64(len(want)) {
		t.Fatalf("%d of %d jobs have their step row (%v)", n, len(want), err)
	}
	if orphans, err := te.db.QueryInt(ctx, `SELECT count(*) FROM steps WHERE job_id < 0`); err != nil || orphans != 0 {
		t.Fatalf("%d rows of gone jobs left (%v); dropped %v", orphans, err, dropped)
	}
	if len(dropped) < 40 {
		t.Fatalf("dropped only %d partitions: %v", len(dropped), dropped)
	}
	t.Logf("%d jobs ran while %d partitions were dropped over %d passes", len(want), len(dropped), passes)
}
