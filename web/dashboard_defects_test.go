package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gendurable/gendurable/internal/webhooktest"
	"github.com/gendurable/gendurable/webhook"
)

// A handler's own page shows its circuit breaker and resumes it: a dead endpoint behind
// a long URL (shown whole, not cut) opens its breaker and pauses; the page says so, its
// Resume button closes the breaker once the endpoint is back. A handler whose every job
// failed with its attempts used up charts them as failed, not retried. An unknown
// handler's page says there is none and draws no charts.
func TestDashboardHandlerPageShowsItsBreakerAndResumes(t *testing.T) {
	ctx, cancel := context.WithTimeout(browser(t), 3*time.Minute)
	defer cancel()
	s := newServer(t, "", true)
	var healed atomic.Bool
	done := webhook.Handler(webhooktest.Secret, func(context.Context, *webhook.StepRequest) webhook.Response {
		return webhook.Response{Done: &webhook.Done{}}
	})
	dead := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if healed.Load() {
			done.ServeHTTP(w, r)
			return
		}
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	t.Cleanup(dead.Close)
	long := dead.URL + "/steps/" + strings.Repeat("a-rather-long-path-segment/", 8) + "end"
	s.post("/v1/handlers/payments", fmt.Sprintf(`{"url": %q, "secret": %q, "max_attempts": 1000, "backoff_base": "10ms",
		"breaker": {"threshold": 3, "probe_interval": "200ms", "probe_interval_max": "200ms", "pause_after": "1ms"}}`,
		long, webhooktest.Secret))
	// doomed: every job fails, its two attempts used up (the breaker off, so it never opens).
	doomed := webhooktest.New(t, func(w http.ResponseWriter, req *webhook.StepRequest) {
		http.Error(w, "no", http.StatusInternalServerError)
	})
	s.post("/v1/handlers/doomed", fmt.Sprintf(`{"url": %q, "secret": %q, "max_attempts": 2, "backoff_base": "10ms",
		"backoff_max": "20ms", "breaker": {"threshold": 0}}`, doomed.URL, webhooktest.Secret))
	for range 4 {
		s.id(`{"handler": "payments"}`)
	}
	a, b := s.id(`{"handler": "doomed"}`), s.id(`{"handler": "doomed"}`)
	s.waitStatus(a, "failed")
	s.waitStatus(b, "failed")

	if err := chromedp.Run(ctx,
		chromedp.Navigate(s.url+"/#/handlers/payments"),
		waitText(`[data-testid=handler-url]`, "end"),
		waitJS(`!!document.querySelector('[data-testid=handler-breaker] [data-health=paused] button')`),
	); err != nil {
		t.Fatalf("the paused handler's page: %v", err)
	}
	var url string
	var cut bool
	if err := chromedp.Run(ctx,
		chromedp.Evaluate(`document.querySelector('[data-testid=handler-url]').textContent`, &url),
		chromedp.Evaluate(`(() => { const e = document.querySelector('[data-testid=handler-url]');
			const r = e.getBoundingClientRect(), box = e.closest('dd').getBoundingClientRect();
			return e.scrollWidth > e.clientWidth + 1 || r.right > box.right + 1 || r.right > innerWidth; })()`, &cut),
	); err != nil {
		t.Fatal(err)
	}
	if url != long || cut {
		t.Fatalf("the URL reads %q (cut: %v), want %q whole", url, cut, long)
	}
	screenshot(t, ctx, "handler-paused.png", false)
	healed.Store(true)
	if err := chromedp.Run(ctx,
		chromedp.Click(`[data-testid=handler-breaker] [data-health=paused] button`),
		waitText(`.notice-slot`, "payments resumed"),
		waitJS(`!!document.querySelector('[data-testid=handler-breaker] [data-health=healthy]')`),
	); err != nil {
		t.Fatalf("Resume on the handler's page: %v", err)
	}
	var h map[string]any
	s.get("/v1/handlers/payments", &h)
	if br := h["breaker"].(map[string]any); br["state"] != "closed" || br["paused"] != false {
		t.Fatalf("the breaker after Resume: %v", br)
	}

	// doomed's chart: 4 attempts, 2 retried (the first ones), 2 failed (the last ones).
	if err := chromedp.Run(ctx,
		chromedp.Navigate(s.url+"/#/handlers/doomed"),
		waitText(`figure[data-testid=throughput-chart] .u-legend`, "steps4"),
	); err != nil {
		t.Fatalf("doomed's chart: %q (%v)", legendOf(ctx, t, "throughput-chart"), err)
	}
	if got := legendOf(ctx, t, "throughput-chart"); !strings.Contains(got, "retried2") || !strings.Contains(got, "failed2") {
		t.Fatalf("doomed's legend %q, want retried 2 and failed 2", got)
	}

	// An unknown handler: said so, no charts.
	if err := chromedp.Run(ctx,
		chromedp.Navigate(s.url+"/#/handlers/nobody"),
		waitText(`.empty`, "No handler named nobody"),
	); err != nil {
		t.Fatalf("an unknown handler's page: %v", err)
	}
	var figures int
	if err := chromedp.Run(ctx, chromedp.Evaluate(`document.querySelectorAll('figure, .u-legend, canvas').length`, &figures)); err != nil || figures != 0 {
		t.Fatalf("an unknown handler's page draws %d chart parts (%v)", figures, err)
	}
}

// A delayed job is "delayed until" its time, in the list and on its page, and its queue
// has no oldest runnable job waiting, only a next one due; empty gates and rate-limit
// tables say there are none, and a gate set from the page shows in its table.
func TestDashboardSaysDelayedAndEmpty(t *testing.T) {
	ctx, cancel := context.WithTimeout(browser(t), 2*time.Minute)
	defer cancel()
	s := newServer(t, "", false)
	rcv := webhooktest.New(t, func(w http.ResponseWriter, req *webhook.StepRequest) {
		webhooktest.Answer(w, webhook.Response{Done: &webhook.Done{}})
	})
	s.post("/v1/handlers/later", fmt.Sprintf(`{"url": %q, "secret": %q}`, rcv.URL, webhooktest.Secret))
	id := s.id(`{"handler": "later", "queue": "tomorrow", "delay": "1h"}`)
	if err := chromedp.Run(ctx,
		chromedp.Navigate(s.url+"/#/runs"),
		waitText(fmt.Sprintf(`tr[data-job="%d"]`, id), "delayed until"),
		chromedp.Navigate(fmt.Sprintf("%s/#/runs/%d", s.url, id)),
		waitText(`.run-head`, "delayed until"),
		chromedp.Navigate(s.url+"/#/queues"),
		waitText(`table[data-testid=queues] [data-testid=oldest-runnable]`, "none due"),
	); err != nil {
		t.Fatalf("the delayed job: %v", err)
	}
	if got := textOf(ctx, t, `[data-testid=oldest-runnable]`); !strings.Contains(got, "next in") {
		t.Fatalf("the queue's oldest runnable reads %q", got)
	}
	// A search by input finds the run whose input contains the JSON typed, and only it.
	other := s.id(`{"handler": "later", "queue": "tomorrow", "delay": "1h", "input": {"customer": "c-8"}}`)
	mine := s.id(`{"handler": "later", "queue": "tomorrow", "delay": "1h", "input": {"customer": "c-7", "n": 1}}`)
	if err := chromedp.Run(ctx,
		chromedp.Navigate(s.url+"/#/runs"),
		waitText(fmt.Sprintf(`tr[data-job="%d"]`, other), "delayed"),
		chromedp.SetValue(`form.filters input[name=contains]`, `{"customer": "c-7"}`),
		chromedp.Click(`form.filters button[type=submit]`),
		waitJS(`location.hash.includes('contains=')`),
		waitJS(fmt.Sprintf(`document.querySelectorAll('table[data-testid=runs] tbody tr').length === 1 && !!document.querySelector('tr[data-job="%d"]')`, mine)),
	); err != nil {
		t.Fatalf("searching by input: %v", err)
	}
	if err := chromedp.Run(ctx,
		chromedp.Navigate(s.url+"/#/flow"),
		waitText(`[data-testid=gates-empty]`, "No gates yet"),
		waitText(`[data-testid=rate-limits-empty]`, "No rate limits yet"),
	); err != nil {
		t.Fatalf("the empty flow page: %v", err)
	}
	var tables int
	if err := chromedp.Run(ctx, chromedp.Evaluate(`document.querySelectorAll('table').length`, &tables)); err != nil || tables != 0 {
		t.Fatalf("the empty flow page shows %d tables (%v)", tables, err)
	}
	if err := chromedp.Run(ctx,
		chromedp.SendKeys(`form[aria-label="Set a gate"] input[name=key]`, "tenant-1"),
		chromedp.SendKeys(`form[aria-label="Set a gate"] input[name=limit]`, "3"),
		chromedp.Click(`form[aria-label="Set a gate"] button`),
		waitText(`table[data-testid=gates]`, "tenant-1"),
		waitText(`[data-testid=rate-limits-empty]`, "No rate limits yet"),
	); err != nil {
		t.Fatalf("a gate set from the page: %v", err)
	}
}
