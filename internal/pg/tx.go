package pg

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// inTx runs fn in a transaction, committed when fn returns nil.
func (db *DB) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		return translate(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if err := fn(tx); err != nil {
		return translate(err)
	}
	return translate(tx.Commit(ctx))
}
