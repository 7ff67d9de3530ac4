package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gendurable/gendurable/webhook"
)

// chaosSecret signs the run's steps.
const chaosSecret = "whsec_Y2hhb3MtY2hhb3MtY2hhb3MtY2hhb3MtY2hhb3MtY2g="

// The webhook's misbehaviour, per request.
const (
	p500   = 0.05 // answers 500 without computing anything
	pSleep = 0.03 // sleeps 2.2–3.8 s (past the 2 s lease and around the 3 s handler timeout), then answers
)

// awaitTimeout is the timeout of every await: long enough that a wake by timeout is
// unusual, short enough that a lost wakeup shows up as one instead of a stuck job.
const awaitTimeout = 8 * time.Second

// jobInput is what the harness inserts: the job runs `phases` work steps; when wait ≥ 0
// it must first obtain a signal named "go" at phase `wait` (wait ≤ phases-2, so at least
// one step follows the one that leaves the wait).
type jobInput struct {
	N      int `json:"n"`
	Phases int `json:"phases"`
	Wait   int `json:"wait"`
}

// jobState is the state the handler carries from step to step (and the job's result).
type jobState struct {
	Phase   int      `json:"phase"`              // work steps done
	Sum     int64    `json:"sum"`                // Σ work(id, phase) + Σ payload.v of the "go" signals shown
	Go      bool     `json:"go"`                 // the wait's "go" was shown
	Sig     []int64  `json:"sig"`                // ids of every signal shown to the steps that led here, in order
	Trail   []string `json:"trail"`              // webhook-id of each attempt whose answer led here
	AwaitAt int64    `json:"await_at,omitempty"` // unix ms of the last await answer
}

// work is what a work step adds to the sum: deterministic, so the expected result of a
// job is known from its id and input alone.
func work(id int64, phase int) int64 { return (id*7919+int64(phase)*104729)%1000 + 1 }

// claimKey names one claim of a step: the service increments attempt at every claim.
type claimKey struct {
	job           int64
	step, attempt int
}

type shownSignal struct {
	ID      int64
	Name    string
	V       int64
	Created time.Time
}

// claimRecord is what the webhook saw and answered for one claim.
type claimRecord struct {
	webhookID  string
	deliveries int // HTTP requests for this claim (1 unless the service re-sent it)
	wake       string
	inState    string // canonical JSON
	shown      []shownSignal
	status     int    // 200 or 500
	kind       string // next, await, done (status 200)
	outState   string // canonical JSON of the answer's state (next, await) or result (done)
	slept      bool
	received   time.Time
	answered   time.Time
}

// jobTrack is the harness's view of one waiting job's signals.
type jobTrack struct {
	senderStarted bool
	senderDone    time.Time // zero while the sender runs
	// uncertain: a try got no answer (its server died or the call timed out). Its
	// statement may still commit a little later: a killed server's backend finishes the
	// statement it runs (say, one waiting for a row lock) before it notices.
	uncertain bool
}

// receiver is the run's webhook: a real HTTP server on loopback in the harness process.
type receiver struct {
	addr   string
	srv    *http.Server
	api    *apiClient
	ctx    context.Context
	rng    *lockedRand
	mu     sync.Mutex
	claims map[claimKey]*claimRecord
	jobs   map[int64]*jobTrack
	acked  map[int64]int64 // signal id → job id, for every signal a server acknowledged (202)

	senders sync.WaitGroup
	st      receiverStats
}

type receiverStats struct {
	requests, answered500, slept, badSignature          atomic.Int64
	next, await, done, polls, reawaits                  atomic.Int64
	earlyWakes, timeoutWakes, signalWakes               atomic.Int64
	goSent, noiseSent, signalAcked, signalWoke, sendErr atomic.Int64
	goWoke, goRaced                                     atomic.Int64 // go acknowledged: woke a parked job / arrived while it was not parked
	racesNoise, racesGo                                 atomic.Int64 // waits whose noise / go was delivered before the step answered
	duplicateDeliveries                                 atomic.Int64
}

func startReceiver(ctx context.Context, api *apiClient, rng *lockedRand) (*receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &receiver{addr: ln.Addr().String(), api: api, ctx: ctx, rng: rng,
		claims: map[claimKey]*claimRecord{}, jobs: map[int64]*jobTrack{}, acked: map[int64]int64{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /step", r.serveStep)
	r.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

func (r *receiver) stop() {
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = r.srv.Shutdown(sctx)
	r.senders.Wait()
}

func (r *receiver) serveStep(w http.ResponseWriter, req *http.Request) {
	r.st.requests.Add(1)
	body, err := io.ReadAll(io.LimitReader(req.Body, webhook.MaxRequestBytes+1))
	if err != nil {
		http.Error(w, "unreadable", http.StatusBadRequest)
		return
	}
	if err := webhook.Verify(chaosSecret, req.Header, body, 0); err != nil {
		r.st.badSignature.Add(1)
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	var step webhook.StepRequest
	if err := json.Unmarshal(body, &step); err != nil {
		http.Error(w, "bad step request", http.StatusBadRequest)
		return
	}
	key := claimKey{step.Job.ID, step.Job.Step, step.Job.Attempt}
	rec := &claimRecord{webhookID: req.Header.Get("webhook-id"), deliveries: 1, wake: step.Wake, inState: canon(step.Job.State),
		received: time.Now()}
	for _, s := range step.Signals {
		var p struct{ V int64 }
		_ = json.Unmarshal(s.Payload, &p)
		rec.shown = append(rec.shown, shownSignal{ID: s.ID, Name: s.Name, V: p.V, Created: s.CreatedAt})
	}

	roll := r.rng.Float64()
	if roll < p500 {
		rec.status = 500
		rec.answered = time.Now()
		r.store(key, rec)
		r.st.answered500.Add(1)
		http.Error(w, "chaos: a 500", http.StatusInternalServerError)
		return
	}
	if roll < p500+pSleep {
		rec.slept = true
		r.st.slept.Add(1)
		d := 2200*time.Millisecond + time.Duration(r.rng.Int64N(int64(1600*time.Millisecond)))
		select { // past the lease; the service's call may give up (timeout) or die meanwhile
		case <-time.After(d):
		case <-r.ctx.Done():
		}
	}
	resp := r.decide(&step, rec)
	rec.status = 200
	rec.answered = time.Now()
	r.store(key, rec) // before answering: an answer the service applies is always on record
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

func (r *receiver) store(key claimKey, rec *claimRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.claims[key]; ok {
		// The same claim delivered twice: the service does not re-send a claim.
		r.st.duplicateDeliveries.Add(1)
		rec.deliveries = old.deliveries + 1
	}
	r.claims[key] = rec
}

// decide computes the answer to one step from the request alone (and, at the wait, from
// whether the harness has finished sending the job's signals).
func (r *receiver) decide(step *webhook.StepRequest, rec *claimRecord) webhook.Response {
	var in jobInput
	_ = json.Unmarshal(step.Job.Input, &in)
	var st jobState
	if len(step.Job.State) > 0 && string(step.Job.State) != "null" {
		_ = json.Unmarshal(step.Job.State, &st)
	}
	id := step.Job.ID
	sawGo := false
	for _, s := range rec.shown {
		st.Sig = append(st.Sig, s.ID)
		if s.Name == "go" {
			st.Sum += s.V
			sawGo = true
		}
	}
	st.Trail = append(st.Trail, rec.webhookID)
	switch step.Wake {
	case "signal":
		r.st.signalWakes.Add(1)
		if !sawGo && in.Wait >= 0 && st.Phase == in.Wait && !st.Go {
			r.st.earlyWakes.Add(1) // woken by a signal the await did not name
		}
	case "timeout":
		r.st.timeoutWakes.Add(1)
	}

	if in.Wait >= 0 && st.Phase == in.Wait && !st.Go {
		if sawGo {
			st.Go = true
		}
		if !st.Go {
			r.ensureSender(id)
			st.AwaitAt = time.Now().UnixMilli()
			if step.Wake != "" {
				r.st.reawaits.Add(1)
			}
			return r.answer(rec, "await", st, webhook.Response{Await: &webhook.Await{
				Signals: []string{"go"}, Timeout: webhook.Duration(awaitTimeout), State: mustJSON(st)}})
		}
	}
	if in.Wait >= 0 && st.Phase == in.Wait && st.Go && !r.senderQuiet(id) {
		// "go" was shown but a signal of this job may still be on its way: look again
		// shortly (a later step would see it, but the last step must not miss one).
		r.st.polls.Add(1)
		return r.answer(rec, "next", st, webhook.Response{Next: &webhook.Next{
			State: mustJSON(st), Delay: webhook.Duration(300 * time.Millisecond)}})
	}
	st.Sum += work(id, st.Phase)
	st.Phase++
	if st.Phase >= in.Phases {
		return r.answer(rec, "done", st, webhook.Response{Done: &webhook.Done{Result: mustJSON(st)}})
	}
	return r.answer(rec, "next", st, webhook.Response{Next: &webhook.Next{State: mustJSON(st)}})
}

func (r *receiver) answer(rec *claimRecord, kind string, st jobState, resp webhook.Response) webhook.Response {
	rec.kind = kind
	rec.outState = canon(mustJSON(st))
	switch kind {
	case "next":
		r.st.next.Add(1)
	case "await":
		r.st.await.Add(1)
	case "done":
		r.st.done.Add(1)
	}
	return resp
}

// senderQuiet reports whether every signal the harness sends to job id has been sent
// (its POSTs answered) a while ago: 700 ms, or 6 s when a try got no answer (longer
// than the harness ever holds a row lock), after which no delivery is still running.
func (r *receiver) senderQuiet(id int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.jobs[id]
	if t == nil || t.senderDone.IsZero() {
		return false
	}
	margin := 700 * time.Millisecond
	if t.uncertain {
		margin = 6 * time.Second
	}
	return time.Since(t.senderDone) > margin
}

// ensureSender starts, once per job, the goroutine that sends its signals, racing the
// park the current step is about to answer: 0–2 "noise" signals (names the await does
// not name), the "go" it waits for, then 0–1 more noise. How they race the park:
//   - 50 % of jobs: every signal after 0–30 ms, while the step answers (either side wins);
//   - 30 %: the noise before go is delivered before the step answers (during the step,
//     for sure), go after 0–30 ms: the await must not be woken by the noise alone;
//   - 20 %: everything up to and including go is delivered before the step answers: the
//     park must see that go arrived during the step and run again at once.
//
// The step waits for its share at most 1.5 s (then the rest goes on in the background).
func (r *receiver) ensureSender(id int64) {
	r.mu.Lock()
	t := r.jobs[id]
	if t == nil {
		t = &jobTrack{}
		r.jobs[id] = t
	}
	if t.senderStarted {
		r.mu.Unlock()
		return
	}
	t.senderStarted = true
	r.mu.Unlock()
	names := make([]string, 0, 4)
	for range r.rng.IntN(3) {
		names = append(names, "noise")
	}
	goAt := len(names)
	names = append(names, "go")
	for range r.rng.IntN(2) {
		names = append(names, "noise")
	}
	during := 0 // signals delivered before the step answers
	switch roll := r.rng.Float64(); {
	case roll < 0.2:
		during = goAt + 1
		r.st.racesGo.Add(1)
	case roll < 0.5:
		during = goAt
		if goAt > 0 {
			r.st.racesNoise.Add(1)
		}
	}
	handedOver := make(chan struct{})
	r.senders.Add(1)
	go func() {
		defer r.senders.Done()
		handOver := sync.OnceFunc(func() { close(handedOver) })
		defer handOver()
		for i, name := range names {
			if i == during {
				handOver()
			}
			if i >= during {
				select {
				case <-time.After(time.Duration(r.rng.IntN(30)) * time.Millisecond):
				case <-r.ctx.Done():
					return
				}
			}
			if !r.send(id, name) {
				r.mu.Lock()
				t.uncertain = true
				r.mu.Unlock()
			}
		}
		handOver()
		r.mu.Lock()
		t.senderDone = time.Now()
		r.mu.Unlock()
	}()
	select {
	case <-handedOver:
	case <-time.After(1500 * time.Millisecond):
	case <-r.ctx.Done():
	}
}

// send POSTs one signal until a server acknowledges it (bounded: 60 tries, 90 s). A try
// that fails without an answer may still have been delivered; the invariants count what
// the database holds, so a resend is harmless. It reports whether every try was answered.
func (r *receiver) send(id int64, name string) (certain bool) {
	certain = true
	if name == "go" {
		r.st.goSent.Add(1)
	} else {
		r.st.noiseSent.Add(1)
	}
	body := fmt.Sprintf(`{"name": %q, "payload": {"v": %d}}`, name, 1+r.rng.IntN(1000))
	deadline := time.Now().Add(90 * time.Second)
	for try := 0; try < 60 && time.Now().Before(deadline) && r.ctx.Err() == nil; try++ {
		// A long timeout: a delivery waits for the job's row lock (held by a step's
		// outcome or by the harness's idle transaction), and an answer given up on early
		// could still commit after the harness thinks the job's signals are all sent.
		b, status, err := r.api.do(r.ctx, "POST", fmt.Sprintf("/v1/jobs/%d/signals", id), body, 15*time.Second)
		switch {
		case err == nil && status == http.StatusAccepted:
			var a struct {
				SignalID int64 `json:"signal_id"`
				Woke     bool  `json:"woke"`
			}
			_ = json.Unmarshal(b, &a)
			r.st.signalAcked.Add(1)
			if a.Woke {
				r.st.signalWoke.Add(1)
			}
			if name == "go" && a.Woke {
				r.st.goWoke.Add(1)
			} else if name == "go" {
				r.st.goRaced.Add(1)
			}
			r.mu.Lock()
			r.acked[a.SignalID] = id
			r.mu.Unlock()
			return certain
		case err == nil && (status == http.StatusConflict || status == http.StatusNotFound):
			r.st.sendErr.Add(1)
			return certain // a finished or missing job: resending cannot help (the invariants will tell)
		default:
			r.st.sendErr.Add(1)
			if err != nil {
				certain = false
			}
			select {
			case <-time.After(200 * time.Millisecond):
			case <-r.ctx.Done():
			}
		}
	}
	return false
}

// canon renders JSON with sorted keys and no spaces (jsonb's own rendering differs), so
// two renderings of one value compare equal; null and absent are "null".
func canon(b []byte) string {
	if len(b) == 0 {
		return "null"
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return "invalid:" + string(b)
	}
	out, _ := json.Marshal(v)
	return string(out)
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// lockedRand is a seeded source safe for the run's goroutines.
type lockedRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func newRand(seed int64) *lockedRand {
	return &lockedRand{r: rand.New(rand.NewPCG(uint64(seed), uint64(seed)>>1^0x9e3779b97f4a7c15))}
}

func (l *lockedRand) Float64() float64 { l.mu.Lock(); defer l.mu.Unlock(); return l.r.Float64() }
func (l *lockedRand) IntN(n int) int   { l.mu.Lock(); defer l.mu.Unlock(); return l.r.IntN(n) }
func (l *lockedRand) Int64N(n int64) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Int64N(n)
}
