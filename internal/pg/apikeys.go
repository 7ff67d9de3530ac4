package pg

import (
	"context"
	"time"

	"github.com/gendurable/gendurable/internal/pg/dbsqlc"
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

// APIKeyInsert stores a new key by its hash.
func (db *DB) APIKeyInsert(ctx context.Context, name, prefix string, hash []byte, scope string) (APIKey, error) {
	k, err := db.q.APIKeyInsert(ctx, dbsqlc.APIKeyInsertParams{Name: name, Prefix: prefix, Hash: hash, Scope: scope})
	return APIKey(k), translate(err)
}

// APIKeyList lists every key, revoked ones included.
func (db *DB) APIKeyList(ctx context.Context) ([]APIKey, error) {
	rows, err := db.q.APIKeyList(ctx)
	return convertAll(rows, func(k dbsqlc.APIKeyListRow) APIKey { return APIKey(k) }), translate(err)
}

// APIKeyRevoke revokes a live key; ErrNotFound when there is none with that id.
func (db *DB) APIKeyRevoke(ctx context.Context, id int64) error {
	_, err := db.q.APIKeyRevoke(ctx, id)
	return translate(err)
}

// APIKeyAuthenticate returns the scope of the live key whose SHA-256 is hash
// (ErrNotFound when none).
func (db *DB) APIKeyAuthenticate(ctx context.Context, hash []byte) (id int64, scope string, err error) {
	k, err := db.q.APIKeyAuthenticate(ctx, hash)
	return k.ID, k.Scope, translate(err)
}
