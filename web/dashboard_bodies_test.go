package web_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gendurable/gendurable/internal/webhooktest"
	"github.com/gendurable/gendurable/webhook"
)

// The timeline shows a failed attempt's request and response bodies, collapsed until
// opened, JSON pretty-printed and a body over the cap marked truncated; a done attempt
// (default setting) and every attempt of a queue set "off" show none; the queues page
// shows each queue's step_bodies and changes it.
func TestDashboardShowsStepBodies(t *testing.T) {
	ctx, cancel := context.WithTimeout(browser(t), 3*time.Minute)
	defer cancel()
	s := newServer(t, "", true)
	long := strings.Repeat("stack frame at payments.charge(card.go:42)\n", 400) // ~17 KiB of text, over the 8 KiB cap
	rcv := webhooktest.New(t, func(w http.ResponseWriter, req *webhook.StepRequest) {
		if req.Job.Attempt > 1 {
			webhooktest.Answer(w, webhook.Response{Done: &webhook.Done{}})
			return
		}
		w.WriteHeader(http.StatusInternalServerError)
		if req.Job.Handler == "crashes" {
			_, _ = io.WriteString(w, long)
			return
		}
		_, _ = io.WriteString(w, `{"error":"card declined","code":"E42","retryable":true}`)
	})
	for _, name := range []string{"declines", "crashes"} {
		s.post("/v1/handlers/"+name, fmt.Sprintf(`{"url": %q, "secret": %q, "max_attempts": 5, "backoff_base": "10ms", "backoff_max": "20ms"}`,
			rcv.URL, webhooktest.Secret))
	}
	s.post("/v1/queues/payments", `{}`)
	s.post("/v1/queues/quiet", `{"step_bodies": "off"}`)
	declined := s.id(`{"handler": "declines", "queue": "payments", "input": {"order": 1234, "amount_cents": 4999}}`)
	crashed := s.id(`{"handler": "crashes", "queue": "payments"}`)
	quiet := s.id(`{"handler": "declines", "queue": "quiet"}`)
	for _, id := range []int64{declined, crashed, quiet} {
		s.waitStatus(id, "done")
	}
	run := func(id int64) {
		t.Helper()
		if err := chromedp.Run(ctx,
			chromedp.Navigate(fmt.Sprintf("%s/#/runs/%d", s.url, id)),
			waitJS(`document.querySelectorAll('table[data-testid=timeline] tbody tr').length === 2`),
		); err != nil {
			t.Fatalf("run %d's page: %v", id, err)
		}
	}
	count := func(selector string) int {
		t.Helper()
		var n int
		if err := chromedp.Run(ctx, chromedp.Evaluate(fmt.Sprintf(`document.querySelectorAll(%q).length`, selector), &n)); err != nil {
			t.Fatal(err)
		}
		return n
	}

	run(declined)
	first := `table[data-testid=timeline] tbody tr:nth-child(1) td.bodies-cell`
	second := `table[data-testid=timeline] tbody tr:nth-child(2) td.bodies-cell`
	if n := count(first + ` details[data-testid=step-request]`); n != 1 {
		t.Fatalf("the failed attempt shows %d request bodies", n)
	}
	if n := count(first + ` details[open]`); n != 0 {
		t.Errorf("%d bodies are open before a click", n)
	}
	if got := textOf(ctx, t, second); got != "—" {
		t.Errorf("the done attempt's bodies cell: %q", got)
	}
	if err := chromedp.Run(ctx,
		chromedp.Click(first+` details[data-testid=step-request] summary`),
		chromedp.Click(first+` details[data-testid=step-response] summary`),
		waitJS(fmt.Sprintf(`document.querySelectorAll(%q).length === 2`, first+` details[open]`)),
	); err != nil {
		t.Fatal(err)
	}
	request := textOf(ctx, t, first+` details[data-testid=step-request] pre`)
	if !strings.Contains(request, `"amount_cents": 4999`) || !strings.Contains(request, `"attempt": 1`) ||
		strings.Contains(request, "v1,") {
		t.Errorf("the request shown (pretty-printed, no signature): %s", request)
	}
	response := textOf(ctx, t, first+` details[data-testid=step-response] pre`)
	if !strings.Contains(response, "{\n  \"error\": \"card declined\",\n  \"code\": \"E42\"") {
		t.Errorf("the 500 body shown: %s", response)
	}
	screenshot(t, ctx, "run-bodies.png", true)

	run(crashed)
	summary := textOf(ctx, t, first+` details[data-testid=step-response] summary`)
	if !strings.Contains(summary, "truncated") || !strings.Contains(summary, "KiB") {
		t.Errorf("the long answer's summary: %q", summary)
	}
	if got := textOf(ctx, t, first+` details[data-testid=step-request] summary`); strings.Contains(got, "truncated") {
		t.Errorf("the short request is marked truncated: %q", got)
	}

	run(quiet)
	if n := count(`td.bodies-cell details`); n != 0 {
		t.Errorf("a queue set off shows %d bodies", n)
	}

	// The queues page shows the setting and changes it.
	if err := chromedp.Run(ctx,
		chromedp.Navigate(s.url+"/#/queues"),
		waitJS(`document.querySelectorAll('select[data-testid=step-bodies]').length === 2`),
	); err != nil {
		t.Fatal(err)
	}
	var settings []string
	if err := chromedp.Run(ctx, chromedp.Evaluate(`[...document.querySelectorAll('table[data-testid=queues] tbody tr')]
		.map(r => r.querySelector('button.link').textContent.trim() + '=' + r.querySelector('select[data-testid=step-bodies]').value)`, &settings)); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(settings, " "); got != "payments=failures quiet=off" {
		t.Errorf("the queues' step_bodies: %s", got)
	}
	if err := chromedp.Run(ctx,
		// Set and announce the choice in one script: between two separate actions a poll's
		// render could put the select back, and the change would send that value instead.
		chromedp.Evaluate(`(() => {
			const s = document.querySelector('select[aria-label="Step bodies of payments"]');
			s.value = 'all';
			s.dispatchEvent(new Event('change', {bubbles: true}));
		})()`, nil),
		waitText(`.notice-slot`, "Queue payments keeps the request and response bodies of every attempt"),
	); err != nil {
		t.Fatalf("changing the setting: %v", err)
	}
	var q map[string]any
	if s.get("/v1/queues/payments", &q); q["step_bodies"] != "all" {
		t.Errorf("after the change the API says %v", q["step_bodies"])
	}
}
