package dbtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// comment returns the comment of schema name, and false when the schema does
// not exist.
func comment(t *testing.T, name string) (string, bool) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var c *string
	err = conn.QueryRow(t.Context(), "SELECT obj_description(oid, 'pg_namespace') FROM pg_namespace WHERE nspname = $1", name).Scan(&c)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	if c == nil {
		return "", true
	}
	return *c, true
}

// rawSchema creates a schema named prefix and 12 random hex digits ("t_" is
// the prefix SchemaName uses), with comment (none when empty), dropped when
// the test ends if it is still there.
func rawSchema(t *testing.T, prefix, comment string) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := prefix + hex.EncodeToString(b)
	id := pgx.Identifier{name}.Sanitize()
	sql := "CREATE SCHEMA " + id
	if comment != "" {
		sql += "; COMMENT ON SCHEMA " + id + " IS " + quote(comment)
	}
	if err := execSQL(t.Context(), sql); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := execSQL(context.Background(), "DROP SCHEMA IF EXISTS "+id+" CASCADE"); err != nil {
			t.Error(err)
		}
	})
	return name
}

// deadPID returns the pid of a process of this host that has exited.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if processAlive(cmd.Process.Pid) {
		t.Fatalf("process %d runs after it exited", cmd.Process.Pid)
	}
	return cmd.Process.Pid
}

// TestSchemaIsMarked: a schema made by Schema carries the mark of this host
// and process, and of its time.
func TestSchemaIsMarked(t *testing.T) {
	t.Parallel()
	before := time.Now().Add(-time.Second)
	name := Schema(t)
	c, _ := comment(t, name)
	m, ok := parseMark(c)
	if !ok || m.kept || m.host != hostname() || m.pid != os.Getpid() || m.made.Before(before.Truncate(time.Second)) || m.made.After(time.Now()) {
		t.Fatalf("schema %s is marked %q: %+v; want this host, pid %d, made now", name, c, m, os.Getpid())
	}
}

// TestSweep: the sweep drops a marked schema whose process on this host is
// gone, and any marked schema older than staleAge; it keeps a marked schema
// of a process that runs, a recent one of another host, one kept after a
// failure until it is old, every schema without the mark, and any not named
// as SchemaName names them.
func TestSweep(t *testing.T) {
	t.Parallel()
	now, host := time.Now(), hostname()
	dead, old := deadPID(t), now.Add(-staleAge-time.Minute)
	mk := func(m mark) string { return rawSchema(t, "t_", m.String()) }
	cases := []struct {
		name    string
		schema  string
		dropped bool
	}{
		{"this host, process gone", mk(mark{host: host, pid: dead, made: now}), true},
		{"this host, process running", mk(mark{host: host, pid: os.Getpid(), made: now}), false},
		{"this host, process running, old", mk(mark{host: host, pid: os.Getpid(), made: old}), true},
		{"another host, recent", mk(mark{host: "elsewhere.example", pid: dead, made: now}), false},
		{"another host, old", mk(mark{host: "elsewhere.example", pid: dead, made: old}), true},
		{"kept, process gone", mk(mark{host: host, pid: dead, made: now, kept: true}), false},
		{"kept, old", mk(mark{host: host, pid: dead, made: old, kept: true}), true},
		{"unmarked", rawSchema(t, "t_", ""), false},
		{"another comment", rawSchema(t, "t_", "weir test data, hands off"), false},
		{"not named by SchemaName", rawSchema(t, "app_", mark{host: host, pid: dead, made: old}.String()), false},
	}
	dropped, err := sweep(t.Context(), now, host, processAlive)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		_, exists := comment(t, c.schema)
		if exists == c.dropped {
			t.Errorf("%s: schema exists %v after the sweep, want %v", c.name, exists, !c.dropped)
		}
		for _, d := range dropped {
			if d == c.schema && !c.dropped {
				t.Errorf("%s: the sweep reports %s dropped", c.name, d)
			}
		}
	}
}

// TestRelease: a test's schema is dropped when it ends, or, when kept, left
// with the kept mark; a schema that does not exist is no error either way.
func TestRelease(t *testing.T) {
	t.Parallel()
	now := time.Now()
	dropped, kept := Schema(t), Schema(t)
	if err := release(t.Context(), dropped, false, now); err != nil {
		t.Fatal(err)
	}
	if err := release(t.Context(), kept, true, now); err != nil {
		t.Fatal(err)
	}
	if _, exists := comment(t, dropped); exists {
		t.Errorf("schema %s was not dropped", dropped)
	}
	c, exists := comment(t, kept)
	if m, ok := parseMark(c); !exists || !ok || !m.kept || m.pid != os.Getpid() {
		t.Errorf("kept schema %s: exists %v, comment %q; want it marked kept", kept, exists, c)
	}
	for _, keep := range []bool{false, true} {
		if err := release(t.Context(), "t_000000000000", keep, now); err != nil {
			t.Errorf("release of a schema that does not exist (keep %v): %v", keep, err)
		}
	}
}

// TestKeepFailed: only a failed test's schema is kept, and only when the
// environment asks.
func TestKeepFailed(t *testing.T) {
	t.Setenv(envKeep, "")
	if keepFailed(true) {
		t.Error("kept a failed test's schema without " + envKeep)
	}
	t.Setenv(envKeep, "1")
	if !keepFailed(true) || keepFailed(false) {
		t.Errorf("with %s=1: keep failed %v, passed %v; want true, false", envKeep, keepFailed(true), keepFailed(false))
	}
}

// TestParseMark: a mark reads back as written; a comment that only looks like
// one is none.
func TestParseMark(t *testing.T) {
	m := mark{host: "h.example", pid: 42, made: time.Unix(1_700_000_000, 0), kept: true}
	if got, ok := parseMark(m.String()); !ok || got != m {
		t.Fatalf("parseMark(%q) = %+v, %v", m.String(), got, ok)
	}
	for _, c := range []string{"", "weir test: h 42", "weir test: h x 1", "weir test: h 0 1", "weir test: h 42 1 extra", "test: h 42 1"} {
		if _, ok := parseMark(c); ok {
			t.Errorf("parseMark(%q) took it for a mark", c)
		}
	}
}
