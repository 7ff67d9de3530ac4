package engine

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"time"
	"unicode/utf8"

	"github.com/gendurable/gendurable/internal/pg"
)

// The scopes an API key may have: admin may do anything, read may only read.
const (
	ScopeAdmin = "admin"
	ScopeRead  = "read"
)

// APIKeyPrefix starts every API key.
const APIKeyPrefix = "gdk_"

// APIKey is an API key's record; the key itself is shown once, by CreateAPIKey, and
// stored only as its SHA-256.
type APIKey struct {
	ID         int64
	Name       string
	Prefix     string // the key's first characters, to tell keys apart in listings
	Scope      string
	CreatedAt  time.Time
	LastUsedAt *time.Time
	RevokedAt  *time.Time
}

func apiKeyOf(k pg.APIKey) APIKey {
	return APIKey{ID: k.ID, Name: k.Name, Prefix: k.Prefix, Scope: k.Scope, CreatedAt: k.CreatedAt,
		LastUsedAt: k.LastUsedAt, RevokedAt: k.RevokedAt}
}

// newAPIKey returns a fresh key and the prefix shown in listings.
func newAPIKey() (key, prefix string) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	key = APIKeyPrefix + base64.RawURLEncoding.EncodeToString(b)
	return key, key[:len(APIKeyPrefix)+6]
}

// CreateAPIKey makes a key of scope (ScopeAdmin or ScopeRead) named name (1-200
// characters) and answers its record and the key, which is not stored and cannot be
// shown again.
func (e *Engine) CreateAPIKey(ctx context.Context, name, scope string) (APIKey, string, error) {
	v := &validator{}
	if n := utf8.RuneCountInString(name); n < 1 || n > 200 {
		v.add("name", "must be 1-200 characters")
	} else if msg := UnstorableText(name); msg != "" {
		v.add("name", "%s", msg)
	}
	if scope != ScopeAdmin && scope != ScopeRead {
		v.add("scope", "must be %q or %q", ScopeAdmin, ScopeRead)
	}
	if err := v.err(); err != nil {
		return APIKey{}, "", err
	}
	key, prefix := newAPIKey()
	hash := sha256.Sum256([]byte(key))
	k, err := e.db.APIKeyInsert(ctx, name, prefix, hash[:], scope)
	if err != nil {
		return APIKey{}, "", err
	}
	return apiKeyOf(k), key, nil
}

// ListAPIKeys lists every key's record, revoked ones included.
func (e *Engine) ListAPIKeys(ctx context.Context) ([]APIKey, error) {
	rows, err := e.db.APIKeyList(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]APIKey, len(rows))
	for i, k := range rows {
		out[i] = apiKeyOf(k)
	}
	return out, nil
}

// RevokeAPIKey revokes a live key; ErrNotFound when there is no live key with the id.
func (e *Engine) RevokeAPIKey(ctx context.Context, id int64) error {
	return e.db.APIKeyRevoke(ctx, id)
}

// AuthenticateAPIKey answers the scope of a live key (one indexed lookup by its
// SHA-256); ErrNotFound for a key that is unknown or revoked.
func (e *Engine) AuthenticateAPIKey(ctx context.Context, key string) (string, error) {
	hash := sha256.Sum256([]byte(key))
	_, scope, err := e.db.APIKeyAuthenticate(ctx, hash[:])
	return scope, err
}
