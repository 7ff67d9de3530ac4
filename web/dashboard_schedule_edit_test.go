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

	"github.com/gendurable/gendurable/internal/webhooktest"
	"github.com/gendurable/gendurable/webhook"
)

// A schedule is created and edited from the dashboard and run now: the create form
// refuses a bad cron with the API's problem (nothing written), makes the schedule with
// every field, the edit form changes it, and "Run now" makes its job at once, listed
// with its runs and run by the real webhook, its next tick unchanged.
func TestDashboardCreatesEditsAndRunsASchedule(t *testing.T) {
	ctx, cancel := context.WithTimeout(browser(t), 3*time.Minute)
	defer cancel()
	s := newServer(t, "", true)
	rcv := webhooktest.New(t, func(w http.ResponseWriter, req *webhook.StepRequest) {
		webhooktest.Answer(w, webhook.Response{Done: &webhook.Done{}})
	})
	s.post("/v1/handlers/report", fmt.Sprintf(`{"url": %q, "secret": %q}`, rcv.URL, webhooktest.Secret))
	form := `form[aria-label="Create a schedule"]`
	fill := func(name, cron string) chromedp.Action {
		return chromedp.Tasks{
			chromedp.SetValue(form+` input[name=name]`, name),
			chromedp.SetValue(form+` input[name=cron]`, cron),
			chromedp.SetValue(form+` input[name=timezone]`, "Europe/Paris"),
			chromedp.SetValue(form+` input[name=handler]`, "report"),
			chromedp.SetValue(form+` input[name=queue]`, "reports"),
			chromedp.SetValue(form+` select[name=overlap]`, "skip"),
			chromedp.SetValue(form+` textarea[name=input]`, `{"scope": "all"}`),
			chromedp.Click(form + ` button[type=submit]`),
		}
	}
	schedule := func(name string) (map[string]any, int) {
		resp, err := http.Get(s.url + "/v1/schedules/" + name)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return m, resp.StatusCode
	}
	if err := chromedp.Run(ctx,
		chromedp.Navigate(s.url+"/#/schedules"),
		waitText(`.empty`, "No schedules yet"),
		fill("weekly", "every monday"),
		waitText(`.notice-slot`, "cron"),
	); err != nil {
		t.Fatalf("a bad cron: %v", err)
	}
	if _, code := schedule("weekly"); code != http.StatusNotFound {
		t.Fatalf("a refused schedule was written (%d)", code)
	}
	if err := chromedp.Run(ctx,
		fill("weekly", "0 9 * * 1"),
		waitJS(`location.hash === '#/schedules/weekly'`),
		waitText(`[data-testid=schedule-settings]`, "0 9 * * 1"),
		waitText(`[data-testid=schedule-settings]`, "Europe/Paris"),
	); err != nil {
		t.Fatalf("creating: %v", err)
	}
	got, _ := schedule("weekly")
	if got["queue"] != "reports" || got["overlap"] != "skip" || fmt.Sprint(got["input"]) != "map[scope:all]" || got["timezone"] != "Europe/Paris" {
		t.Fatalf("the schedule created: %v", got)
	}
	next := got["next_run_at"]

	edit := `form[aria-label="Edit the schedule"]`
	if err := chromedp.Run(ctx,
		chromedp.Click(`//header//button[text()="Edit"]`),
		chromedp.WaitVisible(edit+` input[name=cron]`),
		chromedp.SetValue(edit+` input[name=cron]`, "30 10 * * 1"),
		chromedp.Click(edit+` button[type=submit]`),
		waitText(`.notice-slot`, "Schedule weekly saved"),
		waitText(`[data-testid=schedule-settings]`, "30 10 * * 1"),
	); err != nil {
		t.Fatalf("editing: %v", err)
	}
	got, _ = schedule("weekly")
	if got["cron"] != "30 10 * * 1" || got["queue"] != "reports" || got["overlap"] != "skip" {
		t.Fatalf("the schedule edited: %v", got)
	}
	next = got["next_run_at"]

	if err := chromedp.Run(ctx,
		chromedp.Click(`//header//button[text()="Run now"]`),
		waitText(`.notice-slot`, "Schedule weekly ran now: run"),
		waitJS(`document.querySelectorAll('table[data-testid=schedule-runs] tbody tr').length === 1`),
		waitText(`table[data-testid=schedule-runs]`, "done"),
	); err != nil {
		t.Fatalf("run now: %v", err)
	}
	got, _ = schedule("weekly")
	if got["next_run_at"] != next {
		t.Fatalf("run now moved the next tick from %v to %v", next, got["next_run_at"])
	}
	var page struct {
		Jobs []struct {
			Status       string
			ScheduleName string `json:"schedule_name"`
		}
	}
	s.get("/v1/jobs?schedule=weekly", &page)
	if len(page.Jobs) != 1 || page.Jobs[0].ScheduleName != "weekly" || page.Jobs[0].Status != "done" {
		t.Fatalf("the schedule's runs: %+v", page.Jobs)
	}
	if !strings.Contains(textOf(ctx, t, `.notice-slot`), "ran now") {
		t.Fatal("the notice is gone")
	}
	screenshot(t, ctx, "schedule-edit.png", false)
}
