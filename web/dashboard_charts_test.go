package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/webhooktest"
	"github.com/gendurable/gendurable/webhook"
)

// legendOf reads the legend of the chart figure testid, without a hover.
func legendOf(ctx context.Context, t *testing.T, testid string) string {
	t.Helper()
	return textOf(ctx, t, fmt.Sprintf(`figure[data-testid=%s] .u-legend`, testid))
}

// A handler's page charts its steps live: opened before anything ran, it follows the
// steps a real webhook answers (one slow done, a 500 then done, a fail) within a refresh;
// its legends give the hour's attempts by class and the slowest minute's percentiles,
// which hold the webhook's 80 ms. A run links its handler's page, the handlers list too,
// and the queue page has the latency chart as well.
func TestDashboardChartsAHandler(t *testing.T) {
	ctx, cancel := context.WithTimeout(browser(t), 3*time.Minute)
	defer cancel()
	s := newServer(t, "", true)
	rcv := webhooktest.New(t, func(w http.ResponseWriter, req *webhook.StepRequest) {
		var in struct{ Mode string }
		_ = json.Unmarshal(req.Job.Input, &in)
		switch {
		case in.Mode == "slow":
			time.Sleep(80 * time.Millisecond) // the latency the chart must show
			webhooktest.Answer(w, webhook.Response{Done: &webhook.Done{}})
		case in.Mode == "flaky" && req.Job.Attempt == 1:
			w.WriteHeader(http.StatusInternalServerError)
		case in.Mode == "fail":
			webhooktest.Answer(w, webhook.Response{Fail: &webhook.Fail{Error: json.RawMessage(`{"message":"declined"}`)}})
		default:
			webhooktest.Answer(w, webhook.Response{Done: &webhook.Done{}})
		}
	})
	s.post("/v1/handlers/pay", fmt.Sprintf(`{"url": %q, "secret": %q, "max_attempts": 3, "backoff_base": "10ms", "backoff_max": "20ms"}`,
		rcv.URL, webhooktest.Secret))
	if err := chromedp.Run(ctx,
		chromedp.Navigate(s.url+"/#/handlers/pay"),
		waitText(`[data-testid=handler-settings]`, rcv.URL),
		waitText(`figure[data-testid=throughput-chart] .u-legend`, "steps0"),
		waitText(`figure[data-testid=latency-chart] .u-legend`, "p50none"),
	); err != nil {
		t.Fatalf("the handler's page before any step: %v", err)
	}
	slow := s.id(`{"handler": "pay", "queue": "payments", "input": {"mode": "slow"}}`)
	flaky := s.id(`{"handler": "pay", "queue": "payments", "input": {"mode": "flaky"}}`)
	failing := s.id(`{"handler": "pay", "queue": "payments", "input": {"mode": "fail"}}`)
	for id, want := range map[int64]string{slow: "done", flaky: "done", failing: "failed"} {
		s.waitStatus(id, want)
	}
	// Live: the next refresh (every 10 s) shows the 4 attempts.
	if err := chromedp.Run(ctx, waitText(`figure[data-testid=throughput-chart] .u-legend`, "steps4")); err != nil {
		t.Fatalf("the chart did not follow the steps: %q (%v)", legendOf(ctx, t, "throughput-chart"), err)
	}
	if got := legendOf(ctx, t, "throughput-chart"); !strings.Contains(got, "retried1") || !strings.Contains(got, "failed1") ||
		!strings.Contains(got, "error rate50.0 %") {
		t.Errorf("the throughput legend: %q", got)
	}
	latency := legendOf(ctx, t, "latency-chart")
	m := regexp.MustCompile(`p99([0-9.]+) ms`).FindStringSubmatch(latency)
	if m == nil {
		t.Fatalf("the latency legend has no p99 in ms: %q", latency)
	}
	if p99, _ := strconv.ParseFloat(m[1], 64); p99 < 80 || p99 > 5000 {
		t.Errorf("the slowest p99 is %.1f ms, the webhook took 80 ms: %q", p99, latency)
	}
	// The chart drew its points: one per minute of the hour, with the minute's steps.
	var drawn int
	if err := chromedp.Run(ctx, chromedp.Evaluate(`document.querySelectorAll('figure[data-testid=throughput-chart] canvas').length`, &drawn)); err != nil || drawn != 1 {
		t.Fatalf("the throughput chart has %d canvases (%v)", drawn, err)
	}
	screenshot(t, ctx, "handler.png", true)

	// From a run to its handler's page; from the handlers list too.
	if err := chromedp.Run(ctx,
		chromedp.Navigate(fmt.Sprintf("%s/#/runs/%d", s.url, failing)),
		waitText(`.run-head`, "failed"),
		chromedp.Click(`.run-head h2 a`),
		waitJS(`location.hash === '#/handlers/pay'`),
		waitText(`figure[data-testid=throughput-chart] .u-legend`, "steps4"),
		chromedp.Navigate(s.url+"/#/handlers"),
		chromedp.Click(`//table[@data-testid="handlers"]//a[text()="pay"]`),
		waitJS(`location.hash === '#/handlers/pay'`),
		waitText(`h2`, "Handler pay"),
	); err != nil {
		t.Fatalf("the links to the handler's page: %v", err)
	}
	// The queue's page: the same steps, with their latency.
	if err := chromedp.Run(ctx,
		chromedp.Navigate(s.url+"/#/queues?queue=payments"),
		waitText(`figure[data-testid=throughput-chart] .u-legend`, "steps4"),
		waitText(`figure[data-testid=latency-chart] figcaption`, "payments"),
	); err != nil {
		t.Fatalf("the queue's charts: %v", err)
	}
	if got := legendOf(ctx, t, "latency-chart"); !regexp.MustCompile(`p50[0-9.]+ (ms|s)`).MatchString(got) {
		t.Errorf("the queue's latency legend: %q", got)
	}
}

// The schedules page lists a schedule the real scheduler fires every second; its page
// lists the runs it made (and a run links back); pause and resume from the list and the
// page change it in the API; delete, confirmed, removes it.
func TestDashboardManagesSchedules(t *testing.T) {
	ctx, cancel := context.WithTimeout(browser(t), 3*time.Minute)
	defer cancel()
	s := newServer(t, "", true)
	sched := s.eng.NewScheduler(engine.SchedulerConfig{})
	sched.Start(context.Background())
	t.Cleanup(sched.Stop)
	rcv := webhooktest.New(t, func(w http.ResponseWriter, req *webhook.StepRequest) {
		webhooktest.Answer(w, webhook.Response{Done: &webhook.Done{}})
	})
	s.post("/v1/handlers/report", fmt.Sprintf(`{"url": %q, "secret": %q}`, rcv.URL, webhooktest.Secret))
	put := func(name, body string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPut, s.url+"/v1/schedules/"+name, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("PUT schedule %s: %v %v", name, resp, err)
		}
		resp.Body.Close()
	}
	put("heartbeat", `{"cron": "@every 1s", "handler": "report", "queue": "ticks", "overlap": "skip", "input": {"from": "schedule"}}`)
	put("nightly", `{"cron": "0 30 2 * * *", "timezone": "Europe/Paris", "handler": "report"}`)
	paused := func(name string) string {
		resp, err := http.Get(s.url + "/v1/schedules/" + name)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusNotFound {
			return "gone"
		}
		var sc struct{ Paused bool }
		_ = json.NewDecoder(resp.Body).Decode(&sc)
		return strconv.FormatBool(sc.Paused)
	}
	row := `//table[@data-testid="schedules"]//tr[@data-schedule="%s"]`
	if err := chromedp.Run(ctx,
		chromedp.Navigate(s.url+"/#/schedules"),
		waitText(`table[data-testid=schedules]`, "heartbeat"),
		waitText(`tr[data-schedule=nightly]`, "Europe/Paris"),
		waitText(`tr[data-schedule=nightly]`, "0 30 2 * * *"),
		waitText(`tr[data-schedule=heartbeat]`, "ago"), // its last tick
	); err != nil {
		t.Fatalf("the schedules list: %v", err)
	}
	screenshot(t, ctx, "schedules.png", true)

	// Pause from the list.
	if err := chromedp.Run(ctx,
		chromedp.Click(fmt.Sprintf(row+`//button[text()="Pause"]`, "nightly")),
		waitText(`.notice-slot`, "Schedule nightly paused"),
		waitText(`tr[data-schedule=nightly]`, "paused"),
		waitJS(`document.querySelector('tr[data-schedule=nightly] button').textContent === 'Resume'`),
	); err != nil {
		t.Fatalf("pausing from the list: %v", err)
	}
	if got := paused("nightly"); got != "true" {
		t.Fatalf("nightly paused in the list is paused=%s in the API", got)
	}

	// The heartbeat's page: the runs it made, newest first, done; a run links back.
	if err := chromedp.Run(ctx,
		chromedp.Click(fmt.Sprintf(row+`//a[text()="heartbeat"]`, "heartbeat")),
		waitJS(`location.hash === '#/schedules/heartbeat'`),
		waitText(`[data-testid=schedule-settings]`, "@every 1s"),
		waitJS(`document.querySelectorAll('table[data-testid=schedule-runs] tbody tr').length >= 2`),
		waitText(`table[data-testid=schedule-runs]`, "done"),
	); err != nil {
		t.Fatalf("the schedule's runs: %v", err)
	}
	var runs []string
	if err := chromedp.Run(ctx, chromedp.Evaluate(`[...document.querySelectorAll('table[data-testid=schedule-runs] tbody tr')].map(r => r.dataset.job)`, &runs)); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(runs); i++ {
		a, _ := strconv.Atoi(runs[i-1])
		b, _ := strconv.Atoi(runs[i])
		if a <= b {
			t.Fatalf("the schedule's runs are not newest first: %v", runs)
		}
	}
	screenshot(t, ctx, "schedule.png", true)
	if err := chromedp.Run(ctx,
		chromedp.Click(`table[data-testid=schedule-runs] tbody tr:last-child a`),
		waitText(`.run-head`, "report"),
		waitText(`dl.facts`, "Scheduleheartbeat"),
		chromedp.Click(`//dl[@class="facts"]//a[text()="heartbeat"]`),
		waitJS(`location.hash === '#/schedules/heartbeat'`),
	); err != nil {
		t.Fatalf("a scheduled run and the link back: %v", err)
	}

	// Pause and resume from its page.
	if err := chromedp.Run(ctx,
		chromedp.Click(`//header//button[text()="Pause"]`),
		waitText(`.notice-slot`, "Schedule heartbeat paused"),
		waitText(`.run-head h2`, "paused"),
	); err != nil {
		t.Fatalf("pausing from the page: %v", err)
	}
	if got := paused("heartbeat"); got != "true" {
		t.Fatalf("heartbeat paused on its page is paused=%s in the API", got)
	}
	if err := chromedp.Run(ctx,
		chromedp.Click(`//header//button[text()="Resume"]`),
		waitText(`.notice-slot`, "Schedule heartbeat resumed"),
		waitJS(`!document.querySelector('.run-head h2').textContent.includes('paused')`),
	); err != nil {
		t.Fatalf("resuming from the page: %v", err)
	}
	if got := paused("heartbeat"); got != "false" {
		t.Fatalf("heartbeat resumed is paused=%s in the API", got)
	}

	// Delete (the confirmation is accepted): back to the list, without it.
	if err := chromedp.Run(ctx,
		chromedp.Click(`//header//button[text()="Delete"]`),
		waitJS(`location.hash === '#/schedules'`),
		waitJS(`document.querySelector('tr[data-schedule=heartbeat]') === null && document.querySelector('tr[data-schedule=nightly]') !== null`),
	); err != nil {
		t.Fatalf("deleting from the page: %v", err)
	}
	if got := paused("heartbeat"); got != "gone" {
		t.Fatalf("the deleted schedule is still in the API (paused=%s)", got)
	}
	// And from the list: the last one goes, the page says there are none.
	if err := chromedp.Run(ctx,
		chromedp.Click(fmt.Sprintf(row+`//button[text()="Delete"]`, "nightly")),
		waitText(`.empty`, "No schedules yet"),
	); err != nil {
		t.Fatalf("deleting from the list: %v", err)
	}
	if got := paused("nightly"); got != "gone" {
		t.Fatalf("nightly deleted from the list is still in the API (paused=%s)", got)
	}
}
