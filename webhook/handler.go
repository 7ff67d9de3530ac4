package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
)

// MaxRequestBytes caps the step request Handler reads (the service's default cap).
const MaxRequestBytes = 1 << 20

// StepFunc runs one step and says what happens next.
type StepFunc func(ctx context.Context, req *StepRequest) Response

// Handler serves a step webhook: it verifies the signature with secret (401 when it
// does not match), decodes the step, runs fn and writes its answer. The secret's key is
// decoded once and its HMAC states reused (a Signer).
//
// Handler panics when secret is malformed (see NewHandler) or fn is nil, as a
// misconfiguration is best found when the program starts; NewHandler returns the error
// instead, for a secret read from configuration.
func Handler(secret string, fn StepFunc) http.Handler {
	h, err := NewHandler(secret, fn)
	if err != nil {
		panic(err)
	}
	return h
}

// NewHandler is Handler, answering an error rather than panicking when secret is not
// a signing secret (the whsec_ prefix optional, then the key in padded standard base64)
// or fn is nil. The error says what is wrong with the secret without quoting it.
func NewHandler(secret string, fn StepFunc) (http.Handler, error) {
	signer, err := NewSigner(secret)
	if err != nil {
		return nil, err
	}
	if fn == nil {
		return nil, errors.New("webhook: the step function is nil")
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := readRequest(r)
		if err != nil || len(body) > MaxRequestBytes {
			http.Error(w, "unreadable or oversized step request", http.StatusBadRequest)
			return
		}
		if err := signer.Verify(r.Header, body, 0); err != nil {
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
	}), nil
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
