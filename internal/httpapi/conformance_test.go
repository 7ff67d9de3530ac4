package httpapi_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/gendurable/gendurable/internal/httpapi"
)

var (
	specOnce   sync.Once
	specRouter routers.Router
	specErr    error
)

// specRoutes is the kin-openapi router of openapi.yaml, built once per test binary.
func specRoutes(t testing.TB) routers.Router {
	t.Helper()
	specOnce.Do(func() {
		doc, err := httpapi.GetSwagger()
		if err != nil {
			specErr = err
			return
		}
		if specErr = doc.Validate(context.Background()); specErr != nil {
			return
		}
		doc.Servers = nil
		specRouter, specErr = gorillamux.NewRouter(doc)
	})
	if specErr != nil {
		t.Fatalf("openapi.yaml: %v", specErr)
	}
	return specRouter
}

// conformance wraps the API so that every response the test receives is checked
// against openapi.yaml (status, content type, body schema); a mismatch fails t. A
// request that matches no operation must be answered with a problem document.
func conformance(t testing.TB, next http.Handler) http.Handler {
	router := specRoutes(t)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		res := rec.Result()
		body := rec.Body.Bytes()
		if err := responseMismatch(router, r, res.StatusCode, res.Header, body); err != "" {
			t.Errorf("response does not match openapi.yaml: %s %s -> %d: %s\nbody: %.500s", r.Method, r.URL.RequestURI(),
				res.StatusCode, err, body)
		}
		for k, v := range res.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(res.StatusCode)
		_, _ = w.Write(body)
	})
}

// responseMismatch says how a response differs from the spec ("" when it matches).
func responseMismatch(router routers.Router, r *http.Request, status int, header http.Header, body []byte) string {
	if !strings.HasPrefix(r.URL.Path, "/v1/") && r.URL.Path != "/healthz" && r.URL.Path != "/readyz" {
		return "" // the dashboard, /metrics and /openapi.yaml are outside the spec
	}
	probe := r.Clone(context.Background())
	probe.Body = http.NoBody
	route, params, err := router.FindRoute(probe)
	if err != nil {
		if ct := header.Get("Content-Type"); ct != "application/problem+json" || status < 400 || status >= 500 {
			return "a request matching no operation got " + ct
		}
		return ""
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: probe, PathParams: params, Route: route},
		Status:                 status,
		Header:                 header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		return err.Error()
	}
	return ""
}

// The conformance check itself: it must catch a body that breaks the spec.
func TestConformanceCatchesMismatches(t *testing.T) {
	t.Parallel()
	router := specRoutes(t)
	job := `{"id": 1, "queue": "q", "handler": "h", "status": "runnable", "priority": 5, "eligible_at": null,
		"input": null, "state": null, "result": null, "error": null, "step": 0, "attempt": 0, "max_attempts": 3,
		"key": null, "concurrency_key": null, "parent_id": null, "pending_children": 0,
		"created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z", "finished_at": null,
		"signals_total": 0, "signals_pending": 0, "children_total": 0, "children_finished": 0}`
	jsonCT := http.Header{"Content-Type": {"application/json"}}
	problemCT := http.Header{"Content-Type": {"application/problem+json"}}
	get := httptest.NewRequest("GET", "/v1/jobs/1", nil)
	if err := responseMismatch(router, get, 200, jsonCT, []byte(job)); err != "" {
		t.Fatalf("a valid job (null input, state, result, error) was refused: %s", err)
	}
	nested := strings.Replace(job, `"input": null`, `"input": [1, null, [null, {"a": null}]]`, 1)
	if err := responseMismatch(router, get, 200, jsonCT, []byte(nested)); err != "" {
		t.Fatalf("a job whose input holds nulls was refused: %s", err)
	}
	for name, c := range map[string]struct {
		status int
		header http.Header
		body   string
	}{
		"missing field":       {200, jsonCT, `{"id": 1}`},
		"wrong type":          {200, jsonCT, strings.Replace(job, `"step": 0`, `"step": "zero"`, 1)},
		"wrong status enum":   {200, jsonCT, strings.Replace(job, `"runnable"`, `"sleeping"`, 1)},
		"problem as json":     {404, jsonCT, `{"type": "x", "title": "t", "status": 404}`},
		"problem lacks title": {404, problemCT, `{"type": "x", "status": 404}`},
	} {
		if err := responseMismatch(router, get, c.status, c.header, []byte(c.body)); err == "" {
			t.Errorf("%s: not caught", name)
		}
	}
	unknown := httptest.NewRequest("POST", "/v1/nope", nil)
	if err := responseMismatch(router, unknown, 200, http.Header{"Content-Type": {"text/html"}}, []byte("<html>")); err == "" {
		t.Errorf("HTML for an unknown /v1 route: not caught")
	}
}
