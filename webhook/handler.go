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
// does not match), decodes the step, runs fn and writes its answer. The secret's key is
// decoded once and its HMAC states reused (a Signer); a secret that does not decode
// answers every request 401.
func Handler(secret string, fn StepFunc) http.Handler {
	signer, signerErr := NewSigner(secret)
	verify := func(h http.Header, body []byte) error {
		if signerErr != nil {
			return Verify(secret, h, body, 0) // the same answer as Verify: header problems first
		}
		return signer.Verify(h, body, 0)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := readRequest(r)
		if err != nil || len(body) > MaxRequestBytes {
			http.Error(w, "unreadable or oversized step request", http.StatusBadRequest)
			return
		}
		if err := verify(r.Header, body); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		req, ok := decodeStep(body)
		if !ok {
			if err := json.Unmarshal(body, &req); err != nil {
				http.Error(w, "bad step request: "+err.Error(), http.StatusBadRequest)
				return
			}
		}
		resp := fn(r.Context(), &req)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(resp)
	})
}

// readRequest reads a step request's body, into one buffer of its declared length when
// that is within MaxRequestBytes (a longer body reads as over the cap).
func readRequest(r *http.Request) ([]byte, error) {
	if n := r.ContentLength; n > 0 && n <= MaxRequestBytes {
		body := make([]byte, n)
		if _, err := io.ReadFull(r.Body, body); err != nil {
			return nil, err
		}
		return body, nil
	}
	return io.ReadAll(io.LimitReader(r.Body, MaxRequestBytes+1))
}
