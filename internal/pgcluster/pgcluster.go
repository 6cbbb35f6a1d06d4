// Package pgcluster starts throwaway PostgreSQL clusters, for tests and for
// weir soak.
//
// Start runs initdb into a new temporary directory (trust authentication,
// user postgres, UTF8, locale C) and pg_ctl start on a free port of
// 127.0.0.1, with fsync off and the unix socket in that directory. initdb and
// pg_ctl are taken from one directory: initdb's on PATH, else the newest
// /usr/lib/postgresql/VERSION/bin.
//
// initdb refuses to run as root, so when the process runs as root the
// directory is made under /tmp and given to the "postgres" OS user, and
// initdb and pg_ctl run as that user through runuser -u postgres --.
//
// Stop stops the server and deletes the directory. Nothing else does: a
// process that dies leaves its cluster running.
//
// StartPair starts a primary and a streaming standby of it, for failover
// tests: see Pair.
package pgcluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNoBinaries is returned by Start when initdb and pg_ctl are not found.
var ErrNoBinaries = errors.New("initdb and pg_ctl not found on PATH or under /usr/lib/postgresql/*/bin")

// Options says how to make a cluster.
type Options struct {
	// DirPrefix starts the name of the temporary directory; "pgcluster-" if
	// empty.
	DirPrefix string
	// Database is created once the server runs, and is the one URL names;
	// if empty, URL names the postgres database.
	Database string
	// Settings are more server settings, each "name=value" without spaces,
	// such as "max_connections=200".
	Settings []string
}

// Cluster is a throwaway cluster made by Start. Its methods must not be
// called concurrently.
type Cluster struct {
	dir     string // temporary directory: data/, log and the unix socket
	pgCtl   string // path of pg_ctl
	port    int
	url     string
	opts    string // the server's options, for pg_ctl start -o
	asOwner bool   // run initdb and pg_ctl as the postgres OS user (we are root)
}

// Start creates and starts a throwaway cluster. It returns ErrNoBinaries if
// initdb and pg_ctl are not installed. On an error, nothing is left behind.
func Start(o Options) (*Cluster, error) {
	initdb, pgCtl, err := findBinaries()
	if err != nil {
		return nil, err
	}
	c := &Cluster{pgCtl: pgCtl, asOwner: os.Geteuid() == 0}

	// The postgres user must own the directory and be able to reach it.
	base := ""
	if c.asOwner {
		base = "/tmp"
	}
	if c.dir, err = os.MkdirTemp(base, cmp.Or(o.DirPrefix, "pgcluster-")); err != nil {
		return nil, fmt.Errorf("creating temporary directory: %w", err)
	}
	if c.asOwner {
		if err := chownToPostgres(c.dir); err != nil {
			os.RemoveAll(c.dir)
			return nil, err
		}
	}

	if c.port, err = freePort(); err != nil {
		os.RemoveAll(c.dir)
		return nil, err
	}
	data := c.data()
	if err := c.run(initdb, "-D", data, "-U", "postgres", "--auth=trust",
		"-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		os.RemoveAll(c.dir)
		return nil, fmt.Errorf("creating throwaway cluster: %w", err)
	}
	c.opts = fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -k '%s' -c fsync=off", c.port, c.dir)
	for _, s := range o.Settings {
		c.opts += " -c " + s
	}
	if err := c.run(pgCtl, "-D", data, "-l", c.log(), "-w", "-o", c.opts, "start"); err != nil {
		log, _ := os.ReadFile(c.log())
		os.RemoveAll(c.dir)
		return nil, fmt.Errorf("starting throwaway cluster: %w\nserver log:\n%s", err, log)
	}

	c.url = c.urlOf("postgres")
	if o.Database != "" {
		if err := createDatabase(c.url, o.Database); err != nil {
			c.Stop()
			return nil, err
		}
		c.url = c.urlOf(o.Database)
	}
	return c, nil
}

// Dir returns the cluster's directory; the data directory is its data/.
func (c *Cluster) Dir() string { return c.dir }

// Port returns the TCP port the server listens on, on 127.0.0.1.
func (c *Cluster) Port() int { return c.port }

// URL returns the connection string of Options.Database (else of the
// postgres database), as the superuser postgres, without a password.
func (c *Cluster) URL() string { return c.url }

// Version returns the PostgreSQL version of pg_ctl, such as "15.8" (with
// any packager's suffix), or "" if pg_ctl --version fails.
func (c *Cluster) Version() string {
	out, err := exec.Command(c.pgCtl, "--version").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(out)), "pg_ctl (PostgreSQL)"))
}

// Restart restarts the server with a fast shutdown: sessions are
// terminated, a checkpoint is written, and the server starts again at once.
func (c *Cluster) Restart() error {
	if err := c.run(c.pgCtl, "-D", c.data(), "-l", c.log(), "-m", "fast", "-w", "restart"); err != nil {
		return fmt.Errorf("restarting throwaway cluster: %w", err)
	}
	return nil
}

// Crash stops the server in immediate mode, as if it crashed: no
// checkpoint, so StartServer runs crash recovery. The directory is kept.
func (c *Cluster) Crash() error {
	if err := c.run(c.pgCtl, "-D", c.data(), "-m", "immediate", "-w", "stop"); err != nil {
		return fmt.Errorf("crashing throwaway cluster: %w", err)
	}
	return nil
}

// Shutdown stops the server with a fast shutdown and keeps the directory:
// StartServer, or the command line Command("start") returns, starts it again.
func (c *Cluster) Shutdown() error {
	if err := c.run(c.pgCtl, "-D", c.data(), "-m", "fast", "-w", "stop"); err != nil {
		return fmt.Errorf("stopping throwaway cluster: %w", err)
	}
	return nil
}

// StartServer starts the server again after Crash or Shutdown, with the
// same port and settings.
func (c *Cluster) StartServer() error {
	if err := c.run(c.pgCtl, "-D", c.data(), "-l", c.log(), "-w", "-o", c.opts, "start"); err != nil {
		return fmt.Errorf("starting throwaway cluster: %w", err)
	}
	return nil
}

// Stop stops the server with a fast shutdown and deletes the directory. The
// directory is deleted even if the server could not be stopped.
func (c *Cluster) Stop() error {
	err := c.Shutdown()
	if rmErr := os.RemoveAll(c.dir); rmErr != nil {
		err = errors.Join(err, fmt.Errorf("removing throwaway cluster: %w", rmErr))
	}
	return err
}

// Command returns the pg_ctl command line that does action ("start" or
// "stop") to the cluster, for a person to run.
func (c *Cluster) Command(action string) string {
	cmd := fmt.Sprintf("%s -D %s -l %s", c.pgCtl, c.data(), c.log())
	if action == "start" {
		cmd += fmt.Sprintf(" -o \"%s\"", c.opts)
	}
	cmd += " " + action
	if c.asOwner {
		cmd = "runuser -u postgres -- " + cmd
	}
	return cmd
}

func (c *Cluster) data() string { return filepath.Join(c.dir, "data") }
func (c *Cluster) log() string  { return filepath.Join(c.dir, "log") }

func (c *Cluster) urlOf(database string) string {
	return "postgres://postgres@" + net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)) + "/" + database + "?sslmode=disable"
}

// run runs a PostgreSQL program in the cluster's directory, as the postgres
// user if c.asOwner, and returns its output in the error if it fails.
func (c *Cluster) run(prog string, args ...string) error {
	if c.asOwner {
		args = append([]string{"-u", "postgres", "--", prog}, args...)
		prog = "runuser"
	}
	cmd := exec.Command(prog, args...)
	cmd.Dir = c.dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("running %s: %w\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	return nil
}

// findBinaries returns the paths of initdb and pg_ctl, taken from one
// directory: the one of initdb on PATH, else the newest
// /usr/lib/postgresql/VERSION/bin.
func findBinaries() (initdb, pgCtl string, err error) {
	var dirs []string
	if p, err := exec.LookPath("initdb"); err == nil {
		dirs = append(dirs, filepath.Dir(p))
	}
	versions, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(versions, func(a, b string) int { // newest first
		va, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(a)), 64)
		vb, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(b)), 64)
		return cmp.Compare(vb, va)
	})
	for _, d := range append(dirs, versions...) {
		d, err := filepath.Abs(d) // runuser may not keep PATH
		if err != nil {
			continue
		}
		initdb, pgCtl = filepath.Join(d, "initdb"), filepath.Join(d, "pg_ctl")
		if isExecutable(initdb) && isExecutable(pgCtl) {
			return initdb, pgCtl, nil
		}
	}
	return "", "", ErrNoBinaries
}

// isExecutable reports whether path is an executable regular file.
func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// chownToPostgres gives dir to the postgres OS user.
func chownToPostgres(dir string) error {
	u, err := user.Lookup("postgres")
	if err != nil {
		return fmt.Errorf("looking up the postgres user to run initdb as (initdb refuses to run as root): %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return fmt.Errorf("giving %s to the postgres user: %w", dir, err)
	}
	return nil
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// createDatabase creates database name on the server at adminURL.
func createDatabase(adminURL, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connecting to throwaway cluster: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("creating database %s: %w", name, err)
	}
	return nil
}
