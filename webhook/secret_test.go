package webhook_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/gendurable/gendurable/webhook"
)

// malformedSecrets are secrets no request can be verified with, and what Handler says of
// each: the words of the TypeScript SDK's secretProblem and the Python SDK's
// secret_problem, where Go reads the secret as they do.
var malformedSecrets = map[string]string{
	"":                  "the signing secret is empty",
	"whsec_":            "the signing secret has an empty key (nothing after whsec_)",
	"whsec_not base64!": "the signing secret has whitespace in it",
	"whsec_!!!":         "the signing secret is not whsec_ followed by base64 (it has characters outside",
	"whsec_YW=jZA==":    "the signing secret is not whsec_ followed by base64 (it has characters outside",
	"whsec_YWJjZ":       "the signing secret is not whsec_ followed by base64 (its length does not fit base64",
	"whsec_YWJjZA=":     "the signing secret is not whsec_ followed by base64 (its length does not fit base64",
}

// A malformed secret stops Handler when it is built, with a message that names the
// problem and never quotes the secret, rather than a handler that answers every request
// 401.
func TestHandlerRefusesAMalformedSecretWhenBuilt(t *testing.T) {
	t.Parallel()
	step := func(context.Context, *webhook.StepRequest) webhook.Response {
		return webhook.Response{Done: &webhook.Done{}}
	}
	for secret, want := range malformedSecrets {
		got := panicOf(func() { webhook.Handler(secret, step) })
		if got == "" {
			t.Errorf("Handler(%q) built a handler", secret)
			continue
		}
		if !strings.Contains(got, want) {
			t.Errorf("Handler(%q) panicked with %q, want it to say %q", secret, got, want)
		}
		if key := strings.TrimPrefix(secret, webhook.SecretPrefix); len(key) > 2 && strings.Contains(got, key) {
			t.Errorf("Handler(%q) quoted the secret: %q", secret, got)
		}
	}
	for _, secret := range []string{webhook.NewSecret(), "whsec_YQ==", "YWJjZA=="} {
		if got := panicOf(func() { webhook.Handler(secret, step) }); got != "" {
			t.Errorf("Handler(%q) panicked: %s", secret, got)
		}
	}
	if got := panicOf(func() { webhook.Handler(webhook.NewSecret(), nil) }); !strings.Contains(got, "step function is nil") {
		t.Errorf("Handler with no step function panicked with %q, want it to say so", got)
	}
}

// panicOf runs f and answers what it panicked with ("" when it returned).
func panicOf(f func()) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprint(r)
		}
	}()
	f()
	return ""
}

// NewHandler answers the error Handler panics with, for a secret read from configuration.
func TestNewHandlerAnswersTheSecretsProblem(t *testing.T) {
	t.Parallel()
	step := func(context.Context, *webhook.StepRequest) webhook.Response { return webhook.Response{} }
	for secret, want := range malformedSecrets {
		h, err := webhook.NewHandler(secret, step)
		if err == nil || h != nil {
			t.Errorf("NewHandler(%q) = %v, %v; want no handler and an error", secret, h, err)
			continue
		}
		if !strings.Contains(err.Error(), want) || err.Error() != panicOf(func() { webhook.Handler(secret, step) }) {
			t.Errorf("NewHandler(%q): %q, want it to say %q as Handler's panic does", secret, err, want)
		}
	}
	if _, err := webhook.NewHandler(webhook.NewSecret(), nil); err == nil {
		t.Error("NewHandler built a handler without a step function")
	}
	if h, err := webhook.NewHandler(webhook.NewSecret(), step); err != nil || h == nil {
		t.Errorf("NewHandler with a fresh secret: %v, %v", h, err)
	}
}
