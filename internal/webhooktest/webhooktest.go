// Package webhooktest gives tests a real step webhook: an httptest server that checks
// every request's Standard Webhooks signature with its own implementation of the
// algorithm (independent of package webhook), records the steps it is sent, and answers
// as the test says.
package webhooktest

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gendurable/gendurable/webhook"
)

// Secret is the signing secret tests register their handlers with.
const Secret = "whsec_dGhpcy1pcy1hLXRlc3Qtc2lnbmluZy1rZXktMzJieXRlcw=="

// Verify checks a request's signature as the Standard Webhooks specification describes.
func Verify(secret string, h http.Header, body []byte) error {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return err
	}
	id, ts := h.Get("webhook-id"), h.Get("webhook-timestamp")
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || id == "" {
		return fmt.Errorf("missing id or timestamp")
	}
	if d := time.Since(time.Unix(sec, 0)); d > 5*time.Minute || d < -5*time.Minute {
		return fmt.Errorf("timestamp too far from now")
	}
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%s.%s", id, ts, body)
	want := base64.StdEncoding.EncodeToString(mac.Sum(nil))
	for _, part := range strings.Split(h.Get("webhook-signature"), " ") {
		version, sig, _ := strings.Cut(part, ",")
		if version == "v1" && hmac.Equal([]byte(sig), []byte(want)) {
			return nil
		}
	}
	return fmt.Errorf("no valid v1 signature")
}

// Respond answers one step; Context(w) is the request's context.
type Respond func(w http.ResponseWriter, req *webhook.StepRequest)

// Receiver is a recording step webhook.
type Receiver struct {
	URL     string
	mu      sync.Mutex
	calls   []webhook.StepRequest
	respond Respond
}

// New starts a receiver that verifies signatures made with Secret.
func New(t testing.TB, respond Respond) *Receiver {
	r := &Receiver{respond: respond}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		if err := Verify(Secret, req.Header, body); err != nil {
			t.Errorf("webhooktest: signature check failed: %v", err)
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		var sr webhook.StepRequest
		if err := json.Unmarshal(body, &sr); err != nil {
			t.Errorf("webhooktest: bad step request: %v", err)
		}
		r.mu.Lock()
		r.calls = append(r.calls, sr)
		r.mu.Unlock()
		r.respond(&ctxWriter{ResponseWriter: w, ctx: req.Context()}, &sr)
	}))
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

// Calls returns the steps received so far.
func (r *Receiver) Calls() []webhook.StepRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]webhook.StepRequest(nil), r.calls...)
}

// Answer writes a step answer.
func Answer(w http.ResponseWriter, resp webhook.Response) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

type ctxWriter struct {
	http.ResponseWriter
	ctx context.Context
}

// Context is the context of the request a Respond function is answering.
func Context(w http.ResponseWriter) context.Context { return w.(*ctxWriter).ctx }

// JSONEqual compares two JSON documents by value.
func JSONEqual(got json.RawMessage, want string) bool {
	var a, b any
	if json.Unmarshal(got, &a) != nil || json.Unmarshal([]byte(want), &b) != nil {
		return false
	}
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// NewRaw starts a webhook that hands each request's headers and body to fn unverified
// (tests of signing itself) and returns its URL.
func NewRaw(t testing.TB, fn func(h http.Header, body []byte, w http.ResponseWriter)) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		fn(req.Header, body, w)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}
