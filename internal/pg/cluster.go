package pg

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ClusterOptions describes a PostgreSQL server started from the machine's binaries.
type ClusterOptions struct {
	// Dir is the data directory. It is initialised with initdb when it holds no cluster.
	Dir string
	// Port is the port number (the TCP port when ListenTCP, else the socket's name).
	// 0 picks a free one.
	Port int
	// ListenTCP also listens on 127.0.0.1:Port (make run, so psql can connect); tests
	// use the Unix socket only.
	ListenTCP bool
	// Throwaway turns durability off (fsync, full_page_writes): for tests only.
	Throwaway bool
	// Log receives the server's log (default: Dir/server.log).
	Log io.Writer
}

// Cluster is a running PostgreSQL server this process started. It is stopped by Stop,
// and by the kernel (parent-death signal) if this process dies first.
type Cluster struct {
	opts    ClusterOptions
	cmd     *exec.Cmd
	exited  chan struct{}
	sockDir string
}

// ErrNoPostgres explains how to get the server binaries when none are found.
var ErrNoPostgres = errors.New(`no PostgreSQL server binaries found (looked for initdb and postgres on PATH ` +
	`and in /usr/lib/postgresql/*/bin). Install them, for example "apt-get install postgresql" on Debian ` +
	`or Ubuntu, or "brew install postgresql@17" on macOS; or point DATABASE_URL (TEST_DATABASE_URL for ` +
	`tests) at an existing server, in which case gendurable starts none`)

// postgresBinDir finds the directory holding initdb and postgres.
func postgresBinDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real // /usr/local/bin/initdb -> /usr/lib/postgresql/15/bin/initdb: find lib/ beside it
		}
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", ErrNoPostgres
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// runAs returns the credential to run the server with: the postgres user when this
// process is root (initdb refuses to run as root), nil otherwise.
func runAs() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pg: running as root and there is no 'postgres' user to run the server as " +
			"(create one with 'useradd --system postgres', or run as an unprivileged user)")
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// StartCluster initialises (when needed) and starts a server, and waits until it accepts
// connections.
func StartCluster(ctx context.Context, opts ClusterOptions) (*Cluster, error) {
	bin, err := postgresBinDir()
	if err != nil {
		return nil, err
	}
	cred, err := runAs()
	if err != nil {
		return nil, err
	}
	if opts.Dir, err = filepath.Abs(opts.Dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(opts.Dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, err
		}
	}
	dataDir := filepath.Join(opts.Dir, "data")
	if _, err := os.Stat(filepath.Join(dataDir, "PG_VERSION")); err != nil {
		initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", dataDir, "-U", "postgres",
			"--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync")
		initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		if out, err := initdb.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("pg: initdb: %w\n%s", err, out)
		}
	}
	if opts.Port == 0 {
		if opts.Port, err = freePort(); err != nil {
			return nil, err
		}
	}
	c := &Cluster{opts: opts, exited: make(chan struct{}), sockDir: opts.Dir}
	args := []string{"-D", dataDir, "-p", strconv.Itoa(opts.Port), "-k", c.sockDir,
		"-c", "max_connections=400", "-c", "shared_buffers=128MB",
		"-c", "log_min_messages=warning", "-c", "log_min_error_statement=panic",
		"-c", "idle_in_transaction_session_timeout=60000"}
	if opts.ListenTCP {
		args = append(args, "-c", "listen_addresses=127.0.0.1")
	} else {
		args = append(args, "-c", "listen_addresses=")
	}
	if opts.Throwaway {
		args = append(args, "-c", "fsync=off", "-c", "full_page_writes=off", "-c", "synchronous_commit=off")
	}
	if _, err := os.Stat(filepath.Join(bin, "..", "lib", "pg_stat_statements.so")); err == nil {
		args = append(args, "-c", "shared_preload_libraries=pg_stat_statements",
			"-c", "pg_stat_statements.track=all", "-c", "pg_stat_statements.track_planning=on")
	}
	cmd := exec.Command(filepath.Join(bin, "postgres"), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT, Setpgid: true}
	logw := opts.Log
	if logw == nil {
		f, err := os.OpenFile(filepath.Join(opts.Dir, "server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return nil, err
		}
		logw = f
	}
	cmd.Stdout, cmd.Stderr = logw, logw
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("pg: start postgres: %w", err)
	}
	c.cmd = cmd
	go func() { _ = cmd.Wait(); close(c.exited) }()
	if err := c.waitReady(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-c.exited:
			return fmt.Errorf("pg: postgres exited during start-up; see %s", filepath.Join(c.opts.Dir, "server.log"))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		pingCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		db, err := Open(pingCtx, c.URL("postgres"), Options{MaxConns: 1})
		cancel()
		if err == nil {
			db.Close()
			return nil
		}
	}
	return fmt.Errorf("pg: postgres did not accept connections within 60s")
}

// URL is a connection URL for database name on this cluster (Unix socket).
func (c *Cluster) URL(database string) string {
	return fmt.Sprintf("postgres://postgres@/%s?host=%s&port=%d&sslmode=disable", database, c.sockDir, c.opts.Port)
}

// TCPURL is the URL over 127.0.0.1 (only when started with ListenTCP).
func (c *Cluster) TCPURL(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.opts.Port, database)
}

// Stop shuts the server down (fast shutdown: sessions are disconnected, data is kept),
// killing it if it has not exited within 30 seconds.
func (c *Cluster) Stop() {
	if c.cmd == nil || c.cmd.Process == nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}

// EnsureDatabase creates database name on the server at adminURL if it is missing.
func EnsureDatabase(ctx context.Context, adminURL, name string) error {
	db, err := Open(ctx, adminURL, Options{MaxConns: 1})
	if err != nil {
		return err
	}
	defer db.Close()
	n, err := db.QueryInt(ctx, `SELECT count(*) FROM pg_database WHERE datname = $1`, name)
	if err != nil || n > 0 {
		return err
	}
	_, err = db.Exec(ctx, `CREATE DATABASE `+QuoteIdent(name))
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		return err
	}
	return nil
}

// QuoteIdent quotes an SQL identifier.
func QuoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
