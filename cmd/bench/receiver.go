package main

import (
	"context"
	"encoding/json"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gendurable/gendurable/webhook"
)

// benchSecret signs the bench's steps.
const benchSecret = "whsec_YmVuY2gtc2VjcmV0LWJlbmNoLXNlY3JldC1iZW5jaA=="

// runReceiver is the bench's webhook, in its own process: it verifies each step's
// signature, answers next until the job's input "steps" are done, and records when it
// first saw each job (for insert→webhook latency), served at GET /seen. GET /stats
// answers how many steps it served and the size of the last step body (the River peer
// sends bodies of that size) and how many calls to /hold it holds open. Both gendurable
// and the River peer POST to /steps.
func runReceiver(addr string) {
	var mu sync.Mutex
	seen := map[int64]int64{}
	var requests, lastBody, held atomic.Int64
	release := make(chan struct{})
	var releaseOnce sync.Once
	mux := http.NewServeMux()
	steps := webhook.Handler(benchSecret, func(_ context.Context, req *webhook.StepRequest) webhook.Response {
		now := time.Now().UnixNano()
		mu.Lock()
		if _, ok := seen[req.Job.ID]; !ok {
			seen[req.Job.ID] = now
		}
		mu.Unlock()
		var in struct{ Steps int }
		_ = json.Unmarshal(req.Job.Input, &in)
		if req.Job.Step+1 < in.Steps {
			return webhook.Response{Next: &webhook.Next{}}
		}
		return webhook.Response{Done: &webhook.Done{}}
	})
	mux.HandleFunc("POST /steps", func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		lastBody.Store(r.ContentLength)
		steps.ServeHTTP(w, r)
	})
	// POST /hold keeps each step's call open until POST /release: steps in flight.
	mux.HandleFunc("POST /hold", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		held.Add(1)
		<-release
		held.Add(-1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"done":{}}`)
	})
	mux.HandleFunc("POST /release", func(http.ResponseWriter, *http.Request) { releaseOnce.Do(func() { close(release) }) })
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]int64{"requests": requests.Load(), "last_body_bytes": lastBody.Load(),
			"held": held.Load()})
	})
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile) // bench -receiver-cpuprofile
	mux.HandleFunc("GET /seen", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		_ = json.NewEncoder(w).Encode(seen)
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	// The parent reads the chosen address from our first line of output.
	_, _ = os.Stdout.WriteString(ln.Addr().String() + "\n")
	log.Fatal(http.Serve(ln, mux))
}
