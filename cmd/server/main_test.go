package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func build(t *testing.T, dir, pkg string) string {
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = "../.."
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

func waitHTTP(t *testing.T, url string) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s never answered 200", url)
}

func call(t *testing.T, method, url, body string) map[string]any {
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		t.Fatalf("%s %s: %d %s", method, url, resp.StatusCode, b)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s %s: %s", method, url, b)
	}
	return m
}

// The README quickstart against the real binaries: register the example webhook, insert
// a job, see it go through three steps to done; then SIGTERM stops the server cleanly.
func TestQuickstartAgainstTheBinaries(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	server := build(t, dir, "./cmd/server")
	example := build(t, dir, "./examples/webhook")
	dbURL := pgtest.NewDatabase(t)
	apiAddr, hookAddr := freeAddr(t), freeAddr(t)

	hook := exec.Command(example)
	hook.Env = append(os.Environ(), "WEBHOOK_ADDR="+hookAddr)
	if err := hook.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hook.Process.Kill(); _ = hook.Wait() })

	var logs bytes.Buffer
	srv := exec.Command(server)
	srv.Env = append(os.Environ(), "DATABASE_URL="+dbURL, "GENDURABLE_ADDR="+apiAddr,
		"GENDURABLE_ALLOW_PRIVATE_WEBHOOKS=true", "GENDURABLE_SHUTDOWN_GRACE=5s")
	srv.Stdout, srv.Stderr = &logs, &logs
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- srv.Wait() }()
	t.Cleanup(func() { _ = srv.Process.Kill() })
	base := "http://" + apiAddr
	waitHTTP(t, base+"/readyz")

	// The README's requests, verbatim but for the addresses.
	call(t, "PUT", base+"/v1/handlers/greeter",
		`{"url": "http://`+hookAddr+`/steps", "secret": "whsec_Z2VuZHVyYWJsZS1xdWlja3N0YXJ0LWRlbW8tc2VjcmV0"}`)
	job := call(t, "POST", base+"/v1/jobs", `{"handler": "greeter", "input": {"name": "Ada"}}`)
	id := int64(job["id"].(float64))
	var got map[string]any
	deadline := time.Now().Add(20 * time.Second)
	for {
		got = call(t, "GET", fmt.Sprintf("%s/v1/jobs/%d", base, id), "")
		if got["status"] == "done" || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	result, _ := got["result"].(map[string]any)
	if got["status"] != "done" || got["step"] != float64(3) || result["greeting"] != "hello, Ada" {
		t.Fatalf("job after the quickstart: %v\nserver log:\n%s", got, logs.String())
	}
	steps := call(t, "GET", fmt.Sprintf("%s/v1/jobs/%d/steps", base, id), "")["steps"].([]any)
	if len(steps) != 3 {
		t.Fatalf("%d steps recorded", len(steps))
	}
	metrics, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := io.ReadAll(metrics.Body)
	metrics.Body.Close()
	if !bytes.Contains(mb, []byte(`gendurable_steps_total{handler="greeter",outcome="done",queue="default"} 1`)) {
		t.Fatalf("metrics do not count the step:\n%s", mb)
	}

	if err := srv.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("server exited with %v after SIGTERM\n%s", err, logs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("server did not stop within 30s of SIGTERM")
	}
	if !strings.Contains(logs.String(), `"msg":"stopped"`) {
		t.Fatalf("no clean stop logged:\n%s", logs.String())
	}
}

func TestConfigFromEnvironment(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": "postgres://x", "GENDURABLE_LEASE_TTL": "9s",
		"GENDURABLE_ALLOW_PRIVATE_WEBHOOKS": "true", "GENDURABLE_WEBHOOK_ALLOW_CIDRS": "10.1.0.0/16, 10.2.0.0/16",
		"GENDURABLE_QUEUES": "a,b"}
	c, err := loadConfig(nil, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if c.LeaseTTL != 9*time.Second || !c.AllowPrivateWebhooks || len(c.WebhookAllowCIDRs) != 2 || len(c.Queues) != 2 ||
		c.Addr != ":8080" || !c.Migrate || !c.Dispatch {
		t.Fatalf("config %+v", c)
	}
	_, err = loadConfig(nil, func(k string) string {
		return map[string]string{"GENDURABLE_LEASE_TTL": "soon", "GENDURABLE_MIGRATE": "maybe"}[k]
	})
	for _, want := range []string{"GENDURABLE_LEASE_TTL", "GENDURABLE_MIGRATE", "DATABASE_URL"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("error %v does not name %s", err, want)
		}
	}
}
