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

// setField types text into a form's field as a person would (the input event the page listens to).
func setField(selector, text string) chromedp.Action {
	return chromedp.Evaluate(fmt.Sprintf(`(() => { const e = document.querySelector(%q); e.value = %q;
		e.dispatchEvent(new Event('input', {bubbles: true})); })()`, selector, text), nil)
}

// A failed run is replayed from its failing step with an edited state and rerun with an
// edited input, from its page, against a real webhook: the replay finishes the same run
// (its timeline shows the pause between the two runs), the rerun is a new run linked to
// the old one. While the queue keeps failed attempts' bodies only, the page says what
// successful steps returned is not kept and how to keep it; with step_bodies "all" it
// shows each successful step's answer.
func TestDashboardReplaysAndRerunsARun(t *testing.T) {
	ctx, cancel := context.WithTimeout(browser(t), 3*time.Minute)
	defer cancel()
	s := newServer(t, "", true)
	rcv := webhooktest.New(t, func(w http.ResponseWriter, req *webhook.StepRequest) {
		var in struct{ Fail bool }
		var state struct{ N int }
		_ = json.Unmarshal(req.Job.Input, &in)
		_ = json.Unmarshal(req.Job.State, &state)
		switch {
		case req.Job.Step == 0:
			webhooktest.Answer(w, webhook.Response{Next: &webhook.Next{State: json.RawMessage(`{"n": 1}`)}})
		case in.Fail && state.N != 5:
			webhooktest.Answer(w, webhook.Response{Fail: &webhook.Fail{Error: json.RawMessage(`{"message": "declined"}`)}})
		default:
			webhooktest.Answer(w, webhook.Response{Done: &webhook.Done{Result: json.RawMessage(fmt.Sprintf(`{"n": %d}`, state.N))}})
		}
	})
	s.post("/v1/handlers/order", fmt.Sprintf(`{"url": %q, "secret": %q}`, rcv.URL, webhooktest.Secret))
	id := s.id(`{"handler": "order", "queue": "orders", "input": {"fail": true}}`)
	s.waitStatus(id, "failed")

	replayForm := `form[aria-label="Replay from a step"]`
	if err := chromedp.Run(ctx,
		chromedp.Navigate(fmt.Sprintf("%s/#/runs/%d", s.url, id)),
		waitText(`.run-head`, "failed"),
		waitText(`[data-testid=bodies-hint]`, "not kept"),
		waitText(`[data-testid=bodies-hint]`, `"step_bodies": "all"`),
		chromedp.Click(`//button[text()="Replay…"]`),
		waitText(replayForm+` [data-testid=state-source]`, "as recorded"),
	); err != nil {
		t.Fatalf("the failed run's page: %v", err)
	}
	var recorded string
	if err := chromedp.Run(ctx, chromedp.Evaluate(`document.querySelector('`+replayForm+` textarea').value`, &recorded)); err != nil {
		t.Fatal(err)
	}
	if strings.Join(strings.Fields(recorded), "") != `{"n":1}` {
		t.Fatalf("the recorded state of step 1 reads %q, want {\"n\": 1}", recorded)
	}
	screenshot(t, ctx, "run-replay.png", true)
	if err := chromedp.Run(ctx,
		setField(replayForm+` textarea`, `{"n": 5}`),
		waitText(replayForm+` [data-testid=state-source]`, "edited"),
		chromedp.Click(replayForm+` button[type=submit]`),
		waitText(`.notice-slot`, "replays from step 1 with the edited state"),
	); err != nil {
		t.Fatalf("replaying: %v", err)
	}
	s.waitStatus(id, "done")
	var job struct {
		ID      int64
		Result  map[string]int
		RerunOf *int64 `json:"rerun_of"`
	}
	s.get(fmt.Sprintf("/v1/jobs/%d", id), &job)
	if job.Result["n"] != 5 {
		t.Fatalf("the replayed run's result: %v, want n 5 (the edited state)", job.Result)
	}
	if err := chromedp.Run(ctx,
		waitText(`.run-head`, "done"),
		waitJS(`!!document.querySelector('[data-testid=gantt] .seg[data-kind=ended]')`),
	); err != nil {
		t.Fatalf("the replayed run's timeline: %v", err)
	}

	// Keep every answer, then rerun with an edited input: a new run, linked, that shows them.
	s.post("/v1/queues/orders", `{"step_bodies": "all"}`)
	rerunForm := `form[aria-label="Rerun with edited input"]`
	if err := chromedp.Run(ctx,
		chromedp.Click(`//button[text()="Rerun with edited input…"]`),
		chromedp.WaitVisible(rerunForm+` textarea`),
		setField(rerunForm+` textarea`, `{"fail": false, "note": "rerun"}`),
		chromedp.Click(rerunForm+` button[type=submit]`),
		waitJS(fmt.Sprintf(`location.hash.startsWith('#/runs/') && location.hash !== '#/runs/%d'`, id)),
		waitText(`[data-testid=rerun-of]`, fmt.Sprintf("run %d", id)),
		waitText(`.run-head`, "done"),
		waitJS(`document.querySelectorAll('[data-testid=returned]').length === 2`),
	); err != nil {
		t.Fatalf("rerunning: %v", err)
	}
	var hash string
	if err := chromedp.Run(ctx, chromedp.Evaluate(`location.hash`, &hash)); err != nil {
		t.Fatal(err)
	}
	var rerun struct {
		Input   map[string]any
		RerunOf *int64 `json:"rerun_of"`
	}
	s.get("/v1/jobs/"+strings.TrimPrefix(hash, "#/runs/"), &rerun)
	if rerun.RerunOf == nil || *rerun.RerunOf != id || rerun.Input["note"] != "rerun" {
		t.Fatalf("the rerun: %+v", rerun)
	}
	if got := textOf(ctx, t, `[data-testid=returned]`); !strings.Contains(got, `"next"`) || !strings.Contains(got, `"n":1`) {
		t.Fatalf("step 0 returned %q, want its next answer", got)
	}
	var hint int
	if err := chromedp.Run(ctx, chromedp.Evaluate(`document.querySelectorAll('[data-testid=bodies-hint]').length`, &hint)); err != nil || hint != 0 {
		t.Fatalf("the bodies hint shows with step_bodies all (%d, %v)", hint, err)
	}
	screenshot(t, ctx, "run-returned.png", true)
}
