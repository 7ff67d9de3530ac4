package pg

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
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
}

func scanHandler(r pgx.Row) (Handler, error) {
	var h Handler
	err := r.Scan(&h.Name, &h.URL, &h.Secret, &h.PreviousSecretExpiresAt, &h.TimeoutMS, &h.MaxAttempts,
		&h.BackoffBaseMS, &h.BackoffMaxMS, &h.CreatedAt, &h.UpdatedAt)
	return h, err
}

// HandlerUpsert writes a handler and returns it.
func (db *DB) HandlerUpsert(ctx context.Context, p HandlerUpsert) (Handler, error) {
	h, err := scanHandler(db.pool.QueryRow(ctx, stmt("HandlerUpsert"), p.Name, p.URL, p.Secret, p.NewSecret,
		p.TimeoutMS, p.MaxAttempts, p.BackoffBaseMS, p.BackoffMaxMS))
	return h, translate(err)
}

// HandlerGet returns one handler.
func (db *DB) HandlerGet(ctx context.Context, name string) (Handler, error) {
	h, err := scanHandler(db.pool.QueryRow(ctx, stmt("HandlerGet"), name))
	return h, translate(err)
}

// HandlerList returns every handler by name.
func (db *DB) HandlerList(ctx context.Context) ([]Handler, error) {
	return collect(ctx, db, stmt("HandlerList"), func(r pgx.Rows) (Handler, error) { return scanHandler(r) })
}

// HandlerDelete removes a handler (jobs naming it fail at their next claim).
func (db *DB) HandlerDelete(ctx context.Context, name string) error {
	var n string
	return translate(db.pool.QueryRow(ctx, stmt("HandlerDelete"), name).Scan(&n))
}

// HandlerRotateSecret makes secret the handler's signing secret and keeps the old one
// valid (both signatures sent) for overlap.
func (db *DB) HandlerRotateSecret(ctx context.Context, name, secret string, overlap time.Duration) (Handler, error) {
	h, err := scanHandler(db.pool.QueryRow(ctx, stmt("HandlerRotateSecret"), name, secret, overlap.Milliseconds()))
	return h, translate(err)
}
