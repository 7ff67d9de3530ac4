// Command webhook is a small step handler to try gendurable with: every job it gets runs
// three steps (counting in its state) and finishes with a greeting.
//
//	go run ./examples/webhook            # listens on 127.0.0.1:9090, path /steps
//
// It verifies every request's Standard Webhooks signature with the secret in
// WEBHOOK_SECRET (default: the demo secret the README registers).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"os"

	"github.com/gendurable/gendurable/webhook"
)

// DemoSecret is the signing secret the README's quickstart registers.
const DemoSecret = "whsec_Z2VuZHVyYWJsZS1xdWlja3N0YXJ0LWRlbW8tc2VjcmV0"

type state struct {
	Count int      `json:"count"`
	Log   []string `json:"log"`
}

func step(_ context.Context, req *webhook.StepRequest) webhook.Response {
	var st state
	_ = json.Unmarshal(req.Job.State, &st)
	var in struct {
		Name string `json:"name"`
	}
	_ = json.Unmarshal(req.Job.Input, &in)
	if in.Name == "" {
		in.Name = "world"
	}
	st.Count++
	st.Log = append(st.Log, fmt.Sprintf("step %d, attempt %d", req.Job.Step, req.Job.Attempt))
	log.Printf("job %d step %d (attempt %d)", req.Job.ID, req.Job.Step, req.Job.Attempt)
	b, _ := json.Marshal(st)
	if st.Count < 3 {
		return webhook.Response{Next: &webhook.Next{State: b}}
	}
	result, _ := json.Marshal(map[string]any{"greeting": "hello, " + in.Name, "steps": st.Log})
	return webhook.Response{Done: &webhook.Done{Result: result}}
}

func main() {
	secret := os.Getenv("WEBHOOK_SECRET")
	if secret == "" {
		secret = DemoSecret
	}
	addr := os.Getenv("WEBHOOK_ADDR")
	if addr == "" {
		addr = "127.0.0.1:9090"
	}
	http.Handle("/steps", webhook.Handler(secret, step))
	log.Printf("example webhook listening on http://%s/steps", addr)
	log.Fatal(http.ListenAndServe(addr, nil))
}
