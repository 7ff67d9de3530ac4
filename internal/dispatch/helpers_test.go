package dispatch_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/dispatch"
	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
	"github.com/gendurable/gendurable/webhook"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

const testSecret = "whsec_dGhpcy1pcy1hLXRlc3Qtc2lnbmluZy1rZXktMzJieXRlcw=="

// verifyStandardWebhook checks a request's signature the way the Standard Webhooks
// specification describes it, written independently of package webhook.
func verifyStandardWebhook(secret string, h http.Header, body []byte) error {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return err
	}
	id, ts := h.Get("webhook-id"), h.Get("webhook-timestamp")
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || id == "" {
		return fmt.Errorf("missing id or timestamp")
	}
	if d := time.Since(time.Unix(sec, 0)); d > 5*time.Minute || d < -5*time.Minute {
		return fmt.Errorf("timestamp too far from now")
	}
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%s.%s", id, ts, body)
	want := base64.StdEncoding.EncodeToString(mac.Sum(nil))
	for _, part := range strings.Split(h.Get("webhook-signature"), " ") {
		version, sig, _ := strings.Cut(part, ",")
		if version == "v1" && hmac.Equal([]byte(sig), []byte(want)) {
			return nil
		}
	}
	return fmt.Errorf("no valid v1 signature")
}

// receiver is a webhook server that verifies and records every step it is sent and
// answers with respond.
type receiver struct {
	t       testing.TB
	srv     *httptest.Server
	mu      sync.Mutex
	calls   []webhook.StepRequest
	headers []http.Header
	respond func(w http.ResponseWriter, req *webhook.StepRequest)
}

func newReceiver(t testing.TB, respond func(w http.ResponseWriter, req *webhook.StepRequest)) *receiver {
	r := &receiver{t: t, respond: respond}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		if err := verifyStandardWebhook(testSecret, req.Header, body); err != nil {
			t.Errorf("signature check failed: %v", err)
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		var sr webhook.StepRequest
		if err := json.Unmarshal(body, &sr); err != nil {
			t.Errorf("bad step request: %v", err)
		}
		r.mu.Lock()
		r.calls = append(r.calls, sr)
		r.headers = append(r.headers, req.Header.Clone())
		r.mu.Unlock()
		r.respond(&ctxWriter{ResponseWriter: w, ctx: req.Context()}, &sr)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) Calls() []webhook.StepRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]webhook.StepRequest(nil), r.calls...)
}

func answer(w http.ResponseWriter, resp webhook.Response) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

type harness struct {
	db      *pg.DB
	eng     *engine.Engine
	counter *pg.StatementCounter
}

// newHarness opens a fresh database (statements counted) and an engine with a short lease.
func newHarness(t testing.TB, leaseTTL time.Duration) *harness {
	url := pgtest.NewDatabase(t)
	counter := &pg.StatementCounter{}
	db := pgtest.Open(t, url, pg.Options{Counter: counter, MaxConns: 20})
	eng, err := engine.New(db, engine.Config{LeaseTTL: leaseTTL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &harness{db: db, eng: eng, counter: counter}
}

// secondEngine is another engine (as in another server process) on the same database.
func (h *harness) secondEngine(t testing.TB, url string) *engine.Engine {
	db := pgtest.Open(t, url, pg.Options{MaxConns: 20})
	eng, err := engine.New(db, h.eng.Config(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

func (h *harness) handler(t testing.TB, name, url string, maxAttempts int) {
	t.Helper()
	base, tmo := 10, 2000
	_, err := h.db.HandlerUpsert(context.Background(), pg.HandlerUpsert{Name: name, URL: url, Secret: ptr(testSecret),
		MaxAttempts: &maxAttempts, BackoffBaseMS: &base, TimeoutMS: &tmo})
	if err != nil {
		t.Fatal(err)
	}
}

func (h *harness) insert(t testing.TB, jobs ...engine.NewJob) []pg.JobInserted {
	t.Helper()
	out, err := h.eng.InsertJobs(context.Background(), jobs)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func startDispatcher(t testing.TB, eng *engine.Engine, cfg dispatch.Config) *dispatch.Dispatcher {
	if cfg.PollMin == 0 {
		cfg.PollMin = 10 * time.Millisecond
		cfg.PollMax = 100 * time.Millisecond
		cfg.QueueRefresh = 100 * time.Millisecond
	}
	d := dispatch.New(eng, cfg, nil, nil)
	d.Start(context.Background())
	t.Cleanup(func() { d.Stop(context.Background()) })
	return d
}

// waitJob polls a job until cond holds or the deadline passes.
func waitJob(t testing.TB, db *pg.DB, id int64, timeout time.Duration, cond func(pg.JobDetail) bool) pg.JobDetail {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		j, err := db.JobGet(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if cond(j) {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d: condition not met within %s; last seen status=%s step=%d attempt=%d error=%s",
				id, timeout, j.Status, j.Step, j.Attempt, j.Error)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func hasStatus(s string) func(pg.JobDetail) bool {
	return func(j pg.JobDetail) bool { return j.Status == s }
}

func ptr[T any](v T) *T { return &v }

// jsonEqual compares two JSON documents by value.
func jsonEqual(got json.RawMessage, want string) bool {
	var a, b any
	if json.Unmarshal(got, &a) != nil || json.Unmarshal([]byte(want), &b) != nil {
		return false
	}
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// ctxWriter carries the request's context to respond functions (reqContext).
type ctxWriter struct {
	http.ResponseWriter
	ctx context.Context
}

// reqContext is the context of the request a respond function is answering.
func reqContext(w http.ResponseWriter) context.Context { return w.(*ctxWriter).ctx }
