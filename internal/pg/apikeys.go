package pg

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// APIKey is an API key's record (never the key itself).
type APIKey struct {
	ID         int64
	Name       string
	Prefix     string
	Scope      string
	CreatedAt  time.Time
	LastUsedAt *time.Time
	RevokedAt  *time.Time
}

func scanAPIKey(r pgx.Row) (APIKey, error) {
	var k APIKey
	err := r.Scan(&k.ID, &k.Name, &k.Prefix, &k.Scope, &k.CreatedAt, &k.LastUsedAt, &k.RevokedAt)
	return k, err
}

// APIKeyInsert stores a new key by its hash.
func (db *DB) APIKeyInsert(ctx context.Context, name, prefix string, hash []byte, scope string) (APIKey, error) {
	k, err := scanAPIKey(db.pool.QueryRow(ctx, stmt("APIKeyInsert"), name, prefix, hash, scope))
	return k, translate(err)
}

// APIKeyList lists every key, revoked ones included.
func (db *DB) APIKeyList(ctx context.Context) ([]APIKey, error) {
	return collect(ctx, db, stmt("APIKeyList"), func(r pgx.Rows) (APIKey, error) { return scanAPIKey(r) })
}

// APIKeyRevoke revokes a live key; ErrNotFound when there is none with that id.
func (db *DB) APIKeyRevoke(ctx context.Context, id int64) error {
	var got int64
	return translate(db.pool.QueryRow(ctx, stmt("APIKeyRevoke"), id).Scan(&got))
}

// APIKeyAuthenticate returns the scope of the live key whose SHA-256 is hash
// (ErrNotFound when none).
func (db *DB) APIKeyAuthenticate(ctx context.Context, hash []byte) (id int64, scope string, err error) {
	err = translate(db.pool.QueryRow(ctx, stmt("APIKeyAuthenticate"), hash).Scan(&id, &scope))
	return
}
