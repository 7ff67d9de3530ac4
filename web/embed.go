// Package web serves the dashboard: the built assets under dist/ are embedded into the
// server binary, so running the server needs no Node.js.
package web

import (
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

//go:embed all:dist
var dist embed.FS

// Handler serves the dashboard's files, and index.html for any other path (the
// dashboard routes in the browser).
func Handler() http.Handler { return HandlerWith(Config{}) }

// Config is what the dashboard is told about the server, served as /dashboard.json.
type Config struct {
	// TraceURL links a run's trace: a URL template with {trace_id} in it (e.g. a Jaeger
	// UI's http://localhost:16686/trace/{trace_id}); empty: the trace id is shown unlinked.
	TraceURL string `json:"trace_url,omitempty"`
}

// HandlerWith is Handler serving c at /dashboard.json as well.
func HandlerWith(c Config) http.Handler {
	settings, err := json.Marshal(c)
	if err != nil {
		panic(err)
	}
	files := handler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/dashboard.json" {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Cache-Control", "no-cache")
			_, _ = w.Write(settings)
			return
		}
		files.ServeHTTP(w, r)
	})
}

func handler() http.Handler {
	root, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err)
	}
	files := http.FileServerFS(root)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(path.Clean(r.URL.Path), "/")
		if name == "" {
			name = "index.html"
		}
		if _, err := fs.Stat(root, name); err != nil {
			r2 := r.Clone(r.Context())
			r2.URL.Path = "/"
			w.Header().Set("Cache-Control", "no-cache")
			files.ServeHTTP(w, r2)
			return
		}
		if strings.HasPrefix(name, "assets/") {
			w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
		}
		files.ServeHTTP(w, r)
	})
}
