package pgcluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// PairOptions says how to make a primary and its streaming standby.
type PairOptions struct {
	// DirPrefix starts the name of the temporary directory, which holds one
	// directory per server; "pgpair-" if empty.
	DirPrefix string
	// Database is created on the primary before the standby is made; if
	// empty, URL names the postgres database.
	Database string
	// Settings are more server settings for both servers, each "name=value"
	// without spaces.
	Settings []string
	// Sync makes the standby synchronous: a commit returns once the standby
	// has flushed it (synchronous_commit=on, synchronous_standby_names='*').
	// Otherwise it is asynchronous: a commit returns once the primary has
	// it, and the standby follows behind.
	Sync bool
}

// Pair is a throwaway primary and a streaming standby of it, each a server
// on its own free port of 127.0.0.1, made by StartPair. Its methods must not
// be called concurrently.
//
// Failover goes CrashPrimary, Promote, Rebuild: the standby becomes the
// primary, and the old primary becomes its standby again, so that it can
// happen again and again.
type Pair struct {
	dir      string // holds node0/ and node1/
	database string
	sync     bool
	nodes    [2]*Cluster
	primary  int  // index of the primary in nodes
	down     bool // the primary crashed and no standby was promoted yet
	lone     bool // nodes[1-primary] is not a running standby (after Promote, until Rebuild)
	basebkp  string
	savedCon string // the standby's primary_conninfo, while CutReplication holds
}

// pairWait bounds every wait of the Pair's methods.
const pairWait = 60 * time.Second

// StartPair makes and starts a primary configured for replication and a
// standby made from it with pg_basebackup -R, and waits until the standby
// streams (and, with Sync, is the synchronous standby). It returns
// ErrNoBinaries if initdb, pg_ctl or pg_basebackup are not installed. On an
// error, nothing is left behind.
func StartPair(o PairOptions) (*Pair, error) {
	initdb, pgCtl, err := findBinaries()
	if err != nil {
		return nil, err
	}
	p := &Pair{database: cmp.Or(o.Database, "postgres"), sync: o.Sync}
	if p.basebkp = findBasebackup(pgCtl); p.basebkp == "" {
		return nil, fmt.Errorf("%w (pg_basebackup is missing next to %s)", ErrNoBinaries, pgCtl)
	}
	asOwner := os.Geteuid() == 0
	base := ""
	if asOwner {
		base = "/tmp"
	}
	if p.dir, err = os.MkdirTemp(base, cmp.Or(o.DirPrefix, "pgpair-")); err != nil {
		return nil, fmt.Errorf("creating temporary directory: %w", err)
	}
	fail := func(err error) (*Pair, error) {
		p.Stop()
		return nil, err
	}
	if asOwner {
		if err := chownToPostgres(p.dir); err != nil {
			return fail(err)
		}
	}
	settings := append([]string{"wal_level=replica", "max_wal_senders=10", "hot_standby=on",
		"wal_keep_size=256MB", "wal_retrieve_retry_interval=100ms"}, o.Settings...)
	for i := range p.nodes {
		c := &Cluster{pgCtl: pgCtl, asOwner: asOwner, dir: filepath.Join(p.dir, "node"+strconv.Itoa(i))}
		if err := os.Mkdir(c.dir, 0o700); err != nil {
			return fail(fmt.Errorf("creating %s: %w", c.dir, err))
		}
		if asOwner {
			if err := chownToPostgres(c.dir); err != nil {
				return fail(err)
			}
		}
		if c.port, err = freePort(); err != nil {
			return fail(err)
		}
		c.opts = fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -k '%s' -c fsync=off", c.port, c.dir)
		for _, s := range settings {
			c.opts += " -c " + s
		}
		c.url = c.urlOf(p.database)
		p.nodes[i] = c
	}

	pri := p.nodes[0]
	if err := pri.run(initdb, "-D", pri.data(), "-U", "postgres", "--auth=trust",
		"-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		return fail(fmt.Errorf("creating the primary: %w", err))
	}
	hba, err := os.OpenFile(filepath.Join(pri.data(), "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err == nil {
		_, err = hba.WriteString("host replication postgres 127.0.0.1/32 trust\n")
		err = errors.Join(err, hba.Close())
	}
	if err != nil {
		return fail(fmt.Errorf("allowing replication in pg_hba.conf: %w", err))
	}
	if err := pri.StartServer(); err != nil {
		log, _ := os.ReadFile(pri.log())
		return fail(fmt.Errorf("%w\nserver log:\n%s", err, log))
	}
	if o.Database != "" {
		if err := createDatabase(pri.urlOf("postgres"), o.Database); err != nil {
			return fail(err)
		}
	}
	if err := p.makeStandby(1); err != nil {
		return fail(err)
	}
	return p, nil
}

// makeStandby makes nodes[i] a standby of the primary with a fresh
// pg_basebackup -R into its (emptied) data directory, starts it, waits until
// it streams, and with Sync makes it the synchronous standby.
func (p *Pair) makeStandby(i int) error {
	c, pri := p.nodes[i], p.nodes[p.primary]
	if err := os.RemoveAll(c.data()); err != nil {
		return fmt.Errorf("emptying the standby's data directory: %w", err)
	}
	conn := fmt.Sprintf("host=127.0.0.1 port=%d user=postgres application_name=node%d", pri.port, i)
	if err := c.run(p.basebkp, "-D", c.data(), "-d", conn, "-R", "-X", "stream", "-c", "fast", "--no-sync"); err != nil {
		return fmt.Errorf("making the standby: %w", err)
	}
	if err := c.StartServer(); err != nil {
		log, _ := os.ReadFile(c.log())
		return fmt.Errorf("%w\nserver log:\n%s", err, log)
	}
	p.lone = false
	want := "streaming"
	if p.sync {
		if err := p.exec(pri, "ALTER SYSTEM SET synchronous_standby_names = '*'"); err != nil {
			return err
		}
		if err := p.exec(pri, "SELECT pg_reload_conf()"); err != nil {
			return err
		}
		want = "sync"
	}
	return p.waitFor(pri, "the standby to stream ("+want+")", func(ctx context.Context, conn *pgx.Conn) (bool, error) {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication
			WHERE state = 'streaming' AND (NOT $1 OR sync_state = 'sync')`, p.sync).Scan(&n)
		return n > 0, err
	})
}

// Dir returns the pair's directory, which holds node0/ and node1/, each the
// directory of a server as Cluster.Dir describes it.
func (p *Pair) Dir() string { return p.dir }

// Primary returns the server that is the primary: since the last Promote,
// the promoted standby. After CrashPrimary it is down until Promote.
func (p *Pair) Primary() *Cluster { return p.nodes[p.primary] }

// Standby returns the other server: the standby, or, after Promote and until
// Rebuild, the crashed old primary.
func (p *Pair) Standby() *Cluster { return p.nodes[1-p.primary] }

// Sync reports whether the standby is synchronous.
func (p *Pair) Sync() bool { return p.sync }

// URL returns a multi-host connection string naming both servers, with
// target_session_attrs=read-write: a client connects to whichever accepts
// writes, the primary, as the superuser postgres, without a password.
func (p *Pair) URL() string {
	hosts := make([]string, len(p.nodes))
	for i, c := range p.nodes {
		hosts[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port))
	}
	return "postgres://postgres@" + strings.Join(hosts, ",") + "/" + p.database +
		"?sslmode=disable&target_session_attrs=read-write"
}

// CrashPrimary stops the primary in immediate mode, as if it crashed. With
// an asynchronous standby, what the standby had not received is lost at the
// next Promote.
func (p *Pair) CrashPrimary() error {
	if p.down {
		return errors.New("the primary is already down")
	}
	if err := p.Primary().Crash(); err != nil {
		return err
	}
	p.down = true
	return nil
}

// Promote promotes the standby after CrashPrimary and waits until it accepts
// writes. With Sync, the new primary runs without a synchronous standby
// (synchronous_standby_names is emptied) until Rebuild gives it one, so that
// its commits do not wait for a standby that does not exist yet.
func (p *Pair) Promote() error {
	if !p.down {
		return errors.New("promote: the primary is not down (CrashPrimary first)")
	}
	if p.lone {
		return errors.New("promote: there is no standby (Rebuild first)")
	}
	if err := p.ResumeReplication(); err != nil {
		return err
	}
	next := p.nodes[1-p.primary]
	if err := next.run(next.pgCtl, "-D", next.data(), "-w", "-t", "60", "promote"); err != nil {
		return fmt.Errorf("promoting the standby: %w", err)
	}
	if p.sync {
		if err := p.exec(next, "ALTER SYSTEM SET synchronous_standby_names = ''"); err != nil {
			return err
		}
	}
	if err := p.exec(next, "SELECT pg_reload_conf()"); err != nil {
		return err
	}
	if err := p.waitFor(next, "the promoted standby to accept writes", func(ctx context.Context, conn *pgx.Conn) (bool, error) {
		var recovery bool
		var names string
		err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery(), current_setting('synchronous_standby_names')").Scan(&recovery, &names)
		return !recovery && names == "", err
	}); err != nil {
		return err
	}
	p.primary = 1 - p.primary
	p.down, p.lone = false, true
	return nil
}

// Rebuild makes the crashed old primary a standby of the new one after
// Promote, with a fresh pg_basebackup, and waits until it streams (and, with
// Sync, is the synchronous standby again).
func (p *Pair) Rebuild() error {
	if !p.lone {
		return errors.New("rebuild: the standby runs already")
	}
	return p.makeStandby(1 - p.primary)
}

// CutReplication stops the standby's replication, until ResumeReplication
// or Promote: it waits until the standby has received everything the
// primary had written, then empties the standby's primary_conninfo and waits
// its WAL receiver out. It returns the time at which it began: every commit
// that returned before then is on the standby, and any that returned since
// may not be, so that with an asynchronous standby a failover loses at most
// the commits from then until the crash. With a synchronous standby, commits
// wait meanwhile.
func (p *Pair) CutReplication() (time.Time, error) {
	if p.savedCon != "" {
		return time.Time{}, errors.New("cut replication: it is cut already")
	}
	begin := time.Now()
	sb := p.Standby()
	var con, lsn string
	if err := p.query(sb, "SHOW primary_conninfo", &con); err != nil {
		return begin, err
	}
	if con == "" {
		return begin, errors.New("cut replication: the standby has no primary_conninfo")
	}
	if err := p.query(p.Primary(), "SELECT pg_current_wal_lsn()::text", &lsn); err != nil {
		return begin, err
	}
	if err := p.waitFor(sb, "the standby to receive "+lsn, func(ctx context.Context, conn *pgx.Conn) (bool, error) {
		var ok bool
		err := conn.QueryRow(ctx, "SELECT coalesce(pg_last_wal_receive_lsn() >= $1::text::pg_lsn, false)", lsn).Scan(&ok)
		return ok, err
	}); err != nil {
		return begin, err
	}
	if err := p.exec(sb, "ALTER SYSTEM SET primary_conninfo = ''"); err != nil {
		return begin, err
	}
	if err := p.exec(sb, "SELECT pg_reload_conf()"); err != nil {
		return begin, err
	}
	p.savedCon = con
	return begin, p.waitFor(sb, "the WAL receiver to stop", func(ctx context.Context, conn *pgx.Conn) (bool, error) {
		var n int
		err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_wal_receiver").Scan(&n)
		return n == 0, err
	})
}

// ResumeReplication undoes CutReplication; it does nothing if replication
// was not cut. It does not wait for the standby to catch up.
func (p *Pair) ResumeReplication() error {
	if p.savedCon == "" {
		return nil
	}
	sb := p.Standby()
	if err := p.exec(sb, "ALTER SYSTEM SET primary_conninfo = "+quote(p.savedCon)); err != nil {
		return err
	}
	if err := p.exec(sb, "SELECT pg_reload_conf()"); err != nil {
		return err
	}
	p.savedCon = ""
	return nil
}

// Stop stops both servers and deletes the directory, even if a server could
// not be stopped.
func (p *Pair) Stop() error {
	var err error
	for _, c := range p.nodes {
		if c == nil {
			continue
		}
		if _, statErr := os.Stat(filepath.Join(c.data(), "postmaster.pid")); statErr == nil {
			err = errors.Join(err, c.Shutdown())
		}
	}
	if rmErr := os.RemoveAll(p.dir); rmErr != nil {
		err = errors.Join(err, fmt.Errorf("removing throwaway pair: %w", rmErr))
	}
	return err
}

// Shutdown stops both servers and keeps the directory.
func (p *Pair) Shutdown() error {
	var err error
	for _, c := range p.nodes {
		if _, statErr := os.Stat(filepath.Join(c.data(), "postmaster.pid")); statErr == nil {
			err = errors.Join(err, c.Shutdown())
		}
	}
	return err
}

// findBasebackup returns the path of the pg_basebackup that goes with
// pgCtl: next to it, next to what it links to, or on PATH; "" if none.
func findBasebackup(pgCtl string) string {
	dirs := []string{filepath.Dir(pgCtl)}
	if real, err := filepath.EvalSymlinks(pgCtl); err == nil {
		dirs = append(dirs, filepath.Dir(real))
	}
	if onPath, err := exec.LookPath("pg_basebackup"); err == nil {
		if abs, err := filepath.Abs(onPath); err == nil {
			dirs = append(dirs, filepath.Dir(abs))
		}
	}
	for _, d := range dirs {
		if b := filepath.Join(d, "pg_basebackup"); isExecutable(b) {
			return b
		}
	}
	return ""
}

// quote quotes s as an SQL string literal.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// exec runs sql on c's postgres database, on a new connection.
func (p *Pair) exec(c *Cluster, sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.urlOf("postgres"))
	if err != nil {
		return fmt.Errorf("connecting to the server on port %d: %w", c.port, err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("%s on port %d: %w", sql, c.port, err)
	}
	return nil
}

// query runs sql on c's postgres database and scans its one row into dest.
func (p *Pair) query(c *Cluster, sql string, dest ...any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.urlOf("postgres"))
	if err != nil {
		return fmt.Errorf("connecting to the server on port %d: %w", c.port, err)
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(ctx, sql).Scan(dest...); err != nil {
		return fmt.Errorf("%s on port %d: %w", sql, c.port, err)
	}
	return nil
}

// waitFor polls cond on a connection to c every 20 ms until it holds, or
// fails after pairWait naming what, with the last error.
func (p *Pair) waitFor(c *Cluster, what string, cond func(context.Context, *pgx.Conn) (bool, error)) error {
	deadline := time.Now().Add(pairWait)
	var last error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		conn, err := pgx.Connect(ctx, c.urlOf("postgres"))
		if err == nil {
			var ok bool
			ok, err = cond(ctx, conn)
			conn.Close(context.Background())
			if err == nil && ok {
				cancel()
				return nil
			}
		}
		cancel()
		if err != nil {
			last = err
		}
		time.Sleep(20 * time.Millisecond) // polls the server, which has no signal for this
	}
	return fmt.Errorf("waiting for %s: not after %s (last error: %v)", what, pairWait, last)
}
