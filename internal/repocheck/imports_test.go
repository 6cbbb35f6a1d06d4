package repocheck

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// toolPackages are the internal packages that the dashboard and the command may
// import: tools, not the engine. weirbench is the benchmark engine of `weir
// bench` (and of the comparison module); pgcluster starts a throwaway cluster or
// a PgBouncer for `weir bench` and `weir soak`; safetext is the rule for
// text a display acts on, which the command's tables and the pages share.
var toolPackages = map[string]bool{
	"github.com/weirq/weir/internal/weirbench": true,
	"github.com/weirq/weir/internal/pgcluster": true,
	"github.com/weirq/weir/internal/safetext":  true,
}

// TestFrontEndsUsePublicAPI checks that weirui and cmd/weir (the command's own
// package) reach the engine through the Client's public API only: their
// non-test files import no internal package of the root but the tools, and
// never call a driver's executor.
func TestFrontEndsUsePublicAPI(t *testing.T) {
	t.Parallel()
	for _, dir := range []string{"weirui", "cmd/weir"} {
		files, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no Go files (%v)", dir, err)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, src, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				if strings.HasPrefix(p, "github.com/weirq/weir/internal/") && !toolPackages[p] {
					t.Errorf("%s imports %s: use the Client's public API", path, p)
				}
			}
			if strings.Contains(string(src), ".Executor()") {
				t.Errorf("%s calls a driver's Executor: use the Client's public API", path)
			}
		}
	}
}
