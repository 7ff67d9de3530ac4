package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/dispatch"
	"github.com/gendurable/gendurable/internal/httpapi"
	"github.com/gendurable/gendurable/internal/netguard"
	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/webhooktest"
	"github.com/gendurable/gendurable/webhook"
)

// v1Routes lists every /v1 operation of openapi.yaml with its parameters filled in.
func v1Routes(t *testing.T) [][2]string {
	doc, err := httpapi.GetSwagger()
	if err != nil {
		t.Fatal(err)
	}
	var routes [][2]string
	for path, item := range doc.Paths.Map() {
		if !strings.HasPrefix(path, "/v1/") {
			continue
		}
		p := strings.NewReplacer("{id}", "999999", "{name}", "x", "{key}", "k").Replace(path)
		for method := range item.Operations() {
			routes = append(routes, [2]string{method, p})
		}
	}
	if len(routes) < 30 {
		t.Fatalf("only %d /v1 routes found", len(routes))
	}
	return routes
}

// Every /v1 route refuses a missing, wrong or revoked key; a read key cannot write.
func TestEveryRouteIsGuarded(t *testing.T) {
	t.Parallel()
	a := newAPI(t, httpapi.Config{APIToken: "bootstrap-token"})
	r := a.do("POST", "/v1/api-keys", `{"name": "dashboard", "scope": "read"}`)
	if r.status != 201 {
		t.Fatalf("create key: %d %s", r.status, r.body)
	}
	readKey := r.json(t)["key"].(string)
	r = a.do("POST", "/v1/api-keys", `{"name": "ci", "scope": "admin"}`)
	created := r.json(t)
	adminKey := created["key"].(string)
	if !strings.HasPrefix(adminKey, "gdk_") || !strings.HasPrefix(adminKey, created["prefix"].(string)) {
		t.Fatalf("key %q, prefix %v", adminKey, created["prefix"])
	}
	r = a.do("POST", "/v1/api-keys", `{"name": "old", "scope": "admin"}`)
	old := r.json(t)
	oldKey := old["key"].(string)
	a.token = oldKey
	if r = a.do("GET", "/v1/jobs", ""); r.status != 200 {
		t.Fatalf("a fresh admin key: %d", r.status)
	}
	a.token = "bootstrap-token"
	if r = a.do("DELETE", fmt.Sprintf("/v1/api-keys/%v", old["id"]), ""); r.status != 204 {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	list := a.do("GET", "/v1/api-keys", "")
	if bytes.Contains(list.body, []byte(adminKey)) || bytes.Contains(list.body, []byte(readKey)) {
		t.Fatal("the key listing shows keys")
	}
	leaseRoute := func(p string) bool { return strings.HasSuffix(p, "/heartbeat") || strings.HasSuffix(p, "/outcome") }
	for _, route := range v1Routes(t) {
		method, path := route[0], route[1]
		if leaseRoute(path) {
			continue // authorised by the step's lease token instead
		}
		for _, cred := range []struct{ name, token string }{{"no key", ""}, {"a wrong key", "gdk_nope"},
			{"a revoked key", oldKey}, {"a wrong token", "bootstrap-tokeN"}} {
			a.token = cred.token
			if r := a.do(method, path, "{}"); r.status != 401 {
				t.Errorf("%s %s with %s: %d, want 401", method, path, cred.name, r.status)
			}
		}
		a.token = readKey
		r := a.do(method, path, "{}")
		wantForbidden := method != "GET" || strings.HasPrefix(path, "/v1/api-keys")
		if wantForbidden && r.status != 403 {
			t.Errorf("%s %s with a read key: %d, want 403", method, path, r.status)
		}
		if !wantForbidden && (r.status == 401 || r.status == 403) {
			t.Errorf("%s %s with a read key: %d", method, path, r.status)
		}
		a.token = adminKey
		if r := a.do(method, path, "{}"); r.status == 401 || r.status == 403 {
			t.Errorf("%s %s with an admin key: %d", method, path, r.status)
		}
	}
	// Secrets are shown to admin scope only.
	a.token = adminKey
	a.do("PUT", "/v1/handlers/h", `{"url": "http://93.184.215.14/"}`)
	a.token = readKey
	if r := a.do("GET", "/v1/handlers", ""); bytes.Contains(r.body, []byte(`"secret":"whsec_`)) && !bytes.Contains(r.body, []byte("redacted")) {
		t.Fatalf("a read key sees secrets: %s", r.body)
	}
}

// SSRF: handler URLs that point (or resolve) anywhere but the public internet are
// refused at registration, and the address actually dialled is checked again, so a
// handler whose DNS now points at loopback reaches nothing.
func TestHostileHandlerURLsAreRefused(t *testing.T) {
	t.Parallel()
	guard := &netguard.Guard{Lookup: func(_ context.Context, host string) ([]netip.Addr, error) {
		switch host {
		case "internal.corp.test":
			return []netip.Addr{netip.MustParseAddr("10.1.2.3")}, nil
		case "mixed.corp.test":
			return []netip.Addr{netip.MustParseAddr("93.184.215.14"), netip.MustParseAddr("127.0.0.1")}, nil
		case "v6loop.corp.test":
			return []netip.Addr{netip.MustParseAddr("::1")}, nil
		case "public.example.test":
			return []netip.Addr{netip.MustParseAddr("93.184.215.14")}, nil
		}
		return nil, fmt.Errorf("no such host")
	}}
	a := newAPI(t, httpapi.Config{Guard: guard})
	hostile := []string{
		"http://127.0.0.1/", "http://127.0.0.1:8080/steps", "http://127.1/", "http://127.0.1/",
		"http://2130706433/", "http://0x7f000001/", "http://0x7f.0.0.1/", "http://017700000001/", "http://0177.0.0.1/",
		"http://[::1]/", "http://[0:0:0:0:0:0:0:1]/", "http://[::ffff:127.0.0.1]/", "http://[::ffff:7f00:1]/",
		"http://localhost/", "http://LOCALHOST:9090/", "http://api.localhost/", "http://0.0.0.0/", "http://0/", "http://[::]/",
		"http://169.254.169.254/latest/meta-data/", "http://[::ffff:169.254.169.254]/", "http://169.254.170.2/v2/credentials",
		"http://metadata.google.internal/computeMetadata/v1/", "http://[fe80::1]/",
		"http://10.0.0.1/", "http://172.16.5.4/", "http://192.168.1.1/", "http://[fd00::1]/", "http://[fc00::1]/",
		"http://100.64.0.1/", "http://100.127.255.254/",
		"http://[64:ff9b::7f00:1]/", "http://[64:ff9b::a00:1]/", "http://[2002:7f00:1::]/", "http://[2002:a9fe:a9fe::]/",
		"http://224.0.0.1/", "http://[ff02::1]/", "http://255.255.255.255/", "http://240.0.0.1/",
		"http://192.0.2.1/", "http://[2001:db8::1]/", "http://198.18.0.1/",
		"http://user:pass@example.com/", "http://example.com@127.0.0.1/",
		"file:///etc/passwd", "gopher://127.0.0.1:70/", "ftp://example.com/", "dict://127.0.0.1:11211/", "javascript:alert(1)",
		"http://internal.corp.test/", "http://mixed.corp.test/", "http://v6loop.corp.test/", "http://printer.local/",
	}
	for _, u := range hostile {
		body, _ := json.Marshal(map[string]string{"url": u})
		r := a.do("PUT", "/v1/handlers/evil", string(body))
		if r.status != 422 || !bytes.Contains(r.body, []byte(`"field":"url"`)) {
			t.Errorf("%s: registered (%d %s)", u, r.status, r.body)
		}
	}
	if n := a.count("handlers"); n != 0 {
		t.Fatalf("%d hostile handlers stored", n)
	}
	if r := a.do("PUT", "/v1/handlers/ok", `{"url": "https://public.example.test/hooks"}`); r.status != 200 {
		t.Fatalf("a public handler was refused: %d %s", r.status, r.body)
	}
	t.Logf("%d hostile handler URLs refused at registration", len(hostile))

	// Dial time: a handler whose name now resolves to loopback (here: a row pointing at a
	// listener on 127.0.0.1, as DNS rebinding would make it) is never connected to.
	var accepted atomic.Int32
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	ctx := context.Background()
	if _, err := a.db.HandlerUpsert(ctx, pg.HandlerUpsert{Name: "rebound", URL: "http://" + ln.Addr().String() + "/steps",
		NewSecret: webhooktest.Secret, MaxAttempts: ptrInt(1)}); err != nil {
		t.Fatal(err)
	}
	job := a.do("POST", "/v1/jobs", `{"handler": "rebound"}`).json(t)
	d := dispatch.New(a.eng, dispatch.Config{DialControl: guard.Control, PollMin: 10 * time.Millisecond}, nil, nil)
	d.Start(ctx)
	defer d.Stop(ctx)
	deadline := time.Now().Add(10 * time.Second)
	for {
		j := a.do("GET", fmt.Sprintf("/v1/jobs/%v", job["id"]), "").json(t)
		if j["status"] == "failed" {
			if !strings.Contains(fmt.Sprint(j["error"]), "address not allowed for webhooks") {
				t.Fatalf("the blocked delivery's error does not say why: %v", j["error"])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %v", j)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := accepted.Load(); n != 0 {
		t.Fatalf("the loopback listener accepted %d connections", n)
	}
}

func ptrInt(n int) *int { return &n }

// During a rotation's overlap each step carries both signatures, so receivers holding
// either secret verify; afterwards only the new secret signs.
func TestSecretRotationOverlap(t *testing.T) {
	t.Parallel()
	s := newStack(t, 30*time.Second)
	type seen struct {
		header http.Header
		body   []byte
	}
	var mu sync.Mutex
	var got []seen
	recv := webhooktest.NewRaw(t, func(h http.Header, body []byte, w http.ResponseWriter) {
		mu.Lock()
		got = append(got, seen{h.Clone(), body})
		mu.Unlock()
		webhooktest.Answer(w, webhook.Response{Done: &webhook.Done{}})
	})
	const oldSecret = "whsec_b2xkLXNlY3JldC1vbGQtc2VjcmV0LW9sZC0xMjM0"
	const newSecret = "whsec_bmV3LXNlY3JldC1uZXctc2VjcmV0LW5ldy01Njc4"
	if r := s.do("PUT", "/v1/handlers/rot", fmt.Sprintf(`{"url": %q, "secret": %q}`, recv, oldSecret)); r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	r := s.do("POST", "/v1/handlers/rot/rotate-secret", fmt.Sprintf(`{"secret": %q, "overlap": "1h"}`, newSecret))
	if r.status != 200 || r.json(t)["secret"] != newSecret || r.json(t)["previous_secret_expires_at"] == nil {
		t.Fatalf("rotate: %d %s", r.status, r.body)
	}
	if ends, err := time.Parse(time.RFC3339Nano, r.json(t)["previous_secret_expires_at"].(string)); err != nil ||
		ends.Before(time.Now().Add(59*time.Minute)) || ends.After(time.Now().Add(61*time.Minute)) {
		t.Fatalf("an overlap of 1h ends at %v (%v)", r.json(t)["previous_secret_expires_at"], err)
	}
	during := s.insert(`{"handler": "rot"}`)
	s.waitStatus(during, "done", 10*time.Second)
	// The overlap ends (as an hour later): the previous secret's expiry is past.
	if _, err := s.db.Exec(context.Background(), `UPDATE handlers SET previous_secret_expires_at = now() - interval '1 second'
		WHERE name = 'rot'`); err != nil {
		t.Fatal(err)
	}
	after := s.insert(`{"handler": "rot"}`)
	s.waitStatus(after, "done", 10*time.Second)
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("%d deliveries", len(got))
	}
	if webhooktest.Verify(oldSecret, got[0].header, got[0].body) != nil || webhooktest.Verify(newSecret, got[0].header, got[0].body) != nil {
		t.Fatalf("during the overlap both secrets must verify: %q", got[0].header.Get("webhook-signature"))
	}
	if webhooktest.Verify(newSecret, got[1].header, got[1].body) != nil || webhooktest.Verify(oldSecret, got[1].header, got[1].body) == nil {
		t.Fatalf("after the overlap only the new secret may verify: %q", got[1].header.Get("webhook-signature"))
	}
}
