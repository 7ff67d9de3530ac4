// Package pgtest gives every test its own PostgreSQL database, cloned from a migrated
// template, on a throwaway cluster that the test binary starts itself (initdb in a temp
// dir, fsync off, Unix socket) unless TEST_DATABASE_URL names a server to use.
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
//	func TestX(t *testing.T) { t.Parallel(); db := pgtest.NewDB(t) ... }
package pgtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
)

var (
	adminURL     string
	templateName string
	counter      atomic.Int64
)

// Main prepares the server and the template, runs the tests, and stops the cluster it
// started. Use it as TestMain's body.
func Main(m *testing.M) int {
	ctx := context.Background()
	adminURL = os.Getenv("TEST_DATABASE_URL")
	if adminURL == "" {
		dir, err := os.MkdirTemp("", "gdpg")
		if err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
			return 1
		}
		defer os.RemoveAll(dir)
		c, err := pg.StartCluster(ctx, pg.ClusterOptions{Dir: dir, Throwaway: true})
		if err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
			return 1
		}
		defer c.Stop()
		adminURL = c.URL("postgres")
	}
	if err := prepareTemplate(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "pgtest:", err)
		return 1
	}
	return m.Run()
}

// prepareTemplate creates the migrated template database once per schema version,
// under an advisory lock so that concurrent test binaries sharing a server agree.
func prepareTemplate(ctx context.Context) error {
	ms, err := pg.Migrations()
	if err != nil {
		return err
	}
	h := sha256.New()
	for _, m := range ms {
		h.Write([]byte(m.SQL))
	}
	templateName = "gendurable_tpl_" + hex.EncodeToString(h.Sum(nil))[:12]
	admin, err := pg.Open(ctx, adminURL, pg.Options{MaxConns: 2})
	if err != nil {
		return err
	}
	defer admin.Close()
	// The lock lives on one connection: take it, create, release, in one session.
	_, err = admin.Exec(ctx, `SELECT pg_advisory_lock(4242)`)
	if err != nil {
		return err
	}
	defer admin.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(4242)`) //nolint:errcheck
	n, err := admin.QueryInt(ctx, `SELECT count(*) FROM pg_database WHERE datname = $1`, templateName)
	if err != nil || n > 0 {
		return err
	}
	building := templateName + "_building"
	if _, err := admin.Exec(ctx, `DROP DATABASE IF EXISTS `+pg.QuoteIdent(building)); err != nil {
		return err
	}
	if _, err := admin.Exec(ctx, `CREATE DATABASE `+pg.QuoteIdent(building)); err != nil {
		return err
	}
	db, err := pg.Open(ctx, urlFor(building), pg.Options{MaxConns: 1})
	if err != nil {
		return err
	}
	_, err = db.Migrate(ctx)
	db.Close()
	if err != nil {
		return err
	}
	_, err = admin.Exec(ctx, `ALTER DATABASE `+pg.QuoteIdent(building)+` RENAME TO `+pg.QuoteIdent(templateName))
	return err
}

// urlFor swaps the database name of adminURL.
func urlFor(database string) string {
	u, err := url.Parse(adminURL)
	if err != nil {
		panic(err)
	}
	u.Path = "/" + database
	return u.String()
}

// NewDatabase creates a fresh migrated database for t (dropped when t ends) and returns
// its URL, for tests that open their own pools or start server processes.
func NewDatabase(t testing.TB) string {
	t.Helper()
	if adminURL == "" {
		t.Fatal("pgtest: call pgtest.Main from TestMain")
	}
	ctx := context.Background()
	name := fmt.Sprintf("gdtest_%d_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9, counter.Add(1))
	admin, err := pg.Open(ctx, adminURL, pg.Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	for attempt := 0; ; attempt++ {
		_, err = admin.Exec(ctx, `CREATE DATABASE `+pg.QuoteIdent(name)+` TEMPLATE `+pg.QuoteIdent(templateName))
		if err == nil || attempt == 20 {
			break
		}
		time.Sleep(50 * time.Millisecond) // the template is briefly busy while another clone starts
	}
	if err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() {
		a, err := pg.Open(context.Background(), adminURL, pg.Options{MaxConns: 1})
		if err != nil {
			return
		}
		defer a.Close()
		_, _ = a.Exec(context.Background(), `DROP DATABASE IF EXISTS `+pg.QuoteIdent(name)+` WITH (FORCE)`)
	})
	return urlFor(name)
}

// NewDB returns a pool on a fresh migrated database, closed when t ends.
func NewDB(t testing.TB) *pg.DB {
	t.Helper()
	return Open(t, NewDatabase(t), pg.Options{})
}

// Open opens a pool on url, closed when t ends.
func Open(t testing.TB, url string, opts pg.Options) *pg.DB {
	t.Helper()
	db, err := pg.Open(context.Background(), url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return db
}
