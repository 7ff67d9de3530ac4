// Package httpapi is gendurable's REST API: the chi strict server generated from
// openapi.yaml (api.gen.go), kin-openapi validation in front of it, RFC 9457 problems,
// and thin handlers that translate between the wire and the engine.
package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"go.opentelemetry.io/otel/trace"

	gendurable "github.com/gendurable/gendurable"
	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/netguard"
)

// Config holds the API's settings.
type Config struct {
	// MaxBodyBytes caps a request body (default 1 MiB); MaxBatchBodyBytes caps the
	// batch insert's (default 32 MiB).
	MaxBodyBytes, MaxBatchBodyBytes int64
	// APIToken, when set, turns authentication on: every /v1 call needs
	// "Authorization: Bearer <token>", this token (admin) or an API key (admin or read
	// scope); /healthz, /readyz, /metrics and /openapi.yaml stay open, and the
	// asynchronous-step endpoints are authorised by their lease token.
	APIToken string
	// Guard vets handler URLs at registration (nil: allow any http(s) URL).
	Guard *netguard.Guard
	// Metrics serves /metrics (nil: not served).
	Metrics http.Handler
	// Dashboard serves / (nil: not served).
	Dashboard http.Handler
	// RequestTimeout bounds the time an API call may wait for the database (default
	// DefaultRequestTimeout): past it the call's statement is cancelled and the client
	// gets a 503 problem, rather than a request that hangs on a lock or on a Citus
	// worker that does not answer.
	RequestTimeout time.Duration
	// TracerProvider, when set, makes a server span of every request (tracing.go); nil
	// (the default) makes none, and an insert's traceparent header is kept as it came.
	TracerProvider trace.TracerProvider
}

// Server implements the generated StrictServerInterface.
type Server struct {
	eng  *engine.Engine
	cfg  Config
	log  *slog.Logger
	auth *authenticator
}

var _ StrictServerInterface = (*Server)(nil)

// Validate reports the settings New refuses.
func (c Config) Validate() error {
	v := engine.ConfigCheck{Service: "api"}
	v.Check(c.MaxBodyBytes >= 0, "MaxBodyBytes", "GENDURABLE_MAX_BODY_BYTES", c.MaxBodyBytes,
		"must not be negative (0: the default, 1 MiB)")
	v.Check(c.MaxBatchBodyBytes >= 0, "MaxBatchBodyBytes", "", c.MaxBatchBodyBytes,
		"must not be negative (0: the default, 32 MiB)")
	v.Check(c.RequestTimeout >= 0, "RequestTimeout", "GENDURABLE_REQUEST_TIMEOUT", c.RequestTimeout,
		"must not be negative (0: the default, 30s)")
	return v.Err()
}

// New builds the HTTP handler of the whole service; an error when cfg.Validate refuses a
// setting.
func New(eng *engine.Engine, cfg Config, log *slog.Logger) (http.Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = 1 << 20
	}
	if cfg.MaxBatchBodyBytes == 0 {
		cfg.MaxBatchBodyBytes = 32 << 20
	}
	if cfg.Guard == nil {
		cfg.Guard = &netguard.Guard{AllowPrivate: true}
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	errs := errorMapper{log: log}
	s := &Server{eng: eng, cfg: cfg, log: log,
		auth: &authenticator{token: cfg.APIToken, eng: eng, errs: errs}}
	v, err := newValidator(bodyLimits{regular: cfg.MaxBodyBytes, batch: cfg.MaxBatchBodyBytes}, errs)
	if err != nil {
		return nil, err
	}
	r := chi.NewRouter()
	if cfg.TracerProvider != nil {
		r.Use(tracing(cfg.TracerProvider))
	}
	r.Use(requestLog(log), recoverer(errs))
	r.Get("/openapi.yaml", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(gendurable.OpenAPI)
	})
	if cfg.Metrics != nil {
		r.Handle("/metrics", cfg.Metrics)
	}
	strict := NewStrictHandlerWithOptions(s, nil, StrictHTTPServerOptions{
		RequestErrorHandlerFunc: func(w http.ResponseWriter, r *http.Request, err error) {
			writeProblem(w, http.StatusBadRequest, "malformed", "The request could not be read", err.Error(), nil)
		},
		ResponseErrorHandlerFunc: errs.write,
	})
	r.Group(func(r chi.Router) {
		r.Use(requestDeadline(cfg.RequestTimeout), s.auth.middleware, v.middleware)
		HandlerWithOptions(strict, ChiServerOptions{BaseRouter: r,
			ErrorHandlerFunc: func(w http.ResponseWriter, r *http.Request, err error) {
				writeProblem(w, http.StatusBadRequest, "malformed", "The request could not be read", err.Error(), nil)
			}})
	})
	// chi falls through to the dashboard's catch-all for any path or method it has no
	// route for: the API's own paths must answer a problem (404, or 405 with Allow), not
	// the dashboard's HTML.
	if cfg.Dashboard != nil {
		r.Handle("/*", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1" || strings.HasPrefix(r.URL.Path, "/v1/") || len(v.allowed(r)) > 0 {
				v.unrouted(w, r)
				return
			}
			cfg.Dashboard.ServeHTTP(w, r)
		}))
	}
	r.NotFound(v.unrouted)
	r.MethodNotAllowed(v.unrouted)
	return r, nil
}

// DefaultRequestTimeout is how long an API call may take when Config.RequestTimeout is 0.
const DefaultRequestTimeout = 30 * time.Second

// requestDeadline gives every API call a deadline: a statement still running at it is
// cancelled, and errorMapper answers 503 (errDeadline).
func requestDeadline(d time.Duration) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithTimeout(r.Context(), d)
			defer cancel()
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
}

type ctxKey int

const requestIDKey ctxKey = 0

var saneRequestID = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// RequestID returns the id of the request being served ("" outside one).
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey).(string)
	return id
}

// statusRecorder remembers the status a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// requestLog gives every request an id (X-Request-Id, kept when the client sent a sane
// one) and logs it once it is served. Authorization headers are never logged.
func requestLog(log *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id := r.Header.Get("X-Request-Id")
			if !saneRequestID.MatchString(id) {
				b := make([]byte, 8)
				_, _ = rand.Read(b)
				id = hex.EncodeToString(b)
			}
			w.Header().Set("X-Request-Id", id)
			rec := &statusRecorder{ResponseWriter: w}
			started := time.Now()
			next.ServeHTTP(rec, r.WithContext(context.WithValue(r.Context(), requestIDKey, id)))
			level := slog.LevelInfo
			if rec.status >= 500 {
				level = slog.LevelError
			}
			if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" || r.URL.Path == "/metrics" {
				level = slog.LevelDebug
			}
			if sc := trace.SpanContextFromContext(r.Context()); sc.IsValid() {
				log.Log(r.Context(), level, "request", "request_id", id, "method", r.Method, "path", r.URL.Path,
					"status", rec.status, "duration_ms", float64(time.Since(started).Microseconds())/1000,
					"trace_id", sc.TraceID().String())
				return
			}
			log.Log(r.Context(), level, "request", "request_id", id, "method", r.Method, "path", r.URL.Path,
				"status", rec.status, "duration_ms", float64(time.Since(started).Microseconds())/1000)
		})
	}
}

// recoverer turns a handler panic into a 500 problem.
func recoverer(errs errorMapper) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				if v := recover(); v != nil {
					if v == http.ErrAbortHandler {
						panic(v)
					}
					errs.log.Error("handler panicked", "path", r.URL.Path, "panic", v)
					writeProblem(w, http.StatusInternalServerError, "internal", "Internal error", "", nil)
				}
			}()
			next.ServeHTTP(w, r)
		})
	}
}
