package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gendurable/gendurable/web"
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

// A run inserted with a traceparent shows its trace id, linked through GENDURABLE_TRACE_URL's
// template; a run without one shows no trace.
func TestDashboardLinksARunsTrace(t *testing.T) {
	ctx, cancel := context.WithTimeout(browser(t), 2*time.Minute)
	defer cancel()
	s := newServerWith(t, "", false, web.Config{TraceURL: "http://jaeger.test:16686/trace/{trace_id}"})
	s.post("/v1/handlers/h", `{"url": "https://example.com/hook"}`)
	req, _ := http.NewRequest(http.MethodPost, s.url+"/v1/jobs", strings.NewReader(`{"handler": "h"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("insert: %v %v", resp, err)
	}
	var traced struct{ ID int64 }
	_ = json.NewDecoder(resp.Body).Decode(&traced)
	resp.Body.Close()
	plain := s.id(`{"handler": "h"}`)

	var href string
	var ok bool
	if err := chromedp.Run(ctx,
		chromedp.Navigate(fmt.Sprintf("%s/#/runs/%d", s.url, traced.ID)),
		waitText(`[data-testid=trace-id]`, "4bf92f3577b34da6a3ce929d0e0e4736"),
		waitJS(`document.querySelector('[data-testid=trace-id]').tagName === 'A'`),
		chromedp.AttributeValue(`[data-testid=trace-id]`, "href", &href, &ok, chromedp.ByQuery),
	); err != nil {
		t.Fatal(err)
	}
	if href != "http://jaeger.test:16686/trace/4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("the trace links to %q", href)
	}
	var facts string
	if err := chromedp.Run(ctx,
		chromedp.Navigate("about:blank"), // a fresh page: nothing of the traced run is left
		chromedp.Navigate(fmt.Sprintf("%s/#/runs/%d", s.url, plain)),
		waitText(`dl.facts`, "Queue"),
		chromedp.Text(`dl.facts`, &facts, chromedp.ByQuery),
	); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(facts, "Trace") {
		t.Errorf("a run inserted without a traceparent shows a trace: %q", facts)
	}
}
