package dispatch_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/dispatch"
	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
	"github.com/gendurable/gendurable/internal/webhooktest"
	"github.com/gendurable/gendurable/webhook"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

const testSecret = webhooktest.Secret

type receiver struct{ *webhooktest.Receiver }

func newReceiver(t testing.TB, respond webhooktest.Respond) *receiver {
	return &receiver{webhooktest.New(t, respond)}
}

// doneReceiver is a webhook that answers every step `done`.
func doneReceiver(t testing.TB) *receiver {
	return newReceiver(t, func(w http.ResponseWriter, req *webhook.StepRequest) {
		answer(w, webhook.Response{Done: &webhook.Done{}})
	})
}

var (
	answer     = webhooktest.Answer
	reqContext = webhooktest.Context
	jsonEqual  = webhooktest.JSONEqual
)

type harness struct {
	db      *pg.DB
	eng     *engine.Engine
	counter *pg.StatementCounter
	dbURL   string
}

// newHarness opens a fresh database (statements counted) and an engine with a short lease.
func newHarness(t testing.TB, leaseTTL time.Duration) *harness {
	url := pgtest.NewDatabase(t)
	counter := &pg.StatementCounter{}
	db := pgtest.Open(t, url, pg.Options{Counter: counter, MaxConns: 20})
	eng, err := engine.New(db, engine.Config{LeaseTTL: leaseTTL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &harness{db: db, eng: eng, counter: counter, dbURL: url}
}

// twoEngines opens a fresh database with two engines on separate pools, as two server
// processes would have; the harness holds the first.
func twoEngines(t testing.TB) (*harness, *engine.Engine) {
	url := pgtest.NewDatabase(t)
	db := pgtest.Open(t, url, pg.Options{MaxConns: 20})
	eng, err := engine.New(db, engine.Config{LeaseTTL: 30 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{db: db, eng: eng}
	return h, h.secondEngine(t, url)
}

// secondEngine is another engine (as in another server process) on the same database.
func (h *harness) secondEngine(t testing.TB, url string) *engine.Engine {
	db := pgtest.Open(t, url, pg.Options{MaxConns: 20})
	eng, err := engine.New(db, h.eng.Config(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

func (h *harness) handler(t testing.TB, name, url string, maxAttempts int) {
	t.Helper()
	base, tmo := 10, 2000
	_, err := h.db.HandlerUpsert(context.Background(), pg.HandlerUpsert{Name: name, URL: url, Secret: ptr(testSecret),
		MaxAttempts: &maxAttempts, BackoffBaseMS: &base, TimeoutMS: &tmo})
	if err != nil {
		t.Fatal(err)
	}
}

func (h *harness) insert(t testing.TB, jobs ...engine.NewJob) []engine.JobInserted {
	t.Helper()
	out, err := h.eng.InsertJobs(context.Background(), jobs)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func startDispatcher(t testing.TB, eng *engine.Engine, cfg dispatch.Config) *dispatch.Dispatcher {
	if cfg.PollMin == 0 {
		cfg.PollMin = 10 * time.Millisecond
		cfg.PollMax = 100 * time.Millisecond
		cfg.QueueRefresh = 100 * time.Millisecond
	}
	d := dispatch.New(eng, cfg, nil, nil)
	d.Start(context.Background())
	t.Cleanup(func() { d.Stop(context.Background()) })
	return d
}

// waitJob polls a job until cond holds or the deadline passes.
func waitJob(t testing.TB, db *pg.DB, id int64, timeout time.Duration, cond func(pg.JobDetail) bool) pg.JobDetail {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		j, err := db.JobGet(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if cond(j) {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d: condition not met within %s; last seen status=%s step=%d attempt=%d error=%s",
				id, timeout, j.Status, j.Step, j.Attempt, j.Error)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func hasStatus(s string) func(pg.JobDetail) bool {
	return func(j pg.JobDetail) bool { return j.Status == s }
}

func ptr[T any](v T) *T { return &v }

func fmtSscan(s string, f *float64) (int, error) { return fmt.Sscan(s, f) }

// blackhole forwards connections to the PostgreSQL of a test database until cut; then it
// drops what either side sends and answers nothing, on new connections too: an
// unreachable server (a dropped route), on which statements hang until their context
// ends. Closed when t ends, or by close (before the pools on it close: a pool waits for
// its connections' goodbyes, which nothing answers).
type blackhole struct {
	cut   atomic.Bool
	close func()
}

// newBlackhole returns the blackhole and a URL of the database dbURL names that goes
// through it.
func newBlackhole(t testing.TB, dbURL string) (*blackhole, string) {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	network, target := "tcp", u.Host
	if host := u.Query().Get("host"); strings.HasPrefix(host, "/") { // a Unix socket
		network, target = "unix", fmt.Sprintf("%s/.s.PGSQL.%s", host, u.Query().Get("port"))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackhole{}
	var mu sync.Mutex
	var conns []net.Conn
	keep := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	b.close = func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}
	t.Cleanup(b.close)
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			keep(client)
			if b.cut.Load() {
				go func() { _, _ = io.Copy(io.Discard, client) }()
				continue
			}
			server, err := net.Dial(network, target)
			if err != nil {
				client.Close()
				continue
			}
			keep(server)
			go b.pipe(server, client)
			go b.pipe(client, server)
		}
	}()
	q := u.Query()
	q.Del("host")
	q.Del("port")
	u.RawQuery = q.Encode()
	u.Host = ln.Addr().String()
	return b, u.String()
}

// pipe copies what src sends to dst until the blackhole is cut, then drops it.
func (b *blackhole) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !b.cut.Load() {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
