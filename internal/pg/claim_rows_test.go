package pg_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// The claims' answers are read by hand, by position (pg.readClaimed: one scan list for
// both statements, cut for JobClaimPlain, whose row with id 0 only carries `others`).
// Here one answer of each statement is read both by that reader and by sqlc's generated
// method, whose Row struct is named from the statement's own columns, and the two must
// agree field for field. Every column of one claimed row of each holds a value that no
// other column of the same Go type holds (checked below), so two columns of one type
// swapped in the SQL (and dbsqlc regenerated) or in the reader's scan list make the two
// readings differ. A plain claim that claims nothing but meets rows that need admission
// answers the marker row alone, which the reader must turn into no step and its count.
func TestClaimReaderAgreesWithSqlc(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := db.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%v\n%s", err, sql)
		}
	}
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	exec(`INSERT INTO handlers (name, url, secret, previous_secret, previous_secret_expires_at, timeout_ms,
			backoff_base_ms, backoff_max_ms, breaker_state, consecutive_failures, breaker_opened_at,
			breaker_next_probe_at, paused_at)
		VALUES ('hand', 'http://example.test/hook', 'whsec_c2VjcmV0', 'whsec_cHJldmlvdXM=', $1::timestamptz + interval '1 day',
			1234, 20, 40000, 'half_open', 77, $1, $1::timestamptz + interval '2 days', $1::timestamptz + interval '3 days')`, base)
	if _, err := db.GateUpsert(ctx, "tenant", 5, 1); err != nil {
		t.Fatal(err)
	}
	// Ten rows of another queue first: the claimed ids are past every small number below.
	exec(`INSERT INTO jobs (queue, handler, max_attempts) SELECT 'filler', 'hand', 5 FROM generate_series(1, 10)`)
	// For each queue: one row whose every column differs from the others of its type (the
	// batch queue's is gated, so it holds a gate shard), one with the nullable columns NULL.
	for _, queue := range []string{"batch", "plain"} {
		exec(`INSERT INTO jobs (queue, handler, key, concurrency_key, priority, step, attempt, max_attempts, input, state,
				wake, consumed_seq, inbox_seq, pending_children, created_at, trace_context)
			VALUES ($1, 'hand', 'key-' || $1, CASE WHEN $1 = 'batch' THEN 'tenant' END, 0, 3, 4, 9, '{"in": 1}', '{"st": 2}',
				'signal', 1000, 1100, 2, $2, '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 v=' || $1),
			($1, 'hand', NULL, NULL, 5, 0, 0, 5, '{}', NULL, NULL, 0, 0, 0, $2, NULL)`, queue, base)
	}
	// Rows that need admission: the plain claim leaves and counts them.
	exec(`INSERT INTO jobs (queue, handler, max_attempts, concurrency_key, priority) SELECT 'plain', 'hand', 5, 'k' || i, 9
		FROM generate_series(1, 3) i`)
	p := pg.JobClaimParams{Limit: 10, LeaseTTL: time.Minute, Owner: "t", SignalCap: 7}

	// expect is what the reader must answer for rows of sqlc's Row type (a slice of
	// dbsqlc.JobClaimBatchRow or JobClaimPlainRow): each field copied by name into
	// pg.ClaimedJob (renamed where the two differ), every ClaimedJob field accounted for.
	renamed := map[string]string{"AttemptedAt": "ClaimedAt", "Url": "HandlerURL", "TimeoutMs": "TimeoutMS",
		"BackoffBaseMs": "BackoffBaseMS", "BackoffMaxMs": "BackoffMaxMS", "PausedAt": "HandlerPausedAt"}
	expect := func(rows any) (claimed []pg.ClaimedJob, others int) {
		t.Helper()
		rv := reflect.ValueOf(rows)
		for i := range rv.Len() {
			row := rv.Index(i)
			var c pg.ClaimedJob
			cv := reflect.ValueOf(&c).Elem()
			set := map[string]bool{}
			for f := range row.NumField() {
				name := row.Type().Field(f).Name
				if name == "Others" {
					others = int(row.Field(f).Int())
					continue
				}
				to := name
				if r, ok := renamed[name]; ok {
					to = r
				}
				dst := cv.FieldByName(to)
				if !dst.IsValid() || dst.Type() != row.Field(f).Type() {
					t.Fatalf("sqlc's %s.%s (%s) has no pg.ClaimedJob field %s of its type", row.Type().Name(), name,
						row.Field(f).Type(), to)
				}
				dst.Set(row.Field(f))
				set[to] = true
			}
			for f := range cv.NumField() {
				name := cv.Type().Field(f).Name
				if !set[name] && (name != "GateShard" || row.Type().Name() != "JobClaimPlainRow") &&
					name != "FairnessKey" { // JobClaimFair's alone (TestFairClaimTakesTurnsByWeight reads it)
					t.Fatalf("pg.ClaimedJob.%s is not a column of sqlc's %s", name, row.Type().Name())
				}
			}
			if c.ID != 0 {
				claimed = append(claimed, c)
			}
		}
		return claimed, others
	}
	// distinct fails unless every field of row (a sqlc Row struct) is set and differs
	// from every other field of its type: what makes a swap of two of them visible.
	distinct := func(row any) {
		t.Helper()
		v := reflect.ValueOf(row)
		for i := range v.NumField() {
			a := v.Field(i)
			if a.Kind() == reflect.Pointer && a.IsNil() {
				t.Fatalf("%s.%s is NULL: a swap with it would go unseen", v.Type().Name(), v.Type().Field(i).Name)
			}
			for j := range i {
				b := v.Field(j)
				if a.Type() == b.Type() && reflect.DeepEqual(a.Interface(), b.Interface()) {
					t.Fatalf("%s.%s and .%s are both %v: a swap of the two would go unseen", v.Type().Name(),
						v.Type().Field(j).Name, v.Type().Field(i).Name, reflect.Indirect(a))
				}
			}
		}
	}
	check := func(what string, got pg.ClaimAnswer, rows any, wantClaimed, wantOthers int) {
		t.Helper()
		want, others := expect(rows)
		if len(want) != wantClaimed || others != wantOthers {
			t.Fatalf("%s: sqlc read %d steps and %d others, want %d and %d", what, len(want), others, wantClaimed, wantOthers)
		}
		if got.HandOthers != others {
			t.Errorf("%s: the reader counted %d others, sqlc's row %d", what, got.HandOthers, others)
		}
		if len(got.Hand) != len(want) {
			t.Fatalf("%s: the reader answered %d steps, sqlc %d", what, len(got.Hand), len(want))
		}
		for i := range want {
			gv, wv := reflect.ValueOf(got.Hand[i]), reflect.ValueOf(want[i])
			for f := range gv.NumField() {
				if !reflect.DeepEqual(gv.Field(f).Interface(), wv.Field(f).Interface()) {
					t.Errorf("%s, step %d: the reader's %s is %v, sqlc's %v", what, i, gv.Type().Field(f).Name,
						reflect.Indirect(gv.Field(f)), reflect.Indirect(wv.Field(f)))
				}
			}
		}
	}

	p.Queue = "batch"
	got, err := db.ClaimReadTwice(ctx, p, false)
	if err != nil {
		t.Fatal(err)
	}
	full := 0
	for _, r := range got.Batch {
		if r.Key != nil { // the row with every column set
			distinct(r)
			full++
		}
	}
	check("JobClaimBatch", got, got.Batch, 2, 0)

	p.Queue = "plain"
	if got, err = db.ClaimReadTwice(ctx, p, true); err != nil {
		t.Fatal(err)
	}
	for _, r := range got.Plain {
		if r.Key != nil {
			distinct(r)
			full++
		}
	}
	if full != 2 {
		t.Fatalf("%d rows with every column set were claimed, want one of each statement", full)
	}
	check("JobClaimPlain", got, got.Plain, 2, 3)

	// The plain queue's two plain rows claimed for good: what is left needs admission, and
	// the plain claim answers its marker row (id 0) alone.
	if claimed, _, err := db.JobClaimPlain(ctx, p); err != nil || len(claimed) != 2 {
		t.Fatalf("plain claim: %d claimed (%v), want 2", len(claimed), err)
	}
	if got, err = db.ClaimReadTwice(ctx, p, true); err != nil {
		t.Fatal(err)
	}
	if len(got.Plain) != 1 || got.Plain[0].ID != 0 {
		t.Fatalf("the plain claim of a queue left with rows that need admission answered %d rows, want the marker row alone", len(got.Plain))
	}
	check("JobClaimPlain, the marker row", got, got.Plain, 0, 3)
}
