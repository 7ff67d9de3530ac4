package main

import (
	"bytes"
	"context"
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

	"github.com/gendurable/gendurable/internal/pg"
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

// process is a started binary; done closes when it has exited, with err its exit.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// startProcess starts bin with env added to this process's, its output in out, killed
// when t ends.
func startProcess(t *testing.T, bin string, out output, env ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(bin), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = out.File, out.File
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { _ = p.cmd.Process.Kill(); <-p.done })
	return p
}

// stopServer sends SIGTERM and fails unless the server stops cleanly.
func stopServer(t *testing.T, srv *process, logs output) {
	t.Helper()
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-srv.done:
		if srv.err != nil {
			t.Fatalf("server exited with %v after SIGTERM\n%s", srv.err, logs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("server did not stop within 30s of SIGTERM")
	}
	if !strings.Contains(logs.String(), `"msg":"stopped"`) {
		t.Fatalf("no clean stop logged:\n%s", logs.String())
	}
}

// waitListening waits until something accepts connections at addr.
func waitListening(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("nothing listens on %s", addr)
}

// output is a file a process writes its output to, which String reads at any time.
type output struct{ *os.File }

func newOutput(t *testing.T) output {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "output")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return output{f}
}

func (o output) String() string {
	b, _ := os.ReadFile(o.Name())
	return string(b)
}

// readmeQuickstart is the shell of README.md's code blocks between the quickstart markers.
func readmeQuickstart(t *testing.T) string {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "<!-- quickstart:begin -->")
	section, _, ok2 := strings.Cut(rest, "<!-- quickstart:end -->")
	if !ok || !ok2 {
		t.Fatal("README.md has no <!-- quickstart:begin --> ... <!-- quickstart:end --> section")
	}
	var script strings.Builder
	for _, block := range strings.Split(section, "```sh\n")[1:] {
		code, _, ok := strings.Cut(block, "```")
		if !ok {
			t.Fatalf("unclosed code block in the quickstart:\n%s", block)
		}
		script.WriteString(code)
	}
	if script.Len() == 0 {
		t.Fatal("the quickstart section has no sh code blocks")
	}
	return script.String()
}

// needTool skips when name is not installed, unless CI is set (CI installs what the
// tests need, so there it is a failure).
func needTool(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not installed", name)
		}
		t.Skipf("%s is not installed", name)
	}
}

// The README quickstart, run as written by bash against the real binaries (only the
// addresses differ): a job through three steps to done, a signal to a job that waits for
// it, a cancel and a retry; then SIGTERM stops the server cleanly.
func TestQuickstartAgainstTheBinaries(t *testing.T) {
	t.Parallel()
	needTool(t, "curl")
	script := readmeQuickstart(t)
	dir := t.TempDir()
	server := build(t, dir, "./cmd/server")
	greeter := build(t, dir, "./examples/webhook")
	approval := build(t, dir, "./examples/approval")
	dbURL := pgtest.NewDatabase(t)
	apiAddr, greeterAddr, approvalAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	hookLogs := newOutput(t)
	startProcess(t, greeter, hookLogs, "WEBHOOK_ADDR="+greeterAddr)
	startProcess(t, approval, hookLogs, "WEBHOOK_ADDR="+approvalAddr)
	logs := newOutput(t)
	srv := startProcess(t, server, logs, "DATABASE_URL="+dbURL, "GENDURABLE_ADDR="+apiAddr,
		"GENDURABLE_ALLOW_PRIVATE_WEBHOOKS=true", "GENDURABLE_SHUTDOWN_GRACE=5s")
	base := "http://" + apiAddr
	waitReady(t, base+"/readyz", srv, logs)
	waitListening(t, greeterAddr)
	waitListening(t, approvalAddr)

	script = strings.NewReplacer("localhost:8080", apiAddr, "127.0.0.1:9090", greeterAddr,
		"127.0.0.1:9091", approvalAddr).Replace(script)
	script += "\necho \"ids: $JOB $EXPENSE $SECOND\"\n"
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the quickstart failed: %v\n%s\nserver log:\n%s\nhandlers:\n%s", err, out, logs.String(), hookLogs.String())
	}
	if bytes.Contains(out, []byte("urn:gendurable:problem")) {
		t.Fatalf("a quickstart request was refused:\n%s", out)
	}
	var greeterJob, expense, second int64
	if _, err := fmt.Sscanf(string(out[bytes.LastIndex(out, []byte("ids: ")):]), "ids: %d %d %d",
		&greeterJob, &expense, &second); err != nil {
		t.Fatalf("no ids at the end of the quickstart's output (%v):\n%s", err, out)
	}

	got := call(t, "GET", fmt.Sprintf("%s/v1/jobs/%d", base, greeterJob), "")
	result, _ := got["result"].(map[string]any)
	if got["status"] != "done" || got["step"] != float64(3) || result["greeting"] != "hello, Ada" {
		t.Fatalf("greeter job after the quickstart: %v", got)
	}
	if steps := call(t, "GET", fmt.Sprintf("%s/v1/jobs/%d/steps", base, greeterJob), "")["steps"].([]any); len(steps) != 3 {
		t.Fatalf("%d steps recorded", len(steps))
	}
	for id, decision := range map[int64]string{expense: "approved", second: "rejected"} {
		got := call(t, "GET", fmt.Sprintf("%s/v1/jobs/%d", base, id), "")
		result, _ := got["result"].(map[string]any)
		if got["status"] != "done" || result["decision"] != decision || got["children_total"] != float64(1) {
			t.Fatalf("expense %d after the quickstart, want done and %s: %v", id, decision, got)
		}
	}
	for _, want := range []string{`"status":"cancelled"`, `"woke":true`, `"greeting":"hello, Ada"`, `"decision":"approved"`} {
		if !bytes.Contains(out, []byte(want)) {
			t.Fatalf("the quickstart's output does not show %s:\n%s", want, out)
		}
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
	// The server made the history's partitions: today's and three days ahead.
	db := pgtest.Open(t, dbURL, pg.Options{MaxConns: 1})
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		parts, err := db.StepPartitionList(context.Background())
		if err == nil && len(parts) >= 1+4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server made no history partitions: %+v (%v)\n%s", parts, err, logs.String())
		}
	}
	stopServer(t, srv, logs)
}

// make run as root in a clone under a 0700 folder (as another user, in its own folder):
// the private cluster starts, the server says where the dashboard is and what to try
// next, and a restart finds the cluster again. The times are logged (not asserted: the
// machine may be busy).
func TestMakeRunInAPrivateFolder(t *testing.T) {
	t.Parallel()
	bin := build(t, t.TempDir(), "./cmd/server")
	parent, err := os.MkdirTemp("", "gdclone") // mode 0700, like mktemp -d
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(parent) })
	clone := filepath.Join(parent, "clone")
	if err := os.Mkdir(clone, 0o755); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(clone, ".data")
	t.Cleanup(func() { // a cluster placed elsewhere, as root
		if target, err := os.Readlink(filepath.Join(dataDir, "data")); err == nil {
			_ = os.RemoveAll(filepath.Dir(target))
		}
	})
	addr := freeAddr(t)
	for _, start := range []string{"first start", "restart"} {
		began := time.Now()
		logs := newOutput(t)
		srv := startProcess(t, bin, logs, "DATABASE_URL=", "GENDURABLE_DEV_POSTGRES="+dataDir,
			"GENDURABLE_ADDR="+addr, "GENDURABLE_ALLOW_PRIVATE_WEBHOOKS=true")
		waitReady(t, "http://"+addr+"/readyz", srv, logs)
		t.Logf("%s: ready in %v", start, time.Since(began).Round(time.Millisecond))
		for _, want := range []string{"Dashboard:  http://" + addr + "/", "Try next:   go run ./examples/webhook",
			"psql postgres://postgres@127.0.0.1:"} {
			deadline := time.Now().Add(10 * time.Second) // printed just after the listener opens
			for !strings.Contains(logs.String(), want) && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if !strings.Contains(logs.String(), want) {
				t.Fatalf("%s: the output does not say %q:\n%s", start, want, logs.String())
			}
		}
		stopServer(t, srv, logs)
	}
}

// waitReady waits until url answers 200, failing at once if the process exits.
func waitReady(t *testing.T, url string, srv *process, logs output) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-srv.done:
			t.Fatalf("the server exited (%v) before it was ready:\n%s", srv.err, logs.String())
		default:
		}
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s never answered 200:\n%s", url, logs.String())
}

func TestConfigFromEnvironment(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": "postgres://x", "GENDURABLE_LEASE_TTL": "9s",
		"GENDURABLE_ALLOW_PRIVATE_WEBHOOKS": "true", "GENDURABLE_WEBHOOK_ALLOW_CIDRS": "10.1.0.0/16, 10.2.0.0/16",
		"GENDURABLE_QUEUES": "a,b", "GENDURABLE_HISTORY_PARTITION": "6h"}
	c, err := loadConfig(nil, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if c.LeaseTTL != 9*time.Second || !c.AllowPrivateWebhooks || len(c.WebhookAllowCIDRs) != 2 || len(c.Queues) != 2 ||
		c.Addr != ":8080" || !c.Migrate || !c.Dispatch || c.HistoryPartition != 6*time.Hour {
		t.Fatalf("config %+v", c)
	}
	_, err = loadConfig(nil, func(k string) string {
		return map[string]string{"GENDURABLE_LEASE_TTL": "soon", "GENDURABLE_MIGRATE": "maybe", "GENDURABLE_HISTORY_PARTITION": "30m"}[k]
	})
	for _, want := range []string{"GENDURABLE_LEASE_TTL", "GENDURABLE_MIGRATE", "DATABASE_URL", "GENDURABLE_HISTORY_PARTITION"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("error %v does not name %s", err, want)
		}
	}
}

// A setting the services refuse is reported at start-up, before anything connects, with
// the environment variable that set it (a lease TTL under 100ms was refused only once
// connected, naming no variable; an outcome batch over the most one statement takes was
// not refused).
func TestConfigRefusesWhatTheServicesRefuse(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": "postgres://x", "GENDURABLE_LEASE_TTL": "50ms",
		"GENDURABLE_OUTCOME_BATCH": "20000", "GENDURABLE_IDEMPOTENCY_WINDOW": "10ms"}
	_, err := loadConfig(nil, func(k string) string { return env[k] })
	for _, want := range []string{"GENDURABLE_LEASE_TTL", "GENDURABLE_OUTCOME_BATCH", "GENDURABLE_IDEMPOTENCY_WINDOW"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %s", err, want)
		}
	}
}
