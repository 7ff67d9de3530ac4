package pg_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func TestEveryStatementPrepares(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	if err := db.CheckStatements(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestMigrateIsIdempotent(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	applied, err := db.Migrate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) != 0 {
		t.Fatalf("template is migrated, yet Migrate applied %v", applied)
	}
	n, err := db.MigrationsPending(context.Background())
	if err != nil || n != 0 {
		t.Fatalf("pending = %d, %v", n, err)
	}
}

func str(s string) *string { return &s }

func TestInsertClaimOutcomeRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	if _, err := db.HandlerUpsert(ctx, pg.HandlerUpsert{Name: "h", URL: "http://example.test/", NewSecret: "whsec_x"}); err != nil {
		t.Fatal(err)
	}
	got, err := db.JobInsertMany(ctx, []pg.JobInsert{
		{Queue: "q", Handler: "h", Input: json.RawMessage(`{"n":1}`)},
		{Queue: "q", Handler: "h", Key: str("k1")},
		{Queue: "q", Handler: "h", Key: str("k1")},
		{Queue: "q", Handler: "h"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 || got[0].Deduplicated || got[1].Deduplicated || !got[2].Deduplicated || got[2].ID != got[1].ID {
		t.Fatalf("unexpected insert answer: %+v", got)
	}
	if got[0].ID >= got[1].ID || got[1].ID >= got[3].ID {
		t.Fatalf("ids not in request order: %d %d %d", got[0].ID, got[1].ID, got[3].ID)
	}
	again, err := db.JobInsertMany(ctx, []pg.JobInsert{{Queue: "q", Handler: "h", Key: str("k1")}})
	if err != nil || !again[0].Deduplicated || again[0].ID != got[1].ID {
		t.Fatalf("dedup against a live key: %+v %v", again, err)
	}
	if _, err := db.JobInsertMany(ctx, []pg.JobInsert{{Queue: "q", Handler: "h"}, {Queue: "q", Handler: "nope"}}); err == nil {
		t.Fatal("unknown handler accepted")
	}
	claimed, err := db.JobClaimBatch(ctx, pg.JobClaimParams{Queue: "q", Limit: 10, LeaseTTL: time.Minute, Owner: "t", SignalCap: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(claimed) != 3 {
		t.Fatalf("claimed %d, want 3", len(claimed))
	}
	c := claimed[0]
	if c.Attempt != 1 || c.HandlerURL == nil || *c.HandlerURL != "http://example.test/" || c.LeaseToken == "" {
		t.Fatalf("claim row: %+v", c)
	}
	applied, err := db.JobApplyOutcomes(ctx, []pg.OutcomeRecord{
		{ID: c.ID, Token: c.LeaseToken, Kind: pg.KindNext, Label: "next",
			State: json.RawMessage(`{"s":1}`)},
		{ID: claimed[1].ID, Token: "00000000-0000-0000-0000-000000000000", Kind: pg.KindDone, Label: "done"},
	}, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) != 1 || applied[0].ID != c.ID || applied[0].Status != "runnable" || !applied[0].Ready {
		t.Fatalf("applied: %+v", applied)
	}
	j, err := db.JobGet(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j.Step != 1 || j.Attempt != 0 || string(j.State) != `{"s": 1}` {
		t.Fatalf("job after next: step=%d attempt=%d state=%s", j.Step, j.Attempt, j.State)
	}
	steps, err := db.StepList(ctx, c.ID, 10)
	if err != nil || len(steps) != 1 || steps[0].Outcome != "next" || steps[0].Step != 0 || steps[0].Attempt != 1 {
		t.Fatalf("steps: %+v %v", steps, err)
	}
}

// Every statement of sql/*.sql is in the table CheckStatements prepares and the counter
// names, and none is listed that no sql file defines.
func TestEveryStatementIsListed(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("sql/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("no sql files: %v", err)
	}
	defined := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`(?m)^-- name: (\w+) :`).FindAllStringSubmatch(string(b), -1) {
			defined[m[1]] = true
		}
	}
	for name := range defined {
		if !strings.HasPrefix(pg.Statement(name), "-- name: "+name+" :") {
			t.Errorf("statement %s: its SQL does not start with its name line (the counter reads it)", name)
		}
	}
	if n := len(pg.StatementNames()); n != len(defined) {
		t.Errorf("%d statements listed, %d defined in sql/*.sql", n, len(defined))
	}
}
