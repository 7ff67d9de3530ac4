package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
	"github.com/gendurable/gendurable/webhook"
)

// send makes one request and answers its status and body.
func send(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// flowServer is a started server binary on a fresh database, with handler name
// registered to a webhook that runs step (its secret generated here).
type flowServer struct {
	base, dbURL string
	srv         *process
	out         output
}

func startFlowServer(t *testing.T, handler string, step func(*webhook.StepRequest)) flowServer {
	t.Helper()
	bin := build(t, t.TempDir(), "./cmd/server")
	f := flowServer{dbURL: pgtest.NewDatabase(t), out: newOutput(t)}
	const secret = "whsec_Zmxvdy1jb250cm9sLXRocm91Z2gtdGhlLXNlcnZlcg=="
	hook := httptest.NewServer(webhook.Handler(secret, func(_ context.Context, req *webhook.StepRequest) webhook.Response {
		step(req)
		return webhook.Response{Done: &webhook.Done{}}
	}))
	t.Cleanup(hook.Close)
	addr := freeAddr(t)
	f.srv = startProcess(t, bin, f.out, "DATABASE_URL="+f.dbURL, "GENDURABLE_ADDR="+addr, "GENDURABLE_ALLOW_PRIVATE_WEBHOOKS=true")
	f.base = "http://" + addr
	waitReady(t, f.base+"/readyz", f.srv, f.out)
	call(t, "PUT", f.base+"/v1/handlers/"+handler, fmt.Sprintf(`{"url": %q, "secret": %q}`, hook.URL+"/steps", secret))
	return f
}

// Through the HTTP API of the real server: a job naming two rate limits runs only when
// both buckets hold its weight, and takes from both; the job JSON shows its limits; a
// limit that does not exist is a 422 naming it, and writes nothing.
func TestSeveralRateLimitsThroughTheServer(t *testing.T) {
	t.Parallel()
	f := startFlowServer(t, "send", func(*webhook.StepRequest) {})
	base, srv, out := f.base, f.srv, f.out
	db := pgtest.Open(t, f.dbURL, pg.Options{MaxConns: 1})
	ctx := context.Background()
	// Rate 0: no refill until the test raises it.
	call(t, "PUT", base+"/v1/rate-limits/api", `{"rate": 0, "burst": 2}`)
	call(t, "PUT", base+"/v1/rate-limits/email", `{"rate": 0, "burst": 1}`)

	// Refusals first: nothing is written.
	for _, c := range []struct{ path, body, field string }{
		{"/v1/jobs", `{"handler": "send", "rate_limits": [{"name": "api"}, {"name": "sms"}]}`, "rate_limits/1/name"},
		{"/v1/jobs", `{"handler": "send", "rate_limits": [{"name": "api"}, {"name": "email", "key": "c", "weight": 2}]}`, "rate_limits/1/weight"},
		{"/v1/jobs", `{"handler": "send", "rate_limit": {"name": "api"}, "rate_limits": [{"name": "email"}]}`, "rate_limits"},
		{"/v1/jobs/batch", `{"jobs": [{"handler": "send"}, {"handler": "send", "rate_limits": [{"name": "email"}, {"name": "sms"}]}]}`,
			"jobs/1/rate_limits/1/name"},
	} {
		status, body := send(t, "POST", base+c.path, c.body)
		var problem struct {
			Errors []struct{ Field string } `json:"errors"`
		}
		_ = json.Unmarshal([]byte(body), &problem)
		if status != http.StatusUnprocessableEntity || len(problem.Errors) != 1 || problem.Errors[0].Field != c.field {
			t.Errorf("POST %s %s: %d %s; want 422 naming %s", c.path, c.body, status, body, c.field)
		}
	}
	if n, err := db.QueryInt(ctx, `SELECT count(*) FROM jobs`); err != nil || n != 0 {
		t.Fatalf("refused inserts wrote %d jobs (%v)", n, err)
	}

	both := `{"handler": "send", "rate_limits": [{"name": "api", "key": "c"}, {"name": "email", "key": "c"}]}`
	var ids []int64
	for range 3 {
		ids = append(ids, int64(call(t, "POST", base+"/v1/jobs", both)["id"].(float64)))
	}
	status := func(id int64) string {
		return call(t, "GET", fmt.Sprintf("%s/v1/jobs/%d", base, id), "")["status"].(string)
	}
	waitStatus := func(id int64, want string) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); status(id) != want; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("job %d is %s after 30 s, want %s\n%s", id, status(id), want, out.String())
			}
		}
	}
	waitStatus(ids[0], "done")
	// email is empty now and api holds 1: a job naming api alone runs, and overtakes the
	// two that also need email (they must not take api's token meanwhile).
	apiOnly := int64(call(t, "POST", base+"/v1/jobs", `{"handler": "send", "rate_limit": {"name": "api", "key": "c"}}`)["id"].(float64))
	waitStatus(apiOnly, "done")
	for _, id := range ids[1:] {
		if s := status(id); s != "runnable" {
			t.Fatalf("job %d is %s with email empty, want runnable", id, s)
		}
	}
	rows, err := db.QueryStrings(ctx, `SELECT name, key, tokens FROM rate_buckets ORDER BY 1, 2`)
	if err != nil || fmt.Sprint(rows) != "[[api c 0] [email c 0]]" {
		t.Fatalf("buckets after two grants: %v %v, want api/c and email/c at 0", rows, err)
	}
	// Email refills, api does not: a job naming email alone runs (so a pick saw email
	// refilled), and the two jobs still wait for api.
	call(t, "PUT", base+"/v1/rate-limits/email", `{"rate": 1000, "burst": 1}`)
	emailOnly := int64(call(t, "POST", base+"/v1/jobs", `{"handler": "send", "rate_limit": {"name": "email", "key": "c"}}`)["id"].(float64))
	waitStatus(emailOnly, "done")
	for _, id := range ids[1:] {
		if s := status(id); s != "runnable" {
			t.Fatalf("job %d is %s with api empty, want runnable", id, s)
		}
	}
	call(t, "PUT", base+"/v1/rate-limits/api", `{"rate": 1000, "burst": 2}`)
	waitStatus(ids[1], "done")
	waitStatus(ids[2], "done")

	got := call(t, "GET", fmt.Sprintf("%s/v1/jobs/%d", base, ids[2]), "")
	limits, _ := json.Marshal(got["rate_limits"])
	first, _ := json.Marshal(got["rate_limit"])
	if string(limits) != `[{"key":"c","name":"api","weight":1},{"key":"c","name":"email","weight":1}]` ||
		string(first) != `{"key":"c","name":"api","weight":1}` {
		t.Fatalf("job JSON shows rate_limit %s, rate_limits %s", first, limits)
	}
	stopServer(t, srv, out)
}
