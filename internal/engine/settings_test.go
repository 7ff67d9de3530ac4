package engine_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/engine"
)

// urlChecker refuses the URLs it lists.
type urlChecker []string

func (c urlChecker) CheckURL(_ context.Context, url string) error {
	if slices.Contains(c, url) {
		return errors.New("refused by the test guard")
	}
	return nil
}

func fieldsOf(t *testing.T, err error) []string {
	t.Helper()
	var verr *engine.ValidationError
	if !errors.As(err, &verr) {
		t.Fatalf("want a *ValidationError, got %v", err)
	}
	var fields []string
	for _, f := range verr.Errors {
		fields = append(fields, f.Field)
	}
	return fields
}

// The rules the engine applies to settings, whatever the API's schema already checks:
// each bad value is named, and nothing is written.
func TestSettingsRefused(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, engine.Config{})
	ctx := context.Background()
	guard := urlChecker{"http://refused.example/"}
	dur := func(d time.Duration) *time.Duration { return &d }
	num := func(n int) *int { return &n }
	str := func(s string) *string { return &s }
	for _, tc := range []struct {
		name  string
		call  func() error
		field []string
	}{
		{"handler url", func() error {
			_, err := te.SetHandler(ctx, "x", engine.HandlerSettings{URL: "http://refused.example/"}, guard)
			return err
		}, []string{"url"}},
		{"handler name", func() error {
			_, err := te.SetHandler(ctx, "bad name", engine.HandlerSettings{URL: "http://ok.example/"}, guard)
			return err
		}, []string{"name"}},
		{"handler secret, attempts and durations", func() error {
			_, err := te.SetHandler(ctx, "x", engine.HandlerSettings{URL: "http://ok.example/", Secret: str("hunter2"),
				MaxAttempts: num(0), Timeout: dur(0), BackoffBase: dur(-time.Second), BackoffMax: dur(25 * time.Hour)}, guard)
			return err
		}, []string{"secret", "max_attempts", "timeout", "backoff_base", "backoff_max"}},
		{"rotation overlap and secret", func() error {
			_, err := te.RotateSecret(ctx, "h", "hunter2", 31*24*time.Hour)
			return err
		}, []string{"overlap", "secret"}},
		{"queue ranges", func() error {
			_, err := te.SetQueue(ctx, "q", engine.QueueSettings{MaxInFlight: num(0), Batch: num(1001), Retention: dur(-time.Second)})
			return err
		}, []string{"max_in_flight", "batch", "retention"}},
		{"queue name", func() error {
			_, err := te.SetQueue(ctx, "", engine.QueueSettings{})
			return err
		}, []string{"name"}},
		{"api key", func() error {
			_, _, err := te.CreateAPIKey(ctx, "", "root")
			return err
		}, []string{"name", "scope"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := fieldsOf(t, tc.call()); !slices.Equal(got, tc.field) {
				t.Fatalf("fields %v, want %v", got, tc.field)
			}
		})
	}
	hs, err := te.ListHandlers(ctx)
	if err != nil || len(hs) != 1 || hs[0].Name != "h" || hs[0].PreviousSecretExpiresAt != nil {
		t.Fatalf("a refused change wrote a handler: %+v %v", hs, err)
	}
	if _, err := te.GetQueue(ctx, "q"); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("a refused queue was created: %v", err)
	}
	if ks, err := te.ListAPIKeys(ctx); err != nil || len(ks) != 0 {
		t.Fatalf("a refused key was stored: %+v %v", ks, err)
	}
}

// What the settings methods write, they answer and read back in engine types.
func TestSettingsRoundTrip(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, engine.Config{})
	ctx := context.Background()
	timeout, base := 5*time.Second, 250*time.Millisecond
	h, err := te.SetHandler(ctx, "mailer", engine.HandlerSettings{URL: "http://ok.example/", Timeout: &timeout,
		BackoffBase: &base}, urlChecker{})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := te.GetHandler(ctx, "mailer"); err != nil || got.Timeout != timeout || got.BackoffBase != base ||
		got.Secret != h.Secret || got.Secret == "" {
		t.Fatalf("handler read back as %+v (%v), written %+v", got, err, h)
	}
	if err := te.DeleteHandler(ctx, "mailer"); err != nil {
		t.Fatal(err)
	}
	if _, err := te.GetHandler(ctx, "mailer"); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("deleted handler: %v", err)
	}

	day := 24 * time.Hour
	if q, err := te.SetQueue(ctx, "q", engine.QueueSettings{Retention: &day}); err != nil || q.Retention == nil || *q.Retention != day {
		t.Fatalf("retention: %+v %v", q, err)
	}
	zero := time.Duration(0)
	if q, err := te.SetQueue(ctx, "q", engine.QueueSettings{Retention: &zero}); err != nil || q.Retention != nil {
		t.Fatalf("a zero retention must return to the default: %+v %v", q, err)
	}
	te.insert(t, engine.NewJob{Queue: "q"})
	if q, err := te.GetQueue(ctx, "q"); err != nil || q.Counts.Runnable != 1 || q.OldestRunnableAt == nil {
		t.Fatalf("counts: %+v %v", q, err)
	}

	k, key, err := te.CreateAPIKey(ctx, "ci", engine.ScopeRead)
	if err != nil {
		t.Fatal(err)
	}
	if scope, err := te.AuthenticateAPIKey(ctx, key); err != nil || scope != engine.ScopeRead {
		t.Fatalf("authenticate: %q %v", scope, err)
	}
	if err := te.RevokeAPIKey(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := te.AuthenticateAPIKey(ctx, key); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("a revoked key authenticated: %v", err)
	}
}
