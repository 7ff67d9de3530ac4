package httpapi

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gendurable/gendurable/internal/engine"
)

// A value the database refused is a 422 whose detail does not show the driver's text.
func TestDatabaseRefusalDetailHidesTheDriverText(t *testing.T) {
	t.Parallel()
	var logs strings.Builder
	m := errorMapper{log: slog.New(slog.NewTextHandler(&logs, nil))}
	driver := errors.New(`ERROR: new row for relation "queues" violates check constraint "queues_batch_check" (SQLSTATE 23514)`)
	w := httptest.NewRecorder()
	m.write(w, httptest.NewRequest("PUT", "/v1/queues/q", nil), fmt.Errorf("%w: %w", engine.ErrInvalid, driver))
	body := w.Body.String()
	if w.Code != 422 || w.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("%d %s", w.Code, body)
	}
	for _, leak := range []string{"SQLSTATE", "queues_batch_check", "relation", "ERROR"} {
		if strings.Contains(body, leak) {
			t.Errorf("the detail shows %q: %s", leak, body)
		}
	}
	if !strings.Contains(logs.String(), "queues_batch_check") {
		t.Errorf("the driver's text was not logged for the operator: %s", logs.String())
	}
}
