// Command river is the River peer of gendurable's end-to-end bench (cmd/bench): River
// v0.51.2 on the same PostgreSQL, each job's Work POSTing a signed step body of the size
// gendurable sends to the same webhook receiver process, so the two can be compared
// step for step. It lives in its own Go module so the service never depends on River.
//
// cmd/bench builds it, starts it and drives it over stdin/stdout, one command a line:
//
//	insert N   insert N jobs into the paused queue with InsertMany, in calls of -insert-batch;
//	           answers "inserted N <total seconds> <seconds of each call>..."
//	resume     resume the queue (the drain starts); answers "resumed"
//	pause      pause the queue again; answers "paused"
//	quit       stop the client and exit
//
// On start it migrates River's schema (rivermigrate), starts a client working queue
// "bench" with -workers workers, pauses the queue and prints "ready". Errors go to
// stderr; a failed command answers "error <text>".
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// queue is the one queue the peer works.
const queue = "bench"

type options struct {
	databaseURL       string
	url               string
	secret            string
	bodyBytes         int
	workers           int
	maxConns          int
	insertBatch       int
	fetchCooldown     time.Duration
	fetchPollInterval time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.databaseURL, "database-url", "", "PostgreSQL for River's tables (required)")
	flag.StringVar(&o.url, "url", "", "the webhook receiver's step URL (required)")
	flag.StringVar(&o.secret, "secret", "", "the receiver's whsec_ signing secret (required)")
	flag.IntVar(&o.bodyBytes, "body-bytes", 400, "size of each step request body (match gendurable's)")
	flag.IntVar(&o.workers, "workers", 256, "MaxWorkers of the queue (match gendurable's max_in_flight)")
	flag.IntVar(&o.maxConns, "max-conns", 20, "pgx pool size (gendurable's server default is 20)")
	flag.IntVar(&o.insertBatch, "insert-batch", 5000, "jobs per InsertMany call")
	flag.DurationVar(&o.fetchCooldown, "fetch-cooldown", time.Millisecond, "FetchCooldown (River's default 100ms caps a client near 1k jobs/s)")
	flag.DurationVar(&o.fetchPollInterval, "fetch-poll-interval", time.Second, "FetchPollInterval (a fallback; inserts and resumes are notified)")
	flag.Parse()
	if o.databaseURL == "" || o.url == "" || o.secret == "" {
		fmt.Fprintln(os.Stderr, "river: -database-url, -url and -secret are required")
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "river:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(o.databaseURL)
	if err != nil {
		return err
	}
	cfg.MaxConns = int32(o.maxConns)
	// As gendurable's pool does: JIT never pays for short OLTP statements.
	cfg.ConnConfig.RuntimeParams["jit"] = "off"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, nil)
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrating River's schema: %w", err)
	}

	w, err := newStepWorker(o)
	if err != nil {
		return err
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	client, err := river.NewClient(driver, &river.Config{
		FetchCooldown:     o.fetchCooldown,
		FetchPollInterval: o.fetchPollInterval,
		Queues:            map[string]river.QueueConfig{queue: {MaxWorkers: o.workers}},
		Workers:           workers,
		MaxAttempts:       25,
		Logger:            slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Stop(stopCtx)
	}()
	if err := client.QueuePause(ctx, queue, nil); err != nil {
		return fmt.Errorf("pausing the queue: %w", err)
	}
	fmt.Println("ready")

	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		fields := strings.Fields(in.Text())
		if len(fields) == 0 {
			continue
		}
		var answer string
		switch fields[0] {
		case "insert":
			n := 0
			if len(fields) > 1 {
				n, _ = strconv.Atoi(fields[1])
			}
			answer, err = insert(ctx, client, n, o.insertBatch)
		case "resume":
			answer, err = "resumed", client.QueueResume(ctx, queue, nil)
		case "pause":
			answer, err = "paused", client.QueuePause(ctx, queue, nil)
		case "quit":
			return nil
		default:
			err = fmt.Errorf("unknown command %q", fields[0])
		}
		if err != nil {
			answer = "error " + strings.ReplaceAll(err.Error(), "\n", " ")
		}
		fmt.Println(answer)
	}
	return in.Err()
}

// insert inserts n jobs with InsertMany, batch per call, and times each call.
func insert(ctx context.Context, client *river.Client[pgx.Tx], n, batch int) (string, error) {
	if n <= 0 {
		return "", errors.New("insert needs a positive count")
	}
	params := make([]river.InsertManyParams, batch)
	for i := range params {
		params[i] = river.InsertManyParams{Args: StepArgs{Steps: 1}, InsertOpts: &river.InsertOpts{Queue: queue}}
	}
	var calls []string
	started := time.Now()
	for done := 0; done < n; {
		k := min(batch, n-done)
		t := time.Now()
		if _, err := client.InsertMany(ctx, params[:k]); err != nil {
			return "", err
		}
		calls = append(calls, strconv.FormatFloat(time.Since(t).Seconds(), 'f', 4, 64))
		done += k
	}
	return fmt.Sprintf("inserted %d %.4f %s", n, time.Since(started).Seconds(), strings.Join(calls, " ")), nil
}

// StepArgs are a job's arguments: the same input gendurable's one-step bench jobs carry.
type StepArgs struct {
	Steps int `json:"steps"`
}

// Kind names the job kind.
func (StepArgs) Kind() string { return "bench_step" }

// stepWorker POSTs each job to the webhook receiver as gendurable would: a step request
// body of the same shape and size, Standard Webhooks headers signed with HMAC-SHA256,
// and the answer read and decoded. Anything but a 200 with a done answer is an error
// (River retries it).
type stepWorker struct {
	river.WorkerDefaults[StepArgs]
	url       string
	key       []byte
	bodyBytes int
	client    *http.Client
}

func newStepWorker(o options) (*stepWorker, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(o.secret, "whsec_"))
	if err != nil || len(key) == 0 {
		return nil, errors.New("-secret is not whsec_ followed by base64")
	}
	w := &stepWorker{url: o.url, key: key, bodyBytes: o.bodyBytes, client: &http.Client{
		Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        1024,
			MaxIdleConnsPerHost: max(256, o.workers), // as many kept-alive connections as workers: no re-dials
			IdleConnTimeout:     90 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
	return w, nil
}

// stepRequest mirrors the body of gendurable's step request (webhook.StepRequest).
type stepRequest struct {
	Job struct {
		ID          int64           `json:"id"`
		Queue       string          `json:"queue"`
		Handler     string          `json:"handler"`
		Key         *string         `json:"key"`
		Step        int             `json:"step"`
		Attempt     int             `json:"attempt"`
		MaxAttempts int             `json:"max_attempts"`
		Input       json.RawMessage `json:"input"`
		State       json.RawMessage `json:"state"`
		CreatedAt   time.Time       `json:"created_at"`
	} `json:"job"`
	Signals []struct{} `json:"signals"`
	Lease   struct {
		Token     string    `json:"token"`
		ExpiresAt time.Time `json:"expires_at"`
	} `json:"lease"`
}

func (w *stepWorker) request(id int64, attempt, maxAttempts int, createdAt time.Time, input []byte) *stepRequest {
	r := &stepRequest{Signals: []struct{}{}}
	// Negative ids keep River's jobs apart from gendurable's in the receiver's first-seen map.
	r.Job.ID, r.Job.Queue, r.Job.Handler = -id, queue, "bench"
	r.Job.Attempt, r.Job.MaxAttempts, r.Job.CreatedAt = attempt, maxAttempts, createdAt
	r.Job.Input, r.Job.State = input, json.RawMessage("null")
	r.Lease.Token = "00000000-0000-4000-8000-000000000000"
	r.Lease.ExpiresAt = time.Now().Add(time.Hour).Truncate(time.Microsecond) // PostgreSQL's precision, as ours
	return r
}

// pad grows body to the size gendurable's step requests have, with a "pad" field the
// receiver's decoder skips (a body already as large is left as it is).
func (w *stepWorker) pad(body []byte) []byte {
	const field = `,"pad":""`
	extra := w.bodyBytes - len(body) - len(field)
	if extra < 0 || len(body) == 0 || body[len(body)-1] != '}' {
		return body
	}
	out := make([]byte, 0, w.bodyBytes)
	out = append(out, body[:len(body)-1]...)
	out = append(out, `,"pad":"`...)
	out = append(out, strings.Repeat("x", extra)...)
	return append(out, `"}`...)
}

// Work runs one job: sign, POST, read and decode the answer.
func (w *stepWorker) Work(ctx context.Context, job *river.Job[StepArgs]) error {
	body, err := json.Marshal(w.request(job.ID, job.Attempt, job.MaxAttempts, job.CreatedAt, job.EncodedArgs))
	if err != nil {
		return err
	}
	body = w.pad(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	id := fmt.Sprintf("river_%d_attempt_%d", job.ID, job.Attempt)
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	mac := hmac.New(sha256.New, w.key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "river-peer")
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", ts)
	req.Header.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	resp, err := w.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the receiver answered %d: %s", resp.StatusCode, answer)
	}
	var out struct {
		Done *json.RawMessage `json:"done"`
	}
	if err := json.Unmarshal(answer, &out); err != nil || out.Done == nil {
		return fmt.Errorf("the receiver's answer is not done: %s", answer)
	}
	return nil
}
