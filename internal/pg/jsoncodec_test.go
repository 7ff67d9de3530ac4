package pg_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// jsonb reads into json.RawMessage (and *json.RawMessage) as pgx's own codec, which runs
// encoding/json, reads it: the same bytes for objects, arrays, escapes, numbers and JSON
// null, and nil for SQL NULL (and, through a pointer, for JSON null).
func TestJSONBReadsAsEncodingJSONWould(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	db := pgtest.Open(t, url, pg.Options{MaxConns: 1})
	const values = `SELECT v FROM (VALUES (1, '{"b": [1, 2.50, -3e2], "a": {"x": null}}'::jsonb), (2, '"\u00e9\n\"\\"'), (3, '[]'),
		(4, 'null'), (5, NULL), (6, '12345678901234567890.5'), (7, '{"emoji": "\ud83d\ude00", "nul": "a\u0041"}'), (8, 'true')) t(n, v) ORDER BY n`
	raw, ptrs, err := db.QueryJSON(ctx, values)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close(ctx)
	rows, err := plain.Query(ctx, values)
	if err != nil {
		t.Fatal(err)
	}
	var want []json.RawMessage
	var wantPtrs []*json.RawMessage
	for rows.Next() {
		var v json.RawMessage
		var p *json.RawMessage
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		if err := rows.Scan(&p); err != nil {
			t.Fatal(err)
		}
		want, wantPtrs = append(want, v), append(wantPtrs, p)
	}
	if rows.Err() != nil || len(want) != 8 || len(raw) != 8 {
		t.Fatalf("rows: %v, %d and %d of 8", rows.Err(), len(want), len(raw))
	}
	for i := range want {
		if !bytes.Equal(raw[i], want[i]) || (raw[i] == nil) != (want[i] == nil) {
			t.Errorf("value %d: read %q, encoding/json reads %q", i+1, raw[i], want[i])
		}
		if (ptrs[i] == nil) != (wantPtrs[i] == nil) || (ptrs[i] != nil && !bytes.Equal(*ptrs[i], *wantPtrs[i])) {
			t.Errorf("value %d through a pointer: read %v, encoding/json reads %v", i+1, ptrs[i], wantPtrs[i])
		}
	}
	if raw[4] != nil || string(raw[3]) != "null" {
		t.Errorf("SQL NULL read %q, JSON null %q", raw[4], raw[3])
	}
}
