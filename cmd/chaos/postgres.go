package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	// The harness holds raw sessions that internal/pg does not offer (a connection hog, an
	// idle transaction holding row locks) and must tell its own sessions from the
	// servers' by application_name, so it talks to pgx directly. The service does not.
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gendurable/gendurable/internal/pg"
)

// dbName is the database the servers share.
const dbName = "chaos"

// harnessApp is the application_name of the harness's own sessions; the servers' are
// "gendurable" (internal/pg sets it).
const harnessApp = "gendurable-chaos"

// postgres is the one cluster of the run: started by pg.StartCluster, stopped in
// immediate mode with pg_ctl and started again on the same directory and port.
type postgres struct {
	dir  string
	mu   sync.Mutex
	c    *pg.Cluster
	port int
	pool *pgxpool.Pool // the harness's monitoring sessions (reconnect by themselves)
}

func startPostgres(ctx context.Context, dir string) (*postgres, error) {
	c, err := pg.StartCluster(ctx, pg.ClusterOptions{Dir: dir})
	if err != nil {
		return nil, err
	}
	p := &postgres{dir: dir, c: c}
	if err := pg.EnsureDatabase(ctx, c.URL("postgres"), dbName); err != nil {
		c.Stop()
		return nil, err
	}
	// The port is in the URL; keep it so a restart comes back where the servers look.
	cfg, err := pgx.ParseConfig(c.URL(dbName))
	if err != nil {
		c.Stop()
		return nil, err
	}
	p.port = int(cfg.Port)
	pcfg, err := pgxpool.ParseConfig(p.url() + "&application_name=" + harnessApp)
	if err != nil {
		c.Stop()
		return nil, err
	}
	pcfg.MaxConns = 4
	if p.pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		c.Stop()
		return nil, err
	}
	// fsync off survives what this run does (process crashes: the OS keeps the written
	// pages) and spares a shared 2-core machine; synchronous_commit stays on, because an
	// immediate stop loses asynchronously committed transactions, which would look like
	// (and be) lost writes.
	if _, err := p.pool.Exec(ctx, `ALTER SYSTEM SET fsync = off`); err != nil {
		p.stop()
		return nil, err
	}
	if _, err := p.pool.Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

func (p *postgres) url() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.c.URL(dbName)
}

// stopImmediate runs pg_ctl stop -m immediate: every backend is killed at once, nothing
// is flushed, and the next start runs crash recovery.
func (p *postgres) stopImmediate(ctx context.Context) error {
	bin, err := pgCtl()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, bin, "-D", filepath.Join(p.dir, "data"), "stop", "-m", "immediate", "-w", "-t", "30")
	cred, err := postgresCredential()
	if err != nil {
		return err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctl stop -m immediate: %w: %s", err, out)
	}
	p.mu.Lock()
	old := p.c
	p.mu.Unlock()
	old.Stop() // reaps the exited postmaster (returns at once)
	return nil
}

// start starts the cluster again on the same directory and port.
func (p *postgres) start(ctx context.Context) error {
	c, err := pg.StartCluster(ctx, pg.ClusterOptions{Dir: p.dir, Port: p.port})
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.c = c
	p.mu.Unlock()
	return nil
}

// stop closes the harness's sessions and stops the cluster (fast shutdown).
func (p *postgres) stop() {
	if p.pool != nil {
		p.pool.Close()
	}
	p.mu.Lock()
	c := p.c
	p.mu.Unlock()
	c.Stop()
}

// connect opens one raw session of the harness (the hog, the lock holder).
func (p *postgres) connect(ctx context.Context, app string) (*pgx.Conn, error) {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return pgx.Connect(cctx, p.url()+"&application_name="+app)
}

// isTooManyClients reports the refusal max_connections causes (SQLSTATE 53300).
func isTooManyClients(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "53300"
}

func pgCtl() (string, error) {
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		return p, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	sort.Strings(dirs)
	if len(dirs) == 0 {
		return "", errors.New("pg_ctl not found (on PATH or in /usr/lib/postgresql/*/bin)")
	}
	return dirs[len(dirs)-1], nil
}

// postgresCredential is the user pg_ctl must run as: the cluster's owner, which
// pg.StartCluster makes the postgres user when this process is root.
func postgresCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}
