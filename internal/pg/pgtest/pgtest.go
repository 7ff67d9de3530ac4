// Package pgtest gives every test its own PostgreSQL database, cloned from a migrated
// template, on a throwaway cluster that the test binary starts itself (initdb in a temp
// dir, fsync off, Unix socket) unless TEST_DATABASE_URL names a server to use.
//
// With TEST_CITUS=1 the binary starts a Citus cluster instead (a coordinator and two
// workers, docs/citus.md), and every test's database is made on it with the citus
// extension on every node and migrated (distributed) on its own: a template cannot be
// cloned across nodes. Tests of what Citus does not run yet call SkipOnCitus.
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
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
)

var (
	adminURL     string
	templateName string
	counter      atomic.Int64
	// citus is the Citus cluster of a TEST_CITUS run (nil otherwise).
	citus *pg.CitusCluster
	// citusCreate serialises the making of databases on the Citus cluster (concurrent
	// citus_add_node calls in new databases failed now and then: "failure on connection
	// marked as essential"); citusTemplate is the migrated database they copy.
	citusCreate   sync.Mutex
	citusTemplate string
)

// Citus reports whether this test binary runs on a Citus cluster (TEST_CITUS=1).
func Citus() bool { return citus != nil }

// CitusCluster is the cluster of a TEST_CITUS run (nil otherwise), for tests that stop
// and restart its nodes.
func CitusCluster() *pg.CitusCluster { return citus }

// SkipOnCitus skips t on a Citus run, saying why: what gendurable does not run on Citus yet
// (docs/citus.md names each).
func SkipOnCitus(t testing.TB, why string) {
	t.Helper()
	if citus != nil {
		t.Skip("not on citus yet: " + why)
	}
}

// Main prepares the server and the template, runs the tests, and stops the cluster it
// started. Use it as TestMain's body.
func Main(m *testing.M) int {
	ctx := context.Background()
	if os.Getenv("TEST_CITUS") != "" {
		dir, err := os.MkdirTemp("", "gdcitus")
		if err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
			return 1
		}
		if os.Getenv("TEST_CITUS_KEEP") == "" {
			defer os.RemoveAll(dir)
		} else {
			fmt.Fprintln(os.Stderr, "pgtest: the citus cluster's folder (kept):", dir)
		}
		if citus, err = pg.StartCitusCluster(ctx, pg.CitusClusterOptions{Dir: dir, Throwaway: true}); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
			return 1
		}
		defer citus.Stop()
		adminURL = citus.URL("postgres")
		return m.Run()
	}
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
	if citus != nil {
		return newCitusDatabase(t, name)
	}
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

// newCitusDatabase makes database name on the Citus cluster: a copy, on each node, of a
// template made and migrated (distributed) once per test binary.
func newCitusDatabase(t testing.TB, name string) string {
	t.Helper()
	ctx := context.Background()
	citusCreate.Lock()
	defer citusCreate.Unlock()
	if citusTemplate == "" {
		tpl := fmt.Sprintf("gdtpl_%d", os.Getpid())
		if err := citus.CreateDatabase(ctx, tpl); err != nil {
			t.Fatalf("pgtest: create the citus template: %v", err)
		}
		db, err := pg.Open(ctx, citus.URL(tpl), pg.Options{MaxConns: 1})
		if err != nil {
			t.Fatal(err)
		}
		_, err = db.Migrate(ctx)
		db.Close()
		if err != nil {
			t.Fatalf("pgtest: migrate the citus template: %v", err)
		}
		if err := citus.MakeTemplate(ctx, tpl); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		citusTemplate = tpl
	}
	if err := citus.CloneDatabase(ctx, citusTemplate, name); err != nil {
		t.Fatalf("pgtest: clone the citus template: %v", err)
	}
	t.Cleanup(func() { _ = citus.DropDatabase(context.Background(), name) })
	return citus.URL(name)
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
