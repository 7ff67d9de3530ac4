package pg

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrNoCitus explains how to get Citus when its extension is not installed.
var ErrNoCitus = errors.New(`the citus extension is not installed for this PostgreSQL (no citus.so and citus.control ` +
	`beside the server binaries): install Citus (packages from Citus Data, or ../shared/citus/install.sh on the ` +
	`development machines), or point TEST_DATABASE_URL at an existing server`)

// CitusAvailable reports whether the machine's PostgreSQL server has the citus extension
// installed (what StartCitusCluster needs).
func CitusAvailable() bool {
	bin, err := postgresBinDir()
	if err != nil {
		return false
	}
	version := filepath.Base(filepath.Dir(bin)) // /usr/lib/postgresql/15/bin -> 15
	for _, f := range []string{filepath.Join(bin, "..", "lib", "citus.so"),
		filepath.Join("/usr/share/postgresql", version, "extension", "citus.control")} {
		if _, err := os.Stat(f); err != nil {
			return false
		}
	}
	return true
}

// CitusClusterOptions describes a Citus cluster started from the machine's binaries.
type CitusClusterOptions struct {
	// Dir holds one data directory per node: node0 (the coordinator), node1, node2…
	Dir string
	// Workers is the number of workers (default 2).
	Workers int
	// BasePort is the coordinator's port; worker i listens on BasePort+i (0: a free
	// range below 32768, where a restarted node cannot find its port taken by the
	// ephemeral port of some client connection).
	BasePort int
	// Throwaway turns durability off on every node (tests).
	Throwaway bool
}

// CitusCluster is a Citus coordinator and its workers on 127.0.0.1, each a PostgreSQL
// server this process started (StartCluster). A database on it is made by CreateDatabase.
type CitusCluster struct {
	opts  CitusClusterOptions
	Nodes []*Cluster // Nodes[0] is the coordinator
}

// StartCitusCluster starts (initialising on first use) a coordinator and opts.Workers
// workers. Each database that gendurable uses on it is made by CreateDatabase.
func StartCitusCluster(ctx context.Context, opts CitusClusterOptions) (*CitusCluster, error) {
	if !CitusAvailable() {
		return nil, ErrNoCitus
	}
	if opts.Workers <= 0 {
		opts.Workers = 2
	}
	if opts.BasePort == 0 {
		port, err := freePortRange(opts.Workers + 2) // and one for a worker added later
		if err != nil {
			return nil, err
		}
		opts.BasePort = port
	}
	c := &CitusCluster{opts: opts}
	for i := 0; i <= opts.Workers; i++ {
		if _, err := c.startNode(ctx, i); err != nil {
			c.Stop()
			return nil, err
		}
	}
	return c, nil
}

// startNode starts node i (initialising it on first use) and puts it in c.Nodes.
func (c *CitusCluster) startNode(ctx context.Context, i int) (*Cluster, error) {
	n, err := StartCluster(ctx, ClusterOptions{Dir: filepath.Join(c.opts.Dir, "node"+strconv.Itoa(i)),
		Port: c.opts.BasePort + i, ListenTCP: true, Throwaway: c.opts.Throwaway, Citus: true})
	if err != nil {
		return nil, fmt.Errorf("pg: citus node %d: %w", i, err)
	}
	for len(c.Nodes) <= i {
		c.Nodes = append(c.Nodes, nil)
	}
	c.Nodes[i] = n
	return n, nil
}

// freePortRange finds n consecutive free TCP ports on 127.0.0.1 in [20000, 32000).
func freePortRange(n int) (int, error) {
	for try := 0; try < 100; try++ {
		base := 20000 + rand.IntN(12000-n)
		free := true
		for p := base; p < base+n && free; p++ {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				free = false
				continue
			}
			l.Close()
		}
		if free {
			return base, nil
		}
	}
	return 0, errors.New("pg: no free range of ports below 32768 for a citus cluster")
}

// URL is the coordinator's URL for database name.
func (c *CitusCluster) URL(database string) string { return c.Nodes[0].TCPURL(database) }

// CreateDatabase makes database name on the coordinator (propagated to the workers),
// creates the citus extension in it on every node, and adds the workers to its
// metadata: what a user does once before pointing gendurable at a Citus cluster.
func (c *CitusCluster) CreateDatabase(ctx context.Context, name string) error {
	// The database is made on each node (Citus would propagate it from the coordinator with
	// citus.enable_create_database_propagation, but not the extension or the metadata).
	for _, n := range c.Nodes {
		if err := execOn(ctx, n.TCPURL("postgres"), `CREATE DATABASE `+QuoteIdent(name)); err != nil {
			return err
		}
	}
	for _, n := range c.Nodes {
		if err := execOn(ctx, n.TCPURL(name), `CREATE EXTENSION IF NOT EXISTS citus`); err != nil {
			return err
		}
	}
	if err := execOn(ctx, c.URL(name), fmt.Sprintf(`SELECT citus_set_coordinator_host('127.0.0.1', %d)`, c.opts.BasePort)); err != nil {
		return err
	}
	for i := 1; i < len(c.Nodes); i++ {
		if err := c.AddWorker(ctx, name, i); err != nil {
			return err
		}
	}
	return nil
}

// AddWorker adds node i (started) to database name's metadata, without moving shards.
func (c *CitusCluster) AddWorker(ctx context.Context, name string, i int) error {
	return execOn(ctx, c.URL(name), fmt.Sprintf(`SELECT citus_add_node('127.0.0.1', %d)`, c.opts.BasePort+i))
}

// StartWorker starts one more worker (node len(Nodes)) and creates the citus extension in
// each of databases on it; AddWorker then puts it in a database's metadata.
func (c *CitusCluster) StartWorker(ctx context.Context, databases ...string) (int, error) {
	i := len(c.Nodes)
	n, err := c.startNode(ctx, i)
	if err != nil {
		return 0, err
	}
	for _, name := range databases {
		if err := execOn(ctx, n.TCPURL("postgres"), `CREATE DATABASE `+QuoteIdent(name)); err != nil {
			return 0, err
		}
		if err := execOn(ctx, n.TCPURL(name), `CREATE EXTENSION IF NOT EXISTS citus`); err != nil {
			return 0, err
		}
	}
	return i, nil
}

// StopNode stops node i (fast shutdown); RestartNode starts it again on its port.
func (c *CitusCluster) StopNode(i int) { c.Nodes[i].Stop() }

// StopNodeImmediately stops node i as a crash would: an immediate shutdown (SIGQUIT, what
// pg_ctl stop -m immediate sends), sessions cut without a goodbye, no checkpoint, so that
// RestartNode runs crash recovery. It returns once the node has exited.
func (c *CitusCluster) StopNodeImmediately(i int) {
	n := c.Nodes[i]
	if n.cmd == nil || n.cmd.Process == nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGQUIT)
	<-n.exited
	n.removeSocketDir()
}

// FreezeNode stops every process of node i (SIGSTOP): its connections stay open and
// nothing answers on them, as with a hung host or a network partition that sends no
// reset. ThawNode lets it go on. The postmaster is stopped first, so that no new backend
// starts unfrozen.
func (c *CitusCluster) FreezeNode(i int) error { return c.signalNode(i, syscall.SIGSTOP) }

// ThawNode lets the processes of node i, frozen by FreezeNode, go on (SIGCONT).
func (c *CitusCluster) ThawNode(i int) error { return c.signalNode(i, syscall.SIGCONT) }

// signalNode sends sig to node i's postmaster, then to each of its children.
func (c *CitusCluster) signalNode(i int, sig syscall.Signal) error {
	n := c.Nodes[i]
	if n.cmd == nil || n.cmd.Process == nil {
		return fmt.Errorf("pg: node %d is not running", i)
	}
	postmaster := n.cmd.Process.Pid
	if err := syscall.Kill(postmaster, sig); err != nil {
		return err
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …: comm may hold spaces, so read after its last ')'.
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(postmaster) {
			_ = syscall.Kill(pid, sig) // a backend that has just exited is no matter
		}
	}
	return nil
}

// Port is node i's port (the coordinator's is Port(0)): the nodeport of its rows in
// Citus's metadata (pg_dist_node, citus_shards).
func (c *CitusCluster) Port(i int) int { return c.opts.BasePort + i }

// RestartNode starts node i again, as it was, after StopNode or StopNodeImmediately.
func (c *CitusCluster) RestartNode(ctx context.Context, i int) error {
	_, err := c.startNode(ctx, i)
	return err
}

// DropDatabase drops database name on every node.
func (c *CitusCluster) DropDatabase(ctx context.Context, name string) error {
	var first error
	for i := len(c.Nodes) - 1; i >= 0; i-- {
		err := execOn(ctx, c.Nodes[i].TCPURL("postgres"), `DROP DATABASE IF EXISTS `+QuoteIdent(name)+` WITH (FORCE)`)
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Stop stops every node, workers first. A throwaway cluster's nodes that had to be placed
// outside Dir (as root: see StartCluster) are deleted with it: nothing else would.
func (c *CitusCluster) Stop() {
	for i := len(c.Nodes) - 1; i >= 0; i-- {
		if c.Nodes[i] != nil {
			c.Nodes[i].Stop()
			if home := filepath.Dir(c.Nodes[i].DataDir()); c.opts.Throwaway && !strings.HasPrefix(home, c.opts.Dir) &&
				filepath.Base(filepath.Dir(home)) == placedClusters {
				_ = os.RemoveAll(home)
			}
		}
	}
}

// execOn runs one statement on a one-connection pool to url.
func execOn(ctx context.Context, url, sql string) error {
	db, err := Open(ctx, url, Options{MaxConns: 1})
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.Exec(ctx, sql)
	return err
}

// MakeTemplate turns database name into a template that CloneDatabase copies: no
// connections are allowed to it any more on any node (the citus maintenance daemon of
// each node holds one, which would keep CREATE DATABASE ... TEMPLATE from copying it).
func (c *CitusCluster) MakeTemplate(ctx context.Context, name string) error {
	for _, n := range c.Nodes {
		for _, sql := range []string{
			`ALTER DATABASE ` + QuoteIdent(name) + ` WITH ALLOW_CONNECTIONS false`,
			`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '` + strings.ReplaceAll(name, `'`, `''`) + `'`,
		} {
			if err := execOn(ctx, n.TCPURL("postgres"), sql); err != nil {
				return err
			}
		}
	}
	return nil
}

// CloneDatabase makes database name as a copy of template (MakeTemplate) on every node:
// each node copies its own part (the coordinator its metadata, each worker its shards),
// so the copy is a Citus database as the template was, without distributing anything again.
func (c *CitusCluster) CloneDatabase(ctx context.Context, template, name string) error {
	for _, n := range c.Nodes {
		var err error
		for try := 0; try < 50; try++ {
			err = execOn(ctx, n.TCPURL("postgres"), `CREATE DATABASE `+QuoteIdent(name)+` TEMPLATE `+QuoteIdent(template))
			if err == nil || !strings.Contains(err.Error(), "being accessed by other users") {
				break
			}
			time.Sleep(100 * time.Millisecond) // a backend of the template still exiting
		}
		if err != nil {
			return err
		}
	}
	return nil
}
