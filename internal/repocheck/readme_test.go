package repocheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// goBlock matches a fenced Go block of Markdown and captures its code.
var goBlock = regexp.MustCompile("(?s)```go\n(.*?)```")

// TestReadmeQuickstartCompiles checks that the README's quickstart holds two
// whole programs, the one that enqueues and the worker, and that each
// compiles and passes go vet as pasted into a file of its own.
func TestReadmeQuickstartCompiles(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n## Quickstart\n")
	if !ok {
		t.Fatal("README.md has no Quickstart section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	blocks := goBlock.FindAllStringSubmatch(section, -1)
	if len(blocks) != 2 {
		t.Fatalf("the quickstart has %d Go blocks, want 2 programs", len(blocks))
	}
	for i, b := range blocks {
		dir := filepath.Join(t.TempDir(), "program")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(dir, "main.go")
		if err := os.WriteFile(file, []byte(b[1]), 0o644); err != nil {
			t.Fatal(err)
		}
		// Run from the module's top, so that weir's own packages and its
		// requirements resolve as they do for a module that requires weir.
		vet := exec.CommandContext(t.Context(), "go", "vet", file)
		vet.Dir = root
		if out, err := vet.CombinedOutput(); err != nil {
			t.Errorf("the quickstart's program %d does not compile or vet: %v\n%s", i+1, err, out)
		}
	}
}
