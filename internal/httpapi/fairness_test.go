package httpapi_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gendurable/gendurable/internal/httpapi"
	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// Fair share through the REST API (docs/fairness.md): a queue turned fair, jobs with
// fairness keys by insert and batch, a key's weight and cap set, read, listed (paged, by
// prefix, top keys by runnable work) and dropped, and the jobs listed by key.
func TestFairShareThroughTheAPI(t *testing.T) {
	t.Parallel()
	a := newAPI(t, httpapi.Config{})
	a.registerHandler("h")
	if r := a.do("PUT", "/v1/queues/mail", `{"paused": true, "fairness": "round_robin"}`); r.status != 200 || r.json(t)["fairness"] != "round_robin" {
		t.Fatalf("turning fairness on: %d %s", r.status, r.body)
	}
	for i := range 3 {
		if r := a.do("POST", "/v1/jobs", fmt.Sprintf(`{"handler": "h", "queue": "mail", "fairness_key": "acme", "input": {"n": %d}}`, i)); r.status != 201 {
			t.Fatalf("insert: %d %s", r.status, r.body)
		}
	}
	if r := a.do("POST", "/v1/jobs/batch", `{"jobs": [{"handler": "h", "queue": "mail", "fairness_key": "globex"},
		{"handler": "h", "queue": "mail", "fairness_key": "acme-eu"}, {"handler": "h", "queue": "mail"}]}`); r.status != 201 && r.status != 200 {
		t.Fatalf("batch: %d %s", r.status, r.body)
	}
	// A key's settings, and its counts.
	r := a.do("PUT", "/v1/queues/mail/fairness-keys/acme", `{"weight": 3, "max_in_flight": 20}`)
	if k := r.json(t); r.status != 200 || k["weight"] != float64(3) || k["max_in_flight"] != float64(20) || k["runnable"] != float64(3) || k["declared"] != true {
		t.Fatalf("PUT key: %d %s", r.status, r.body)
	}
	if r := a.do("GET", "/v1/queues/mail/fairness-keys/globex", ""); r.status != 200 || r.json(t)["weight"] != float64(1) ||
		r.json(t)["runnable"] != float64(1) || r.json(t)["declared"] != false {
		t.Fatalf("GET a key without settings: %d %s", r.status, r.body)
	}
	keys := func(path string) (names []string, next any) {
		t.Helper()
		r := a.do("GET", path, "")
		if r.status != 200 {
			t.Fatalf("GET %s: %d %s", path, r.status, r.body)
		}
		page := r.json(t)
		for _, k := range page["keys"].([]any) {
			names = append(names, k.(map[string]any)["key"].(string))
		}
		return names, page["next_after"]
	}
	if got, next := keys("/v1/queues/mail/fairness-keys?limit=2"); strings.Join(got, ",") != ",acme" || next != "acme" {
		t.Fatalf("first page: %q next %v", got, next)
	}
	if got, next := keys("/v1/queues/mail/fairness-keys?limit=2&after=acme"); strings.Join(got, ",") != "acme-eu,globex" || next != nil {
		t.Fatalf("second (last) page: %q next %v", got, next)
	}
	if got, _ := keys("/v1/queues/mail/fairness-keys?prefix=acme"); strings.Join(got, ",") != "acme,acme-eu" {
		t.Fatalf("by prefix: %q", got)
	}
	if got, _ := keys("/v1/queues/mail/fairness-keys?order=runnable&limit=1"); strings.Join(got, ",") != "acme" {
		t.Fatalf("top key: %q", got)
	}
	// The jobs of a key, and of the default key "".
	if r := a.do("GET", "/v1/jobs?fairness_key=acme", ""); r.status != 200 || len(jobIDs(t, r)) != 3 {
		t.Fatalf("jobs of acme: %d %s", r.status, r.body)
	}
	if r := a.do("GET", "/v1/jobs?queue=mail&fairness_key=", ""); r.status != 200 || len(jobIDs(t, r)) != 1 {
		t.Fatalf("jobs of the default key: %d %s", r.status, r.body)
	}
	if r := a.do("DELETE", "/v1/queues/mail/fairness-keys/acme", ""); r.status != 204 {
		t.Fatalf("DELETE key: %d %s", r.status, r.body)
	}
	if r := a.do("GET", "/v1/queues/mail/fairness-keys/acme", ""); r.status != 200 || r.json(t)["weight"] != float64(1) || r.json(t)["declared"] != false {
		t.Fatalf("a key after DELETE: %d %s", r.status, r.body)
	}
	if n := a.count("fairness_keys"); n != 0 {
		t.Fatalf("%d key settings left after DELETE", n)
	}
	if r := a.do("PUT", "/v1/rate-limits/tight", `{"rate": 1, "burst": 2}`); r.status != 200 {
		t.Fatalf("rate limit: %d %s", r.status, r.body)
	}
	// Bad input writes nothing.
	a.expectRefusals([]refusal{
		{"a fairness mode that does not exist", "PUT", "/v1/queues/mail", `{"fairness": "weighted"}`, 422, "fairness"},
		{"a key over 512 bytes", "POST", "/v1/jobs", `{"handler": "h", "queue": "mail", "fairness_key": "` + strings.Repeat("k", 513) + `"}`, 422, "fairness_key"},
		{"a key that is not a string", "POST", "/v1/jobs", `{"handler": "h", "queue": "mail", "fairness_key": 7}`, 422, "fairness_key"},
		{"a rate limit in a fair queue", "POST", "/v1/jobs", `{"handler": "h", "queue": "mail", "rate_limit": {"name": "tight"}}`, 422, "rate_limit"},
		{"weight 0", "PUT", "/v1/queues/mail/fairness-keys/acme", `{"weight": 0}`, 422, "weight"},
		{"weight over the most", "PUT", "/v1/queues/mail/fairness-keys/acme", `{"weight": 1001}`, 422, "weight"},
		{"a cap of 0", "PUT", "/v1/queues/mail/fairness-keys/acme", `{"max_in_flight": 0}`, 422, "max_in_flight"},
		{"an unknown member", "PUT", "/v1/queues/mail/fairness-keys/acme", `{"wieght": 2}`, 422, "wieght"},
		{"malformed JSON", "PUT", "/v1/queues/mail/fairness-keys/acme", `{"weight": `, 400, ""},
		{"a key of an unknown queue", "PUT", "/v1/queues/nope/fairness-keys/acme", `{"weight": 2}`, 404, ""},
		{"the keys of an unknown queue", "GET", "/v1/queues/nope/fairness-keys", "", 404, ""},
		{"an unknown order", "GET", "/v1/queues/mail/fairness-keys?order=oldest", "", 422, "query/order"},
	})
}

// On Citus a fairness key places its jobs (docs/citus.md, "Fair share"), unless a
// concurrency key places the job first (where K=1 is exact); a rate limit beside it is a
// remote bucket. Each is taken, as on plain PostgreSQL. A debounce key beside it is taken
// too: the job lives at the fairness key's placement, and its debounce key is held from
// its own (docs/citus.md, "Displaced keys").
func TestFairnessKeyOnCitusBesideWhatPlacesElsewhere(t *testing.T) {
	if !pgtest.Citus() {
		t.Skip("Citus only (make test-citus): on plain PostgreSQL nothing places a job")
	}
	t.Parallel()
	a := newAPI(t, httpapi.Config{})
	a.registerHandler("h")
	if r := a.do("PUT", "/v1/rate-limits/slow", `{"rate": 1, "burst": 1}`); r.status != 200 {
		t.Fatalf("rate limit: %d %s", r.status, r.body)
	}
	for _, body := range []string{
		`{"handler": "h", "fairness_key": "acme", "concurrency_key": "k"}`,
		`{"handler": "h", "fairness_key": "acme", "rate_limit": {"name": "slow"}}`,
	} {
		r := a.do("POST", "/v1/jobs", body)
		if r.status != 201 {
			t.Fatalf("POST /v1/jobs %s: %d %s; want 201", body, r.status, r.body)
		}
		id := int64(r.json(t)["id"].(float64))
		want := pg.FairnessPlacement("acme")
		if strings.Contains(body, "concurrency_key") {
			want = pg.PlacementOfKey("k")
		}
		if int(id%pg.Placements) != want {
			t.Fatalf("the job of %s lives at %d, want %d", body, id%pg.Placements, want)
		}
		if got := a.do("GET", fmt.Sprintf("/v1/jobs/%d", id), ""); got.status != 200 || got.json(t)["fairness_key"] != "acme" {
			t.Fatalf("GET the job of %s: %d %s", body, got.status, got.body)
		}
	}
	body := `{"handler": "h", "fairness_key": "acme", "debounce": {"key": "d", "period": "1h"}}`
	first, again := a.do("POST", "/v1/jobs", body), a.do("POST", "/v1/jobs", body)
	if first.status != 201 || again.status != 200 || first.json(t)["id"] != again.json(t)["id"] || again.json(t)["debounced"] != true {
		t.Fatalf("a fairness key and a debounce key, twice: %d %s, then %d %s; want one job, the second debounced into it",
			first.status, first.body, again.status, again.body)
	}
}
