package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// apiClient calls the REST API of whichever server is up (a random one each call).
type apiClient struct {
	fleet  *fleet
	rng    *lockedRand
	client *http.Client
	errors atomic.Int64
}

func newAPIClient(f *fleet, rng *lockedRand) *apiClient {
	return &apiClient{fleet: f, rng: rng, client: &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: 16, IdleConnTimeout: 10 * time.Second,
	}}}
}

// do sends one request to one server, bounded by timeout.
func (a *apiClient) do(ctx context.Context, method, path, body string, timeout time.Duration) ([]byte, int, error) {
	addrs := a.fleet.addrs()
	addr := addrs[a.rng.IntN(len(addrs))]
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path, strings.NewReader(body))
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.client.Do(req)
	if err != nil {
		a.errors.Add(1)
		return nil, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		a.errors.Add(1)
		return nil, 0, err
	}
	return b, resp.StatusCode, nil
}

// must retries a setup call until it answers 2xx (bounded: 20 tries, 30 s).
func (a *apiClient) must(ctx context.Context, method, path, body string) error {
	var last error
	deadline := time.Now().Add(30 * time.Second)
	for try := 0; try < 20 && time.Now().Before(deadline); try++ {
		b, status, err := a.do(ctx, method, path, body, 5*time.Second)
		if err == nil && status < 300 {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("%s %s: %d %s", method, path, status, b)
		}
		last = err
		select {
		case <-time.After(250 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return last
}

// inserter inserts the run's jobs in batches, paced over a period, and remembers which
// ids the service acknowledged.
type inserter struct {
	api   *apiClient
	rng   *lockedRand
	seed  int64
	mu    sync.Mutex
	acked map[int64]int // job id → ordinal
	// resent counts batches sent again after a failure without an answer (their first
	// copy may have been inserted: the key deduplicates it while that job is live).
	resent, failed atomic.Int64
	finished       atomic.Bool
}

const insertBatch = 20

func (in *inserter) run(ctx context.Context, total int, over time.Duration) {
	defer in.finished.Store(true)
	batches := (total + insertBatch - 1) / insertBatch
	interval := over / time.Duration(batches)
	next := time.Now()
	for b := 0; b < batches && ctx.Err() == nil; b++ {
		select {
		case <-time.After(time.Until(next)):
		case <-ctx.Done():
			return
		}
		next = next.Add(interval)
		var buf bytes.Buffer
		buf.WriteString(`{"jobs":[`)
		for i := b * insertBatch; i < min(total, (b+1)*insertBatch); i++ {
			if i > b*insertBatch {
				buf.WriteByte(',')
			}
			phases := 3 + in.rng.IntN(3)
			wait := -1
			if in.rng.Float64() < 0.5 {
				wait = in.rng.IntN(phases - 1)
			}
			fmt.Fprintf(&buf, `{"handler":"chaos","queue":"chaos","key":"chaos-%d-%d","max_attempts":1000,"input":{"n":%d,"phases":%d,"wait":%d}}`,
				in.seed, i, i, phases, wait)
		}
		buf.WriteString(`]}`)
		in.send(ctx, buf.String())
	}
}

// send posts one batch until a server answers it (bounded: 100 tries, 120 s).
func (in *inserter) send(ctx context.Context, body string) {
	deadline := time.Now().Add(120 * time.Second)
	for try := 0; try < 100 && time.Now().Before(deadline) && ctx.Err() == nil; try++ {
		if try > 0 {
			in.resent.Add(1)
			select {
			case <-time.After(200 * time.Millisecond):
			case <-ctx.Done():
				return
			}
		}
		b, status, err := in.api.do(ctx, "POST", "/v1/jobs/batch", body, 10*time.Second)
		if err != nil || status >= 500 {
			continue
		}
		if status >= 300 {
			in.failed.Add(1)
			fmt.Printf("chaos: a batch insert was refused: %d %s\n", status, b)
			return
		}
		var out struct {
			Jobs []struct {
				ID    int64 `json:"id"`
				Input struct {
					N int `json:"n"`
				} `json:"input"`
			} `json:"jobs"`
		}
		if err := json.Unmarshal(b, &out); err != nil {
			continue
		}
		in.mu.Lock()
		for _, j := range out.Jobs {
			in.acked[j.ID] = j.Input.N
		}
		in.mu.Unlock()
		return
	}
	in.failed.Add(1)
}
