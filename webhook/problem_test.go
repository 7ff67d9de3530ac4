package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gendurable/gendurable/webhook"
)

// problems lists every error Handler answers, with its status and title: the TypeScript
// SDK's serve and the Python SDK's Steps answer the same for the same case
// (sdk/typescript/test/serve.test.ts, sdk/python/tests/test_steps.py). Handler runs one
// function, so it never answers unknown-handler.
var problems = map[string]struct {
	status int
	title  string
}{
	"method-not-allowed": {405, "Step webhooks are POSTed"},
	"webhook-signature":  {401, "Bad webhook signature"},
	"bad-step-request":   {400, "Bad step request"},
	"too-large":          {413, "Step request too large"},
	"step-error":         {500, "The step function failed"},
}

// Every error Handler answers is an RFC 9457 problem document (application/problem+json
// with type, title, status and detail), and the step function runs for none but the
// answers it gets wrong.
func TestHandlerAnswersEveryErrorAsAProblem(t *testing.T) {
	t.Parallel()
	secret := webhook.NewSecret()
	var ran atomic.Int32
	srv := httptest.NewServer(webhook.Handler(secret, func(_ context.Context, req *webhook.StepRequest) webhook.Response {
		ran.Add(1)
		switch req.Job.Handler {
		case "none":
			return webhook.Response{}
		case "two":
			return webhook.Response{Next: &webhook.Next{}, Done: &webhook.Done{}}
		case "broken":
			return webhook.Response{Done: &webhook.Done{Result: json.RawMessage(`{"ok":`)}}
		}
		return webhook.Response{Done: &webhook.Done{}}
	}))
	t.Cleanup(srv.Close)
	post := func(body []byte, sign func(http.Header, []byte)) *http.Response {
		t.Helper()
		r, err := http.NewRequest("POST", srv.URL, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		sign(r.Header, body)
		return do(t, r)
	}
	signedAt := func(at time.Time, secret string) func(http.Header, []byte) {
		return func(h http.Header, body []byte) {
			if err := webhook.SetHeaders(h, "msg_1", at, body, secret); err != nil {
				t.Fatal(err)
			}
		}
	}
	signed := signedAt(time.Now(), secret)
	step := func(handler string) []byte {
		return []byte(strings.Replace(stepBody, `"handler":"bench"`, `"handler":"`+handler+`"`, 1))
	}

	get, err := http.NewRequest("GET", srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	res := do(t, get)
	checkProblem(t, "GET", res, "method-not-allowed", `^a step request is a POST, not GET$`)
	if allow := res.Header.Get("Allow"); allow != "POST" {
		t.Errorf("a 405 allows %q, want POST", allow)
	}

	checkProblem(t, "no headers", post(step("h"), func(http.Header, []byte) {}), "webhook-signature", `^missing webhook-id, webhook-timestamp or webhook-signature header$`)
	checkProblem(t, "stale", post(step("h"), signedAt(time.Now().Add(-time.Hour), secret)), "webhook-signature", `outside the tolerance`)
	checkProblem(t, "another secret", post(step("h"), signedAt(time.Now(), webhook.NewSecret())), "webhook-signature", `^no matching signature$`)

	checkProblem(t, "not JSON", post([]byte(`{`), signed), "bad-step-request", `^the body is not JSON: `)
	for _, body := range []string{`{"hello":1}`, `[]`, `"job"`, `null`, `{"job":{"id":1}}`, `{"lease":{}}`, `{"job":null,"lease":{}}`, `{"job":{"id":1},"lease":"t"}`} {
		checkProblem(t, body, post([]byte(body), signed), "bad-step-request", `^a step request is an object with job and lease$`)
	}
	checkProblem(t, "a string id", post([]byte(`{"job":{"id":"1"},"lease":{}}`), signed), "bad-step-request", `^the body is not a step request: .*job\.id`)

	big := append(bytes.Repeat([]byte(" "), webhook.MaxRequestBytes), step("h")...)
	checkProblem(t, "over the cap", post(big, signed), "too-large", `^a step request is at most 1 MiB$`)
	chunked, err := http.NewRequest("POST", srv.URL, io.MultiReader(bytes.NewReader(big))) // no length: sent chunked
	if err != nil {
		t.Fatal(err)
	}
	signed(chunked.Header, big)
	checkProblem(t, "over the cap, chunked", do(t, chunked), "too-large", `^a step request is at most 1 MiB$`)

	if n := ran.Load(); n != 0 {
		t.Errorf("the step function ran %d times for requests that are not signed steps", n)
	}
	checkProblem(t, "no answer", post(step("none"), signed), "step-error", `^a step answers exactly one of next, await, spawn, done, fail, retry \(got none\)$`)
	checkProblem(t, "two answers", post(step("two"), signed), "step-error", `^a step answers exactly one of next, await, spawn, done, fail, retry \(got next, done\)$`)
	checkProblem(t, "a broken result", post(step("broken"), signed), "step-error", `^the answer is not valid JSON: .*unexpected end of JSON input`)

	res = post(step("h"), signed)
	if b, _ := io.ReadAll(res.Body); res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "application/json" || strings.TrimSpace(string(b)) != `{"done":{}}` {
		t.Errorf("a good step answered %d %s %s", res.StatusCode, res.Header.Get("Content-Type"), b)
	}
}

// do sends r and closes the response's body when the test ends.
func do(t *testing.T, r *http.Request) *http.Response {
	t.Helper()
	res, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}

// checkProblem fails t unless res is the problem kind (under urn:gendurable:problem:)
// with its status and title, exactly the four members, and a detail that matches detail.
func checkProblem(t *testing.T, name string, res *http.Response, kind, detail string) {
	t.Helper()
	want := problems[kind]
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if ct := res.Header.Get("Content-Type"); res.StatusCode != want.status || ct != "application/problem+json" {
		t.Errorf("%s: %d %s %s, want %d application/problem+json", name, res.StatusCode, ct, body, want.status)
		return
	}
	var p map[string]any
	if err := json.Unmarshal(body, &p); err != nil {
		t.Errorf("%s: %v: %s", name, err, body)
		return
	}
	d, _ := p["detail"].(string)
	delete(p, "detail")
	if wantP := map[string]any{"type": "urn:gendurable:problem:" + kind, "title": want.title, "status": float64(want.status)}; !reflect.DeepEqual(p, wantP) {
		t.Errorf("%s: %s, want %v and a detail", name, body, wantP)
	}
	if !regexp.MustCompile(detail).MatchString(d) {
		t.Errorf("%s: detail %q, want it to match %s", name, d, detail)
	}
}
