package webhook

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
)

// MaxRequestBytes caps the step request Handler reads (the service's default cap).
const MaxRequestBytes = 1 << 20

// StepFunc runs one step and says what happens next.
type StepFunc func(ctx context.Context, req *StepRequest) Response

// Handler serves a step webhook: it verifies the signature with secret (401 when it
// does not match), decodes the step, runs fn and writes its answer.
func Handler(secret string, fn StepFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, MaxRequestBytes+1))
		if err != nil || len(body) > MaxRequestBytes {
			http.Error(w, "unreadable or oversized step request", http.StatusBadRequest)
			return
		}
		if err := Verify(secret, r.Header, body, 0); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		var req StepRequest
		if err := json.Unmarshal(body, &req); err != nil {
			http.Error(w, "bad step request: "+err.Error(), http.StatusBadRequest)
			return
		}
		resp := fn(r.Context(), &req)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(resp)
	})
}
