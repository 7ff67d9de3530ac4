package dispatch

import (
	"reflect"
	"testing"

	"github.com/gendurable/gendurable/internal/engine"
)

// What each answer tells the breaker, and how a batch's notes add up per handler: a
// success restarts the count (and writes only when failures may be recorded), the
// failures after the last success are what is added.
func TestBreakerVerdictsAndTallies(t *testing.T) {
	t.Parallel()
	status := func(n int) *int { return &n }
	for _, c := range []struct {
		o    engine.Outcome
		want breakerVerdict
	}{
		{engine.Outcome{Label: "connection_error"}, verdictFailure},
		{engine.Outcome{Label: "timeout"}, verdictFailure},
		{engine.Outcome{Label: "bad_response"}, verdictFailure},                          // the answer broke off
		{engine.Outcome{Label: "bad_response", HTTPStatus: status(200)}, verdictSuccess}, // up, but answered badly
		{engine.Outcome{Label: "http_error", HTTPStatus: status(503)}, verdictFailure},
		{engine.Outcome{Label: "http_error", HTTPStatus: status(500)}, verdictFailure},
		{engine.Outcome{Label: "http_error", HTTPStatus: status(429)}, verdictNone},
		{engine.Outcome{Label: "http_error", HTTPStatus: status(404)}, verdictNone},
		{engine.Outcome{Label: "redirect", HTTPStatus: status(302)}, verdictNone},
		{engine.Outcome{Label: "fail", HTTPStatus: status(200)}, verdictSuccess},
		{engine.Outcome{Label: "retry", HTTPStatus: status(200)}, verdictSuccess},
		{engine.Outcome{Label: "handler_missing"}, verdictNone},
		{engine.Outcome{Label: "request_too_large"}, verdictNone},
	} {
		if got := verdictOf(&c.o); got != c.want {
			t.Errorf("%s %v: verdict %d, want %d", c.o.Label, c.o.HTTPStatus, got, c.want)
		}
	}

	n := func(h string, v breakerVerdict, known bool) pendingOutcome {
		return pendingOutcome{note: breakerNote{handler: h, verdict: v, knownFailures: known}}
	}
	for _, c := range []struct {
		name  string
		batch []pendingOutcome
		want  []engine.BreakerTally
	}{
		{"healthy: nothing to write", []pendingOutcome{n("a", verdictSuccess, false), n("a", verdictSuccess, false), n("b", verdictNone, false)}, nil},
		{"failures add up", []pendingOutcome{n("a", verdictFailure, false), n("b", verdictFailure, false), n("a", verdictFailure, false)},
			[]engine.BreakerTally{{Handler: "a", Failures: 2}, {Handler: "b", Failures: 1}}},
		{"a success ends the run", []pendingOutcome{n("a", verdictFailure, false), n("a", verdictSuccess, false), n("a", verdictFailure, false)},
			[]engine.BreakerTally{{Handler: "a", Failures: 1, Reset: true}}},
		{"a last success resets", []pendingOutcome{n("a", verdictFailure, false), n("a", verdictSuccess, false)},
			[]engine.BreakerTally{{Handler: "a", Reset: true}}},
		{"a success of a handler with failures recorded", []pendingOutcome{n("a", verdictSuccess, true)},
			[]engine.BreakerTally{{Handler: "a", Reset: true}}},
		{"neutral answers change nothing", []pendingOutcome{n("a", verdictFailure, false), n("a", verdictNone, true)},
			[]engine.BreakerTally{{Handler: "a", Failures: 1}}},
	} {
		if got := breakerTallies(c.batch); !reflect.DeepEqual(got, c.want) && (len(got) != 0 || len(c.want) != 0) {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
