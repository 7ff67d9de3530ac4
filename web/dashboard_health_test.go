package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gendurable/gendurable/internal/webhooktest"
	"github.com/gendurable/gendurable/webhook"
)

// The handlers page shows each handler's health: a healthy handler as healthy, a dead
// endpoint's breaker open with its next probe, then paused (open for longer than its
// pause_after) with a Resume button that closes the breaker.
func TestDashboardShowsHandlerHealthAndResumes(t *testing.T) {
	ctx, cancel := context.WithTimeout(browser(t), 3*time.Minute)
	defer cancel()
	s := newServer(t, "", true)
	var healed atomic.Bool
	alive := webhooktest.New(t, func(w http.ResponseWriter, req *webhook.StepRequest) {
		webhooktest.Answer(w, webhook.Response{Done: &webhook.Done{}})
	})
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
	s.post("/v1/handlers/mailer", fmt.Sprintf(`{"url": %q, "secret": %q}`, alive.URL, webhooktest.Secret))
	s.post("/v1/handlers/payments", fmt.Sprintf(`{"url": %q, "secret": %q, "max_attempts": 1000, "backoff_base": "10ms",
		"breaker": {"threshold": 3, "probe_interval": "200ms", "probe_interval_max": "200ms", "pause_after": "1h"}}`,
		dead.URL, webhooktest.Secret))
	for range 5 {
		s.id(`{"handler": "payments"}`)
	}
	s.waitStatus(s.id(`{"handler": "mailer"}`), "done")
	breaker := func() map[string]any {
		var h map[string]any
		s.get("/v1/handlers/payments", &h)
		return h["breaker"].(map[string]any)
	}
	for deadline := time.Now().Add(30 * time.Second); breaker()["state"] == "closed"; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the breaker never opened")
		}
	}

	if err := chromedp.Run(ctx,
		chromedp.Navigate(s.url+"/#/handlers"),
		chromedp.WaitVisible(`table[data-testid=handlers]`),
		waitJS(`!!document.querySelector('table[data-testid=handlers] [data-health=healthy]')`),
		waitJS(`!!document.querySelector('table[data-testid=handlers] [data-health=open], table[data-testid=handlers] [data-health=half_open]')`),
	); err != nil {
		t.Fatal(err)
	}
	if got := textOf(ctx, t, `[data-health=healthy]`); got != "healthy" {
		t.Fatalf("mailer's health reads %q", got)
	}
	screenshot(t, ctx, "handler-health.png", false)

	// Open for longer than pause_after: the next due probe pauses the handler instead.
	s.post("/v1/handlers/payments", fmt.Sprintf(`{"url": %q, "breaker": {"pause_after": "1ms"}}`, dead.URL))
	if err := chromedp.Run(ctx, waitJS(`!!document.querySelector('[data-health=paused] button')`)); err != nil {
		t.Fatal(err)
	}
	if b := breaker(); b["paused"] != true || b["paused_reason"] == nil {
		t.Fatalf("paused breaker: %v", b)
	}
	healed.Store(true)
	if err := chromedp.Run(ctx,
		chromedp.Click(`[data-health=paused] button`),
		waitText(`.notice`, "payments resumed"),
		waitJS(`document.querySelectorAll('table[data-testid=handlers] [data-health=healthy]').length === 2`),
	); err != nil {
		t.Fatal(err)
	}
	if b := breaker(); b["state"] != "closed" || b["paused"] != false {
		t.Fatalf("breaker after Resume: %v", b)
	}
}
