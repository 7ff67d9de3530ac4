package typescript_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
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

// consumer makes a scratch project (an ES module) with the smoke test in it and answers
// its folder.
func consumer(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{"package.json": `{"name": "consumer", "private": true, "type": "module"}` + "\n"}
	for _, name := range []string{"smoke.ts", "tsconfig.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", "consumer", name))
		if err != nil {
			t.Fatal(err)
		}
		files[name] = string(b)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// `npm install <clone>/sdk/typescript` on a fresh clone, and `npm pack` there then an
// install of the tarball: both without the SDK's devDependencies (the clone has no
// node_modules), and both give a package that a TypeScript project compiles against
// (its types resolve through "exports") and that runs: the entry points import and serve
// answers a signed step. Before dist/ was committed the first failed with
// ERR_MODULE_NOT_FOUND …/dist/index.js and the second with "tsc: not found".
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
	sdk := filepath.Join(cloneTracked(t, t.TempDir(), "sdk/typescript"), "sdk", "typescript")
	npmQuiet := []string{"--no-audit", "--no-fund"}

	// From the folder (npm links it).
	app := consumer(t)
	runIn(t, ctx, app, nil, npm, append([]string{"install"}, append(npmQuiet, sdk)...)...)
	runIn(t, ctx, app, nil, node, tsc, "-p", "tsconfig.json")
	if out := runIn(t, ctx, app, nil, node, "out/smoke.js"); !strings.Contains(string(out), "smoke: ok") {
		t.Fatalf("smoke from the folder install: %s", out)
	}
	if _, err := os.Stat(filepath.Join(sdk, "node_modules")); err == nil {
		t.Error("installing from the folder installed the SDK's own dependencies into the clone")
	}

	// From a tarball that npm pack makes in the clone.
	packed := t.TempDir()
	out := runIn(t, ctx, sdk, nil, npm, "pack", "--json", "--pack-destination", packed)
	var packs []struct {
		Filename string
		Files    []struct{ Path string }
	}
	if err := json.Unmarshal(out[bytes.IndexByte(out, '['):], &packs); err != nil || len(packs) != 1 {
		t.Fatalf("npm pack --json: %v\n%s", err, out)
	}
	var paths []string
	for _, f := range packs[0].Files {
		paths = append(paths, f.Path)
	}
	for _, want := range []string{"dist/index.js", "dist/index.d.ts", "dist/node.js", "dist/lambda.js", "package.json"} {
		if !strings.Contains(" "+strings.Join(paths, " ")+" ", " "+want+" ") {
			t.Fatalf("the tarball has no %s: %v", want, paths)
		}
	}
	app2 := consumer(t)
	runIn(t, ctx, app2, nil, npm, append([]string{"install"}, append(npmQuiet, filepath.Join(packed, packs[0].Filename))...)...)
	runIn(t, ctx, app2, nil, node, tsc, "-p", "tsconfig.json")
	if out := runIn(t, ctx, app2, nil, node, "out/smoke.js"); !strings.Contains(string(out), "smoke: ok") {
		t.Fatalf("smoke from the tarball: %s", out)
	}
}
