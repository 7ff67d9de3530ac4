package webhook

import (
	"encoding/json"
	"net/http"
)

// problemType is one kind of error Handler answers: an RFC 9457 problem type (under
// urn:gendurable:problem:), its status and a title fixed per type. The TypeScript SDK's
// serve and the Python SDK's Steps answer the same for the same case.
type problemType struct {
	status int
	name   string
	title  string
}

// The problems Handler answers. Handler runs one function whatever the job's handler,
// so it never answers the SDKs' 404 unknown-handler.
var (
	problemNotPost      = problemType{http.StatusMethodNotAllowed, "method-not-allowed", "Step webhooks are POSTed"}
	problemSignature    = problemType{http.StatusUnauthorized, "webhook-signature", "Bad webhook signature"}
	problemBadStep      = problemType{http.StatusBadRequest, "bad-step-request", "Bad step request"}
	problemTooLarge     = problemType{http.StatusRequestEntityTooLarge, "too-large", "Step request too large"}
	problemStepFunction = problemType{http.StatusInternalServerError, "step-error", "The step function failed"}
)

// writeProblem answers p as application/problem+json, with detail saying what went
// wrong this time.
func writeProblem(w http.ResponseWriter, p problemType, detail string) {
	body, _ := json.Marshal(struct { // strings and an int: it cannot fail
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}{"urn:gendurable:problem:" + p.name, p.title, p.status, detail})
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(p.status)
	_, _ = w.Write(body)
}
