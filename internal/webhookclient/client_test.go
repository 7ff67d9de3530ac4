package webhookclient_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/webhookclient"
)

// countingServer is a real net/http server that counts the connections it accepts.
func countingServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

func post(t *testing.T, c *webhookclient.Client, url, body string, maxBody int) webhookclient.Response {
	t.Helper()
	resp, err := c.Post(context.Background(), url, []webhookclient.Header{{Name: "Webhook-Id", Value: "msg_1"}}, []byte(body), maxBody)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestPostSendsTheRequestAndReusesTheConnection(t *testing.T) {
	t.Parallel()
	type seen struct {
		method, uri, host, ctype, ua, id, body string
		length                                 int64
	}
	got := make(chan seen, 100)
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.RequestURI, r.Host, r.Header.Get("Content-Type"), r.UserAgent(), r.Header.Get("Webhook-Id"), string(b), r.ContentLength}
		w.Header().Set("Retry-After", "7")
		fmt.Fprintf(w, `{"done":{"n":%d}}`, len(b))
	})
	c := webhookclient.New(webhookclient.Config{})
	for i := range 50 {
		resp := post(t, c, srv.URL+"/steps/a?x=1&y=%20", strings.Repeat("b", i), 1<<20)
		if resp.Status != 200 || string(resp.Body) != fmt.Sprintf(`{"done":{"n":%d}}`, i) || resp.RetryAfter != "7" {
			t.Fatalf("answer %d: %+v (%s)", i, resp, resp.Body)
		}
		s := <-got
		if s.method != "POST" || s.uri != "/steps/a?x=1&y=%20" || s.host != strings.TrimPrefix(srv.URL, "http://") ||
			s.ctype != "application/json" || s.ua != "gendurable" || s.id != "msg_1" || s.body != strings.Repeat("b", i) || s.length != int64(i) {
			t.Fatalf("request %d as the server saw it: %+v", i, s)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("50 sequential posts used %d connections, want 1", n)
	}
}

func TestConcurrentPostsKeepAPoolOfConnections(t *testing.T) {
	t.Parallel()
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = w.Write([]byte(`{"done":{}}`))
	})
	c := webhookclient.New(webhookclient.Config{})
	const workers, each = 16, 40
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				resp, err := c.Post(context.Background(), srv.URL, nil, []byte(`{}`), 1024)
				if err == nil && (resp.Status != 200 || string(resp.Body) != `{"done":{}}`) {
					err = fmt.Errorf("answer %+v", resp)
				}
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := conns.Load(); n > workers {
		t.Fatalf("%d concurrent callers opened %d connections", workers, n)
	}
}

func TestAnswerFramings(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 100)
	cases := []struct {
		name    string
		handler http.HandlerFunc
		status  int
		body    string
		tooBig  bool
	}{
		{"content length", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hello") }, 200, "hello", false},
		{"chunked", func(w http.ResponseWriter, _ *http.Request) {
			for i := range 3 {
				fmt.Fprintf(w, "part%d;", i)
				w.(http.Flusher).Flush()
			}
		}, 200, "part0;part1;part2;", false},
		{"chunked with a trailer", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Trailer", "X-Sum")
			_, _ = io.WriteString(w, "abc")
			w.(http.Flusher).Flush()
			w.Header().Set("X-Sum", "3")
		}, 200, "abc", false},
		{"no content", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) }, 204, "", false},
		{"error status", func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "nope", http.StatusServiceUnavailable) }, http.StatusServiceUnavailable, "nope\n", false},
		{"over the cap by length", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, big) }, 200, "", true},
		{"over the cap chunked", func(w http.ResponseWriter, _ *http.Request) {
			for range 10 {
				_, _ = io.WriteString(w, big[:10])
				w.(http.Flusher).Flush()
			}
		}, 200, "", true},
		{"early hints first", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Link", "</a>; rel=preload")
			w.WriteHeader(103)
			_, _ = io.WriteString(w, "after hints")
		}, 200, "after hints", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv, _ := countingServer(t, tc.handler)
			c := webhookclient.New(webhookclient.Config{})
			for range 3 { // the connection stays usable (or is replaced) after each framing
				resp := post(t, c, srv.URL, "{}", 64)
				if resp.Status != tc.status || string(resp.Body) != tc.body || resp.TooLarge != tc.tooBig {
					t.Fatalf("got %d %q tooLarge=%v, want %d %q tooLarge=%v", resp.Status, resp.Body, resp.TooLarge, tc.status, tc.body, tc.tooBig)
				}
			}
		})
	}
}

// rawServer answers each connection with fn, reading one request first.
func rawServer(t *testing.T, fn func(c net.Conn, n int)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for n := 0; ; n++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func(n int) {
				defer c.Close()
				br := bufio.NewReader(c)
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				fn(c, n)
			}(n)
		}
	}()
	return "http://" + ln.Addr().String()
}

func TestMalformedAnswersAreErrors(t *testing.T) {
	t.Parallel()
	for _, answer := range []string{
		"garbage\r\n\r\n",
		"HTTP/2 200 OK\r\n\r\n",
		"HTTP/1.1 2x0 OK\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
		"HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX-A: 1\r\n folded\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("a", 70<<10) + "\r\n\r\n",
		"HTTP/1.1 101 Switching Protocols\r\n\r\n",
	} {
		url := rawServer(t, func(c net.Conn, _ int) { _, _ = io.WriteString(c, answer) })
		_, err := webhookclient.New(webhookclient.Config{}).Post(context.Background(), url, nil, []byte("{}"), 1024)
		if !errors.Is(err, webhookclient.ErrBadResponse) {
			t.Errorf("answer %.40q: err %v, want ErrBadResponse", answer, err)
		}
	}
	// Cut short: the connection ends inside the body.
	url := rawServer(t, func(c net.Conn, _ int) { _, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc") })
	if _, err := webhookclient.New(webhookclient.Config{}).Post(context.Background(), url, nil, []byte("{}"), 1024); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a body cut short: err %v, want unexpected EOF", err)
	}
}

func TestABodyToTheEndOfTheConnection(t *testing.T) {
	t.Parallel()
	url := rawServer(t, func(c net.Conn, _ int) { _, _ = io.WriteString(c, "HTTP/1.0 200 OK\r\n\r\n{\"done\":{}}") })
	resp := post(t, webhookclient.New(webhookclient.Config{}), url, "{}", 1024)
	if resp.Status != 200 || string(resp.Body) != `{"done":{}}` {
		t.Fatalf("got %+v", resp)
	}
}

func TestAConnectionTheServerClosedWhileIdleIsReplaced(t *testing.T) {
	t.Parallel()
	// The first connection answers once with keep-alive and then closes, as a server whose
	// idle timeout has passed does; the next post must go through on a new connection.
	var accepted atomic.Int64
	url := rawServer(t, func(c net.Conn, n int) {
		accepted.Add(1)
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	})
	c := webhookclient.New(webhookclient.Config{})
	for i := range 3 {
		if resp := post(t, c, url, "{}", 64); string(resp.Body) != "ok" {
			t.Fatalf("post %d: %+v", i, resp)
		}
	}
	if n := accepted.Load(); n != 3 {
		t.Fatalf("%d connections for 3 posts to a server that closes each", n)
	}
}

func TestConnectionCloseIsHonoured(t *testing.T) {
	t.Parallel()
	srv, conns := countingServer(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Connection", "close")
		_, _ = io.WriteString(w, "bye")
	})
	c := webhookclient.New(webhookclient.Config{})
	for range 3 {
		if resp := post(t, c, srv.URL, "{}", 64); string(resp.Body) != "bye" {
			t.Fatalf("got %+v", resp)
		}
	}
	if n := conns.Load(); n != 3 {
		t.Fatalf("Connection: close answered 3 times over %d connections, want 3", n)
	}
}

func TestDeadlineAndCancellation(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // the server notices a closed connection once the body is read
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	t.Cleanup(func() { close(release) }) // before the server's Close, which waits for its handlers
	c := webhookclient.New(webhookclient.Config{})

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.Post(ctx, srv.URL, nil, []byte("{}"), 64); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("past the deadline: err %v, want DeadlineExceeded", err)
	}

	// A deadline of the call's own, with a context that has none (twice: a connection
	// that timed out is closed, not kept).
	for range 2 {
		_, err := c.PostUntil(context.Background(), time.Now().Add(50*time.Millisecond), srv.URL, nil, []byte("{}"), 64)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("past PostUntil's deadline: err %v, want DeadlineExceeded", err)
		}
	}

	ctx, cancel = context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Post(ctx, srv.URL, nil, []byte("{}"), 64)
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: err %v, want Canceled", err)
	}
}

// Abort ends an exchange from another goroutine: a call blocked on its answer returns
// with the abort's cause, its connection is not kept, and an exchange aborted before
// it is sent sends nothing.
func TestAbort(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var requests atomic.Int64
	arrived := make(chan struct{}, 4)
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		arrived <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	t.Cleanup(func() { close(release) })
	c := webhookclient.New(webhookclient.Config{})
	cause := errors.New("lease lost")

	x := c.NewExchange(context.Background(), time.Time{}, srv.URL, nil, []byte("{}"), 64)
	x.Send()
	<-arrived // the server has the request; the client waits for the answer
	go x.Abort(cause)
	x.Wait()
	if _, err := x.Finish(); !errors.Is(err, cause) {
		t.Fatalf("aborted while waiting: err %v, want the abort's cause", err)
	}

	before := requests.Load()
	x = c.NewExchange(context.Background(), time.Time{}, srv.URL, nil, []byte("{}"), 64)
	x.Abort(cause)
	x.Send()
	x.Wait()
	if _, err := x.Finish(); !errors.Is(err, cause) {
		t.Fatalf("aborted before it was sent: err %v, want the abort's cause", err)
	}
	if requests.Load() != before {
		t.Fatal("an exchange aborted before it was sent reached the server")
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections, want the aborted one only (the second exchange dials none)", n)
	}
}

func TestEveryDialPassesControl(t *testing.T) {
	t.Parallel()
	srv, conns := countingServer(t, func(w http.ResponseWriter, _ *http.Request) {})
	blocked := errors.New("blocked by the guard")
	var vetted atomic.Int64
	c := webhookclient.New(webhookclient.Config{Control: func(network, address string, _ syscall.RawConn) error {
		vetted.Add(1)
		return blocked
	}})
	if _, err := c.Post(context.Background(), srv.URL, nil, []byte("{}"), 64); !errors.Is(err, blocked) {
		t.Fatalf("err %v, want the guard's error", err)
	}
	if vetted.Load() != 1 || conns.Load() != 0 {
		t.Fatalf("vetted %d dials, server saw %d connections", vetted.Load(), conns.Load())
	}
}

func TestRedirectsAreAnswersNotFollowed(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
	})
	resp := post(t, webhookclient.New(webhookclient.Config{}), srv.URL, "{}", 1024)
	if resp.Status != 307 || resp.Location != "/elsewhere" || hits.Load() != 1 {
		t.Fatalf("got %+v after %d requests", resp, hits.Load())
	}
}

func TestHTTPS(t *testing.T) {
	t.Parallel()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprintf(w, "tls=%v proto=%s", r.TLS != nil, r.Proto)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	roots := srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	c := webhookclient.New(webhookclient.Config{TLS: &tls.Config{RootCAs: roots}})
	for range 3 {
		if resp := post(t, c, srv.URL, "{}", 1024); string(resp.Body) != "tls=true proto=HTTP/1.1" {
			t.Fatalf("got %+v (%s)", resp, resp.Body)
		}
	}
	if conns.Load() != 1 {
		t.Fatalf("3 posts over %d TLS connections", conns.Load())
	}
	// An unknown authority fails the handshake.
	if _, err := webhookclient.New(webhookclient.Config{}).Post(context.Background(), srv.URL, nil, nil, 64); err == nil {
		t.Fatal("a self-signed server was accepted without its root")
	}
}

func TestURLsTheClientRefuses(t *testing.T) {
	t.Parallel()
	c := webhookclient.New(webhookclient.Config{})
	for _, u := range []string{"ftp://example.com/", "http:///path", "http://user:pw@example.com/", "::not a url"} {
		if _, err := c.Post(context.Background(), u, nil, nil, 64); err == nil {
			t.Errorf("%q was accepted", u)
		}
	}
}
