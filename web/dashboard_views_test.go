package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gendurable/gendurable/internal/webhooktest"
	"github.com/gendurable/gendurable/webhook"
)

// waitJS waits until a JavaScript expression is true on the page.
func waitJS(expr string) chromedp.Action {
	return chromedp.Poll(expr, nil, chromedp.WithPollingTimeout(15*time.Second))
}

// historyGo is the browser's back (-1) or forward (1) button.
func historyGo(n int) chromedp.Action {
	return chromedp.Evaluate(fmt.Sprintf(`history.go(%d)`, n), nil)
}

// textOf reads the trimmed text of the first element selector matches ("" when none does).
func textOf(ctx context.Context, t *testing.T, selector string) string {
	t.Helper()
	var s string
	if err := chromedp.Run(ctx, chromedp.Evaluate(fmt.Sprintf(`(document.querySelector(%q)?.textContent || '').trim()`, selector), &s)); err != nil {
		t.Fatal(err)
	}
	return s
}

// timelineColumn reads one column of the timeline, oldest attempt first.
func timelineColumn(ctx context.Context, t *testing.T, column int) []string {
	t.Helper()
	var cells []string
	if err := chromedp.Run(ctx, chromedp.Evaluate(fmt.Sprintf(
		`[...document.querySelectorAll('table[data-testid=timeline] tbody tr')].map(r => r.children[%d].textContent.trim())`, column), &cells)); err != nil {
		t.Fatal(err)
	}
	return cells
}

// A finished run's attempts are those of its last step (not the 0 the API keeps for "no
// current step"), an asynchronous step's HTTP status is the 202 its webhook answered,
// long errors are shown whole (wrapped, nothing scrolls out of sight), the throughput
// legend shows the hour's figures without a hover, and there is no token to forget
// when the server needs none.
func TestDashboardSaysAttemptsStatusesAndErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(browser(t), 3*time.Minute)
	defer cancel()
	s := newServer(t, "", true)
	long := strings.Repeat("the issuer refused the charge, ", 10) + "ref=" + strings.Repeat("9f3a", 60) // 240 characters without a space
	rcv := webhooktest.New(t, func(w http.ResponseWriter, req *webhook.StepRequest) {
		switch req.Job.Handler {
		case "greeter":
			if req.Job.Step < 2 {
				webhooktest.Answer(w, webhook.Response{Next: &webhook.Next{}})
				return
			}
			webhooktest.Answer(w, webhook.Response{Done: &webhook.Done{}})
		case "flaky": // fails its first attempt
			if req.Job.Attempt == 1 {
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
			webhooktest.Answer(w, webhook.Response{Done: &webhook.Done{}})
		case "async": // accepts the step, then reports its outcome over the API
			w.WriteHeader(http.StatusAccepted)
			go func() {
				body := fmt.Sprintf(`{"token": %q, "done": {"result": {"async": true}}}`, req.Lease.Token)
				resp, err := http.Post(fmt.Sprintf("%s/v1/jobs/%d/outcome", s.url, req.Job.ID), "application/json", strings.NewReader(body))
				if err != nil || resp.StatusCode != http.StatusOK {
					t.Errorf("the async outcome: %v %v", resp, err)
				}
				if resp != nil {
					resp.Body.Close()
				}
			}()
		case "verbose":
			e, _ := json.Marshal(map[string]any{"message": long, "code": "E_DECLINED"})
			webhooktest.Answer(w, webhook.Response{Fail: &webhook.Fail{Error: e}})
		}
	})
	for _, name := range []string{"greeter", "flaky", "async", "verbose", "report"} {
		s.post("/v1/handlers/"+name, fmt.Sprintf(`{"url": %q, "secret": %q, "max_attempts": 5, "backoff_base": "10ms", "backoff_max": "20ms"}`,
			rcv.URL, webhooktest.Secret))
	}
	s.post("/v1/queues/held", `{"paused": true}`)
	greet, flaky := s.id(`{"handler": "greeter"}`), s.id(`{"handler": "flaky"}`)
	async, verbose := s.id(`{"handler": "async"}`), s.id(`{"handler": "verbose"}`)
	held := s.id(`{"handler": "report", "queue": "held"}`)
	for id, want := range map[int64]string{greet: "done", flaky: "done", async: "done", verbose: "failed"} {
		s.waitStatus(id, want)
	}

	run := func(id int64, rows int) {
		t.Helper()
		if err := chromedp.Run(ctx,
			chromedp.Navigate(fmt.Sprintf("%s/#/runs/%d", s.url, id)),
			waitJS(fmt.Sprintf(`document.querySelectorAll('table[data-testid=timeline] tbody tr').length === %d`, rows)),
		); err != nil {
			t.Fatalf("run %d's page: %v", id, err)
		}
	}
	run(greet, 3)
	if got := textOf(ctx, t, `[data-testid=attempts]`); got != "1 of 5" {
		t.Errorf("a run done in one attempt per step says attempts %q", got)
	}
	if got := textOf(ctx, t, `dl.facts`); !strings.Contains(got, "Steps completed3") {
		t.Errorf("the facts of a three-step run: %q", got)
	}
	if got := fmt.Sprint(timelineColumn(ctx, t, 3)); got != "[200 200 200]" {
		t.Errorf("the HTTP column of three answered steps: %s", got)
	}
	var noForget bool
	if err := chromedp.Run(ctx, chromedp.Evaluate(`document.querySelector('button.signout') === null`, &noForget)); err != nil || !noForget {
		t.Errorf("Forget token is offered by a server without auth (%v)", err)
	}

	run(flaky, 2)
	if got := textOf(ctx, t, `[data-testid=attempts]`); got != "2 of 5" {
		t.Errorf("a run done at its second attempt says attempts %q", got)
	}
	if got := fmt.Sprint(timelineColumn(ctx, t, 2)) + fmt.Sprint(timelineColumn(ctx, t, 3)); got != "[http_error done][500 200]" {
		t.Errorf("the flaky run's outcomes and statuses: %s", got)
	}
	screenshot(t, ctx, "run.png", true) // a retried step, for the README

	run(async, 1)
	if got := fmt.Sprint(timelineColumn(ctx, t, 2)) + fmt.Sprint(timelineColumn(ctx, t, 3)); got != "[done][202 async]" {
		t.Errorf("an asynchronous step's outcome and status: %s", got)
	}

	run(verbose, 1)
	if got := textOf(ctx, t, `[data-testid=attempts]`); got != "1 of 5" {
		t.Errorf("a run failed at its first attempt says attempts %q", got)
	}
	for _, where := range []string{`td.error-cell`, `[data-testid=job-error]`} {
		if got := textOf(ctx, t, where); !strings.Contains(got, long) || !strings.Contains(got, "details") {
			t.Errorf("%s does not show the whole error and its details: %q", where, got)
		}
	}
	// Nothing is cut: no box that shows the error is wider inside than it is shown.
	var clipped []string
	if err := chromedp.Run(ctx,
		chromedp.Click(`td.error-cell summary`),
		waitText(`td.error-cell details`, "E_DECLINED"),
		chromedp.Evaluate(`[...document.querySelectorAll('td.error-cell, [data-testid=job-error], details.json pre, .table-wrap')]
			.filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.className || e.tagName)`, &clipped),
	); err != nil {
		t.Fatal(err)
	}
	if len(clipped) > 0 {
		t.Errorf("these boxes cut the error off (they scroll sideways): %v", clipped)
	}
	screenshot(t, ctx, "run-error.png", false)

	// The runs list: a finished run keeps its last step's attempts, 0 of 5 for one not yet run.
	if err := chromedp.Run(ctx,
		chromedp.Navigate(s.url+"/#/runs"),
		chromedp.WaitVisible(fmt.Sprintf(`tr[data-job="%d"]`, held)),
	); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[int64]string{greet: "1/5", held: "0/5", verbose: "1/5"} {
		if got := textOf(ctx, t, fmt.Sprintf(`tr[data-job="%d"] td:nth-child(7)`, id)); got != want {
			t.Errorf("run %d's attempts in the list: %q, want %q", id, got, want)
		}
	}

	// The throughput legend shows the last hour's figures before any hover: 7 steps, a
	// retried attempt (flaky's 500) and a failed one (verbose's fail).
	if err := chromedp.Run(ctx,
		chromedp.Navigate(s.url+"/#/queues?queue=default"),
		chromedp.WaitVisible(`.u-legend`),
		waitText(`figure.chart`, "last hour"),
	); err != nil {
		t.Fatalf("the queue's chart: %v", err)
	}
	legend := textOf(ctx, t, `.u-legend`)
	if strings.Contains(legend, "--") || !strings.Contains(legend, "steps7") || !strings.Contains(legend, "retried1") ||
		!strings.Contains(legend, "failed1") ||
		!strings.Contains(legend, "error rate28.6 %") {
		t.Errorf("the legend without a hover: %q", legend)
	}
	// The chosen queue is in the URL.
	if err := chromedp.Run(ctx,
		chromedp.Click(`//table[@data-testid="queues"]//button[text()="held"]`),
		waitJS(`location.hash === '#/queues?queue=held'`),
		waitText(`figcaption`, "of held"),
	); err != nil {
		t.Fatalf("choosing a queue: %v", err)
	}
}

// A run's family is a tree from its root: parents, children and grandchildren with their
// statuses and links, kept live, with the run shown highlighted.
func TestDashboardShowsARunsFamily(t *testing.T) {
	ctx, cancel := context.WithTimeout(browser(t), 3*time.Minute)
	defer cancel()
	s := newServer(t, "", true)
	rcv := webhooktest.New(t, func(w http.ResponseWriter, req *webhook.StepRequest) {
		var input struct {
			What    string `json:"what"`
			Confirm bool   `json:"confirm"`
		}
		_ = json.Unmarshal(req.Job.Input, &input)
		switch {
		case req.Wake == "children" || req.Job.Handler == "book" && !input.Confirm:
			webhooktest.Answer(w, webhook.Response{Done: &webhook.Done{Result: json.RawMessage(fmt.Sprintf(`{"booked": %q}`, input.What))}})
		case req.Job.Handler == "trip":
			webhooktest.Answer(w, webhook.Response{Spawn: &webhook.Spawn{Children: []webhook.ChildSpec{
				{Handler: "book", Input: json.RawMessage(`{"what": "flight"}`)},
				{Handler: "book", Input: json.RawMessage(`{"what": "hotel", "confirm": true}`)},
			}}})
		case req.Job.Handler == "book":
			webhooktest.Answer(w, webhook.Response{Spawn: &webhook.Spawn{Children: []webhook.ChildSpec{
				{Handler: "confirm", Key: "hotel-confirmation"},
			}}})
		case len(req.Signals) > 0: // confirm, signalled
			webhooktest.Answer(w, webhook.Response{Done: &webhook.Done{}})
		default:
			webhooktest.Answer(w, webhook.Response{Await: &webhook.Await{Signals: []string{"confirmed"}}})
		}
	})
	for _, name := range []string{"trip", "book", "confirm"} {
		s.post("/v1/handlers/"+name, fmt.Sprintf(`{"url": %q, "secret": %q}`, rcv.URL, webhooktest.Secret))
	}
	trip := s.id(`{"handler": "trip", "key": "trip-to-lisbon"}`)
	// The family, once the grandchild awaits: trip → flight (done), hotel → confirm.
	var confirm int64
	deadline := time.Now().Add(15 * time.Second)
	for confirm == 0 {
		var page struct {
			Jobs []struct {
				ID     int64  `json:"id"`
				Status string `json:"status"`
			} `json:"jobs"`
		}
		resp, err := http.Get(s.url + "/v1/jobs?handler=confirm")
		if err != nil {
			t.Fatal(err)
		}
		_ = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if len(page.Jobs) == 1 && page.Jobs[0].Status == "awaiting" {
			confirm = page.Jobs[0].ID
		} else if time.Now().After(deadline) {
			t.Fatalf("no awaiting grandchild: %+v", page)
		} else {
			time.Sleep(20 * time.Millisecond) // the poll's pace, not a wait for the outcome
		}
	}
	tree := `ul[data-testid=family]`
	items := fmt.Sprintf(`document.querySelectorAll('%s li[data-job]').length === 4`, tree)
	if err := chromedp.Run(ctx,
		chromedp.Navigate(fmt.Sprintf("%s/#/runs/%d", s.url, confirm)),
		chromedp.WaitVisible(tree),
		waitJS(items),
		waitText(`section.family h3`, fmt.Sprintf("4 runs under run %d", trip)),
	); err != nil {
		t.Fatalf("the grandchild's family: %v", err)
	}
	// Root first, the run itself highlighted, the others linked, each with its status and
	// under its parent (siblings in id order, which a spawn does not fix).
	var shape []string
	if err := chromedp.Run(ctx, chromedp.Evaluate(fmt.Sprintf(`[...document.querySelectorAll('%s li[data-job]')].map(li => {
		const says = (n) => n ? n.querySelector('.node .muted').textContent + '/' + n.querySelector('.node .badge').textContent : 'none';
		return says(li) + ' under ' + says(li.parentElement.closest('li[data-job]'))
			+ (li.getAttribute('aria-current') ? ' here' : '') + (li.querySelector(':scope > .node > a') ? ' link' : '');
	})`, tree), &shape)); err != nil {
		t.Fatal(err)
	}
	sort.Strings(shape[1:])
	want := "[trip/awaiting under none link book/awaiting under trip/awaiting link book/done under trip/awaiting link confirm/awaiting under book/awaiting here]"
	if fmt.Sprint(shape) != want {
		t.Fatalf("the family tree:\n got %v\nwant %s", shape, want)
	}
	screenshot(t, ctx, "family.png", true)

	// The root's page shows the same family, with the grandchild linked; the signal that
	// confirms it finishes the whole family, and the tree follows.
	if err := chromedp.Run(ctx,
		chromedp.Click(fmt.Sprintf(`%s li[data-job="%d"] > .node > a`, tree, trip)),
		waitJS(fmt.Sprintf(`location.hash === '#/runs/%d'`, trip)),
		waitText(`.run-head`, "trip"),
		waitJS(items),
		waitJS(fmt.Sprintf(`document.querySelector('%s li[data-job="%d"]').getAttribute('aria-current') === 'true'`, tree, trip)),
		waitText(`dl.facts`, "1 of 2 finished"),
	); err != nil {
		t.Fatalf("the root's family: %v", err)
	}
	s.post("/v1/signals", `{"key": "hotel-confirmation", "name": "confirmed"}`)
	if err := chromedp.Run(ctx,
		waitText(`.run-head`, "done"),
		waitJS(fmt.Sprintf(`[...document.querySelectorAll('%s .node .badge')].every(b => b.textContent === 'done')`, tree)),
		waitText(`dl.facts`, "2 of 2 finished"),
	); err != nil {
		t.Fatalf("the family once confirmed: %v", err)
	}
}

// Searching by id, key and handler, with the filters in the URL: a link shares them, back
// and forward move between them (the fields follow), and a link from a row adds one.
func TestDashboardKeepsSearchInTheURL(t *testing.T) {
	ctx, cancel := context.WithTimeout(browser(t), 3*time.Minute)
	defer cancel()
	s := newServer(t, "", false)
	for _, name := range []string{"invoice", "report"} {
		s.post("/v1/handlers/"+name, `{"url": "http://127.0.0.1:9/"}`)
	}
	s.post("/v1/queues/held", `{"paused": true}`)
	inv7 := s.id(`{"handler": "invoice", "queue": "held", "key": "customer-7"}`)
	inv8 := s.id(`{"handler": "invoice", "queue": "held", "key": "customer-8"}`)
	rep := s.id(`{"handler": "report", "queue": "held", "key": "weekly"}`)
	shown := func(ids ...int64) chromedp.Action {
		var want []string
		for _, id := range ids {
			want = append(want, fmt.Sprint(id))
		}
		return waitJS(fmt.Sprintf(`[...document.querySelectorAll('table[data-testid=runs] tbody tr')].map(r => r.dataset.job).join() === %q`,
			strings.Join(want, ",")))
	}
	field := func(name, want string) chromedp.Action {
		return waitJS(fmt.Sprintf(`document.querySelector('form.filters [name=%s]').value === %q`, name, want))
	}
	if err := chromedp.Run(ctx,
		chromedp.Navigate(s.url+"/#/runs"),
		shown(rep, inv8, inv7),
		// By key.
		chromedp.SendKeys(`form.filters input[name=key]`, "customer-8"),
		chromedp.Click(`form.filters button[type=submit]`),
		waitJS(`location.hash === '#/runs?key=customer-8'`),
		shown(inv8),
	); err != nil {
		t.Fatalf("searching by key: %v", err)
	}
	// Clear, then by handler from the link in a row.
	if err := chromedp.Run(ctx,
		chromedp.Click(`form.filters a.clear`),
		waitJS(`location.hash === '#/runs'`),
		shown(rep, inv8, inv7),
		field("key", ""),
		chromedp.Click(fmt.Sprintf(`tr[data-job="%d"] td:nth-child(3) a`, inv7)),
		waitJS(`location.hash === '#/runs?handler=invoice'`),
		shown(inv8, inv7),
		field("handler", "invoice"),
	); err != nil {
		t.Fatalf("searching by handler: %v", err)
	}
	// Back: all runs, then the key; forward: all runs, then the handler again.
	if err := chromedp.Run(ctx,
		historyGo(-1), waitJS(`location.hash === '#/runs'`), shown(rep, inv8, inv7), field("handler", ""),
		historyGo(-1), waitJS(`location.hash === '#/runs?key=customer-8'`), shown(inv8), field("key", "customer-8"),
		historyGo(1), waitJS(`location.hash === '#/runs'`), shown(rep, inv8, inv7), field("key", ""),
		historyGo(1), waitJS(`location.hash === '#/runs?handler=invoice'`), shown(inv8, inv7), field("handler", "invoice"),
	); err != nil {
		t.Fatalf("back and forward: %v", err)
	}
	// A shared link, opened afresh, shows its filters in the fields and its runs.
	if err := chromedp.Run(ctx,
		chromedp.Navigate(s.url+"/#/runs?handler=invoice&key=customer-7&status=runnable"),
		chromedp.Reload(),
		shown(inv7),
		field("handler", "invoice"), field("key", "customer-7"), field("status", "runnable"),
	); err != nil {
		t.Fatalf("a shared link: %v", err)
	}
	// By id (as typed, with or without #).
	if err := chromedp.Run(ctx,
		chromedp.SendKeys(`form.filters input[name=id]`, fmt.Sprintf("#%d", rep)),
		chromedp.Click(`form.filters button[type=submit]`),
		waitJS(fmt.Sprintf(`location.hash === '#/runs/%d'`, rep)),
		waitText(`.run-head`, "report"),
	); err != nil {
		t.Fatalf("searching by id: %v", err)
	}
}
