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
)

// Wire counts what clients send to PostgreSQL (or a pooler) through a Proxy.
type Wire struct {
	// RoundTrips counts the client's flights: messages sent after the server last
	// answered (a pipeline of Parse, Bind, Execute, Sync is one).
	RoundTrips int64
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

// PerStatement is w's round trips and bytes per statement.
func (w Wire) PerStatement() (roundTrips, bytes float64) {
	if w.Statements == 0 {
		return 0, 0
	}
	return float64(w.RoundTrips) / float64(w.Statements), float64(w.Bytes) / float64(w.Statements)
}

func (w Wire) String() string {
	rt, b := w.PerStatement()
	return fmt.Sprintf("%d statements, %d round trips (%.2f a statement), %d parses, %.0f bytes sent a statement, %d connections",
		w.Statements, w.RoundTrips, rt, w.Parses, b, w.Connections)
}

// Proxy forwards TCP connections to a PostgreSQL server (or a pooler) and counts the
// frontend messages that pass.
type Proxy struct {
	// Addr is where the proxy listens (127.0.0.1, a free port).
	Addr                                               string
	roundTrips, statements, parses, bytes, connections atomic.Int64
	network, target                                    string
	ln                                                 net.Listener
	wg                                                 sync.WaitGroup
	mu                                                 sync.Mutex
	conns                                              []net.Conn
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
	return Wire{RoundTrips: p.roundTrips.Load(), Statements: p.statements.Load(), Parses: p.parses.Load(),
		Bytes: p.bytes.Load(), Connections: p.connections.Load()}
}

func (p *Proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
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
			client.Close()
			continue
		}
		p.connections.Add(1)
		p.mu.Lock()
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		var answered atomic.Bool // the server has sent something since the client's last message
		answered.Store(true)
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			defer server.Close()
			p.forwardFrontend(client, server, &answered)
		}()
		go func() {
			defer p.wg.Done()
			defer client.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := server.Read(buf)
				if n > 0 {
					answered.Store(true)
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

// forwardFrontend copies client's messages to server one by one, counting them.
func (p *Proxy) forwardFrontend(client io.Reader, server io.Writer, answered *atomic.Bool) {
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
		answered.Store(false)
		p.roundTrips.Add(1)
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
		if answered.Swap(false) {
			p.roundTrips.Add(1)
		}
		switch header[0] {
		case 'E', 'Q':
			p.statements.Add(1)
		case 'P':
			p.parses.Add(1)
		}
		p.bytes.Add(int64(len(header) + len(body)))
		if _, err := server.Write(append(header[:], body...)); err != nil {
			return
		}
	}
}
