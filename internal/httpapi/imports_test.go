package httpapi_test

import (
	"go/build"
	"path/filepath"
	"strings"
	"testing"
)

// seamModule is the module whose internal/pg only internal/engine may import.
const seamModule = "github.com/gendurable/gendurable/"

// seamPending names the packages that still import internal/pg, and why. When one of
// them stops, the test fails until its line here is removed, so the exception cannot
// outlive its reason.
var seamPending = map[string]string{}

// TestSeamImports fails when a package above the engine imports internal/pg (or the
// driver) in its non-test files: the engine is the one way into state
// (docs/architecture.md, CONVENTIONS.md "One seam"). Tests may import pg.
func TestSeamImports(t *testing.T) {
	t.Parallel()
	for _, dir := range []string{"internal/httpapi", "internal/dispatch"} {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			t.Parallel()
			pkg, err := build.ImportDir(filepath.Join("..", "..", dir), 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(pkg.GoFiles) == 0 {
				t.Fatalf("found no Go files in %s: the check would pass vacuously", dir)
			}
			var bad []string
			for _, imp := range pkg.Imports { // non-test files only
				if imp == seamModule+"internal/pg" || strings.HasPrefix(imp, seamModule+"internal/pg/") ||
					strings.HasPrefix(imp, "github.com/jackc/pgx") {
					bad = append(bad, imp)
				}
			}
			reason, pending := seamPending[dir]
			switch {
			case len(bad) > 0 && pending:
				t.Skipf("%s still imports %s: %s", dir, strings.Join(bad, ", "), reason)
			case len(bad) > 0:
				t.Errorf("%s imports %s: reach state through internal/engine instead", dir, strings.Join(bad, ", "))
			case pending:
				t.Errorf("%s no longer imports internal/pg: remove it from seamPending", dir)
			}
		})
	}
}
