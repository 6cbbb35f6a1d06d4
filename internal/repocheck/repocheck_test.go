// Package repocheck holds tests of the repository itself: that it stands alone
// (no file points outside it, every relative link resolves) and that every
// guarantee cited by number is defined in docs/design/contract.md.
package repocheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// root is the repository's top directory, seen from this package's folder.
const root = "../.."

// contractPath is where the delivery contract defines the guarantees, from root.
const contractPath = "docs/design/contract.md"

// textFiles lists the repository's files that people read: sources, docs, SQL,
// scripts and the model. Generated results and module sums are left out, and
// so are the packages installed into node_modules (bench/node's).
func textFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") && name != ".ci" || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".md", ".sql", ".sh", ".js", ".pml", ".yml", ".yaml":
			files = append(files, path)
		case "":
			if name := d.Name(); name == "Makefile" || name == "run" {
				files = append(files, path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// outside matches what would send a reader outside the repository: the team's
// notes beside it, or their file names.
// The pattern is assembled so that this file does not itself hold what it
// looks for.
var outside = regexp.MustCompile(`\.\./shared\b|shared` + `/spec|` + `\bSEMANTICS\b|BENCHMARK\.md|STYLE\.md`)

func TestNothingPointsOutside(t *testing.T) {
	t.Parallel()
	for _, path := range textFiles(t) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(data), "\n") {
			if m := outside.FindString(line); m != "" {
				t.Errorf("%s:%d points outside the repository (%q): %s", rel(path), i+1, m, strings.TrimSpace(line))
			}
		}
	}
}

// mdLink matches a Markdown link's target: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

func TestRelativeLinksResolve(t *testing.T) {
	t.Parallel()
	for _, path := range textFiles(t) {
		if filepath.Ext(path) != ".md" {
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(data), "\n") {
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				target, _, _ = strings.Cut(target, "#")
				resolved := filepath.Join(filepath.Dir(path), target)
				if !within(resolved) {
					t.Errorf("%s:%d links outside the repository: %s", rel(path), i+1, m[1])
					continue
				}
				if _, err := os.Stat(resolved); err != nil {
					t.Errorf("%s:%d links to %s, which does not exist", rel(path), i+1, m[1])
				}
			}
		}
	}
}

// guarantee matches a guarantee cited by number: G1, G9.
var guarantee = regexp.MustCompile(`\bG([0-9]+)\b`)

// defined matches a guarantee's definition in the contract (contractPath).
var defined = regexp.MustCompile(`(?m)^- \*\*G([0-9]+) `)

func TestGuaranteesCitedAreDefined(t *testing.T) {
	t.Parallel()
	contract, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(contractPath)))
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, m := range defined.FindAllStringSubmatch(string(contract), -1) {
		known[m[1]] = true
	}
	if len(known) < 9 {
		t.Fatalf("%s defines %d guarantees, want G1-G9 at least", contractPath, len(known))
	}
	for _, path := range textFiles(t) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(data), "\n") {
			for _, m := range guarantee.FindAllStringSubmatch(line, -1) {
				if !known[m[1]] {
					t.Errorf("%s:%d cites G%s, which %s does not define", rel(path), i+1, m[1], contractPath)
				}
			}
		}
	}
}

// within reports whether path stays inside the repository.
func within(path string) bool {
	r, err := filepath.Rel(root, path)
	return err == nil && r != ".." && !strings.HasPrefix(r, ".."+string(filepath.Separator))
}

func rel(path string) string {
	r, err := filepath.Rel(root, path)
	if err != nil {
		return path
	}
	return r
}
