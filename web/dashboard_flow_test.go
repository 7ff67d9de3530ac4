package web_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// A run shows the flow control it was inserted with: its concurrency key, every rate
// limit it draws from (key and weight), and its debounce key.
func TestDashboardShowsARunsFlowControl(t *testing.T) {
	ctx, cancel := context.WithTimeout(browser(t), 2*time.Minute)
	defer cancel()
	s := newServer(t, "", false)
	s.post("/v1/handlers/h", `{"url": "https://example.com/hook"}`)
	for _, name := range []string{"api", "mail"} {
		req, _ := http.NewRequest(http.MethodPut, s.url+"/v1/rate-limits/"+name, strings.NewReader(`{"rate": 10, "burst": 5}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode >= 300 {
			t.Fatalf("rate limit %s: %v %v", name, resp, err)
		}
		resp.Body.Close()
	}
	limited := s.id(`{"handler": "h", "concurrency_key": "tenant-3",
		"rate_limits": [{"name": "api", "key": "u7", "weight": 2}, {"name": "mail"}]}`)
	debounced := s.id(`{"handler": "h", "debounce": {"key": "user-7", "period": "1h"}}`)

	var facts string
	if err := chromedp.Run(ctx,
		chromedp.Navigate(fmt.Sprintf("%s/#/runs/%d", s.url, limited)),
		waitText(`[data-testid=rate-limits]`, "api[u7] ×2, mail"),
		chromedp.Text(`dl.facts`, &facts, chromedp.ByQuery),
	); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(facts, "Concurrency key") || !strings.Contains(facts, "tenant-3") {
		t.Errorf("the run's facts do not show its concurrency key: %q", facts)
	}
	if strings.Contains(facts, "Debounce key") {
		t.Errorf("a run inserted without debounce shows a debounce key: %q", facts)
	}
	if err := chromedp.Run(ctx,
		chromedp.Navigate(fmt.Sprintf("%s/#/runs/%d", s.url, debounced)),
		waitText(`[data-testid=debounce-key]`, "user-7"),
	); err != nil {
		t.Fatal(err)
	}
}
