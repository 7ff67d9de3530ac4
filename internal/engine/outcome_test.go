package engine_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// statementsRun is how many statements ran since before (a counter snapshot).
func statementsRun(te testEngine, before map[string]int) int {
	n := 0
	for name, c := range te.counter.Snapshot() {
		n += c - before[name]
	}
	return n
}

// A spawn whose child names a key that a live job holds fails its attempt at once with
// an error naming the key: one statement refuses the spawn, one writes the failed attempt
// (retried by the handler's policy, failed at the last attempt). A spawn refused alone
// used to go to the one-by-one fallback, which handed it back to ApplyOutcomes, and so on:
// outcome statements until the context ended.
func TestSpawnOfAHeldKeyFailsTheAttemptAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	te := newTestEngine(t, engine.Config{}) // handler h: 3 attempts
	held := "user-7"
	holder := te.insert(t, engine.NewJob{Queue: "elsewhere", Key: &held})
	parent := te.insert(t, engine.NewJob{})
	spawn, err := engine.DecodeResponse([]byte(`{"spawn": {"children": [{"handler": "h", "key": "user-7"}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	for attempt := 1; attempt <= 3; attempt++ {
		st := te.claim(t)
		before := te.counter.Snapshot()
		actx, cancel := context.WithTimeout(ctx, 20*time.Second)
		applied, err := te.ApplyOutcome(actx, st.WithOutcome(spawn))
		cancel()
		if err != nil {
			t.Fatalf("attempt %d: %v (%d statements)", attempt, err, statementsRun(te, before))
		}
		// On Citus the refusal is the key's lock and its two holders' reads in a
		// transaction (BEGIN, the lock timeout, three statements in one round trip,
		// ROLLBACK: the ids drawn and the handlers read first), then the failed attempt
		// is one transaction sent in one round trip: BEGIN, the job's UPDATE, its
		// history INSERT, COMMIT.
		limit := 2
		if pgtest.Citus() {
			limit = 12
		}
		if n := statementsRun(te, before); n > limit {
			t.Fatalf("attempt %d: %d statements for one refused spawn, want at most %d", attempt, n, limit)
		} else if attempt == 1 {
			t.Logf("a refused spawn: %d statements", n)
		}
		want := "runnable"
		if attempt == 3 {
			want = "failed"
		}
		j := te.job(t, parent)
		if applied.Status != want || j.Status != want || j.Attempt != attempt || j.Step != 0 {
			t.Fatalf("attempt %d: applied %s, job %s attempt %d step %d; want %s", attempt, applied.Status, j.Status,
				j.Attempt, j.Step, want)
		}
		if !strings.Contains(string(j.Error), held) || !strings.Contains(string(j.Error), "spawn refused") {
			t.Fatalf("attempt %d: the job's error does not name the held key: %s", attempt, j.Error)
		}
		if want == "runnable" {
			makeDue(t, te, parent)
		}
	}
	if j := te.job(t, holder); j.Status != "runnable" {
		t.Fatalf("the key's holder: %s", j.Status)
	}
	if n, err := te.db.QueryInt(ctx, `SELECT count(*) FROM jobs WHERE parent_id = $1`, parent); err != nil || n != 0 {
		t.Fatalf("children of the refused spawn: %d (%v)", n, err)
	}
	labels, err := te.db.QueryStrings(ctx, `SELECT outcome FROM steps WHERE job_id = $1 ORDER BY id`, parent)
	if err != nil || len(labels) != 3 {
		t.Fatalf("history: %v (%v)", labels, err)
	}
	for _, l := range labels {
		if l[0] != "error" {
			t.Fatalf("history: %v, want three failed attempts", labels)
		}
	}
}

// A spawned child holds its key like any job: an insert of the key answers the child, and
// once the child is done the key is free. On Citus the child lives at its parent's
// placement, away from its key's (a displaced key: docs/citus.md), and a holder row names it.
func TestSpawnedChildHoldsItsKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	te := newTestEngine(t, engine.Config{})
	parent := te.insert(t, engine.NewJob{})
	key := "child-of-" + strconv.FormatInt(parent, 10)
	spawn, err := engine.DecodeResponse([]byte(`{"spawn": {"children": [{"handler": "h", "key": "` + key + `"}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	st := te.claim(t)
	if applied, err := te.ApplyOutcome(ctx, st.WithOutcome(spawn)); err != nil || applied.Status != "awaiting" {
		t.Fatalf("the spawn: %+v %v", applied, err)
	}
	child, err := te.db.QueryInt(ctx, `SELECT id FROM jobs WHERE parent_id = $1`, parent)
	if err != nil {
		t.Fatal(err)
	}
	again, err := te.InsertJobs(ctx, []engine.NewJob{{Handler: "h", Key: &key}})
	if err != nil || again[0].ID != child || !again[0].Deduplicated {
		t.Fatalf("an insert of the child's key: %+v %v, want the child %d", again, err, child)
	}
	if j, err := te.db.JobGetLiveByKey(ctx, key); err != nil || j.ID != child {
		t.Fatalf("the key's live job: %d %v, want the child %d", j.ID, err, child)
	}
	// The child done, its key is free.
	st = te.claim(t)
	if st.ID != child {
		t.Fatalf("claimed %d, want the child %d", st.ID, child)
	}
	done, err := engine.DecodeResponse([]byte(`{"done": {}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := te.ApplyOutcome(ctx, st.WithOutcome(done)); err != nil {
		t.Fatal(err)
	}
	fresh, err := te.InsertJobs(ctx, []engine.NewJob{{Handler: "h", Key: &key}})
	if err != nil || fresh[0].Deduplicated || fresh[0].ID == child {
		t.Fatalf("an insert of the finished child's key: %+v %v, want a new job", fresh, err)
	}
}

// ApplyOutcome (the asynchronous-step API) tries an outcome again after a transient
// conflict, a few times in all: the one layer of retries of that path, since
// ApplyOutcomes itself writes once.
func TestApplyOutcomeRetriesATransientConflict(t *testing.T) {
	t.Parallel()
	pgtest.SkipOnCitus(t, "the test injects its conflict with a trigger, which Citus does not allow on a distributed table")
	ctx := context.Background()
	te := newTestEngine(t, engine.Config{})
	id := te.insert(t, engine.NewJob{})
	st := te.claim(t)
	// The first two writes of the job fail as serialization failures would.
	if _, err := te.db.Exec(ctx, `CREATE SEQUENCE tries;
		CREATE FUNCTION fail_twice() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
			IF nextval('tries') <= 2 THEN RAISE EXCEPTION 'injected' USING ERRCODE = 'serialization_failure'; END IF;
			RETURN NEW; END $$;
		CREATE TRIGGER fail_twice BEFORE UPDATE ON jobs FOR EACH ROW EXECUTE FUNCTION fail_twice()`); err != nil {
		t.Fatal(err)
	}
	before := te.counter.Count("JobApplyOutcomesCrediting") // the API's outcome may hold a gate slot
	applied, err := te.ApplyOutcome(ctx, engine.StepOutcome{JobID: st.ID, Token: st.LeaseToken,
		Outcome: engine.Outcome{Kind: "done", Label: "done"}})
	if err != nil || applied.Status != "done" {
		t.Fatalf("applied %+v, %v", applied, err)
	}
	if n := te.counter.Count("JobApplyOutcomesCrediting") - before; n != 3 {
		t.Fatalf("%d outcome statements, want 3 (two transient failures, then the write)", n)
	}
	if j := te.job(t, id); j.Status != "done" {
		t.Fatalf("job %s", j.Status)
	}
}
