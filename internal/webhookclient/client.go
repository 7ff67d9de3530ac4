// Package webhookclient is the HTTP/1.1 client that POSTs steps to their handlers.
//
// It does one thing net/http's Transport does in general: a POST of a body already in
// memory, an answer read into memory under a cap, over pooled keep-alive connections.
// The caller's goroutine does the whole exchange: no read and write loop per connection,
// no channel hand-offs, one write system call per request (header and body go out
// together), and the response header is parsed in place without building a map. At the
// dispatcher's rates that is about a third of the server's CPU per step (docs/performance.md).
//
// What it keeps from net/http's behaviour, and tests: every dialled address passes the
// caller's Control (the SSRF guard); the context's deadline bounds dialling, TLS, writing
// and reading, and its cancellation aborts the exchange at once; redirects are answers
// (never followed); no proxy from the environment; bodies over the cap are not read.
// What it does not do: HTTP/2 (every server speaks HTTP/1.1), compression, Expect.
package webhookclient

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Config shapes a Client. The zero value is usable.
type Config struct {
	// Control vets every address dialled (the SSRF guard); nil allows all.
	Control func(network, address string, c syscall.RawConn) error
	// TLS is the base configuration of https connections (nil: system roots).
	TLS *tls.Config
	// MaxIdlePerHost bounds the kept-alive connections per host (default 256).
	MaxIdlePerHost int
	// IdleTimeout closes connections unused for this long (default 30 s).
	IdleTimeout time.Duration
	// DialTimeout bounds the TCP connect when the context allows longer (default 10 s).
	DialTimeout time.Duration
	// UserAgent is sent with every request (default "gendurable").
	UserAgent string
}

// Client posts requests. It is safe for concurrent use.
type Client struct {
	cfg     Config
	dialer  net.Dialer
	targets sync.Map // raw URL → *target

	mu   sync.Mutex
	idle map[string][]*conn // target key → idle connections, most recently used last
}

// New returns a Client.
func New(cfg Config) *Client {
	if cfg.MaxIdlePerHost <= 0 {
		cfg.MaxIdlePerHost = 256
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 30 * time.Second
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "gendurable"
	}
	return &Client{cfg: cfg, dialer: net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second, Control: cfg.Control},
		idle: map[string][]*conn{}}
}

// Header is one extra request header, written as given (canonical names, no CR or LF).
type Header struct{ Name, Value string }

// Response is an answer read in full.
type Response struct {
	Status int
	// Body holds at most the cap's bytes; TooLarge says the answer was longer (then Body
	// is empty and the connection is not reused).
	Body     []byte
	TooLarge bool
	// The two headers the dispatcher reads.
	Location, RetryAfter string
}

// ErrBadResponse marks an answer that is not valid HTTP/1.1.
var ErrBadResponse = errors.New("malformed HTTP response")

// readBufferSize is each connection's read buffer: an answer's header fits (longer lines
// are gathered), bodies longer than it are read straight into their own slice.
const readBufferSize = 2048

// maxHeaderBytes bounds the status line and header of an answer.
const maxHeaderBytes = 64 << 10

// Post sends body to rawURL with Content-Type application/json and the given headers,
// and reads the answer, at most maxBody bytes of it. The context's deadline bounds the
// whole exchange; a deadline reached answers an error matching context.DeadlineExceeded,
// a cancellation one matching context.Canceled.
func (c *Client) Post(ctx context.Context, rawURL string, headers []Header, body []byte, maxBody int) (Response, error) {
	return c.PostUntil(ctx, time.Time{}, rawURL, headers, body, maxBody)
}

// PostUntil is Post with a deadline of its own (zero: none but ctx's): the call is
// abandoned with an error wrapping context.DeadlineExceeded once it passes. A step's
// call takes its timeout this way rather than from a context.WithTimeout, whose timer
// and context were 0.5 kB of each of 10 000 steps held in flight.
func (c *Client) PostUntil(ctx context.Context, deadline time.Time, rawURL string, headers []Header, body []byte, maxBody int) (Response, error) {
	x := c.Send(ctx, deadline, rawURL, headers, body, maxBody)
	x.Wait()
	return x.Finish()
}

// Exchange is one request under way: Send writes it, Wait blocks until its answer
// starts arriving (or the exchange fails), and Finish reads the answer. PostUntil is the
// three in a row. They are apart for a caller that holds thousands of calls open: each
// waits in Wait, with neither the frames that build the request nor those that read the
// answer on its stack, and no read buffer (TestWaitingExchangesHoldNoReadBuffer).
type Exchange struct {
	c          *Client
	ctx        context.Context
	deadline   time.Time
	t          *target
	head, body []byte
	maxBody    int
	cn         *conn // nil: no connection (err says why)
	reused     bool
	stopCtx    func() bool // disarms ctx's abort of the exchange (nil: ctx is never cancelled)
	err        error       // the exchange failed before its answer

	// Abort's state, shared with the goroutine that calls it.
	mu         sync.Mutex
	armed      *conn              // the connection whose blocked I/O an abort interrupts
	dialCancel context.CancelFunc // ends the dial under way
	aborted    error              // the abort's cause
}

// Abort ends the exchange from another goroutine: I/O blocked on its connection (or
// its dial) returns at once, and Finish answers an error wrapping cause. A caller that
// holds thousands of calls cancels one this way without a context of its own for each:
// a cancellable context per call, and the AfterFunc that armed it on the connection,
// were 0.8 kB a call and two registrations in the parent context's map. A context
// given to Send that can be cancelled aborts the exchange with its error.
func (x *Exchange) Abort(cause error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.aborted != nil {
		return
	}
	x.aborted = cause
	if x.armed != nil {
		_ = x.armed.nc.SetDeadline(time.Unix(1, 0))
	}
	if x.dialCancel != nil {
		x.dialCancel()
	}
}

// arm lets an abort interrupt cn's I/O; false: the exchange is aborted already.
func (x *Exchange) arm(cn *conn) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.armed = cn
	return x.aborted == nil
}

// disarm ends an abort's hold on the connection; false: an abort interrupted it, and
// its state is unknown.
func (x *Exchange) disarm() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	interrupted := x.armed != nil && x.aborted != nil
	x.armed = nil
	return !interrupted
}

// failure says what failed: the abort's cause or the context's error when either
// caused err, context.DeadlineExceeded for a timeout once the call's deadline is set.
func (x *Exchange) failure(err error) error {
	x.mu.Lock()
	cause := x.aborted
	x.mu.Unlock()
	if cause == nil {
		cause = x.ctx.Err()
	}
	if cause != nil {
		return fmt.Errorf("%w (%v)", cause, err)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() && !x.deadline.IsZero() {
		return fmt.Errorf("%w (%v)", context.DeadlineExceeded, err)
	}
	return err
}

// abortedOrCancelled reports whether the exchange was aborted or its context ended.
func (x *Exchange) abortedOrCancelled() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.aborted != nil || x.ctx.Err() != nil
}

// Send takes a connection to rawURL (an idle one, or one it dials) and writes the
// request; a failure is answered by Finish.
func (c *Client) Send(ctx context.Context, deadline time.Time, rawURL string, headers []Header, body []byte, maxBody int) *Exchange {
	x := c.NewExchange(ctx, deadline, rawURL, headers, body, maxBody)
	x.Send()
	return x
}

// NewExchange is Send's exchange before it is sent: a caller that aborts exchanges
// (Abort) holds it before its I/O begins, so that an abort reaches a dial too.
func (c *Client) NewExchange(ctx context.Context, deadline time.Time, rawURL string, headers []Header, body []byte, maxBody int) *Exchange {
	if d, ok := ctx.Deadline(); ok && (deadline.IsZero() || d.Before(deadline)) {
		deadline = d
	}
	x := &Exchange{c: c, ctx: ctx, deadline: deadline, body: body, maxBody: maxBody}
	if ctx.Done() != nil {
		x.stopCtx = context.AfterFunc(ctx, func() { x.Abort(ctx.Err()) })
	}
	if x.t, x.err = c.target(rawURL); x.err != nil {
		return x
	}
	x.head = x.t.appendHead(make([]byte, 0, 256+len(x.t.requestURI)), c.cfg.UserAgent, headers, len(body))
	return x
}

// Send takes a connection (an idle one, or one it dials) and writes the request; a
// failure is answered by Finish. Call it once, on an exchange from NewExchange.
func (x *Exchange) Send() {
	if x.err == nil {
		x.send()
	}
}

// send takes a connection and writes the request on it.
func (x *Exchange) send() {
	x.cn, x.reused = nil, false
	cn, reused, err := x.c.get(x)
	if err != nil {
		x.err = x.failure(err)
		return
	}
	x.cn, x.reused = cn, reused
	x.err = cn.begin(x)
}

// Wait blocks until the first byte of the answer arrives, or the exchange fails. On a
// plain TCP connection it waits for the socket to be readable without a read buffer:
// the connection takes one from a pool to read the answer, and gives it back when it
// goes idle (2 KiB for each of thousands of steps in flight, and of the idle pool).
func (x *Exchange) Wait() {
	if x.err == nil {
		if err := x.cn.waitReadable(); err != nil {
			x.err = x.abandon(err)
		}
	}
}

// Finish reads the answer (waiting for it if Wait has not), at most maxBody bytes of
// its body, and gives the connection back to the pool when it can carry another request.
func (x *Exchange) Finish() (Response, error) {
	if x.stopCtx != nil {
		defer x.stopCtx()
	}
	for tries := 0; ; tries++ {
		if x.cn == nil {
			return Response{}, x.err
		}
		err := x.err
		if err == nil {
			var resp Response
			var keep bool
			if resp, keep, err = x.cn.end(x); err == nil {
				if keep {
					x.c.put(x.t, x.cn)
				} else {
					x.cn.close()
				}
				return resp, nil
			}
		}
		x.cn.close()
		// A kept-alive connection the server closed while it was idle fails before a byte
		// of the answer arrives: that is the pool's fault, not the handler's, so try once
		// on a new connection (as net/http does). The handler may see the request twice if
		// it read it and then dropped the connection unanswered, as with any retry.
		if x.reused && tries == 0 && x.cn.nothingRead && !x.abortedOrCancelled() && isConnectionLoss(err) {
			x.send()
			continue
		}
		return Response{}, err
	}
}

// CloseIdle closes every idle connection.
func (c *Client) CloseIdle() {
	c.mu.Lock()
	idle := c.idle
	c.idle = map[string][]*conn{}
	c.mu.Unlock()
	for _, list := range idle {
		for _, cn := range list {
			cn.close()
		}
	}
}

// target is a parsed handler URL.
type target struct {
	key        string // scheme://host:port: the pool's key
	addr       string // host:port to dial
	host       string // the Host header
	serverName string // TLS server name
	requestURI string
	tls        bool
}

const maxTargets = 4096

func (c *Client) target(rawURL string) (*target, error) {
	if v, ok := c.targets.Load(rawURL); ok {
		return v.(*target), nil
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	t := &target{host: u.Host, requestURI: u.RequestURI()}
	port := u.Port()
	switch u.Scheme {
	case "http":
		if port == "" {
			port = "80"
		}
	case "https":
		t.tls = true
		if port == "" {
			port = "443"
		}
	default:
		return nil, fmt.Errorf("unsupported URL scheme %q", u.Scheme)
	}
	if u.Hostname() == "" {
		return nil, errors.New("the URL has no host")
	}
	if u.User != nil {
		return nil, errors.New("URLs with user information are not supported")
	}
	t.serverName = u.Hostname()
	t.addr = net.JoinHostPort(u.Hostname(), port)
	t.key = u.Scheme + "://" + t.addr
	for _, s := range []string{t.host, t.requestURI} {
		if strings.ContainsAny(s, "\r\n\x00 ") {
			return nil, errors.New("the URL holds characters a request line cannot carry")
		}
	}
	if n := countTargets(&c.targets); n >= maxTargets { // URLs of deleted handlers: start over
		c.targets.Clear()
	}
	c.targets.Store(rawURL, t)
	return t, nil
}

func countTargets(m *sync.Map) int {
	n := 0
	m.Range(func(any, any) bool { n++; return n < maxTargets })
	return n
}

// appendHead appends the request line and header.
func (t *target) appendHead(b []byte, userAgent string, headers []Header, contentLength int) []byte {
	b = append(b, "POST "...)
	b = append(b, t.requestURI...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, t.host...)
	b = append(b, "\r\nUser-Agent: "...)
	b = append(b, userAgent...)
	b = append(b, "\r\nContent-Type: application/json\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(contentLength), 10)
	b = append(b, "\r\n"...)
	for _, h := range headers {
		b = append(b, h.Name...)
		b = append(b, ": "...)
		b = append(b, h.Value...)
		b = append(b, "\r\n"...)
	}
	return append(b, "\r\n"...)
}

// get takes an idle connection to x's target, or dials one (which an abort of x ends).
func (c *Client) get(x *Exchange) (*conn, bool, error) {
	t := x.t
	now := time.Now()
	c.mu.Lock()
	list := c.idle[t.key]
	for len(list) > 0 {
		cn := list[len(list)-1]
		list[len(list)-1] = nil
		list = list[:len(list)-1]
		// Bytes that arrived while idle (a server's parting 408, say) answer no request.
		if now.Sub(cn.idleSince) < c.cfg.IdleTimeout {
			c.idle[t.key] = list
			c.mu.Unlock()
			return cn, true, nil
		}
		cn.close() // idle too long (the server has likely closed it)
	}
	delete(c.idle, t.key)
	c.mu.Unlock()
	// Dialling (the resolver, the guard, a TLS handshake) runs deep call chains; on its
	// own goroutine it leaves the caller's stack small for the wait on the answer, which
	// is what thousands of steps in flight hold (the runtime never shrinks a stack back
	// below the size it needed).
	type dialed struct {
		cn  *conn
		err error
	}
	var dialCtx context.Context
	var cancel context.CancelFunc
	if x.deadline.IsZero() {
		dialCtx, cancel = context.WithCancel(x.ctx)
	} else {
		dialCtx, cancel = context.WithDeadline(x.ctx, x.deadline)
	}
	defer cancel()
	x.mu.Lock()
	if x.aborted != nil {
		x.mu.Unlock()
		return nil, false, errAborted
	}
	x.dialCancel = cancel
	x.mu.Unlock()
	defer func() {
		x.mu.Lock()
		x.dialCancel = nil
		x.mu.Unlock()
	}()
	ch := make(chan dialed, 1)
	go func() {
		cn, err := c.dial(dialCtx, t)
		ch <- dialed{cn, err}
	}()
	d := <-ch
	return d.cn, false, d.err
}

func (c *Client) put(t *target, cn *conn) {
	// Bytes read past the answer (a server's parting 408, say) answer no request.
	if cn.br != nil && cn.br.Buffered() > 0 {
		cn.close()
		return
	}
	cn.releaseReader()
	cn.idleSince = time.Now()
	c.mu.Lock()
	list := c.idle[t.key]
	if len(list) >= c.cfg.MaxIdlePerHost {
		c.mu.Unlock()
		cn.close()
		return
	}
	c.idle[t.key] = append(list, cn)
	c.mu.Unlock()
}

func (c *Client) dial(ctx context.Context, t *target) (*conn, error) {
	nc, err := c.dialer.DialContext(ctx, "tcp", t.addr)
	if err != nil {
		return nil, err
	}
	if t.tls {
		cfg := &tls.Config{}
		if c.cfg.TLS != nil {
			cfg = c.cfg.TLS.Clone()
		}
		if cfg.ServerName == "" {
			cfg.ServerName = t.serverName
		}
		cfg.NextProtos = []string{"http/1.1"}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = nc.Close()
			return nil, err
		}
		nc = tc
	}
	cn := &conn{nc: nc}
	if sc, ok := nc.(syscall.Conn); ok && !t.tls {
		cn.raw, _ = sc.SyscallConn()
		cn.readable = cn.readableTest
	}
	if cn.raw == nil {
		cn.br = bufio.NewReaderSize(nc, readBufferSize) // TLS reads through its own records
	}
	return cn, nil
}

// conn is one HTTP/1.1 connection, used by one request at a time.
type conn struct {
	nc net.Conn
	// br reads the answers: on a plain TCP connection (raw set) it is taken from
	// readerPool when an answer arrives and given back when the connection goes idle.
	br          *bufio.Reader
	raw         syscall.RawConn
	readable    func(fd uintptr) bool // cn.readableTest
	looked      bool                  // readableTest has looked at the socket
	peek        [1]byte
	idleSince   time.Time
	nothingRead bool // the last exchange failed before a byte of the answer arrived
}

// readerPool holds the read buffers of the plain TCP connections not reading an answer.
var readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBufferSize) }}

// reader is the connection's read buffer, taken from the pool if it has none.
func (cn *conn) reader() *bufio.Reader {
	if cn.br == nil {
		cn.br = readerPool.Get().(*bufio.Reader)
		cn.br.Reset(cn.nc)
	}
	return cn.br
}

// releaseReader gives a plain TCP connection's read buffer back to the pool; it holds
// nothing unread (put checks).
func (cn *conn) releaseReader() {
	if cn.raw != nil && cn.br != nil {
		cn.br.Reset(nil)
		readerPool.Put(cn.br)
		cn.br = nil
	}
}

func (cn *conn) close() {
	_ = cn.nc.Close()
	cn.releaseReader()
}

// waitReadable blocks until the answer can be read (a byte, the end of the stream or an
// error is there), or the exchange's deadline or cancellation interrupts it.
func (cn *conn) waitReadable() error {
	if cn.raw == nil || cn.br != nil {
		_, err := cn.reader().Peek(1)
		return err
	}
	cn.looked = false
	return cn.raw.Read(cn.readable)
}

// readableTest is waitReadable's test, made once per connection (a method value): it looks
// at the socket the first time, and is true when the poller wakes it.
func (cn *conn) readableTest(fd uintptr) bool {
	if cn.looked {
		return true // the poller says it is readable
	}
	cn.looked = true
	// Readiness the poller reported before this wait is not kept: look at the socket.
	for {
		_, _, err := syscall.Recvfrom(int(fd), cn.peek[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		if err != syscall.EINTR {
			return err != syscall.EAGAIN && err != syscall.EWOULDBLOCK
		}
	}
}

// begin arms x's deadline and its abort on cn and writes x's request.
func (cn *conn) begin(x *Exchange) error {
	cn.nothingRead = true
	if !x.deadline.IsZero() {
		if err := cn.nc.SetDeadline(x.deadline); err != nil {
			return err
		}
	}
	// An abort (a lost lease, the end of the shutdown grace) interrupts blocked I/O.
	if !x.arm(cn) {
		return x.abandon(errAborted)
	}
	bufs := net.Buffers{x.head, x.body}
	if _, err := bufs.WriteTo(cn.nc); err != nil {
		return x.abandon(err)
	}
	return nil
}

// errAborted is what an exchange aborted before its I/O began failed with.
var errAborted = errors.New("aborted")

// abandon disarms an exchange that failed with err, and says what failed.
func (x *Exchange) abandon(err error) error {
	x.disarm()
	return x.failure(err)
}

// end reads the answer of the request begin wrote and disarms the exchange. keep says
// the connection can carry another request.
func (cn *conn) end(x *Exchange) (resp Response, keep bool, err error) {
	resp, keep, err = cn.readResponse(x.maxBody)
	if !x.disarm() { // an abort interrupted the connection: its state is unknown
		keep = false
	}
	if err != nil {
		return Response{}, false, x.failure(err)
	}
	if !x.deadline.IsZero() && keep {
		if err := cn.nc.SetDeadline(time.Time{}); err != nil {
			keep = false
		}
	}
	return resp, keep, nil
}

func isConnectionLoss(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// readResponse reads a status line, a header and a body. 1xx answers are skipped.
func (cn *conn) readResponse(maxBody int) (resp Response, keep bool, err error) {
	var h header
	for {
		h, err = cn.readHeader()
		if err != nil {
			return Response{}, false, err
		}
		if h.status >= 200 || h.status == 101 {
			break
		}
	}
	if h.status == 101 {
		return Response{}, false, fmt.Errorf("%w: the handler switched protocols (101)", ErrBadResponse)
	}
	resp = Response{Status: h.status, Location: h.location, RetryAfter: h.retryAfter}
	keep = h.keepAlive
	switch {
	case h.status == 204 || h.status == 304:
		return resp, keep, nil
	case h.chunked:
		if h.contentLength >= 0 {
			keep = false // both framings: take the chunked one, never reuse the connection
		}
		return cn.readChunked(resp, keep, maxBody)
	case h.contentLength >= 0:
		if h.contentLength > int64(maxBody) {
			resp.TooLarge = true
			return resp, false, nil
		}
		resp.Body = make([]byte, h.contentLength)
		if _, err := io.ReadFull(cn.reader(), resp.Body); err != nil {
			return Response{}, false, err
		}
		return resp, keep, nil
	default: // the body runs to the end of the connection
		return cn.readToLimit(cn.reader(), resp, false, maxBody)
	}
}

func (cn *conn) readChunked(resp Response, keep bool, maxBody int) (Response, bool, error) {
	resp, keep, err := cn.readToLimit(httputil.NewChunkedReader(cn.reader()), resp, keep, maxBody)
	if err != nil || resp.TooLarge {
		return resp, false, err
	}
	// The trailer: header lines up to an empty one.
	for n := 0; ; {
		line, err := cn.readLine(&n)
		if err != nil {
			return Response{}, false, err
		}
		if len(line) == 0 {
			return resp, keep, nil
		}
	}
}

func (cn *conn) readToLimit(r io.Reader, resp Response, keep bool, maxBody int) (Response, bool, error) {
	b, err := io.ReadAll(io.LimitReader(r, int64(maxBody)+1))
	if err != nil {
		return Response{}, false, err
	}
	if len(b) > maxBody {
		resp.TooLarge = true
		return resp, false, nil
	}
	resp.Body = b
	return resp, keep, nil
}

// header is what the client reads of a response header.
type header struct {
	status        int
	contentLength int64 // -1: absent
	chunked       bool
	keepAlive     bool
	location      string
	retryAfter    string
}

func (cn *conn) readHeader() (header, error) {
	n := 0
	line, err := cn.readLine(&n)
	if err != nil {
		return header{}, err
	}
	h := header{contentLength: -1}
	// HTTP/1.x SP 3DIGIT [SP reason]
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || (line[7] != '0' && line[7] != '1') ||
		line[8] != ' ' || (len(line) > 12 && line[12] != ' ') {
		return header{}, fmt.Errorf("%w: status line %q", ErrBadResponse, clip(line))
	}
	h.keepAlive = line[7] == '1'
	for _, d := range line[9:12] {
		if d < '0' || d > '9' {
			return header{}, fmt.Errorf("%w: status line %q", ErrBadResponse, clip(line))
		}
		h.status = h.status*10 + int(d-'0')
	}
	if h.status < 100 {
		return header{}, fmt.Errorf("%w: status %d", ErrBadResponse, h.status)
	}
	for {
		line, err := cn.readLine(&n)
		if err != nil {
			return header{}, err
		}
		if len(line) == 0 {
			return h, nil
		}
		if line[0] == ' ' || line[0] == '\t' { // obsolete line folding
			return header{}, fmt.Errorf("%w: folded header line", ErrBadResponse)
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			return header{}, fmt.Errorf("%w: header line %q", ErrBadResponse, clip(line))
		}
		name, value := line[:colon], bytes.TrimSpace(line[colon+1:])
		switch {
		case equalFold(name, "content-length"):
			v, err := strconv.ParseInt(string(value), 10, 64)
			if err != nil || v < 0 || (h.contentLength >= 0 && v != h.contentLength) {
				return header{}, fmt.Errorf("%w: Content-Length %q", ErrBadResponse, clip(value))
			}
			h.contentLength = v
		case equalFold(name, "transfer-encoding"):
			if !equalFold(value, "chunked") {
				return header{}, fmt.Errorf("%w: unsupported Transfer-Encoding %q", ErrBadResponse, clip(value))
			}
			h.chunked = true
		case equalFold(name, "connection"):
			for _, tok := range bytes.Split(value, []byte(",")) {
				tok = bytes.TrimSpace(tok)
				if equalFold(tok, "close") {
					h.keepAlive = false
				} else if equalFold(tok, "keep-alive") && line[7] == '0' {
					h.keepAlive = true
				}
			}
		case equalFold(name, "location"):
			h.location = string(value)
		case equalFold(name, "retry-after"):
			h.retryAfter = string(value)
		}
	}
}

// readLine reads one CRLF- (or LF-) terminated line without its terminator; n counts the
// header's bytes so far against maxHeaderBytes. The line is valid until the next read.
func (cn *conn) readLine(n *int) ([]byte, error) {
	line, err := cn.reader().ReadSlice('\n')
	if len(line) > 0 {
		cn.nothingRead = false
	}
	if errors.Is(err, bufio.ErrBufferFull) { // a line longer than the buffer: gather it
		long := append([]byte(nil), line...)
		for errors.Is(err, bufio.ErrBufferFull) && *n+len(long) <= maxHeaderBytes {
			line, err = cn.reader().ReadSlice('\n')
			long = append(long, line...)
		}
		line = long
	}
	*n += len(line)
	if *n > maxHeaderBytes {
		return nil, fmt.Errorf("%w: the header is over %d bytes", ErrBadResponse, maxHeaderBytes)
	}
	if err != nil {
		if errors.Is(err, io.EOF) && len(line) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	line = line[:len(line)-1]
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	return line, nil
}

// equalFold compares b with an ASCII lower-case s, ignoring case.
func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

func clip(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "…"
	}
	return string(b)
}
