package pgbouncertest

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Wire counts what clients send to PostgreSQL (or a pooler) through a Proxy.
type Wire struct {
	// RoundTrips counts the client's flights: messages sent after the server last
	// answered (a pipeline of Parse, Bind, Execute, Sync is one).
	RoundTrips int64
	// ExecutingRoundTrips counts the round trips that execute a statement (the others
	// start connections or only prepare, i.e. describe, a statement).
	ExecutingRoundTrips int64
	// Waited is the time the client waited for the server's first answer to its round
	// trips, summed.
	Waited time.Duration
	// Statements counts Execute messages and simple-protocol Query messages.
	Statements int64
	// Parses counts Parse messages (each makes PostgreSQL parse and plan the SQL anew,
	// unless it names a statement that is then executed many times).
	Parses int64
	// Bytes counts the bytes clients sent after start-up.
	Bytes int64
	// Connections counts the connections opened.
	Connections int64
}

// PerStatement is w's round trips (all, and those that execute) and bytes per statement.
func (w Wire) PerStatement() (roundTrips, executing, bytes float64) {
	if w.Statements == 0 {
		return 0, 0, 0
	}
	n := float64(w.Statements)
	return float64(w.RoundTrips) / n, float64(w.ExecutingRoundTrips) / n, float64(w.Bytes) / n
}

// Since is what w counted after before.
func (w Wire) Since(before Wire) Wire {
	return Wire{RoundTrips: w.RoundTrips - before.RoundTrips,
		ExecutingRoundTrips: w.ExecutingRoundTrips - before.ExecutingRoundTrips, Waited: w.Waited - before.Waited,
		Statements: w.Statements - before.Statements, Parses: w.Parses - before.Parses, Bytes: w.Bytes - before.Bytes,
		Connections: w.Connections - before.Connections}
}

func (w Wire) String() string {
	rt, exec, b := w.PerStatement()
	var wait time.Duration
	if w.RoundTrips > 0 {
		wait = w.Waited / time.Duration(w.RoundTrips)
	}
	return fmt.Sprintf("%d statements: %.2f round trips a statement (%.2f executing, %d preparing or connecting), "+
		"%.0f µs a round trip, %d parses, %.0f bytes sent a statement, %d new connections",
		w.Statements, rt, exec, w.RoundTrips-w.ExecutingRoundTrips, float64(wait.Microseconds()), w.Parses, b, w.Connections)
}

// Proxy forwards TCP connections to a PostgreSQL server (or a pooler) and counts the
// frontend messages that pass.
type Proxy struct {
	// Addr is where the proxy listens (127.0.0.1, a free port).
	Addr                                   string
	roundTrips, executing, waited          atomic.Int64
	statements, parses, bytes, connections atomic.Int64
	network, target                        string
	ln                                     net.Listener
	wg                                     sync.WaitGroup
	mu                                     sync.Mutex
	conns                                  []net.Conn
}

// NewProxy forwards to the server that dbURL names (TCP, or the Unix socket of a pgtest
// URL), closed when t ends. URL rewrites a URL of that server to go through the proxy.
func NewProxy(t testing.TB, dbURL string) *Proxy {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{network: "tcp", target: u.Host}
	if host := u.Query().Get("host"); strings.HasPrefix(host, "/") {
		p.network, p.target = "unix", fmt.Sprintf("%s/.s.PGSQL.%s", host, u.Query().Get("port"))
	}
	if p.ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	p.Addr = p.ln.Addr().String()
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// URL is dbURL (a URL of the proxied server) made to go through the proxy.
func (p *Proxy) URL(dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		panic(err)
	}
	q := u.Query()
	q.Del("host")
	q.Del("port")
	u.RawQuery = q.Encode()
	u.Host = p.Addr
	return u.String()
}

// Wire is what has passed so far.
func (p *Proxy) Wire() Wire {
	return Wire{RoundTrips: p.roundTrips.Load(), ExecutingRoundTrips: p.executing.Load(),
		Waited: time.Duration(p.waited.Load()), Statements: p.statements.Load(), Parses: p.parses.Load(),
		Bytes: p.bytes.Load(), Connections: p.connections.Load()}
}

func (p *Proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial(p.network, p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.connections.Add(1)
		p.mu.Lock()
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		fl := &flight{}
		fl.answered.Store(true)
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			defer func() { _ = server.Close() }()
			p.forwardFrontend(client, server, fl)
		}()
		go func() {
			defer p.wg.Done()
			defer func() { _ = client.Close() }()
			buf := make([]byte, 32<<10)
			for {
				n, err := server.Read(buf)
				if n > 0 {
					if !fl.answered.Swap(true) {
						p.waited.Add(time.Now().UnixNano() - fl.began.Load())
					}
					if _, werr := client.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

// Protocol codes of the start-up packets that precede the start-up message proper.
const (
	sslRequest    = 80877103
	gssencRequest = 80877104
)

// flight is a connection's current round trip.
type flight struct {
	answered  atomic.Bool  // the server has answered since the client last sent
	began     atomic.Int64 // when the client sent (unix nanoseconds)
	executing bool         // it carries an Execute or a Query (the client's goroutine only)
}

// start counts a new round trip when the server has answered the last one.
func (p *Proxy) start(fl *flight) {
	if fl.answered.Load() {
		p.roundTrips.Add(1)
		fl.executing = false
		fl.began.Store(time.Now().UnixNano())
		fl.answered.Store(false)
	}
}

// forwardFrontend copies client's messages to server one by one, counting them.
func (p *Proxy) forwardFrontend(client io.Reader, server io.Writer, fl *flight) {
	r := bufio.NewReaderSize(client, 64<<10)
	var header [5]byte
	for started := false; !started; { // untyped packets: length, protocol code, body
		if _, err := io.ReadFull(r, header[:4]); err != nil {
			return
		}
		body := make([]byte, binary.BigEndian.Uint32(header[:4])-4)
		if _, err := io.ReadFull(r, body); err != nil {
			return
		}
		code := binary.BigEndian.Uint32(body[:4])
		started = code != sslRequest && code != gssencRequest
		p.start(fl)
		if _, err := server.Write(append(header[:4:4], body...)); err != nil {
			return
		}
	}
	for {
		if _, err := io.ReadFull(r, header[:]); err != nil {
			return
		}
		body := make([]byte, binary.BigEndian.Uint32(header[1:])-4)
		if _, err := io.ReadFull(r, body); err != nil {
			return
		}
		p.start(fl)
		switch header[0] {
		case 'E', 'Q':
			p.statements.Add(1)
			if !fl.executing {
				fl.executing = true
				p.executing.Add(1)
			}
		case 'P':
			p.parses.Add(1)
		}
		p.bytes.Add(int64(len(header) + len(body)))
		if _, err := server.Write(append(header[:], body...)); err != nil {
			return
		}
	}
}
