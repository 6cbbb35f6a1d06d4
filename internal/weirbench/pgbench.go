package weirbench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// PgbenchPath is the pgbench that W4 runs for its ceiling of single inserts:
// on PATH, or else among the binaries of the newest PostgreSQL installed where
// Debian puts them. Without one, W4 measures no ceiling.
func PgbenchPath() (string, error) {
	if p, err := exec.LookPath("pgbench"); err == nil {
		return p, nil
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pgbench")
	if len(found) == 0 {
		return "", errors.New("pgbench is neither on PATH nor in /usr/lib/postgresql/*/bin")
	}
	slices.SortFunc(found, func(a, b string) int { return versionOf(a) - versionOf(b) })
	return found[len(found)-1], nil
}

// versionOf is the major version in a path /usr/lib/postgresql/N/bin/pgbench.
func versionOf(path string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(path))))
	return n
}

// pgbenchTPS matches pgbench's figure of transactions per second.
var pgbenchTPS = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)

// pgbenchRate has pgbench run sql, each execution its own transaction, from
// clients connections at once for d (whole seconds, at least one) against
// the database at url, and returns the transactions per second it reports.
// Its errors carry pgbench's own last lines, never url.
func pgbenchRate(ctx context.Context, path, url, sql string, clients int, d time.Duration) (float64, error) {
	script, err := os.CreateTemp("", "weirbench-*.sql")
	if err != nil {
		return 0, fmt.Errorf("pgbench script: %w", err)
	}
	defer os.Remove(script.Name())
	if _, err := script.WriteString(sql + ";\n"); err != nil {
		script.Close()
		return 0, fmt.Errorf("pgbench script: %w", err)
	}
	if err := script.Close(); err != nil {
		return 0, fmt.Errorf("pgbench script: %w", err)
	}
	secs := max(1, int(d.Round(time.Second)/time.Second))
	cmd := exec.CommandContext(ctx, path, "--no-vacuum", "--file", script.Name(),
		"--client", strconv.Itoa(clients), "--jobs", strconv.Itoa(clients), "--time", strconv.Itoa(secs), url)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	runErr := cmd.Run()
	m := pgbenchTPS.FindSubmatch(out.Bytes())
	if runErr != nil || m == nil {
		if runErr == nil {
			runErr = errors.New("no tps figure in its output")
		}
		return 0, fmt.Errorf("pgbench: %w: %s", runErr, pgbenchSays(out.String()))
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

// pgbenchSays is what pgbench's output says went wrong: its first lines that
// carry an error, or else its last lines.
func pgbenchSays(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var said []string
	for _, l := range lines {
		if strings.Contains(l, "error:") || strings.Contains(l, "ERROR:") || strings.Contains(l, "FATAL:") {
			said = append(said, strings.TrimSpace(l))
		}
	}
	if len(said) == 0 {
		said = lines[max(0, len(lines)-3):]
	}
	return strings.Join(said[:min(len(said), 3)], " / ")
}
