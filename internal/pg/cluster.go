package pg

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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
	// Citus preloads the citus extension's library (it must come first) and sets
	// wal_level = logical, so that shards can move online (StartCitusCluster).
	Citus bool
	// placementParents replaces placementParents' answer (for tests).
	placementParents []string
}

// Cluster is a running PostgreSQL server this process started. It is stopped by Stop,
// and by the kernel (parent-death signal) if this process dies first.
type Cluster struct {
	opts          ClusterOptions
	cmd           *exec.Cmd
	exited        chan struct{}
	sockDir       string
	removeSockDir bool // sockDir is a temporary folder of its own
	dataDir       string
}

// DataDir is the cluster's data directory: Dir/data, or where that links to when the
// cluster had to be placed elsewhere (see StartCluster).
func (c *Cluster) DataDir() string { return c.dataDir }

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
//
// As root, the server runs as the postgres user, which may not be able to reach Dir (a
// clone under /root or under a mktemp -d folder, mode 0700). The cluster then lives in a
// folder of its own that postgres can reach (see placeCluster), Dir/data links to it,
// and Cluster.DataDir says where it is.
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
	home := opts.Dir // holds data/ and the socket
	if cred != nil {
		if home, err = placeCluster(bin, opts.Dir, cred, opts.placementParents); err != nil {
			return nil, err
		}
	}
	dataDir := filepath.Join(home, "data")
	if _, err := os.Stat(filepath.Join(dataDir, "PG_VERSION")); err != nil {
		initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", dataDir, "-U", "postgres",
			"--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions")
		initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		if out, err := initdb.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("pg: initdb: %w\n%s", err, out)
		}
	}
	if opts.Port == 0 {
		if opts.Port, err = FreePort(); err != nil {
			return nil, err
		}
	}
	c := &Cluster{opts: opts, exited: make(chan struct{}), sockDir: home, dataDir: dataDir}
	if len(filepath.Join(c.sockDir, ".s.PGSQL.")+strconv.Itoa(opts.Port)) > maxSocketPath {
		// A deep folder: the socket goes to a short temporary one (removed by Stop).
		if c.sockDir, err = os.MkdirTemp("", "gdpg-sock"); err != nil {
			return nil, err
		}
		c.removeSockDir = true
		if cred != nil {
			if err := os.Chown(c.sockDir, int(cred.Uid), int(cred.Gid)); err != nil {
				return nil, err
			}
		}
	}
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
	var preload []string
	if opts.Citus {
		preload = append(preload, "citus")
		// The nodes talk over 127.0.0.1 without TLS: a server started by root keeps root's
		// HOME, where libpq would look for (and be refused) a client certificate.
		args = append(args, "-c", "wal_level=logical", "-c", "max_wal_senders=10", "-c", "max_replication_slots=10",
			"-c", "citus.node_conninfo=sslmode=disable")
		if os.Getenv("GENDURABLE_CITUS_LOG_STATEMENTS") != "" { // debugging: every statement in each node's log
			args = append(args, "-c", "log_statement=all")
		}
	}
	if _, err := os.Stat(filepath.Join(bin, "..", "lib", "pg_stat_statements.so")); err == nil {
		preload = append(preload, "pg_stat_statements")
		args = append(args, "-c", "pg_stat_statements.track=all", "-c", "pg_stat_statements.track_planning=on")
	}
	if len(preload) > 0 {
		args = append(args, "-c", "shared_preload_libraries="+strings.Join(preload, ","))
	}
	if pid := runningPostmaster(dataDir); pid > 0 {
		c.removeSocketDir()
		return nil, fmt.Errorf("pg: a PostgreSQL (pid %d) already runs on %s: is another make run using %s? "+
			"Stop it (Ctrl-C there), or give this one another folder (GENDURABLE_DEV_POSTGRES)", pid, dataDir, opts.Dir)
	}
	cmd := exec.Command(filepath.Join(bin, "postgres"), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT, Setpgid: true}
	logw := opts.Log
	if logw == nil {
		f, err := os.OpenFile(filepath.Join(opts.Dir, "server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			c.removeSocketDir()
			return nil, err
		}
		logw = f
	}
	cmd.Stdout, cmd.Stderr = logw, logw
	if err := cmd.Start(); err != nil {
		c.removeSocketDir()
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

// maxSocketPath is the longest Unix socket path used; the kernel's limit is 107 bytes.
const maxSocketPath = 100

// placedClusters is the folder, under each of placementParents, that holds the clusters
// root starts for Dirs the postgres user cannot reach, one sub-folder per Dir.
const placedClusters = "gendurable-dev"

// placementParents lists where root may place a cluster that the postgres user cannot
// keep at Dir: its home (/var/lib/postgresql on Debian), then /var/tmp (kept across
// reboots, unlike /tmp).
func placementParents(cred *syscall.Credential) []string {
	var parents []string
	if u, err := user.LookupId(strconv.Itoa(int(cred.Uid))); err == nil && u.HomeDir != "" {
		parents = append(parents, u.HomeDir)
	}
	return append(parents, "/var/tmp")
}

// placeCluster returns the folder that holds the cluster's data/ and socket when this
// process is root and the server runs as cred (the postgres user): dir itself when
// postgres can reach it (dir is then handed to postgres), else a folder of postgres's
// own under one of parents (default placementParents), which dir/data then links to.
// A link whose cluster is gone gets a fresh one; a placed folder that no link names any
// more (dir was deleted to start afresh) is deleted and made anew.
func placeCluster(bin, dir string, cred *syscall.Credential, parents []string) (string, error) {
	link := filepath.Join(dir, "data")
	if fi, err := os.Lstat(link); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		target, err := os.Readlink(link)
		if err != nil {
			return "", err
		}
		home := filepath.Dir(target)
		if _, err := os.Stat(home); err == nil {
			return home, nil
		}
		return home, makePlacedFolder(home, cred)
	}
	if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
		return "", err
	}
	if canEnter(bin, dir, cred) {
		return dir, nil
	}
	if _, err := os.Stat(filepath.Join(link, "PG_VERSION")); err == nil {
		why, fix := whyUnreachable(bin, dir, cred)
		return "", fmt.Errorf("pg: the cluster in %s was made when the postgres user could reach it, and now "+
			"%s. Give it access back (%s), or move %s away to start afresh", dir, why, fix, dir)
	}
	if parents == nil {
		parents = placementParents(cred)
	}
	sum := sha256.Sum256([]byte(dir))
	name := shortName(filepath.Base(filepath.Dir(dir))) + "-" + hex.EncodeToString(sum[:])[:12]
	var tried []string
	for _, parent := range parents {
		home := filepath.Join(parent, placedClusters, name)
		tried = append(tried, home)
		if err := makePlacedFolder(home, cred); err != nil || !canEnter(bin, home, cred) {
			continue
		}
		_ = os.Remove(link) // an empty data/ that an initdb which could not reach it left
		if err := os.Symlink(filepath.Join(home, "data"), link); err != nil {
			return "", err
		}
		return home, nil
	}
	why, fix := whyUnreachable(bin, dir, cred)
	return "", fmt.Errorf("pg: running as root, PostgreSQL runs as the postgres user, which cannot reach %s "+
		"(%s), and no folder it can reach could be made for the cluster (tried %s). Run as an unprivileged "+
		"user, let postgres through with %q, or point DATABASE_URL (TEST_DATABASE_URL for tests) at an "+
		"existing server", dir, why, strings.Join(tried, ", "), fix)
}

// makePlacedFolder makes home (parent/gendurable-dev/name) afresh for the postgres user.
// gendurable-dev is root's, mode 0711: postgres may pass through, nobody may list it.
func makePlacedFolder(home string, cred *syscall.Credential) error {
	base := filepath.Dir(home)
	if err := os.Mkdir(base, 0o711); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	fi, err := os.Lstat(base)
	if err != nil {
		return err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || !fi.IsDir() || st.Uid != 0 {
		return fmt.Errorf("pg: %s is not a folder of root's", base) // never follow someone else's link
	}
	if err := os.RemoveAll(home); err != nil {
		return err
	}
	if err := os.Mkdir(home, 0o700); err != nil {
		return err
	}
	return os.Chown(home, int(cred.Uid), int(cred.Gid))
}

// canEnter reports whether the user of cred can enter dir, asking the kernel: it starts
// postgres --version there as that user (Go changes to the folder after the user).
func canEnter(bin, dir string, cred *syscall.Credential) bool {
	cmd := exec.Command(filepath.Join(bin, "postgres"), "--version")
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	return cmd.Run() == nil
}

// whyUnreachable names the first folder on the way to dir that the user of cred cannot
// enter, and the command that lets it through: o+x on every folder on the way whose
// mode keeps it out (judged by owner, group and mode bits; ACLs are not read).
func whyUnreachable(bin, dir string, cred *syscall.Credential) (why, fix string) {
	why = "it cannot enter " + dir
	first := true
	var shut []string
	for _, d := range ancestors(dir) {
		fi, err := os.Stat(d)
		if err != nil {
			continue
		}
		if first && !canEnter(bin, d, cred) {
			why, first = fmt.Sprintf("it cannot enter %s (mode %04o)", d, fi.Mode().Perm()), false
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		mode := fi.Mode().Perm()
		if !ok || st.Uid == cred.Uid && mode&0o100 != 0 || st.Gid == cred.Gid && mode&0o010 != 0 || mode&0o001 != 0 {
			continue
		}
		shut = append(shut, d)
	}
	if len(shut) == 0 {
		shut = []string{dir}
	}
	return why, "chmod o+x " + strings.Join(shut, " ")
}

// ancestors lists dir's folders from the root down, dir last.
func ancestors(dir string) []string {
	var out []string
	for d := dir; ; d = filepath.Dir(d) {
		out = append([]string{d}, out...)
		if d == filepath.Dir(d) {
			return out
		}
	}
}

// shortName keeps a folder name readable in a placed folder's name (and the socket path short).
func shortName(s string) string {
	s = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			return r
		}
		return '_'
	}, s)
	if len(s) > 20 {
		s = s[:20]
	}
	return s
}

func (c *Cluster) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	for wait := time.Duration(0); time.Now().Before(deadline); wait = 20 * time.Millisecond {
		select {
		case <-c.exited:
			return fmt.Errorf("pg: postgres exited during start-up; see %s", filepath.Join(c.opts.Dir, "server.log"))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
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
	c.removeSocketDir()
}

func (c *Cluster) removeSocketDir() {
	if c.removeSockDir {
		_ = os.RemoveAll(c.sockDir)
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

// FreePort answers a TCP port on 127.0.0.1 that nothing listens on now.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// runningPostmaster is the pid of the live postmaster that holds dataDir (its
// postmaster.pid names a process that exists), or 0.
func runningPostmaster(dataDir string) int {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 {
		return 0
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return 0 // a stale file: postgres itself checks and replaces it
	}
	return pid
}
