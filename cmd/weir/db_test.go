package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/internal/pgcluster"
)

func TestSQLitePath(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		url    string
		path   string
		sqlite bool
	}{
		{"jobs.db", "jobs.db", true},
		{"./data/jobs.db", "./data/jobs.db", true},
		{"/var/lib/app/jobs.db", "/var/lib/app/jobs.db", true},
		{"sqlite:jobs.db", "jobs.db", true},
		{"sqlite:///var/lib/app/jobs.db", "/var/lib/app/jobs.db", true},
		// An explicit sqlite: is a path, whatever it holds.
		{"sqlite:my jobs.db", "my jobs.db", true},
		// Key/value connection strings, whatever their last value.
		{"host=db1 user=app password=pw dbname=reports.db", "", false},
		{"dbname=reports.db", "", false},
		{"host=db1\tdbname=reports.db", "", false},
		// Paths that could be a mistyped connection string go to PostgreSQL.
		{"my jobs.db", "", false},
		{"app:pw@db1/reports.db", "", false},
		{"postgres:reports.db", "", false},
		{"postgresql:reports.db", "", false},
		{"postgres://db1/reports.db", "", false},
		{"postgres//app:pw@db1/reports.db", "", false},
		{"jobs.db\n", "", false},
		{"jobs.sqlite", "", false},
		{"postgres://db1/app", "", false},
	} {
		path, ok := sqlitePath(tt.url)
		if ok != tt.sqlite || path != tt.path {
			t.Errorf("sqlitePath(%q) = %q, %v; want %q, %v", tt.url, path, ok, tt.path, tt.sqlite)
		}
	}
}

// TestDatabaseURLNeverLeaks runs every command that takes a database URL with
// malformed and ambiguous connection strings: none is taken for a SQLite
// path, none makes a file, and no output shows the password.
func TestDatabaseURLNeverLeaks(t *testing.T) {
	t.Parallel()
	const pw = "Pw-7f3kQ9zX"
	urls := []string{
		// Key/value strings whose last value ends in .db.
		"host=127.0.0.1 user=postgres password=" + pw + " dbname=reports.db",
		"host=127.0.0.1 user=postgres password='" + pw + "' dbname='reports.db'",
		"password=" + pw + " dbname=reports.db",
		"host=127.0.0.1\tuser=postgres\tpassword=" + pw + "\tdbname=reports.db",
		" host=127.0.0.1 password=" + pw + " dbname=reports.db",
		"host=127.0.0.1 port=1 user=postgres password=" + pw + " dbname=reports.db",
		"host=127.0.0.1 port=notaport password=" + pw + " dbname=reports.db",
		"host=127.0.0.1 password=" + pw + " sslmode=bogus dbname=reports.db",
		"host=127.0.0.1 password=" + pw + " connect_timeout=soon dbname=reports.db",
		"host=127.0.0.1 password=" + pw + " dbname=reports.db bogus",
		"dbname=reports.db password=" + pw,
		// URLs, well-formed and not.
		"postgres://postgres:" + pw + "@127.0.0.1:5432/reports.db",
		"postgresql://postgres:" + pw + "@127.0.0.1:notaport/reports.db",
		"postgres://postgres:" + pw + "@[::1/reports.db",
		"postgres://postgres:" + pw + "@127.0.0.1/reports.db?sslmode=bogus",
		"postgres://postgres:" + pw + "@127.0.0.1:5432/reports.db%zz",
		"postgres://127.0.0.1/reports.db?password=" + pw + "&connect_timeout=x",
		// URLs that lost part of their scheme.
		"postgres//postgres:" + pw + "@127.0.0.1/reports.db",
		"postgres:" + pw + "@127.0.0.1/reports.db",
		"postgres:" + pw + "@reports.db",
	}
	commands := [][]string{
		{"migrate", "up"}, {"migrate", "down"}, {"migrate", "status"},
		{"jobs", "list"}, {"jobs", "show", "1"}, {"jobs", "retry", "1"}, {"jobs", "cancel", "1"}, {"jobs", "delete", "1"},
		{"queues", "list"}, {"queues", "pause", "q"}, {"queues", "resume", "q"},
		{"enqueue", "--kind", "k"},
		{"demo"},
		{"bench", "--workloads", "bulk", "--insert-jobs", "10"},
		{"soak", "--duration", "1s", "--faults", "none"},
		{"serve", "--addr", "127.0.0.1:0"},
	}
	cwd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	// What old versions of weir made of such strings: files in the working
	// directory named after them.
	leftovers := func() []string {
		entries, err := os.ReadDir(cwd)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			if strings.Contains(e.Name(), pw) || strings.Contains(e.Name(), "dbname") {
				names = append(names, e.Name())
			}
		}
		return names
	}
	t.Cleanup(func() {
		for _, name := range leftovers() {
			os.Remove(name)
		}
	})
	for i, dbURL := range urls {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			for _, args := range commands {
				for _, how := range []string{"flag", "env"} {
					var env map[string]string
					switch how {
					case "flag":
						args = append(args[:len(args):len(args)], "--database-url", dbURL)
					case "env":
						if args[0] == "demo" || args[0] == "bench" {
							continue // they never read the environment
						}
						env = map[string]string{envDatabaseURL: dbURL}
					}
					r := runWeir(t, env, args...)
					if r.code == 0 {
						t.Errorf("%q: weir %q succeeded: %v", dbURL, args, r)
					}
					if strings.Contains(r.stdout+r.stderr, pw) {
						t.Errorf("%q: weir %q shows the password: %v", dbURL, args, r)
					}
					if strings.Contains(r.stderr, "SQLite") || strings.Contains(r.stdout, "SQLite") {
						t.Errorf("%q: weir %q took it for a SQLite file: %v", dbURL, args, r)
					}
				}
			}
			if names := leftovers(); len(names) > 0 {
				t.Errorf("files made: %q", names)
			}
		})
	}
}

// silentServer listens on 127.0.0.1 and accepts connections but never
// answers. It returns the port.
func silentServer(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().(*net.TCPAddr).Port
}

// TestConnectTimeout: against a server that never answers, weir gives up
// after the string's connect_timeout, names the host and port, and shows no
// password.
func TestConnectTimeout(t *testing.T) {
	t.Parallel()
	const pw = "Pw-timeout-93"
	port := silentServer(t)
	for _, dbURL := range []string{
		fmt.Sprintf("postgres://postgres:%s@127.0.0.1:%d/test?connect_timeout=1", pw, port),
		fmt.Sprintf("host=127.0.0.1 port=%d user=postgres password=%s dbname=test connect_timeout=1", port, pw),
	} {
		for _, args := range [][]string{{"jobs", "list"}, {"migrate", "status"}, {"soak", "--faults", "none"}} {
			r := runWeir(t, map[string]string{envDatabaseURL: dbURL}, args...)
			wantFailure(t, r, exitFailure, fmt.Sprintf("cannot reach the database at 127.0.0.1:%d: no answer within 1s (connect_timeout)", port))
			if strings.Contains(r.stderr, pw) {
				t.Errorf("weir %q shows the password: %v", args, r)
			}
		}
	}
}

// TestWrongPassword: a server that refuses the password is reported as such,
// not as the failure of the TLS attempt that pgx makes first. The test server
// trusts every local connection, so this starts a cluster of its own, without
// TLS, that asks for passwords.
func TestWrongPassword(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a PostgreSQL cluster")
	}
	c, err := pgcluster.Start(pgcluster.Options{DirPrefix: "weir-pw-"})
	dbtest.Started(t, err)
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE ROLE app LOGIN PASSWORD 'right-pw'"); err != nil {
		t.Fatal(err)
	}
	// app must give its password over TCP; postgres is still trusted.
	hba := "host all app 127.0.0.1/32 scram-sha-256\nhost all postgres 127.0.0.1/32 trust\nlocal all all trust\n"
	if err := os.WriteFile(filepath.Join(c.Dir(), "data", "pg_hba.conf"), []byte(hba), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		t.Fatal(err)
	}
	const pw = "Wrong-pw-5521"
	for _, dbURL := range []string{
		fmt.Sprintf("postgres://app:%s@127.0.0.1:%d/postgres", pw, c.Port()),
		fmt.Sprintf("host=127.0.0.1 port=%d user=app password=%s dbname=postgres", c.Port(), pw),
	} {
		r := runWeir(t, map[string]string{envDatabaseURL: dbURL}, "jobs", "list")
		wantFailure(t, r, exitFailure, fmt.Sprintf("the database at 127.0.0.1:%d refused the connection: FATAL: password authentication failed for user \"app\" (SQLSTATE 28P01)", c.Port()))
		if strings.Contains(r.stderr, "TLS") || strings.Contains(r.stderr, pw) {
			t.Errorf("%v", r)
		}
	}
}
