package pg

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// skipUnlessRoot skips a test of what StartCluster does as root (the server then runs
// as the postgres user).
func skipUnlessRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("as another user, initdb runs as that user, who can reach their own folders")
	}
}

// folder is a new folder under /tmp with mode perm, removed when t ends; mode 0700 makes
// a folder of root's that the postgres user cannot enter, like a mktemp -d one or /root.
// (t.TempDir's folders sit in a 0700 folder of their own.)
func folder(t *testing.T, perm os.FileMode) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "gdcluster")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, perm); err != nil {
		t.Fatal(err)
	}
	return dir
}

// clone makes parent/clone as git clone does (mode 0755) and returns its .data path.
func clone(t *testing.T, parent string) string {
	t.Helper()
	if err := os.Mkdir(filepath.Join(parent, "clone"), 0o755); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(parent, "clone", ".data")
}

func startCluster(t *testing.T, opts ClusterOptions) *Cluster {
	t.Helper()
	c, err := StartCluster(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// tableCount counts the tables named name in database postgres of c.
func tableCount(t *testing.T, c *Cluster, name string) int64 {
	t.Helper()
	db, err := Open(context.Background(), c.URL("postgres"), Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	n, err := db.QueryInt(context.Background(), `SELECT count(*) FROM pg_tables WHERE tablename = $1`, name)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// The failure of make run as root in a clone under a 0700 folder: initdb, run as
// postgres, could not reach ./.data. The cluster now lives where postgres can reach it,
// ./.data/data links to it, a restart finds it again, and deleting ./.data starts afresh.
func TestStartClusterAsRootUnderAPrivateFolder(t *testing.T) {
	t.Parallel()
	skipUnlessRoot(t)
	dir := clone(t, folder(t, 0o700))
	c := startCluster(t, ClusterOptions{Dir: dir, Throwaway: true})
	placed := filepath.Dir(c.DataDir())
	t.Cleanup(func() { _ = os.RemoveAll(placed) })
	if strings.HasPrefix(c.DataDir(), dir) {
		t.Fatalf("the cluster is in %s, which postgres cannot reach", c.DataDir())
	}
	if target, err := os.Readlink(filepath.Join(dir, "data")); err != nil || target != c.DataDir() {
		t.Fatalf("%s/data links to %q (%v), want %s", dir, target, err, c.DataDir())
	}
	db, err := Open(context.Background(), c.URL("postgres"), Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(context.Background(), `CREATE TABLE kept_across_restarts ()`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	c.Stop()

	again := startCluster(t, ClusterOptions{Dir: dir, Throwaway: true})
	if again.DataDir() != c.DataDir() || tableCount(t, again, "kept_across_restarts") != 1 {
		t.Fatalf("the restart used %s and lost the table (first start: %s)", again.DataDir(), c.DataDir())
	}
	again.Stop()

	if err := os.RemoveAll(dir); err != nil { // rm -rf .data: start afresh
		t.Fatal(err)
	}
	fresh := startCluster(t, ClusterOptions{Dir: dir, Throwaway: true})
	if n := tableCount(t, fresh, "kept_across_restarts"); n != 0 {
		t.Fatal("deleting the folder did not start a fresh cluster: the old table is still there")
	}
	fresh.Stop()

	if err := os.RemoveAll(filepath.Dir(fresh.DataDir())); err != nil { // the placed cluster is gone
		t.Fatal(err)
	}
	remade := startCluster(t, ClusterOptions{Dir: dir, Throwaway: true})
	defer remade.Stop()
	if remade.DataDir() != fresh.DataDir() {
		t.Fatalf("the link names %s, the new cluster is in %s", fresh.DataDir(), remade.DataDir())
	}
}

// When postgres can reach no place at all, the error names the folder in the way and
// the command that lets postgres through.
func TestStartClusterAsRootNamesTheFixWhenPostgresCannotReachAnyPlace(t *testing.T) {
	t.Parallel()
	skipUnlessRoot(t)
	blocked := folder(t, 0o700)
	dir := clone(t, blocked)
	_, err := StartCluster(context.Background(), ClusterOptions{Dir: dir, placementParents: []string{folder(t, 0o700)}})
	if err == nil {
		t.Fatal("the cluster started although postgres can reach no place for it")
	}
	for _, want := range []string{"cannot enter " + blocked + " (mode 0700)", `"chmod o+x ` + blocked + `"`,
		"unprivileged user", "DATABASE_URL"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	}
}

// A folder deep enough that the socket path would pass the kernel's limit gets its
// socket in a short folder of its own, removed when the cluster stops.
func TestStartClusterInADeepFolder(t *testing.T) {
	t.Parallel()
	// Reachable, so that the cluster stays in place as root too.
	dir := filepath.Join(folder(t, 0o755), strings.Repeat("deep-folder/", 8), ".data")
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	c := startCluster(t, ClusterOptions{Dir: dir, Throwaway: true})
	if c.DataDir() != filepath.Join(dir, "data") || strings.HasPrefix(c.sockDir, dir) {
		t.Fatalf("data in %s, socket in %s; want the data in %s and the socket elsewhere", c.DataDir(), c.sockDir, dir)
	}
	if n := tableCount(t, c, "kept_across_restarts"); n != 0 { // connects through the socket
		t.Fatalf("a new cluster has %d tables named kept_across_restarts", n)
	}
	c.Stop()
	if _, err := os.Stat(c.sockDir); !os.IsNotExist(err) {
		t.Fatalf("socket folder %s after Stop: %v", c.sockDir, err)
	}
}

// A second start on a folder whose cluster runs (a second make run in one clone) says so
// and names the fix, instead of "postgres exited during start-up".
func TestStartClusterTwiceOnOneFolderNamesTheRunningOne(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(folder(t, 0o755), ".data")
	c := startCluster(t, ClusterOptions{Dir: dir, Throwaway: true})
	defer c.Stop()
	second, err := StartCluster(context.Background(), ClusterOptions{Dir: dir, Throwaway: true})
	if err == nil {
		second.Stop()
		t.Fatal("a second cluster started on the folder of a running one")
	}
	if !strings.Contains(err.Error(), "already runs") || !strings.Contains(err.Error(), "GENDURABLE_DEV_POSTGRES") {
		t.Fatalf("the second start said %q", err)
	}
	if n := tableCount(t, c, "anything"); n != 0 { // the first one still serves
		t.Fatalf("%d tables", n)
	}
}
