package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"github.com/gendurable/gendurable/internal/engine"
)

// problemType builds the type URI of a problem kind.
func problemType(kind string) string { return "urn:gendurable:problem:" + kind }

// writeProblem writes an RFC 9457 problem document.
func writeProblem(w http.ResponseWriter, status int, kind, title, detail string, fields []FieldError) {
	p := Problem{Type: problemType(kind), Title: title, Status: status}
	if detail != "" {
		p.Detail = &detail
	}
	if len(fields) > 0 {
		p.Errors = &fields
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(p)
}

// errorMapper is the one table from errors to HTTP problems. Only 5xx are logged as
// errors; 4xx are the client's to fix.
type errorMapper struct{ log *slog.Logger }

func (m errorMapper) write(w http.ResponseWriter, r *http.Request, err error) {
	var verr *engine.ValidationError
	var maxBytes *http.MaxBytesError
	switch {
	case errors.As(err, &verr):
		fields := make([]FieldError, len(verr.Errors))
		for i, f := range verr.Errors {
			fields[i] = FieldError{Field: f.Field, Message: f.Message}
		}
		writeProblem(w, http.StatusUnprocessableEntity, "validation", "The request is not valid", verr.Error(), fields)
	case errors.As(err, &maxBytes):
		writeProblem(w, http.StatusRequestEntityTooLarge, "too-large", "The request body is too large",
			"the body is over the limit of "+itoa(maxBytes.Limit)+" bytes", nil)
	case errors.Is(err, engine.ErrNotFound):
		writeProblem(w, http.StatusNotFound, "not-found", "Not found", detailOf(err, "no such resource"), nil)
	case errors.Is(err, engine.ErrLeaseLost):
		writeProblem(w, http.StatusConflict, "lease-lost", "The lease token is not current",
			"the step's lease token is not the job's current one (the step was taken back, finished or re-claimed); nothing was changed", nil)
	case errors.Is(err, engine.ErrConflict):
		writeProblem(w, http.StatusConflict, "conflict", "Conflict with the current state", err.Error(), nil)
	case errors.Is(r.Context().Err(), context.DeadlineExceeded):
		// The call's deadline (Config.RequestTimeout) passed while the database had not
		// answered: a lock held long, or on Citus a worker that does not answer.
		m.log.Error("request timed out", "request_id", RequestID(r.Context()), "method", r.Method, "path", r.URL.Path, "err", err)
		w.Header().Set("Retry-After", "1")
		writeProblem(w, http.StatusServiceUnavailable, "timeout", "The database did not answer in time",
			"the call was cancelled at its deadline (GENDURABLE_REQUEST_TIMEOUT); a change it asked for was not made unless "+
				"it had committed: read the resource, or send it again (with an Idempotency-Key for an insert)", nil)
	case errors.Is(err, errAuthUnavailable):
		m.log.Error("cannot check an API key", "request_id", RequestID(r.Context()), "method", r.Method, "path", r.URL.Path, "err", err)
		w.Header().Set("Retry-After", "1")
		writeProblem(w, http.StatusServiceUnavailable, "unavailable", "Service unavailable",
			"the API key could not be checked (the database did not answer); try again", nil)
	case errors.Is(err, engine.ErrInvalid):
		// The database refused a value that validation let through: the driver's text
		// names tables and constraints, which are the server's business, not the client's.
		m.log.Warn("the database refused a value", "request_id", RequestID(r.Context()), "method", r.Method,
			"path", r.URL.Path, "err", err)
		writeProblem(w, http.StatusUnprocessableEntity, "validation", "The request is not valid",
			"a value is out of the range the server can store, or refers to something that does not exist; nothing was changed", nil)
	case errors.Is(err, errForbidden):
		writeProblem(w, http.StatusForbidden, "forbidden", "Not allowed with this key",
			"this API key has the read scope; changes and key management need an admin key", nil)
	case errors.Is(err, errUnauthorized):
		w.Header().Set("WWW-Authenticate", `Bearer realm="gendurable"`)
		writeProblem(w, http.StatusUnauthorized, "unauthorized", "Authentication required",
			"send Authorization: Bearer <API token or key>; the key is missing, wrong or revoked", nil)
	default:
		m.log.Error("request failed", "request_id", RequestID(r.Context()), "method", r.Method, "path", r.URL.Path, "err", err)
		writeProblem(w, http.StatusInternalServerError, "internal", "Internal error",
			"the server could not complete the request; see its logs", nil)
	}
}

func detailOf(err error, fallback string) string {
	if err == nil || err == engine.ErrNotFound {
		return fallback
	}
	return err.Error()
}

var errUnauthorized = errors.New("unauthorized")
