package pg

import (
	"context"
	"time"

	"github.com/gendurable/gendurable/internal/pg/dbsqlc"
)

// Handler is a registered webhook.
type Handler struct {
	Name                    string
	URL                     string
	Secret                  string
	PreviousSecretExpiresAt *time.Time
	TimeoutMS               int
	MaxAttempts             int
	BackoffBaseMS           int
	BackoffMaxMS            int
	CreatedAt, UpdatedAt    time.Time
	Breaker                 HandlerBreaker
}

// HandlerBreaker is a handler's circuit breaker: its settings and its state.
type HandlerBreaker struct {
	// Threshold is the consecutive failures that open it (0: off).
	Threshold           int
	ProbeMS, ProbeMaxMS int
	// PauseAfterMS pauses a handler open for longer (0: never).
	PauseAfterMS        int64
	State               string
	ConsecutiveFailures int
	OpenedAt            *time.Time
	NextProbeAt         *time.Time
	Probes              int
	Opens               int64
	PausedAt            *time.Time
	PausedReason        *string
}

// HandlerUpsert registers or changes a handler. Nil fields keep the current value (or
// take the default); Secret nil keeps the current secret, NewSecret is used for a new row.
type HandlerUpsert struct {
	Name, URL     string
	Secret        *string
	NewSecret     string
	TimeoutMS     *int
	MaxAttempts   *int
	BackoffBaseMS *int
	BackoffMaxMS  *int
	// The breaker settings; BreakerThreshold 0 turns it off (and closes it).
	BreakerThreshold    *int
	BreakerProbeMS      *int
	BreakerProbeMaxMS   *int
	BreakerPauseAfterMS *int64
}

func handlerFromRow(h dbsqlc.Handler) Handler {
	return Handler{Name: h.Name, URL: h.Url, Secret: h.Secret, PreviousSecretExpiresAt: h.PreviousSecretExpiresAt,
		TimeoutMS: h.TimeoutMs, MaxAttempts: h.MaxAttempts, BackoffBaseMS: h.BackoffBaseMs, BackoffMaxMS: h.BackoffMaxMs,
		CreatedAt: h.CreatedAt, UpdatedAt: h.UpdatedAt,
		Breaker: HandlerBreaker{Threshold: h.BreakerThreshold, ProbeMS: h.BreakerProbeMs, ProbeMaxMS: h.BreakerProbeMaxMs,
			PauseAfterMS: h.BreakerPauseAfterMs, State: h.BreakerState, ConsecutiveFailures: h.ConsecutiveFailures,
			OpenedAt: h.BreakerOpenedAt, NextProbeAt: h.BreakerNextProbeAt, Probes: h.BreakerProbes, Opens: h.BreakerOpens,
			PausedAt: h.PausedAt, PausedReason: h.PausedReason}}
}

// HandlerUpsert writes a handler and returns it.
func (db *DB) HandlerUpsert(ctx context.Context, p HandlerUpsert) (Handler, error) {
	h, err := db.q.HandlerUpsert(ctx, dbsqlc.HandlerUpsertParams{Name: p.Name, Url: p.URL, Secret: p.Secret,
		NewSecret: p.NewSecret, TimeoutMs: p.TimeoutMS, MaxAttempts: p.MaxAttempts,
		BackoffBaseMs: p.BackoffBaseMS, BackoffMaxMs: p.BackoffMaxMS, BreakerThreshold: p.BreakerThreshold,
		BreakerProbeMs: p.BreakerProbeMS, BreakerProbeMaxMs: p.BreakerProbeMaxMS, BreakerPauseAfterMs: p.BreakerPauseAfterMS})
	return handlerFromRow(h), translate(err)
}

// HandlerGet returns one handler.
func (db *DB) HandlerGet(ctx context.Context, name string) (Handler, error) {
	h, err := db.q.HandlerGet(ctx, name)
	return handlerFromRow(h), translate(err)
}

// HandlerList returns every handler by name.
func (db *DB) HandlerList(ctx context.Context) ([]Handler, error) {
	hs, err := db.q.HandlerList(ctx)
	return convertAll(hs, handlerFromRow), translate(err)
}

// HandlerDelete removes a handler (jobs naming it fail at their next claim).
func (db *DB) HandlerDelete(ctx context.Context, name string) error {
	_, err := db.q.HandlerDelete(ctx, name)
	return translate(err)
}

// HandlerRotateSecret makes secret the handler's signing secret and keeps the old one
// valid (both signatures sent) for overlap.
func (db *DB) HandlerRotateSecret(ctx context.Context, name, secret string, overlap time.Duration) (Handler, error) {
	h, err := db.q.HandlerRotateSecret(ctx, dbsqlc.HandlerRotateSecretParams{Name: name, Secret: secret, OverlapMs: overlap.Milliseconds()})
	return handlerFromRow(h), translate(err)
}
