package engine

import (
	"context"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/webhook"
)

// Handler is a registered webhook and its retry settings.
type Handler struct {
	Name   string
	URL    string
	Secret string
	// PreviousSecretExpiresAt is when a rotated-out secret stops signing (nil: no overlap).
	PreviousSecretExpiresAt *time.Time
	Timeout                 time.Duration
	MaxAttempts             int
	BackoffBase             time.Duration
	BackoffMax              time.Duration
	CreatedAt, UpdatedAt    time.Time
	Breaker                 Breaker
}

func handlerOf(h pg.Handler) Handler {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	return Handler{Name: h.Name, URL: h.URL, Secret: h.Secret, PreviousSecretExpiresAt: h.PreviousSecretExpiresAt,
		Timeout: ms(h.TimeoutMS), MaxAttempts: h.MaxAttempts, BackoffBase: ms(h.BackoffBaseMS),
		BackoffMax: ms(h.BackoffMaxMS), CreatedAt: h.CreatedAt, UpdatedAt: h.UpdatedAt, Breaker: breakerOf(h.Breaker)}
}

// HandlerSettings registers or changes a handler. Nil fields keep the current value (or
// take the default for a new handler); a nil Secret keeps the current secret and gives a
// new handler a fresh one.
type HandlerSettings struct {
	URL         string
	Secret      *string
	MaxAttempts *int           // 1-1000
	Timeout     *time.Duration // 1ms-24h, whole milliseconds
	BackoffBase *time.Duration // 0-24h
	BackoffMax  *time.Duration // 0-24h
	Breaker     BreakerSettings
}

// URLChecker vets a handler URL before it is registered (a *netguard.Guard is one): the
// error says what is wrong with it.
type URLChecker interface {
	CheckURL(ctx context.Context, url string) error
}

// maxHandlerDuration bounds a handler's timeout and backoffs.
const maxHandlerDuration = 24 * time.Hour

// CheckHandler lists what is wrong with a handler's settings (nil when nothing is),
// in the order of the fields: url (vetted by guard, which may resolve its host),
// secret, max_attempts, timeout, backoff_base, backoff_max, breaker.
func CheckHandler(ctx context.Context, name string, s HandlerSettings, guard URLChecker) []FieldError {
	v := &validator{}
	v.name("name", name)
	if err := guard.CheckURL(ctx, s.URL); err != nil {
		v.add("url", "%s", err.Error())
	}
	if s.Secret != nil && !webhook.ValidSecret(*s.Secret) {
		v.add("secret", "%s", secretRule)
	}
	if s.MaxAttempts != nil && (*s.MaxAttempts < 1 || *s.MaxAttempts > 1000) {
		v.add("max_attempts", "must be between 1 and 1000, got %d", *s.MaxAttempts)
	}
	for _, d := range []struct {
		field string
		value *time.Duration
		min   time.Duration
	}{{"timeout", s.Timeout, time.Millisecond}, {"backoff_base", s.BackoffBase, 0}, {"backoff_max", s.BackoffMax, 0}} {
		if d.value != nil && (*d.value < d.min || *d.value > maxHandlerDuration) {
			v.add(d.field, "must be a duration between %s and 24h", d.min)
		}
	}
	v.breaker(s.Breaker)
	return v.errs
}

// secretRule is what a signing secret must look like.
const secretRule = "must be whsec_ followed by the base64 of at least 16 bytes"

// SetHandler registers or changes a handler after CheckHandler finds nothing wrong
// (a *ValidationError otherwise; nothing is written). One statement (two when it turns
// the breaker off: its parked steps are woken).
func (e *Engine) SetHandler(ctx context.Context, name string, s HandlerSettings, guard URLChecker) (Handler, error) {
	if errs := CheckHandler(ctx, name, s, guard); len(errs) > 0 {
		return Handler{}, &ValidationError{Errors: errs}
	}
	p := pg.HandlerUpsert{Name: name, URL: s.URL, Secret: s.Secret, NewSecret: webhook.NewSecret(), MaxAttempts: s.MaxAttempts}
	for _, d := range []struct {
		in  *time.Duration
		out **int
	}{{s.Timeout, &p.TimeoutMS}, {s.BackoffBase, &p.BackoffBaseMS}, {s.BackoffMax, &p.BackoffMaxMS}} {
		if d.in != nil {
			ms := int(d.in.Milliseconds())
			*d.out = &ms
		}
	}
	s.Breaker.apply(&p)
	h, err := e.db.HandlerUpsert(ctx, p)
	if err != nil {
		return Handler{}, err
	}
	if t := s.Breaker.Threshold; t != nil && *t == 0 { // the breaker is off and closed: run what it parked
		if _, err := e.db.JobWakeParked(ctx, name); err != nil {
			return Handler{}, err
		}
	}
	return handlerOf(h), nil
}

// ListHandlers lists every registered handler.
func (e *Engine) ListHandlers(ctx context.Context) ([]Handler, error) {
	rows, err := e.db.HandlerList(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Handler, len(rows))
	for i, h := range rows {
		out[i] = handlerOf(h)
	}
	return out, nil
}

// GetHandler returns one handler; ErrNotFound when none has the name.
func (e *Engine) GetHandler(ctx context.Context, name string) (Handler, error) {
	h, err := e.db.HandlerGet(ctx, name)
	if err != nil {
		return Handler{}, err
	}
	return handlerOf(h), nil
}

// DeleteHandler removes a handler; ErrNotFound when none has the name.
func (e *Engine) DeleteHandler(ctx context.Context, name string) error {
	return e.db.HandlerDelete(ctx, name)
}

// maxOverlap bounds a secret rotation's overlap.
const maxOverlap = 30 * 24 * time.Hour

// RotateSecret makes secret (a fresh one when empty) the handler's signing secret and
// keeps the current one valid for overlap (at most 720h): meanwhile steps carry both
// signatures.
func (e *Engine) RotateSecret(ctx context.Context, handler, secret string, overlap time.Duration) (Handler, error) {
	v := &validator{}
	if overlap < 0 || overlap > maxOverlap {
		v.add("overlap", "must be a duration of at most 720h")
	}
	if secret == "" {
		secret = webhook.NewSecret()
	}
	if !webhook.ValidSecret(secret) {
		v.add("secret", "%s", secretRule)
	}
	if err := v.err(); err != nil {
		return Handler{}, err
	}
	h, err := e.db.HandlerRotateSecret(ctx, handler, secret, overlap)
	if err != nil {
		return Handler{}, err
	}
	return handlerOf(h), nil
}
