// Package pgbouncertest puts a real PgBouncer (Debian's /usr/sbin/pgbouncer) in
// transaction mode in front of a test's PostgreSQL, and counts what a client sends
// through it (round trips, statements, bytes) with a wire-protocol proxy.
//
//	b := pgbouncertest.Start(t, pgtest.NewDatabase(t), pgbouncertest.Config{PoolSize: 4})
//	// b.URL reaches the database through PgBouncer; b.Show("POOLS") reads its console.
package pgbouncertest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/jackc/pgx/v5/pgconn"
)

// Binary is where Debian's pgbouncer package installs the pooler.
const Binary = "/usr/sbin/pgbouncer"

// Config shapes the PgBouncer a test starts.
type Config struct {
	// PoolSize is default_pool_size: server connections per database and user (default 4).
	PoolSize int
	// MaxPreparedStatements is max_prepared_statements, which PgBouncer 1.21 added: 0
	// keeps PgBouncer 1.18's behaviour (no protocol-level prepared statements), written
	// as 0 to a PgBouncer that knows the setting and left out for one that does not.
	MaxPreparedStatements int
}

// Bouncer is a running PgBouncer in transaction mode.
type Bouncer struct {
	// URL reaches the test's database through the pooler (TCP on 127.0.0.1).
	URL string
	// Version is PgBouncer's, e.g. "1.18.0".
	Version  string
	Database string
	port     int
	log      *logBuffer
}

// Require fails (under CI, which installs it) or skips (elsewhere) when PgBouncer is
// not installed.
func Require(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(Binary); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not installed (.ci/run installs Debian's pgbouncer package)", Binary)
		}
		t.Skipf("%s is not installed (apt-get install pgbouncer)", Binary)
	}
}

// Start runs a PgBouncer in transaction mode in front of the database at dbURL (a
// pgtest URL: host, port and user are read from it), stopped when t ends.
func Start(t testing.TB, dbURL string, cfg Config) *Bouncer {
	t.Helper()
	Require(t)
	if cfg.PoolSize == 0 {
		cfg.PoolSize = 4
	}
	target, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	host, port := target.Query().Get("host"), target.Query().Get("port")
	if host == "" {
		host = target.Hostname()
	}
	if port == "" {
		port = target.Port()
	}
	if port == "" {
		port = "5432"
	}
	pgUser := target.User.Username()
	password, _ := target.User.Password()
	b := &Bouncer{Database: strings.TrimPrefix(target.Path, "/"), Version: version(t), log: &logBuffer{}}

	dir, err := os.MkdirTemp("", "gdbouncer") // not t.TempDir: its parents are closed to the postgres user
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	cred := runAs(t)
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	if b.port, err = pg.FreePort(); err != nil {
		t.Fatal(err)
	}
	server := fmt.Sprintf("host=%s port=%s user=%s", host, port, pgUser)
	if password != "" {
		server += " password=" + password
	}
	ini := fmt.Sprintf(`[databases]
* = %s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
admin_users = %s
pool_mode = transaction
default_pool_size = %d
max_client_conn = 500
logfile =
pidfile =
`, server, b.port, filepath.Join(dir, "userlist.txt"), pgUser, cfg.PoolSize)
	if b.knows("max_prepared_statements") {
		ini += fmt.Sprintf("max_prepared_statements = %d\n", cfg.MaxPreparedStatements)
	} else if cfg.MaxPreparedStatements != 0 {
		t.Fatalf("PgBouncer %s has no max_prepared_statements", b.Version)
	}
	write(t, filepath.Join(dir, "userlist.txt"), fmt.Sprintf("%q %q\n", pgUser, password))
	write(t, filepath.Join(dir, "pgbouncer.ini"), ini)

	cmd := exec.Command(Binary, filepath.Join(dir, "pgbouncer.ini"))
	cmd.Stdout, cmd.Stderr = b.log, b.log
	// The kernel stops it if the test binary dies first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM) // immediate shutdown
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	addr := fmt.Sprintf("127.0.0.1:%d", b.port)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if c, err := net.Dial("tcp", addr); err == nil {
			_ = c.Close()
			break
		}
		select {
		case <-exited:
			t.Fatalf("pgbouncer exited at start-up:\n%s", b.log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("pgbouncer does not listen on %s:\n%s", addr, b.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.URL = fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", url.User(pgUser).String(), addr, b.Database)
	return b
}

// Log is what PgBouncer has logged so far.
func (b *Bouncer) Log() string { return b.log.String() }

// Show runs SHOW what on PgBouncer's admin console and returns its rows, each column
// by name (the console speaks the simple protocol only, and knows no ping: pgconn, not
// a pg.DB).
func (b *Bouncer) Show(t testing.TB, what string) []map[string]string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgconn.Connect(ctx, strings.Replace(b.URL, "/"+b.Database+"?", "/pgbouncer?", 1))
	if err != nil {
		t.Fatalf("pgbouncer console: %v", err)
	}
	defer func() { _ = conn.Close(ctx) }()
	results, err := conn.Exec(ctx, "SHOW "+what).ReadAll()
	if err != nil {
		t.Fatalf("SHOW %s: %v", what, err)
	}
	var out []map[string]string
	for _, res := range results {
		for _, row := range res.Rows {
			rec := map[string]string{}
			for i, f := range res.FieldDescriptions {
				rec[f.Name] = string(row[i])
			}
			out = append(out, rec)
		}
	}
	return out
}

// version runs pgbouncer --version.
func version(t testing.TB) string {
	out, err := exec.Command(Binary, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("pgbouncer --version: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`PgBouncer (\d+\.\d+(\.\d+)?)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("pgbouncer --version says %q", out)
	}
	return string(m[1])
}

// knows reports whether this PgBouncer has setting (by the release that added it).
func (b *Bouncer) knows(setting string) bool {
	added := map[string][2]int{"max_prepared_statements": {1, 21}}[setting]
	parts := strings.Split(b.Version, ".")
	major, _ := strconv.Atoi(parts[0])
	minor, _ := strconv.Atoi(parts[1])
	return major > added[0] || major == added[0] && minor >= added[1]
}

// runAs is the postgres user when the test runs as root (PgBouncer refuses root), nil
// otherwise.
func runAs(t testing.TB) *syscall.Credential {
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		t.Fatal("running as root and there is no postgres user to run pgbouncer as")
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
}

func write(t testing.TB, path, content string) {
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// logBuffer collects a process's output for failure messages.
type logBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}
