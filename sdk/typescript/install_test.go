package typescript_test

import (
	"bytes"
	"context"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The SDK ships its compiled dist/ in the repository, because npm installs a package
// from a folder as a symlink and runs its prepare script without its devDependencies
// (tsc: not found), and runs nothing at all for `npm pack` without them; so dist/ must
// be what tsc makes of src/ now. This compiles src/ apart and compares every file.
func TestDistIsFresh(t *testing.T) {
	t.Parallel()
	node, npm := nodeTools(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	installDevDependencies(t, ctx, npm)
	fresh := t.TempDir()
	run(t, ctx, nil, node, "node_modules/typescript/bin/tsc", "-p", "tsconfig.json", "--outDir", fresh)
	want, got := readTree(t, fresh), readTree(t, "dist")
	for name, content := range want {
		if c, ok := got[name]; !ok {
			t.Errorf("dist/%s is missing", name)
		} else if !bytes.Equal(c, content) {
			t.Errorf("dist/%s is stale", name)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("dist/%s is not built from src/", name)
		}
	}
	if t.Failed() {
		t.Log("run 'npm run build' in sdk/typescript and commit dist/")
	}
}

// readTree answers every file under dir by its slash path relative to dir.
func readTree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		files[filepath.ToSlash(rel)] = b
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// cloneTracked copies the files git tracks under each of paths (relative to the
// repository's root) to dir, at the same relative places: what a fresh clone has there,
// without node_modules, build output or anything else left in this work tree. It answers
// the copy's root.
func cloneTracked(t *testing.T, dir string, paths ...string) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("git", append([]string{"ls-files", "-z", "--"}, paths...)...)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files (a test of what a clone holds needs git and a checkout): %v", err)
	}
	n := 0
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if name == "" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, name))
		if os.IsNotExist(err) {
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

// runIn runs a command in dir and fails the test with its output.
func runIn(t *testing.T, ctx context.Context, dir string, env []string, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v in %s: %v\n%s", name, args, dir, err, out)
	}
	return out
}

// readmeBlock answers the code block that follows <!-- readme:name --> in README.md.
func readmeBlock(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "<!-- readme:"+name+" -->\n```")
	if !ok {
		t.Fatalf("README.md has no <!-- readme:%s --> block", name)
	}
	_, rest, _ = strings.Cut(rest, "\n") // the fence's language
	code, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatalf("README.md: the %s block is not closed", name)
	}
	return code
}

// installAsTheReadmeSays runs one of the README's install blocks in a fresh folder, with
// the clone at root for /path/to/gendurable, and answers the project it made.
func installAsTheReadmeSays(t *testing.T, ctx context.Context, block, root string) string {
	t.Helper()
	dir := t.TempDir()
	script := strings.ReplaceAll(readmeBlock(t, block), "/path/to/gendurable", root)
	runIn(t, ctx, dir, []string{"npm_config_audit=false", "npm_config_fund=false", "npm_config_update_notifier=false"},
		"bash", "-euo", "pipefail", "-c", script)
	project := filepath.Join(dir, "greeter")
	if _, err := os.Stat(filepath.Join(project, "node_modules", "@gendurable", "sdk", "package.json")); err != nil {
		t.Fatalf("the %s block installed no @gendurable/sdk: %v", block, err)
	}
	return project
}

// smoke copies the smoke test into project, compiles it with tsc against the installed
// package's types and runs it.
func smoke(t *testing.T, ctx context.Context, node, tsc, project string) {
	t.Helper()
	for _, name := range []string{"smoke.ts", "tsconfig.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", "consumer", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(project, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	runIn(t, ctx, project, nil, node, tsc, "-p", "tsconfig.json")
	if out := runIn(t, ctx, project, nil, node, "out/smoke.js"); !strings.Contains(string(out), "smoke: ok") {
		t.Fatalf("the smoke test in %s: %s", project, out)
	}
}

// The README's two ways to install from a clone, run as written on a copy of the files
// git tracks here (no node_modules: no devDependency is there to build with): npm links
// the folder, or npm pack makes a tarball that is installed. Each gives a package that a
// TypeScript project compiles against (its types resolve through "exports") and that
// runs: the entry points import and serve answers a signed step. Before dist/ was
// committed the first failed with ERR_MODULE_NOT_FOUND …/dist/index.js and the second
// with "tsc: not found".
func TestInstallFromAClone(t *testing.T) {
	t.Parallel()
	node, npm := nodeTools(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	installDevDependencies(t, ctx, npm) // tsc, for the consumer's type check
	tsc, err := filepath.Abs("node_modules/typescript/bin/tsc")
	if err != nil {
		t.Fatal(err)
	}
	root := cloneTracked(t, t.TempDir(), "sdk/typescript")
	sdk := filepath.Join(root, "sdk", "typescript")

	linked := installAsTheReadmeSays(t, ctx, "install-folder", root)
	if target, err := filepath.EvalSymlinks(filepath.Join(linked, "node_modules", "@gendurable", "sdk")); err != nil || target != sdk {
		t.Errorf("the folder install is not a link to the clone: %q (%v)", target, err)
	}
	smoke(t, ctx, node, tsc, linked)
	if _, err := os.Stat(filepath.Join(sdk, "node_modules")); err == nil {
		t.Error("installing from the folder installed the SDK's own dependencies into the clone")
	}

	packed := installAsTheReadmeSays(t, ctx, "install-tarball", root)
	for _, want := range []string{"dist/index.js", "dist/index.d.ts", "dist/node.js", "dist/lambda.js", "src/index.ts"} {
		if _, err := os.Stat(filepath.Join(packed, "node_modules", "@gendurable", "sdk", want)); err != nil {
			t.Errorf("the tarball's install has no %s", want)
		}
	}
	smoke(t, ctx, node, tsc, packed)
}

// The README's quickstart, as written, in the project its install block makes: the
// program serves the greeter, registers it with the real server, runs a job and prints
// what the README says it prints.
func TestReadmeQuickstart(t *testing.T) {
	t.Parallel()
	node, _ := nodeTools(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	base := startServer(t)
	root := cloneTracked(t, t.TempDir(), "sdk/typescript")
	project := installAsTheReadmeSays(t, ctx, "install-folder", root)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	l.Close()
	program := strings.NewReplacer("http://localhost:8080", base, "9094", port).Replace(readmeBlock(t, "quickstart"))
	if err := os.WriteFile(filepath.Join(project, "greeter.mjs"), []byte(program), 0o644); err != nil {
		t.Fatal(err)
	}
	out := runIn(t, ctx, project, nil, node, "greeter.mjs")
	for _, want := range []string{"done { greeting: 'hello, Ada' }", "[ 'next', 'next', 'done' ]"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the quickstart printed no %q:\n%s", want, out)
		}
	}
}
