// Command approval is the worked example of docs/protocol.md: an expense that needs a
// manager's approval. Its first step spawns a child job that notifies the approver, the
// next one (after the child finished) waits up to 72 hours for an "approved" or
// "rejected" signal, and the last one records the decision.
//
//	go run ./examples/approval           # 127.0.0.1:9091, paths /expense and /notify
package main

import (
	"context"
	"encoding/json"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/gendurable/gendurable/webhook"
)

// DemoSecret is the signing secret the worked example registers both handlers with.
const DemoSecret = "whsec_Z2VuZHVyYWJsZS1xdWlja3N0YXJ0LWRlbW8tc2VjcmV0"

type expense struct {
	Amount   float64 `json:"amount"`
	Approver string  `json:"approver"`
}

func expenseStep(_ context.Context, req *webhook.StepRequest) webhook.Response {
	var in expense
	_ = json.Unmarshal(req.Job.Input, &in)
	if req.Job.Step == 0 {
		// Notify the approver in a child job (retried on its own if the mailer is down).
		note, _ := json.Marshal(map[string]any{"to": in.Approver, "amount": in.Amount})
		return webhook.Response{Spawn: &webhook.Spawn{Children: []webhook.ChildSpec{{Handler: "notify", Input: note}}}}
	}
	// A decision delivered with this step is taken now, whatever woke it: a signal sent
	// while the job waited for its children arrives with the children's step, and the step
	// consumes what it was shown, so awaiting it again would wait for ever.
	for _, s := range req.Signals {
		if s.Name == "approved" || s.Name == "rejected" {
			result, _ := json.Marshal(map[string]any{"decision": s.Name, "details": s.Payload})
			return webhook.Response{Done: &webhook.Done{Result: result}}
		}
	}
	switch req.Wake {
	case "children":
		if len(req.Children) == 0 || req.Children[0].Status != "done" {
			return webhook.Response{Fail: &webhook.Fail{Error: json.RawMessage(`{"message":"could not notify the approver"}`)}}
		}
		return webhook.Response{Await: &webhook.Await{Signals: []string{"approved", "rejected"},
			Timeout: webhook.Duration(72 * time.Hour)}}
	case "timeout":
		return webhook.Response{Fail: &webhook.Fail{Error: json.RawMessage(`{"message":"no decision within 72h"}`)}}
	}
	// Woken by something else: keep waiting.
	return webhook.Response{Await: &webhook.Await{Signals: []string{"approved", "rejected"}, Timeout: webhook.Duration(72 * time.Hour)}}
}

func notifyStep(_ context.Context, req *webhook.StepRequest) webhook.Response {
	log.Printf("notify: %s", req.Job.Input) // a real handler would send an email here
	return webhook.Response{Done: &webhook.Done{Result: json.RawMessage(`{"sent":true}`)}}
}

func main() {
	addr := os.Getenv("WEBHOOK_ADDR")
	if addr == "" {
		addr = "127.0.0.1:9091"
	}
	http.Handle("/expense", webhook.Handler(DemoSecret, expenseStep))
	http.Handle("/notify", webhook.Handler(DemoSecret, notifyStep))
	log.Printf("approval example listening on http://%s (/expense, /notify)", addr)
	log.Fatal(http.ListenAndServe(addr, nil))
}
