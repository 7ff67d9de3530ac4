package httpapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/gendurable/gendurable/internal/engine"
)

// Scopes an API key may have.
const (
	scopeAdmin = engine.ScopeAdmin
	scopeRead  = engine.ScopeRead
)

var errForbidden = errors.New("forbidden")

// errAuthUnavailable: the credential could not be checked (the database failed).
var errAuthUnavailable = errors.New("cannot check the credential")

type scopeKey struct{}

// scopeOf is the scope the request was authenticated with (admin when auth is off).
func scopeOf(ctx context.Context) string {
	if s, ok := ctx.Value(scopeKey{}).(string); ok {
		return s
	}
	return scopeAdmin
}

// leaseAuthorised are the routes whose credential is the step's lease token (a handler
// reporting an asynchronous step needs no API key).
var leaseAuthorised = regexp.MustCompile(`^/v1/jobs/[0-9]+/(heartbeat|outcome)$`)

// authenticator checks bearer credentials when the server runs with an API token: the
// token itself (admin) or an API key, which the engine looks up by its hash (cached here
// by hash for 5 s, so a revocation takes effect within 5 s). Keys are never logged.
type authenticator struct {
	token string
	eng   *engine.Engine
	errs  errorMapper
	mu    sync.Mutex
	cache map[[32]byte]cachedKey
}

type cachedKey struct {
	scope string
	until time.Time
}

func (a *authenticator) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.token == "" || !strings.HasPrefix(r.URL.Path, "/v1/") || leaseAuthorised.MatchString(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || got == "" {
			a.errs.write(w, r, errUnauthorized)
			return
		}
		scope := ""
		if subtle.ConstantTimeCompare([]byte(got), []byte(a.token)) == 1 {
			scope = scopeAdmin
		} else if strings.HasPrefix(got, engine.APIKeyPrefix) {
			var err error
			if scope, err = a.lookup(r.Context(), got); err != nil {
				// Not the client's fault: a 401 would send it to fix a key that is fine.
				a.errs.write(w, r, fmt.Errorf("%w: %w", errAuthUnavailable, err))
				return
			}
		}
		if scope == "" {
			a.errs.write(w, r, errUnauthorized)
			return
		}
		if scope != scopeAdmin && (r.Method != http.MethodGet && r.Method != http.MethodHead || strings.HasPrefix(r.URL.Path, "/v1/api-keys")) {
			a.errs.write(w, r, errForbidden)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), scopeKey{}, scope)))
	})
}

// lookup answers the scope of a key ("" for an unknown or revoked one), or the error
// that kept it from checking the key.
func (a *authenticator) lookup(ctx context.Context, key string) (string, error) {
	hash := sha256.Sum256([]byte(key))
	a.mu.Lock()
	if c, ok := a.cache[hash]; ok && time.Now().Before(c.until) {
		a.mu.Unlock()
		return c.scope, nil
	}
	a.mu.Unlock()
	scope, err := a.eng.AuthenticateAPIKey(ctx, key)
	if errors.Is(err, engine.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	a.mu.Lock()
	if a.cache == nil || len(a.cache) > 10000 {
		a.cache = map[[32]byte]cachedKey{}
	}
	a.cache[hash] = cachedKey{scope: scope, until: time.Now().Add(5 * time.Second)}
	a.mu.Unlock()
	return scope, nil
}

// forget drops every cached key (after a revocation in this process).
func (a *authenticator) forget() {
	a.mu.Lock()
	a.cache = nil
	a.mu.Unlock()
}

func apiKeyBody(k engine.APIKey) APIKey {
	return APIKey{Id: k.ID, Name: k.Name, Scope: APIKeyScope(k.Scope), Prefix: k.Prefix, CreatedAt: k.CreatedAt,
		LastUsedAt: k.LastUsedAt, RevokedAt: k.RevokedAt}
}

type apiKeyCreatedBody struct {
	APIKey
	Key string `json:"key"`
}

func (r jsonResponse) VisitCreateAPIKeyResponse(w http.ResponseWriter) error { return r.write(w) }

// CreateAPIKey creates a key and shows it once.
func (s *Server) CreateAPIKey(ctx context.Context, req CreateAPIKeyRequestObject) (CreateAPIKeyResponseObject, error) {
	k, key, err := s.eng.CreateAPIKey(ctx, req.Body.Name, string(req.Body.Scope))
	if err != nil {
		return nil, err
	}
	return jsonResponse{status: http.StatusCreated, body: apiKeyCreatedBody{APIKey: apiKeyBody(k), Key: key}}, nil
}

// ListAPIKeys lists keys (never the keys themselves).
func (s *Server) ListAPIKeys(ctx context.Context, _ ListAPIKeysRequestObject) (ListAPIKeysResponseObject, error) {
	ks, err := s.eng.ListAPIKeys(ctx)
	if err != nil {
		return nil, err
	}
	out := APIKeyList{ApiKeys: make([]APIKey, len(ks))}
	for i, k := range ks {
		out.ApiKeys[i] = apiKeyBody(k)
	}
	return ListAPIKeys200JSONResponse(out), nil
}

// RevokeAPIKey revokes a key.
func (s *Server) RevokeAPIKey(ctx context.Context, req RevokeAPIKeyRequestObject) (RevokeAPIKeyResponseObject, error) {
	if err := s.eng.RevokeAPIKey(ctx, req.Id); err != nil {
		return nil, notFound(err, "live API key", req.Id)
	}
	s.auth.forget()
	return RevokeAPIKey204Response{}, nil
}

// RotateHandlerSecret replaces a handler's signing secret with an overlap window.
func (s *Server) RotateHandlerSecret(ctx context.Context, req RotateHandlerSecretRequestObject) (RotateHandlerSecretResponseObject, error) {
	secret, overlap := "", 24*time.Hour
	if req.Body != nil {
		if req.Body.Secret != nil {
			secret = *req.Body.Secret
		}
		if req.Body.Overlap != nil {
			var fields []engine.FieldError
			d, ok := parseDuration("overlap", *req.Body.Overlap, &fields)
			if !ok {
				return nil, &engine.ValidationError{Errors: fields}
			}
			overlap = d
		}
	}
	h, err := s.eng.RotateSecret(ctx, req.Name, secret, overlap)
	if err != nil {
		return nil, missing(err, "handler", req.Name)
	}
	return RotateHandlerSecret200JSONResponse(handlerBody(h, scopeOf(ctx))), nil
}
