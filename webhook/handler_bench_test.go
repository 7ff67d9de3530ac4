package webhook_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gendurable/gendurable/webhook"
)

// stepBody is a step request of the shape the service sends for a fresh step.
const stepBody = `{"job":{"id":123456,"queue":"drain1-1","handler":"bench","key":null,"step":0,"attempt":1,"max_attempts":5,"input":{"steps":1},"state":null,"created_at":"2026-12-02T01:06:08.123456Z"},"signals":[],"lease":{"token":"0b6f1f52-4a36-4b5e-9a39-3c2f3a1d2e4f","expires_at":"2026-12-02T01:06:38.123456Z"}}`

// The CPU and allocations of one verified, decoded and answered step, without the HTTP
// server around the handler.
func BenchmarkHandler(b *testing.B) {
	secret := webhook.NewSecret()
	h := webhook.Handler(secret, func(_ context.Context, req *webhook.StepRequest) webhook.Response {
		return webhook.Response{Done: &webhook.Done{}}
	})
	body := []byte(stepBody)
	header := http.Header{"Content-Type": {"application/json"}}
	if err := webhook.SetHeaders(header, "msg_1", time.Now(), body, secret); err != nil {
		b.Fatal(err)
	}
	r := httptest.NewRequest("POST", "/steps", nil)
	r.Header = header
	r.ContentLength = int64(len(body))
	reader := bytes.NewReader(body)
	b.ReportAllocs()
	for b.Loop() {
		reader.Reset(body)
		r.Body = io.NopCloser(reader)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
}
