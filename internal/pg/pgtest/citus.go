package pgtest

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/gendurable/gendurable/internal/pg"
)

// OwnCitus is a Citus cluster that one test owns: its own coordinator and workers, which
// the test may stop, restart or grow without touching the other tests' databases (the
// cluster of a TEST_CITUS run is shared by every test of the binary).
type OwnCitus struct {
	*pg.CitusCluster
	// Database is the name of the migrated database on it; URL its URL on the coordinator.
	Database, URL string
}

// OwnCitusOptions describes the database of an OwnCitus.
type OwnCitusOptions struct {
	// ShardCount is the number of shards the migration makes of each distributed table
	// (0: Citus's default, citus.shard_count, 32). An online rebalance moves one shard
	// group at a time, each move taking several seconds of Citus's own waits.
	ShardCount int
}

// NewOwnCitus starts a Citus cluster for t alone (a coordinator and two workers, ports
// below 32768, one more kept free for a worker the test adds), makes one database on it
// and migrates it (distributes the schema); the cluster is stopped when t ends. It skips
// t outside a TEST_CITUS run. Starting it costs three initdb and one migration: a few
// seconds, for the tests of faults and growth only.
//
// The nodes run without fsync (a test stops processes, never the machine) but the
// database commits synchronously: an immediate stop of a node loses what was committed
// asynchronously, which would be a lost write of the test's making, not of gendurable's.
func NewOwnCitus(t testing.TB, opts OwnCitusOptions) *OwnCitus {
	t.Helper()
	if citus == nil {
		t.Skip("a Citus fault test: TEST_CITUS=1 (make test-citus)")
	}
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "gdcitusown")
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("TEST_CITUS_KEEP") == "" {
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
	} else {
		t.Logf("pgtest: the test's citus cluster's folder (kept): %s", dir)
	}
	c, err := pg.StartCitusCluster(ctx, pg.CitusClusterOptions{Dir: dir, Throwaway: true})
	if err != nil {
		t.Fatalf("pgtest: start the test's citus cluster: %v", err)
	}
	t.Cleanup(c.Stop)
	own := &OwnCitus{CitusCluster: c, Database: "gendurable"}
	if err := c.CreateDatabase(ctx, own.Database); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	for i := range c.Nodes {
		own.SynchronousCommit(t, i)
	}
	own.URL = c.URL(own.Database)
	if opts.ShardCount > 0 {
		if err := setOn(c.Nodes[0], own.Database, fmt.Sprintf("citus.shard_count = %d", opts.ShardCount)); err != nil {
			t.Fatal(err)
		}
	}
	db := Open(t, own.URL, pg.Options{MaxConns: 1})
	if _, err := db.Migrate(ctx); err != nil {
		t.Fatalf("pgtest: migrate the test's citus database: %v", err)
	}
	db.Close()
	return own
}

// SynchronousCommit turns synchronous_commit back on for the test's database on node i
// (a worker added later needs it too): a database setting outranks the server's
// command line, and the coordinator's connections to a worker are sessions of it.
func (o *OwnCitus) SynchronousCommit(t testing.TB, i int) {
	t.Helper()
	if err := setOn(o.Nodes[i], o.Database, "synchronous_commit = on"); err != nil {
		t.Fatal(err)
	}
}

// setOn sets a setting of database on node (ALTER DATABASE … SET): new sessions take it.
func setOn(node *pg.Cluster, database, setting string) error {
	db, err := pg.Open(context.Background(), node.TCPURL("postgres"), pg.Options{MaxConns: 1})
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.Exec(context.Background(), `ALTER DATABASE `+pg.QuoteIdent(database)+` SET `+setting)
	return err
}
