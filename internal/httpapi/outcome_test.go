package httpapi_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/httpapi"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// An outcome refused for its stale token writes nothing, a spawn into a queue nothing has
// used included (the queue used to be created before the token was checked); the same
// spawn under the current token creates the queue its child needs.
func TestRefusedOutcomeWritesNothing(t *testing.T) {
	t.Parallel()
	a := newAPI(t, httpapi.Config{})
	a.registerHandler("h")
	if r := a.do("POST", "/v1/jobs", `{"handler": "h"}`); r.status != 201 {
		t.Fatalf("insert: %d %s", r.status, r.body)
	}
	st := a.claim("default", 1)[0]
	spawn := `"spawn": {"children": [{"handler": "h", "queue": "nobody-used"}]}`
	fingerprint := fingerprintSQL(t, a.db)
	read := func() string {
		rows, err := a.db.QueryStrings(context.Background(), fingerprint)
		if err != nil {
			t.Fatal(err)
		}
		return rows[0][0]
	}
	before := read()
	const stale = "0b7c2a54-34a8-4f4c-9d0e-5a8f3c1e2d90"
	r := a.do("POST", fmt.Sprintf("/v1/jobs/%d/outcome", st.ID), fmt.Sprintf(`{"token": %q, %s}`, stale, spawn))
	if r.status != 409 {
		t.Fatalf("a stale token: %d %s", r.status, r.body)
	}
	if after := read(); after != before {
		t.Fatalf("a refused outcome wrote:\nbefore %s\nafter  %s", before, after)
	}
	if n, _ := a.db.QueryInt(context.Background(), `SELECT count(*) FROM queues WHERE name = 'nobody-used'`); n != 0 {
		t.Fatal("a refused outcome created the queue its spawn named")
	}
	a.outcome(st, spawn)
	if n, _ := a.db.QueryInt(context.Background(), `SELECT count(*) FROM queues WHERE name = 'nobody-used'`); n != 1 {
		t.Fatal("an applied spawn did not create its child's queue")
	}
}

// New refuses a body cap it cannot apply, naming the setting and its variable.
func TestNewRefusesAnInvalidConfig(t *testing.T) {
	t.Parallel()
	eng, err := engine.New(pgtest.NewDB(t), engine.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cfg   httpapi.Config
		names []string
	}{
		{httpapi.Config{MaxBodyBytes: -1}, []string{"MaxBodyBytes", "GENDURABLE_MAX_BODY_BYTES"}},
		{httpapi.Config{MaxBatchBodyBytes: -1}, []string{"MaxBatchBodyBytes"}},
	} {
		_, err := httpapi.New(eng, c.cfg, nil)
		for _, name := range c.names {
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("%s set wrong: %v, which does not name %s", c.names[0], err, name)
			}
		}
	}
}
