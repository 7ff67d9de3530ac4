// Package examples_test runs each example in the runtime its README names, with the
// commands its README gives, as written: a Cloudflare Worker under wrangler dev (workerd),
// a Next.js route under next start, a Python handler under gunicorn and under uvicorn, and
// the Lambda example's bundle invoked as Lambda's Node.js runtime invokes a handler.
//
// An example's README marks its blocks: the block after <!-- example:serve [name] -->
// starts the handler (every line but the last runs first, then the last one, the server,
// runs until the test ends), and the block after <!-- example:try --> registers the
// handler and inserts a job into $JOB. The test copies the files git tracks in the example
// and the SDK it uses (what a fresh clone has: no node_modules, no build output), starts
// the real server on a fresh database, runs the blocks with only the addresses changed
// (the server's, and the handler's port for a free one), and waits for the job to be done
// with the result the example answers. The Lambda example, which cannot run in its
// runtime here, has a <!-- example:build --> block instead, whose bundle the test invokes.
//
// The Node.js examples install wrangler (with workerd) or Next.js from npm, a few hundred
// MB: they run when GENDURABLE_EXAMPLE_RUNTIMES=1, which `make test-examples` (a stage of
// CI) sets, and are skipped with a message otherwise. The Python ones need gunicorn and
// uvicorn, which CI installs from Debian; elsewhere they are skipped when absent.
package examples_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg/pgtest"
	"github.com/gendurable/gendurable/sdk/go/gendurabletest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// runtimesEnv turns on the examples whose runtimes come from npm.
const runtimesEnv = "GENDURABLE_EXAMPLE_RUNTIMES"

// example is one README to run.
type example struct {
	dir  string   // under examples/
	sdk  string   // the SDK it installs from the clone, under sdk/
	port string   // the handler's port in the README, replaced by a free one
	env  []string // added to every command's environment (telemetry off; not in the README)
	// done checks the finished job's result.
	done func(result map[string]any) error
}

func TestCloudflareWorkerUnderWranglerDev(t *testing.T) {
	t.Parallel()
	needNodeRuntimes(t)
	runExample(t, example{dir: "cloudflare-worker", sdk: "typescript", port: "8787",
		// wrangler sends usage metrics and fetches a Request.cf object from Cloudflare
		// unless told not to; this machine reaches no such host.
		env: []string{"WRANGLER_SEND_METRICS=false", "CLOUDFLARE_CF_FETCH_ENABLED=false"},
		done: func(r map[string]any) error {
			steps, _ := r["steps"].([]any)
			if r["greeting"] != "hello, Ada" || len(steps) != 3 {
				return fmt.Errorf("want the greeting after three steps, got %v", r)
			}
			return nil
		}})
}

func TestNextjsRouteUnderNextStart(t *testing.T) {
	t.Parallel()
	needNodeRuntimes(t)
	runExample(t, example{dir: "nextjs-route", sdk: "typescript", port: "3000",
		env: []string{"NEXT_TELEMETRY_DISABLED=1"},
		done: func(r map[string]any) error {
			details, _ := r["details"].(map[string]any)
			if r["decision"] != "approved" || details["by"] != "ana" {
				return fmt.Errorf("want the approval by ana, got %v", r)
			}
			return nil
		}})
}

func TestPythonServerUnderGunicornAndUvicorn(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"gunicorn", "uvicorn", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("CI needs %s (Debian's package): %v", tool, err)
			}
			t.Skipf("%s is not installed (apt-get install gunicorn uvicorn); CI runs this test", tool)
		}
	}
	runExample(t, example{dir: "python-server", sdk: "python", port: "9092",
		env: []string{"PYTHONDONTWRITEBYTECODE=1"},
		done: func(r map[string]any) error {
			if r["greeting"] != "hello, Ada" || r["steps"] != float64(3) {
				return fmt.Errorf("want the greeting after three steps, got %v", r)
			}
			return nil
		}})
}

// invokeScript is what Lambda's Node.js runtime does with a handler, in one process per
// invocation (a cold start each time): import the module, call handler(event, context)
// with the event read from stdin, and print the result.
const invokeScript = `
import { pathToFileURL } from "node:url";
const { handler } = await import(pathToFileURL(process.argv[1]).href);
let input = "";
for await (const chunk of process.stdin) input += chunk;
const context = { awsRequestId: "local", getRemainingTimeInMillis: () => 30000 };
process.stdout.write(JSON.stringify(await handler(JSON.parse(input), context)));
`

// The Lambda example's build block, as written, on a copy of what a clone holds; then a
// function URL in front of the bundle it built: every step request becomes a payload 2.0
// event that a fresh node process hands to the bundle's handler, as Lambda's runtime would
// (AWS Lambda itself does not run here).
func TestLambdaBundle(t *testing.T) {
	t.Parallel()
	needNodeRuntimes(t)
	build := markedBlock(t, "lambda/README.md", "build")
	srv := gendurabletest.Start(t, pgtest.NewDatabase(t))
	root := cloneTracked(t, "examples/lambda", "sdk/typescript")
	work := filepath.Join(root, "examples", "lambda")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", build)
	cmd.Dir, cmd.Env = work, append(os.Environ(), "npm_config_audit=false", "npm_config_fund=false", "npm_config_update_notifier=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the build block: %v\n%s", err, out)
	}
	// Only the bundle goes to Lambda: move it away from node_modules.
	bundle := filepath.Join(t.TempDir(), "index.mjs")
	if err := os.Rename(filepath.Join(work, "dist", "index.mjs"), bundle); err != nil {
		t.Fatal(err)
	}

	const secret = "whsec_Z2VuZHVyYWJsZS1xdWlja3N0YXJ0LWRlbW8tc2VjcmV0"
	functionURL := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		headers := map[string]string{}
		for name := range r.Header {
			headers[strings.ToLower(name)] = r.Header.Get(name)
		}
		event, _ := json.Marshal(map[string]any{"version": "2.0", "routeKey": "$default", "rawPath": r.URL.Path,
			"rawQueryString": r.URL.RawQuery, "headers": headers, "body": string(body), "isBase64Encoded": false,
			"requestContext": map[string]any{"domainName": r.Host, "http": map[string]any{"method": r.Method, "path": r.URL.Path}}})
		invoke := exec.Command("node", "--input-type=module", "-e", invokeScript, bundle)
		invoke.Env = append(os.Environ(), "GENDURABLE_SECRET="+secret)
		invoke.Stdin = bytes.NewReader(event)
		var stderr bytes.Buffer
		invoke.Stderr = &stderr
		out, err := invoke.Output()
		var result struct {
			StatusCode int               `json:"statusCode"`
			Headers    map[string]string `json:"headers"`
			Body       string            `json:"body"`
		}
		if err == nil {
			err = json.Unmarshal(out, &result)
		}
		if err != nil {
			t.Errorf("the invocation failed: %v\n%s%s", err, out, stderr.String())
			http.Error(w, "invocation failed", http.StatusBadGateway)
			return
		}
		for name, value := range result.Headers {
			w.Header().Set(name, value)
		}
		w.WriteHeader(result.StatusCode)
		_, _ = io.WriteString(w, result.Body)
	}))
	defer functionURL.Close()

	api(t, "PUT", srv.URL+"/v1/handlers/welcome", `{"url": "`+functionURL.URL+`/", "secret": "`+secret+`"}`)
	job := api(t, "POST", srv.URL+"/v1/jobs", `{"handler": "welcome", "input": {"email": "ada@example.com"}}`)
	done := waitDone(t, srv, int64(job["id"].(float64)))
	result, _ := done["result"].(map[string]any)
	if done["status"] != "done" || result["sent"] != true || result["subject"] != "Welcome, ada@example.com" {
		t.Fatalf("the welcome job: %v\nserver log:\n%s", done, srv.Logs())
	}
}

// api sends a JSON request to the server and answers the JSON of its 2xx answer.
func api(t *testing.T, method, url, body string) map[string]any {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if resp.StatusCode/100 != 2 || json.Unmarshal(b, &out) != nil {
		t.Fatalf("%s %s: %s %s", method, url, resp.Status, b)
	}
	return out
}

// markedBlock answers the sh block after <!-- example:name --> in a README.
func markedBlock(t *testing.T, path, name string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "<!-- example:"+name+" -->\n```sh\n")
	code, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatalf("%s has no closed sh block after <!-- example:%s -->", path, name)
	}
	return code
}

// needNodeRuntimes skips unless the npm-installed runtimes are asked for.
func needNodeRuntimes(t *testing.T) {
	t.Helper()
	if os.Getenv(runtimesEnv) == "" {
		t.Skipf("%s is not set: `make test-examples` (a CI stage) runs this, installing its runtime from npm (a few hundred MB)", runtimesEnv)
	}
	for _, tool := range []string{"node", "npm", "npx", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s=1 needs %s: %v", runtimesEnv, tool, err)
		}
	}
}

// block is a marked sh block of a README.
type block struct {
	name  string // the word after the marker, if any
	lines []string
}

var marker = regexp.MustCompile("(?m)^<!-- example:(serve|try)( [a-z0-9-]+)? -->\n```sh\n")

// readmeBlocks answers the serve blocks and the try block of an example's README.
func readmeBlocks(t *testing.T, path string) (serves []block, try block) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	tries := 0
	for _, m := range marker.FindAllStringSubmatchIndex(text, -1) {
		body, _, ok := strings.Cut(text[m[1]:], "```")
		if !ok {
			t.Fatalf("%s: an unclosed block after %q", path, text[m[0]:m[1]])
		}
		blk := block{lines: strings.Split(strings.TrimSuffix(body, "\n"), "\n")}
		if m[4] >= 0 {
			blk.name = strings.TrimSpace(text[m[4]:m[5]])
		}
		if text[m[2]:m[3]] == "serve" {
			serves = append(serves, blk)
		} else {
			try, tries = blk, tries+1
		}
	}
	if len(serves) == 0 || tries != 1 {
		t.Fatalf("%s: want <!-- example:serve --> blocks and one <!-- example:try --> block, found %d and %d", path, len(serves), tries)
	}
	return serves, try
}

// runExample runs an example's README against a fresh server, each serve block in a
// subtest of its own.
func runExample(t *testing.T, ex example) {
	t.Helper()
	serves, try := readmeBlocks(t, filepath.Join(ex.dir, "README.md"))
	srv := gendurabletest.Start(t, pgtest.NewDatabase(t))
	apiAddr := strings.TrimPrefix(srv.URL, "http://")
	root := cloneTracked(t, "examples/"+ex.dir, "sdk/"+ex.sdk)
	work := filepath.Join(root, "examples", ex.dir)
	env := append(append(os.Environ(), ex.env...), "npm_config_audit=false", "npm_config_fund=false",
		"npm_config_update_notifier=false")

	for i, serve := range serves {
		name := serve.name
		if name == "" {
			name = fmt.Sprint("serve", i)
		}
		t.Run(name, func(t *testing.T) {
			port := freePort(t)
			replace := strings.NewReplacer("localhost:8080", apiAddr, ex.port, port)
			setup := replace.Replace(strings.Join(serve.lines[:len(serve.lines)-1], "\n"))
			server := replace.Replace(serve.lines[len(serve.lines)-1])

			// The lines before the server (npm install, a build) may take minutes.
			began := time.Now()
			startServe(t, work, env, setup, server, port)
			t.Logf("%s: listening %v after the setup began", server, time.Since(began).Round(time.Second))

			script := replace.Replace(strings.Join(try.lines, "\n")) + "\necho \"job: $JOB\"\n"
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
			cmd.Dir, cmd.Env = work, env
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("the try block: %v\n%s\n--- output:\n%s", err, script, out)
			}
			m := regexp.MustCompile(`(?m)^job: (\d+)$`).FindSubmatch(out)
			if m == nil {
				t.Fatalf("the try block set no $JOB:\n%s", out)
			}
			id, _ := strconv.ParseInt(string(m[1]), 10, 64)
			job := waitDone(t, srv, id)
			result, _ := job["result"].(map[string]any)
			if job["status"] != "done" {
				t.Fatalf("job %d ended %v: %v\nserver log:\n%s", id, job["status"], job, srv.Logs())
			}
			if err := ex.done(result); err != nil {
				t.Fatalf("job %d: %v", id, err)
			}
			t.Logf("job %d done: %v", id, result)
		})
	}
}

// startServe runs a serve block in dir: its setup, then its server, in one bash (so that
// the setup's exports reach the server) and in a process group of its own, killed when t
// ends. It returns once something listens on port.
func startServe(t *testing.T, dir string, env []string, setup, server, port string) {
	t.Helper()
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", setup+"\n"+server)
	cmd.Dir, cmd.Env = dir, env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // the shell, the server and its children
		<-exited
		if t.Failed() {
			t.Logf("%s (the end of its output):\n%s", server, out.tail(16<<10))
		}
	})
	waitListening(t, port, exited, &out)
}

// waitListening waits until something accepts connections on the port, on 127.0.0.1 or
// ::1, failing at once if the process exits first.
func waitListening(t *testing.T, port string, exited <-chan struct{}, out *lockedBuffer) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Minute) // includes npm install and next build
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			t.Fatalf("the serve block ended before it listened on %s:\n%s", port, out.tail(16<<10))
		default:
		}
		for _, host := range []string{"127.0.0.1", "::1"} {
			if c, err := net.DialTimeout("tcp", net.JoinHostPort(host, port), time.Second); err == nil {
				c.Close()
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("nothing listens on port %s:\n%s", port, out.tail(16<<10))
}

// waitDone polls the job until it is done, failed or cancelled (two minutes at most).
func waitDone(t *testing.T, srv *gendurabletest.Server, id int64) map[string]any {
	t.Helper()
	var job map[string]any
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get(fmt.Sprintf("%s/v1/jobs/%d", srv.URL, id))
		if err != nil {
			t.Fatal(err)
		}
		job = nil
		err = json.NewDecoder(resp.Body).Decode(&job)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("GET job %d: %v", id, err)
		}
		switch job["status"] {
		case "done", "failed", "cancelled":
			return job
		}
	}
	t.Fatalf("job %d did not finish within two minutes: %v\nserver log:\n%s", id, job, srv.Logs())
	return nil
}

// freePort answers a TCP port nothing listens on now.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}

// cloneTracked copies the files git tracks under paths (relative to the repository's
// root) to a temporary folder, at the same places, and answers that folder: what a fresh
// clone holds there, without node_modules or build output.
func cloneTracked(t *testing.T, paths ...string) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("git", append([]string{"ls-files", "-z", "--"}, paths...)...)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files (these tests copy what a clone holds: they need git and a checkout): %v", err)
	}
	dir := t.TempDir()
	n := 0
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		b, err := os.ReadFile(filepath.Join(root, name))
		if name == "" || os.IsNotExist(err) {
			continue // deleted in the work tree, not yet in the index
		} else if err != nil {
			t.Fatal(err)
		}
		to := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o644); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n == 0 {
		t.Fatalf("git tracks nothing under %v", paths)
	}
	return dir
}

// lockedBuffer collects a process's output while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// tail answers the last n bytes written, from a line's start.
func (b *lockedBuffer) tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.buf.Bytes()
	if len(s) <= n {
		return string(s)
	}
	s = s[len(s)-n:]
	if i := bytes.IndexByte(s, '\n'); i >= 0 {
		s = s[i+1:] // drop the cut line
	}
	return string(s)
}
