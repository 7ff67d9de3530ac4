package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gendurable/gendurable/internal/webhooktest"
	"github.com/gendurable/gendurable/webhook"
)

// segment is one bar of the run page's timeline as the browser laid it out.
type segment struct {
	Job     int64   `json:"job"`
	Kind    string  `json:"kind"`
	Outcome string  `json:"outcome"`
	Title   string  `json:"title"`
	Left    float64 `json:"left"`
	Right   float64 `json:"right"`
	Start   float64 `json:"start"` // ms since the epoch, as the page derived them
	End     float64 `json:"end"`
}

// timelineBars reads every bar of the timeline, row by row, left to right.
func timelineBars(ctx context.Context, t *testing.T) []segment {
	t.Helper()
	var segs []segment
	if err := chromedp.Run(ctx, chromedp.Evaluate(`[...document.querySelectorAll('[data-testid=gantt] .gantt-row[data-job]')].flatMap(row =>
		[...row.querySelectorAll('.seg')].map(s => { const r = s.getBoundingClientRect();
			return {job: Number(row.dataset.job), kind: s.dataset.kind, outcome: s.dataset.outcome || '', title: s.title, left: r.left, right: r.right,
			start: Number(s.dataset.start), end: Number(s.dataset.end)}; }))`,
		&segs)); err != nil {
		t.Fatal(err)
	}
	return segs
}

// A run is drawn as a timeline from its history: a real four-step run whose first
// attempt fails (a 500, then backoff), whose second spawns a child (waiting for
// children, the child's own bars nested under it), whose next step awaits a signal
// (awaiting, until the test sends it) and then goes on to done. Every attempt is a bar in
// order on one axis, each wait between them is a labelled gap of its kind, and a live
// run's last wait is drawn up to now.
func TestDashboardDrawsARunAsATimeline(t *testing.T) {
	ctx, cancel := context.WithTimeout(browser(t), 3*time.Minute)
	defer cancel()
	s := newServer(t, "", true)
	rcv := webhooktest.New(t, func(w http.ResponseWriter, req *webhook.StepRequest) {
		if req.Job.Handler == "leaf" {
			webhooktest.Answer(w, webhook.Response{Done: &webhook.Done{Result: json.RawMessage(`{"sent": true}`)}})
			return
		}
		switch {
		case req.Job.Step == 0 && req.Job.Attempt == 1:
			http.Error(w, "not yet", http.StatusInternalServerError)
		case req.Job.Step == 0:
			webhooktest.Answer(w, webhook.Response{Spawn: &webhook.Spawn{Children: []webhook.ChildSpec{{Handler: "leaf"}}}})
		case req.Job.Step == 1:
			webhooktest.Answer(w, webhook.Response{Await: &webhook.Await{Signals: []string{"go"}}})
		case req.Job.Step == 2:
			webhooktest.Answer(w, webhook.Response{Next: &webhook.Next{}})
		default:
			webhooktest.Answer(w, webhook.Response{Done: &webhook.Done{}})
		}
	})
	for _, h := range []string{"flow", "leaf"} {
		s.post("/v1/handlers/"+h, fmt.Sprintf(`{"url": %q, "secret": %q, "backoff_base": "200ms", "backoff_max": "300ms"}`,
			rcv.URL, webhooktest.Secret))
	}
	id := s.id(`{"handler": "flow"}`)
	s.waitStatus(id, "awaiting")
	var page struct{ Jobs []struct{ ID int64 } }
	s.get(fmt.Sprintf("/v1/jobs/%d/children", id), &page)
	if len(page.Jobs) != 1 {
		t.Fatalf("%d children, want 1", len(page.Jobs))
	}
	child := page.Jobs[0].ID
	s.waitStatus(child, "done")

	// Live, parked on the await: the last gap is the wait, drawn up to now.
	row := fmt.Sprintf(`[data-testid=gantt] .gantt-row[data-job="%d"]`, id)
	if err := chromedp.Run(ctx,
		chromedp.Navigate(fmt.Sprintf("%s/#/runs/%d", s.url, id)),
		waitJS(fmt.Sprintf(`document.querySelector('%s .seg:last-child')?.dataset.kind === 'await'`, row)),
		waitJS(fmt.Sprintf(`!!document.querySelector('[data-testid=gantt] .gantt-row[data-job="%d"] .seg[data-kind=call]')`, child)),
	); err != nil {
		t.Fatalf("the awaiting run's timeline: %v", err)
	}
	s.post(fmt.Sprintf("/v1/jobs/%d/signals", id), `{"name": "go"}`)
	s.waitStatus(id, "done")
	if err := chromedp.Run(ctx,
		waitJS(fmt.Sprintf(`document.querySelectorAll('%s .seg[data-kind=call]').length === 5`, row)),
	); err != nil {
		t.Fatalf("the finished run's timeline: %v", err)
	}
	screenshot(t, ctx, "run-timeline.png", true)

	bars := timelineBars(ctx, t)
	var mine, kids []segment
	for _, b := range bars {
		switch b.Job {
		case id:
			mine = append(mine, b)
		case child:
			kids = append(kids, b)
		}
	}
	var kinds []string
	for _, b := range mine {
		k := b.Kind
		if k == "call" {
			k += ":" + b.Outcome
		}
		kinds = append(kinds, k)
	}
	// queued, call 0.1 (500), backoff, call 0.2 (spawn), children, call 1.1 (await),
	// await, call 2.1 (next), queued, call 3.1 (done); a gap too short to measure (a
	// queued step claimed in the same millisecond) is not drawn.
	want := []string{"call:http_error", "backoff", "call:spawn", "children", "call:await", "await", "call:next", "call:done"}
	var got []string
	for _, k := range kinds {
		if k != "queued" {
			got = append(got, k)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("the run's bars are %v (without queued), want %v", kinds, want)
	}
	// In time, each bar starts where the one before it ended (a gap fills the time between
	// two calls); on screen, in order (a bar is at least 2 px wide, so a short call may
	// overlap its neighbour by that much).
	for i := 1; i < len(mine); i++ {
		if mine[i].Start != mine[i-1].End || mine[i].Left < mine[i-1].Left {
			t.Fatalf("bar %d (%s, %.0f…%.0f, at %.1f px) does not follow bar %d (%s, %.0f…%.0f, at %.1f px)", i, mine[i].Kind,
				mine[i].Start, mine[i].End, mine[i].Left, i-1, mine[i-1].Kind, mine[i-1].Start, mine[i-1].End, mine[i-1].Left)
		}
	}
	for _, b := range mine {
		label := map[string]string{"backoff": "backoff", "children": "waiting for children", "await": "awaiting a signal",
			"queued": "queued"}[b.Kind]
		if b.Kind == "call" {
			label = "attempt"
		}
		if !strings.Contains(b.Title, label) {
			t.Fatalf("the %s bar is labelled %q", b.Kind, b.Title)
		}
	}
	// The child's bars, nested under the parent, lie within the parent's wait for it.
	var wait segment
	for _, b := range mine {
		if b.Kind == "children" {
			wait = b
		}
	}
	if len(kids) == 0 || kids[len(kids)-1].Kind != "call" || kids[len(kids)-1].Outcome != "done" {
		t.Fatalf("the child's bars: %+v", kids)
	}
	if c := kids[len(kids)-1]; c.Start < wait.Start || c.End > wait.End || c.Left < wait.Left-1 || c.Left > wait.Right+1 {
		t.Fatalf("the child's call [%.0f, %.0f] at %.1f px lies outside the parent's wait for it [%.0f, %.0f] at %.1f…%.1f px",
			c.Start, c.End, c.Left, wait.Start, wait.End, wait.Left, wait.Right)
	}
	var nested bool
	if err := chromedp.Run(ctx, chromedp.Evaluate(fmt.Sprintf(
		`document.querySelector('[data-testid=gantt] .gantt-row[data-job="%d"]').classList.contains('depth-1')`, child), &nested)); err != nil || !nested {
		t.Fatalf("the child's row is not nested under the parent (%v)", err)
	}
	// A gap wide enough shows its label on the bar itself.
	if got := textOf(ctx, t, row+` .seg[data-kind=backoff]`); !strings.Contains(got, "backoff") {
		t.Errorf("the backoff gap reads %q", got)
	}
}

// The timeline tells a wait for a slot, and a wait for a rate limit, from plain queued
// time, from what the API derives at read time (GET /v1/jobs/{id}/waits). Two jobs of one
// concurrency key, the first held in its webhook until the test lets it go: the second's
// queued time is drawn as waiting for a slot, from its insert to the first one's outcome.
// Two jobs of a rate limit of 2/s with a burst of 1: the second waits for its rate limit
// from the first one's claim for half a second, and is drawn so. A plain job is queued.
func TestDashboardTimelineTellsWaitsForASlotOrARateLimit(t *testing.T) {
	ctx, cancel := context.WithTimeout(browser(t), 3*time.Minute)
	defer cancel()
	s := newServer(t, "", true)
	release := make(chan struct{})
	rcv := webhooktest.New(t, func(w http.ResponseWriter, req *webhook.StepRequest) {
		if req.Job.Handler == "holder" {
			select {
			case <-release:
			case <-time.After(time.Minute): // the test failed before it let go
			}
		}
		webhooktest.Answer(w, webhook.Response{Done: &webhook.Done{}})
	})
	for _, h := range []string{"holder", "quick"} {
		s.post("/v1/handlers/"+h, fmt.Sprintf(`{"url": %q, "secret": %q}`, rcv.URL, webhooktest.Secret))
	}
	if _, err := s.eng.SetRateLimit(context.Background(), "api", 2, 1); err != nil {
		t.Fatal(err)
	}
	first := s.id(`{"handler": "holder", "concurrency_key": "account-7"}`)
	s.waitStatus(first, "executing")
	second := s.id(`{"handler": "quick", "concurrency_key": "account-7"}`)
	s.id(`{"handler": "quick", "rate_limit": {"name": "api", "key": "k"}}`)
	r2 := s.id(`{"handler": "quick", "rate_limit": {"name": "api", "key": "k"}}`)
	s.waitStatus(r2, "done")
	close(release)
	s.waitStatus(second, "done")

	type wait struct {
		Kind       string
		Start, End time.Time
	}
	waitsOf := func(id int64) []wait {
		var page struct{ Waits []wait }
		s.get(fmt.Sprintf("/v1/jobs/%d/waits", id), &page)
		return page.Waits
	}
	var held struct {
		Steps []struct {
			FinishedAt time.Time `json:"finished_at"`
		}
	}
	s.get(fmt.Sprintf("/v1/jobs/%d/steps", first), &held)
	if w := waitsOf(second); len(w) != 1 || w[0].Kind != "slot" || !w[0].End.Equal(held.Steps[0].FinishedAt) {
		t.Fatalf("the second keyed job's waits are %+v, want one slot wait to %v", w, held.Steps[0].FinishedAt)
	}
	if w := waitsOf(r2); len(w) != 1 || w[0].Kind != "rate_limit" {
		t.Fatalf("the second rate-limited job's waits are %+v, want one rate-limit wait", w)
	}

	// On the page: each run's queued time carries the kind of its wait.
	check := func(id int64, kind, label string, wantMs float64) {
		t.Helper()
		row := fmt.Sprintf(`[data-testid=gantt] .gantt-row[data-job="%d"]`, id)
		if err := chromedp.Run(ctx,
			chromedp.Navigate(fmt.Sprintf("%s/#/runs/%d", s.url, id)),
			waitJS(fmt.Sprintf(`!!document.querySelector('%s .seg[data-kind=%s]')`, row, kind)),
		); err != nil {
			t.Fatalf("run %d's timeline has no %s bar: %v", id, kind, err)
		}
		var bars []segment
		for _, b := range timelineBars(ctx, t) {
			if b.Job == id && b.Kind == kind {
				bars = append(bars, b)
			}
		}
		if len(bars) != 1 || !strings.Contains(bars[0].Title, label) {
			t.Fatalf("run %d's %s bars: %+v, want one labelled %q", id, kind, bars, label)
		}
		if got := bars[0].End - bars[0].Start; got < wantMs-1 || got > wantMs+1 {
			t.Fatalf("run %d's %s bar lasts %.0f ms, want %.0f", id, kind, got, wantMs)
		}
	}
	slot := waitsOf(second)[0]
	check(second, "slot", "waiting for a slot", float64(slot.End.Sub(slot.Start).Milliseconds()))
	screenshot(t, ctx, "run-waits.png", true)
	rl := waitsOf(r2)[0]
	check(r2, "ratelimit", "waiting for its rate limit", float64(rl.End.Sub(rl.Start).Milliseconds()))
	// The plain run (a key, but nobody else held it) waited for nothing but the queue.
	if err := chromedp.Run(ctx,
		chromedp.Navigate(fmt.Sprintf("%s/#/runs/%d", s.url, first)),
		waitJS(fmt.Sprintf(`document.querySelectorAll('[data-testid=gantt] .gantt-row[data-job="%d"] .seg[data-kind=call]').length === 1`, first)),
	); err != nil {
		t.Fatal(err)
	}
	for _, b := range timelineBars(ctx, t) {
		if b.Kind == "slot" || b.Kind == "ratelimit" {
			t.Fatalf("the first keyed run, which nobody held up, has a %s bar", b.Kind)
		}
	}
}
