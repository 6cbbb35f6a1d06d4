package dbtest

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

// errNoBinaries means initdb and pg_ctl were not found.
var errNoBinaries = errors.New("initdb and pg_ctl not found on PATH or under /usr/lib/postgresql/*/bin")

// cluster is a throwaway PostgreSQL cluster living in a temporary directory.
type cluster struct {
	dir     string // temporary directory: data/, log and the unix socket
	pgCtl   string // path of pg_ctl
	url     string // URL of its "test" database
	asOwner bool   // run commands as the postgres OS user (we are root)
}

// startCluster creates and starts a throwaway cluster with a "test" database.
func startCluster() (*cluster, error) {
	initdb, pgCtl, err := findBinaries()
	if err != nil {
		return nil, err
	}
	c := &cluster{pgCtl: pgCtl, asOwner: os.Geteuid() == 0}

	// initdb refuses to run as root, so root runs it as the postgres user,
	// which must own the directory and be able to reach it: use /tmp.
	base := ""
	if c.asOwner {
		base = "/tmp"
	}
	if c.dir, err = os.MkdirTemp(base, "dbtest-"); err != nil {
		return nil, fmt.Errorf("creating temporary directory: %w", err)
	}
	if c.asOwner {
		if err := chownToPostgres(c.dir); err != nil {
			os.RemoveAll(c.dir)
			return nil, err
		}
	}

	port, err := freePort()
	if err != nil {
		os.RemoveAll(c.dir)
		return nil, err
	}
	data := filepath.Join(c.dir, "data")
	if err := c.run(initdb, "-D", data, "-U", "postgres", "--auth=trust",
		"-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		os.RemoveAll(c.dir)
		return nil, fmt.Errorf("creating throwaway cluster: %w", err)
	}
	opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -k '%s' -c fsync=off", port, c.dir)
	if err := c.run(pgCtl, "-D", data, "-l", filepath.Join(c.dir, "log"), "-w", "-o", opts, "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(c.dir, "log"))
		os.RemoveAll(c.dir)
		return nil, fmt.Errorf("starting throwaway cluster: %w\nserver log:\n%s", err, log)
	}

	hostPort := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	admin := "postgres://postgres@" + hostPort + "/postgres?sslmode=disable"
	if err := createDatabase(admin, "test"); err != nil {
		c.stop()
		return nil, err
	}
	c.url = "postgres://postgres@" + hostPort + "/test?sslmode=disable"
	return c, nil
}

// stop stops the cluster and removes its directory.
func (c *cluster) stop() error {
	err := c.run(c.pgCtl, "-D", filepath.Join(c.dir, "data"), "-m", "fast", "stop")
	if err != nil {
		err = fmt.Errorf("stopping throwaway cluster: %w", err)
	}
	if rmErr := os.RemoveAll(c.dir); rmErr != nil {
		err = errors.Join(err, fmt.Errorf("removing throwaway cluster: %w", rmErr))
	}
	return err
}

// run runs a PostgreSQL program in the cluster's directory, as the postgres
// user if c.asOwner, and returns its output in the error if it fails.
func (c *cluster) run(prog string, args ...string) error {
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
	dirs = append(dirs, versions...)
	for _, d := range dirs {
		d, err := filepath.Abs(d) // runuser may not keep PATH
		if err != nil {
			continue
		}
		initdb, pgCtl = filepath.Join(d, "initdb"), filepath.Join(d, "pg_ctl")
		if isExecutable(initdb) && isExecutable(pgCtl) {
			return initdb, pgCtl, nil
		}
	}
	return "", "", errNoBinaries
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
