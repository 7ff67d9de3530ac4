package webhook_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gendurable/gendurable/webhook"
)

// Handler answers a step whose signature one of the secrets made, and 401 for any other:
// a signature of another secret or another body, an old timestamp, a missing header (a
// handler whose own secret does not decode is never built: secret_test.go).
func TestHandlerVerifiesEachRequest(t *testing.T) {
	t.Parallel()
	secret, other := webhook.NewSecret(), webhook.NewSecret()
	ran := 0
	h := webhook.Handler(secret, func(_ context.Context, req *webhook.StepRequest) webhook.Response {
		ran++
		if req.Job.ID != 123456 || string(req.Job.Input) != `{"steps":1}` {
			t.Errorf("decoded %+v", req.Job)
		}
		return webhook.Response{Done: &webhook.Done{}}
	})
	body := []byte(stepBody)
	send := func(h http.Handler, sign func(http.Header)) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/steps", bytes.NewReader(body))
		sign(r.Header)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	signWith := func(at time.Time, signedBody []byte, secrets ...string) func(http.Header) {
		return func(hd http.Header) {
			if err := webhook.SetHeaders(hd, "msg_1", at, signedBody, secrets...); err != nil {
				t.Fatal(err)
			}
		}
	}
	for range 2 { // the second request reuses the first one's HMAC state
		if w := send(h, signWith(time.Now(), body, secret)); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"done"`) {
			t.Fatalf("a signed step answered %d %s", w.Code, w.Body)
		}
	}
	if w := send(h, signWith(time.Now(), body, other, secret)); w.Code != http.StatusOK {
		t.Fatalf("a step signed with two secrets, one of them the handler's, answered %d %s", w.Code, w.Body)
	}
	refused := map[string]func(http.Header){
		"another secret":  signWith(time.Now(), body, other),
		"another body":    signWith(time.Now(), []byte(`{}`), secret),
		"an old stamp":    signWith(time.Now().Add(-time.Hour), body, secret),
		"no signature":    func(http.Header) {},
		"a broken header": func(hd http.Header) { signWith(time.Now(), body, secret)(hd); hd.Set(webhook.HeaderTimestamp, "soon") },
	}
	for name, sign := range refused {
		if w := send(h, sign); w.Code != http.StatusUnauthorized {
			t.Errorf("%s: %d %s, want 401", name, w.Code, w.Body)
		}
	}
	if ran != 3 {
		t.Fatalf("the step function ran %d times, want 3", ran)
	}
}
