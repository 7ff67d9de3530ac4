package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/gendurable/gendurable/internal/dispatch"
	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/httpapi"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
	"github.com/gendurable/gendurable/internal/webhooktest"
	"github.com/gendurable/gendurable/web"
	"github.com/gendurable/gendurable/webhook"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// browser starts headless Chromium (Debian's chromium package); CI installs it, so a
// missing browser fails there and skips elsewhere.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("no Chromium on this machine: .ci/run installs Debian's chromium package")
		}
		t.Skip("no Chromium here (apt-get install chromium)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.Headless,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.WindowSize(1280, 860))
	profile, err := os.MkdirTemp("", "gd-chromium")
	if err != nil {
		t.Fatal(err)
	}
	opts = append(opts, chromedp.UserDataDir(profile))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancelCtx()
		cancelAlloc() // waits for the browser process to exit
		_ = os.RemoveAll(profile)
	})
	// Accept the confirmation dialogs of the actions.
	chromedp.ListenTarget(ctx, func(ev any) {
		if _, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			go func() { _ = chromedp.Run(ctx, page.HandleJavaScriptDialog(true)) }()
		}
	})
	return ctx
}

// server is the real API and dashboard on a throwaway database, with the dispatcher
// running when the test needs steps to run.
type server struct {
	t     *testing.T
	url   string
	http  *httptest.Server
	token string // the API token the server requires ("" for none)
	eng   *engine.Engine
}

// newServer starts the server; dispatching starts the dispatcher that runs the steps.
func newServer(t *testing.T, token string, dispatching bool) *server {
	t.Helper()
	return newServerWith(t, token, dispatching, web.Config{})
}

// newServerWith is newServer with the dashboard told settings.
func newServerWith(t *testing.T, token string, dispatching bool, settings web.Config) *server {
	t.Helper()
	eng, err := engine.New(pgtest.NewDB(t), engine.Config{LeaseTTL: 30 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := httpapi.New(eng, httpapi.Config{Dashboard: web.HandlerWith(settings), APIToken: token}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	// The charts' counts, flushed often so a chart shows a step within its refresh.
	rollups := eng.NewStepRollups(engine.StepRollupConfig{Interval: 50 * time.Millisecond})
	rollups.Start(context.Background())
	t.Cleanup(rollups.Stop)
	if dispatching {
		d := dispatch.New(eng, dispatch.Config{PollMin: 10 * time.Millisecond, PollMax: 100 * time.Millisecond,
			QueueRefresh: 100 * time.Millisecond}, nil, nil)
		d.Start(context.Background())
		t.Cleanup(func() { d.Stop(context.Background()) })
	}
	return &server{t: t, url: srv.URL, http: srv, token: token, eng: eng}
}

// id inserts a job and returns its id.
func (s *server) id(body string) int64 {
	s.t.Helper()
	return int64(s.post("/v1/jobs", body)["id"].(float64))
}

// post sends a body to the API (PUT for queues and handlers) and fails the test on a 3xx or more.
func (s *server) post(path, body string) map[string]any {
	s.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.url+path, strings.NewReader(body))
	if strings.HasPrefix(path, "/v1/queues") || strings.HasPrefix(path, "/v1/handlers") {
		req.Method = http.MethodPut
	}
	req.Header.Set("Content-Type", "application/json")
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		s.t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
	}
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return m
}

func (s *server) status(id int64) string {
	req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/v1/jobs/%d", s.url, id), nil)
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&m)
	return fmt.Sprint(m["status"])
}

func (s *server) waitStatus(id int64, want string) {
	s.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for s.status(id) != want {
		if time.Now().After(deadline) {
			s.t.Fatalf("job %d is %s, want %s", id, s.status(id), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// screenshot saves the page under test-artifacts/; with GENDURABLE_DOCS_SCREENSHOTS=1 a
// screenshot that has a docs name also replaces docs/dashboard-<name> (the README's).
func screenshot(t *testing.T, ctx context.Context, name string, docs bool) {
	var png []byte
	if err := chromedp.Run(ctx, chromedp.FullScreenshot(&png, 100)); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join("..", "test-artifacts")
	_ = os.MkdirAll(dir, 0o755)
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
	if docs && os.Getenv("GENDURABLE_DOCS_SCREENSHOTS") == "1" {
		if err := os.WriteFile(filepath.Join("..", "docs", "dashboard-"+name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// waitText waits until the element matched by selector contains text.
func waitText(selector, text string) chromedp.Action {
	return chromedp.Poll(fmt.Sprintf(`(document.querySelector(%q)?.textContent || '').includes(%q)`, selector, text),
		nil, chromedp.WithPollingTimeout(15*time.Second))
}

func TestDashboardInABrowser(t *testing.T) {
	ctx := browser(t)
	s := newServer(t, "", true)
	srv := s.http

	rcv := webhooktest.New(t, func(w http.ResponseWriter, req *webhook.StepRequest) {
		switch req.Job.Handler {
		case "greeter":
			if req.Job.Step < 2 {
				webhooktest.Answer(w, webhook.Response{Next: &webhook.Next{State: json.RawMessage(fmt.Sprintf(`{"count":%d}`, req.Job.Step+1))}})
				return
			}
			webhooktest.Answer(w, webhook.Response{Done: &webhook.Done{Result: json.RawMessage(`{"greeting":"hello"}`)}})
		case "charge":
			webhooktest.Answer(w, webhook.Response{Fail: &webhook.Fail{Error: json.RawMessage(`{"message":"card declined"}`)}})
		case "approval":
			for _, sg := range req.Signals {
				if sg.Name == "approved" {
					webhooktest.Answer(w, webhook.Response{Done: &webhook.Done{Result: sg.Payload}})
					return
				}
			}
			webhooktest.Answer(w, webhook.Response{Await: &webhook.Await{Signals: []string{"approved"}}})
		default:
			webhooktest.Answer(w, webhook.Response{Done: &webhook.Done{}})
		}
	})
	for _, name := range []string{"greeter", "charge", "approval", "report"} {
		s.post("/v1/handlers/"+name, fmt.Sprintf(`{"url": %q, "secret": %q, "max_attempts": 1}`, rcv.URL, webhooktest.Secret))
	}
	s.post("/v1/queues/nightly", `{"paused": true}`)
	greet := int64(s.post("/v1/jobs", `{"handler": "greeter", "input": {"name": "Ada"}, "key": "user-7"}`)["id"].(float64))
	s.post("/v1/jobs", `{"handler": "greeter", "input": {"name": "Grace"}}`)
	charge := int64(s.post("/v1/jobs", `{"handler": "charge", "queue": "payments", "input": {"amount": 42}}`)["id"].(float64))
	approval := int64(s.post("/v1/jobs", `{"handler": "approval", "key": "expense-1001"}`)["id"].(float64))
	held := int64(s.post("/v1/jobs", `{"handler": "report", "queue": "nightly"}`)["id"].(float64))
	s.waitStatus(greet, "done")
	s.waitStatus(charge, "failed")
	s.waitStatus(approval, "awaiting")

	// The list, then a filter on status.
	if err := chromedp.Run(ctx,
		chromedp.Navigate(srv.URL+"/#/runs"),
		chromedp.WaitVisible(`table[data-testid=runs]`),
		waitText(`table[data-testid=runs]`, "approval"),
	); err != nil {
		t.Fatal(err)
	}
	screenshot(t, ctx, "runs.png", true)
	var rows int
	if err := chromedp.Run(ctx,
		chromedp.SetValue(`select[data-testid=status-filter]`, "failed"),
		chromedp.Click(`form.filters button[type=submit]`),
		chromedp.Poll(`location.hash.includes('status=failed')`, nil),
		chromedp.Poll(`document.querySelectorAll('table[data-testid=runs] tbody tr').length === 1`, nil, chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.Evaluate(`document.querySelectorAll('table[data-testid=runs] tbody tr').length`, &rows),
	); err != nil {
		t.Fatalf("filtering by status: %v", err)
	}
	if rows != 1 {
		t.Fatalf("the failed filter shows %d rows", rows)
	}

	// Open the failed run from the list, see its timeline, retry it.
	if err := chromedp.Run(ctx,
		chromedp.Click(fmt.Sprintf(`tr[data-job="%d"] a`, charge)),
		chromedp.WaitVisible(`table[data-testid=timeline]`),
		waitText(`table[data-testid=timeline]`, "fail"),
		waitText(`.json-grid`, "card declined"),
		chromedp.Click(`//button[text()="Retry"]`),
		waitText(`.notice-slot`, "runnable again"),
	); err != nil {
		t.Fatalf("retrying a failed run: %v", err)
	}
	// It runs again (and fails again): two attempts in its history.
	if err := chromedp.Run(ctx, chromedp.Poll(`document.querySelectorAll('table[data-testid=timeline] tbody tr').length === 2`,
		nil, chromedp.WithPollingTimeout(15*time.Second))); err != nil {
		t.Fatalf("the retried run's timeline: %v", err)
	}

	// Cancel a runnable job (its queue is paused).
	if err := chromedp.Run(ctx,
		chromedp.Navigate(fmt.Sprintf("%s/#/runs/%d", srv.URL, held)),
		waitText(`.run-head`, "runnable"),
		chromedp.Click(`//button[text()="Cancel"]`),
		waitText(`.notice-slot`, "cancelled"),
		waitText(`.run-head`, "cancelled"),
	); err != nil {
		t.Fatalf("cancelling a runnable job: %v", err)
	}
	if got := s.status(held); got != "cancelled" {
		t.Fatalf("the cancelled job is %s in the database", got)
	}

	// Send the signal that wakes the awaiting approval.
	if err := chromedp.Run(ctx,
		chromedp.Navigate(fmt.Sprintf("%s/#/runs/%d", srv.URL, approval)),
		waitText(`.run-head`, "awaiting"),
		chromedp.SendKeys(`form.signal-form input[name=name]`, "approved"),
		chromedp.SendKeys(`form.signal-form input[name=payload]`, `{"by": "ana"}`),
		chromedp.Click(`form.signal-form button[type=submit]`),
		waitText(`.notice-slot`, "woke the job"),
		waitText(`.run-head`, "done"),
		waitText(`.json-grid`, "ana"),
	); err != nil {
		t.Fatalf("waking an awaiting run with a signal: %v", err)
	}

	// A finished run's detail page, for the docs.
	if err := chromedp.Run(ctx,
		chromedp.Navigate(fmt.Sprintf("%s/#/runs/%d", srv.URL, greet)),
		chromedp.Poll(`document.querySelectorAll('table[data-testid=timeline] tbody tr').length === 3`, nil),
		waitText(`table[data-testid=timeline]`, "done"),
	); err != nil {
		t.Fatal(err)
	}
	screenshot(t, ctx, "run.png", false)

	// Queues: counts and pause/resume.
	if err := chromedp.Run(ctx,
		chromedp.Navigate(srv.URL+"/#/queues"),
		waitText(`table[data-testid=queues]`, "nightly"),
		chromedp.Click(`//tr[.//button[text()="nightly"]]//button[text()="Resume"]`),
		waitText(`.notice-slot`, "resumed"),
	); err != nil {
		t.Fatalf("queues page: %v", err)
	}
	screenshot(t, ctx, "queues.png", true)
}

// With an API token configured the dashboard asks for it, sends it, and shows the runs.
func TestDashboardAsksForTheToken(t *testing.T) {
	ctx := browser(t)
	s := newServer(t, "dash-token", false)
	srv := s.http
	s.post("/v1/handlers/report", `{"url": "http://127.0.0.1:9/"}`)
	s.post("/v1/jobs", `{"handler": "report", "queue": "q"}`)
	noForget := `document.querySelector('button.signout') === null`
	if err := chromedp.Run(ctx,
		chromedp.Navigate(srv.URL+"/#/runs"),
		chromedp.WaitVisible(`form.token input[name=token]`),
		chromedp.Poll(noForget, nil, chromedp.WithPollingTimeout(5*time.Second)), // no token held yet
		chromedp.SendKeys(`form.token input[name=token]`, "wrong"),
		chromedp.Click(`form.token button[type=submit]`),
		chromedp.WaitVisible(`form.token input[name=token]`), // refused: asked again
		chromedp.SendKeys(`form.token input[name=token]`, "dash-token"),
		chromedp.Click(`form.token button[type=submit]`),
		chromedp.WaitVisible(`table[data-testid=runs]`),
		waitText(`table[data-testid=runs]`, "report"),
	); err != nil {
		t.Fatalf("signing in: %v", err)
	}
	// The token held can be forgotten: the next request is refused and the prompt is back.
	if err := chromedp.Run(ctx,
		chromedp.Click(`button.signout`),
		chromedp.WaitVisible(`form.token input[name=token]`),
		chromedp.Poll(noForget, nil, chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.Poll(`localStorage.getItem('gendurable.token') === null`, nil, chromedp.WithPollingTimeout(5*time.Second)),
	); err != nil {
		t.Fatalf("forgetting the token: %v", err)
	}
}

// A poll that fails shows the problem the API answered, keeps the last data, and clears
// on the next success: a filter the API rejects (422), a run that does not exist (404),
// and a server that stopped answering.
func TestDashboardShowsAFailingPoll(t *testing.T) {
	ctx, cancel := context.WithTimeout(browser(t), 2*time.Minute) // bounds the WaitVisibles
	defer cancel()
	s := newServer(t, "", false)
	srv := s.http
	s.post("/v1/handlers/report", `{"url": "http://127.0.0.1:9/"}`)
	s.post("/v1/queues/held", `{"paused": true}`)
	id := int64(s.post("/v1/jobs", `{"handler": "report", "queue": "held"}`)["id"].(float64))

	gone := `document.querySelector('[data-testid=poll-error]') === null`
	if err := chromedp.Run(ctx,
		chromedp.Navigate(srv.URL+"/#/runs?status=bogus"),
		chromedp.WaitVisible(`[data-testid=poll-error]`),
		waitText(`[data-testid=poll-error]`, "The request is not valid"),
		waitText(`[data-testid=poll-error]`, "query/status"),
	); err != nil {
		t.Fatalf("a rejected filter: %v", err)
	}
	var tables int
	if err := chromedp.Run(ctx, chromedp.Evaluate(`document.querySelectorAll('table[data-testid=runs]').length`, &tables)); err != nil {
		t.Fatal(err)
	}
	if tables != 0 {
		t.Fatal("the runs of no filter are shown under a filter the API rejected")
	}
	screenshot(t, ctx, "poll-error.png", false)
	// A valid filter: the next poll succeeds, the banner goes, the rows come.
	if err := chromedp.Run(ctx,
		chromedp.SetValue(`select[data-testid=status-filter]`, "runnable"),
		chromedp.Click(`form.filters button[type=submit]`),
		chromedp.Poll(`location.hash.includes('status=runnable')`, nil, chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.WaitVisible(fmt.Sprintf(`tr[data-job="%d"]`, id)),
		chromedp.Poll(gone, nil, chromedp.WithPollingTimeout(10*time.Second)),
	); err != nil {
		t.Fatalf("recovering from a rejected filter: %v", err)
	}

	if err := chromedp.Run(ctx,
		chromedp.Navigate(fmt.Sprintf("%s/#/runs/%d", srv.URL, id+1000)),
		chromedp.WaitVisible(`[data-testid=poll-error]`),
		waitText(`[data-testid=poll-error]`, "Not found"),
	); err != nil {
		t.Fatalf("a run that does not exist: %v", err)
	}

	// The server stops answering while a run is shown: the banner says so over the
	// last data, which stays on the page.
	if err := chromedp.Run(ctx,
		chromedp.Navigate(fmt.Sprintf("%s/#/runs/%d", srv.URL, id)),
		waitText(`.run-head`, "runnable"),
		chromedp.Poll(gone, nil, chromedp.WithPollingTimeout(10*time.Second)),
	); err != nil {
		t.Fatalf("a run's page: %v", err)
	}
	srv.Close()
	if err := chromedp.Run(ctx,
		chromedp.WaitVisible(`[data-testid=poll-error]`),
		waitText(`[data-testid=poll-error]`, "Server unreachable"),
		waitText(`[data-testid=poll-error]`, "last successful refresh"),
		waitText(`.run-head`, "runnable"),
	); err != nil {
		t.Fatalf("a server that stopped answering: %v", err)
	}
}

// A response to an older request never overwrites newer data: the runs page's request for
// the old filter is held in the browser (DevTools Fetch interception) while the user
// changes the filter; the new filter's rows show, and the old request is cancelled
// rather than left to land on top of them.
func TestDashboardDropsAStaleResponse(t *testing.T) {
	ctx, cancel := context.WithTimeout(browser(t), 2*time.Minute) // bounds the waits
	defer cancel()
	s := newServer(t, "", false)
	srv := s.http
	s.post("/v1/handlers/report", `{"url": "http://127.0.0.1:9/"}`)
	s.post("/v1/queues/held", `{"paused": true}`)
	id := int64(s.post("/v1/jobs", `{"handler": "report", "queue": "held"}`)["id"].(float64))

	held := make(chan network.RequestID, 8)
	cancelled := make(chan network.RequestID, 8)
	chromedp.ListenTarget(ctx, func(ev any) {
		switch e := ev.(type) {
		case *fetch.EventRequestPaused:
			if strings.Contains(e.Request.URL, "/v1/jobs?") && strings.Contains(e.Request.URL, "status=failed") {
				held <- e.NetworkID // never answered
				return
			}
			go func() { _ = chromedp.Run(ctx, fetch.ContinueRequest(e.RequestID)) }()
		case *network.EventLoadingFailed:
			if e.Canceled {
				cancelled <- e.RequestID
			}
		}
	})
	if err := chromedp.Run(ctx,
		network.Enable(),
		fetch.Enable().WithPatterns([]*fetch.RequestPattern{{URLPattern: "*/v1/jobs*"}}),
		chromedp.Navigate(srv.URL+"/#/runs?status=failed"),
	); err != nil {
		t.Fatal(err)
	}
	var old network.RequestID
	select {
	case old = <-held:
	case <-ctx.Done():
		t.Fatal("the runs page never asked for the failed runs")
	}
	if err := chromedp.Run(ctx,
		chromedp.SetValue(`select[data-testid=status-filter]`, "runnable"),
		chromedp.Click(`form.filters button[type=submit]`),
		chromedp.WaitVisible(fmt.Sprintf(`tr[data-job="%d"]`, id)),
	); err != nil {
		t.Fatalf("the new filter's rows: %v", err)
	}
	deadline := time.After(15 * time.Second)
	for {
		select {
		case c := <-cancelled:
			if c == old {
				return
			}
		case <-deadline:
			t.Fatal("the old filter's request was left in flight: its answer could overwrite the new rows")
		}
	}
}
