package pgcluster

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrNoPgBouncer is returned by StartPgBouncer when pgbouncer is not
// installed (the Debian package pgbouncer puts it in /usr/sbin).
var ErrNoPgBouncer = errors.New("pgbouncer not found on PATH or in /usr/sbin (Debian: apt-get install pgbouncer)")

// PgBouncerOptions says how to run a PgBouncer.
type PgBouncerOptions struct {
	// PoolSize is the number of server connections per database and user
	// (default_pool_size); 20 if 0.
	PoolSize int
}

// PgBouncer is a PgBouncer started by StartPgBouncer, in transaction mode, in
// front of one PostgreSQL server. Its methods must not be called
// concurrently, except Exited.
type PgBouncer struct {
	dir     string // temporary directory: ini, userlist, log, pid
	bin     string
	port    int
	target  *url.URL // the server's URL, as given
	asOwner bool
	cmd     *exec.Cmd
	exited  chan struct{} // closed when cmd ended
}

// StartPgBouncer starts a PgBouncer on a free port of 127.0.0.1 in front of
// the server serverURL names (its host and port; every database of the server
// is reachable). It runs in transaction mode and resets each server
// connection with DISCARD ALL after every transaction (server_reset_query_always),
// so that a client that relies on session state (a prepared statement, a
// session advisory lock, a SET) fails at once. Authentication is trust for
// the user serverURL names, which must need no password. As root, pgbouncer
// (which refuses root) runs as the postgres OS user, like pg_ctl. It returns
// ErrNoPgBouncer if pgbouncer is not installed. Stop stops it.
func StartPgBouncer(serverURL string, o PgBouncerOptions) (*PgBouncer, error) {
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if bin = "/usr/sbin/pgbouncer"; !isExecutable(bin) {
			return nil, ErrNoPgBouncer
		}
	}
	target, err := url.Parse(serverURL)
	if err != nil || target.Host == "" || (target.Scheme != "postgres" && target.Scheme != "postgresql") {
		return nil, errors.New("pgbouncer: the server's connection string is not a postgres:// URL with a host")
	}
	if _, set := target.User.Password(); set {
		return nil, errors.New("pgbouncer: the server's URL holds a password; the test PgBouncer only does trust authentication")
	}
	b := &PgBouncer{bin: bin, target: target, asOwner: os.Geteuid() == 0}
	base := ""
	if b.asOwner {
		base = "/tmp"
	}
	if b.dir, err = os.MkdirTemp(base, "pgbouncer-"); err != nil {
		return nil, fmt.Errorf("pgbouncer: creating temporary directory: %w", err)
	}
	if err := b.writeConfig(o); err != nil {
		os.RemoveAll(b.dir)
		return nil, err
	}
	if b.asOwner {
		for _, p := range []string{b.dir, b.ini(), b.userlist()} {
			if err := chownToPostgres(p); err != nil {
				os.RemoveAll(b.dir)
				return nil, err
			}
		}
	}
	if err := b.start(); err != nil {
		os.RemoveAll(b.dir)
		return nil, err
	}
	return b, nil
}

func (b *PgBouncer) ini() string      { return filepath.Join(b.dir, "pgbouncer.ini") }
func (b *PgBouncer) userlist() string { return filepath.Join(b.dir, "userlist.txt") }

// Log returns the path of PgBouncer's log file.
func (b *PgBouncer) Log() string { return filepath.Join(b.dir, "pgbouncer.log") }

func (b *PgBouncer) writeConfig(o PgBouncerOptions) error {
	var err error
	if b.port, err = freePort(); err != nil {
		return err
	}
	host, port := b.target.Hostname(), b.target.Port()
	if port == "" {
		port = "5432"
	}
	user := b.target.User.Username()
	if user == "" {
		user = "postgres"
	}
	poolSize := o.PoolSize
	if poolSize <= 0 {
		poolSize = 20
	}
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
server_reset_query = DISCARD ALL
server_reset_query_always = 1
default_pool_size = %d
max_client_conn = 2000
server_login_retry = 1
ignore_startup_parameters = extra_float_digits
logfile = %s
pidfile = %s
`, host, port, b.port, b.userlist(), poolSize, b.Log(), filepath.Join(b.dir, "pgbouncer.pid"))
	if err := os.WriteFile(b.ini(), []byte(ini), 0o600); err != nil {
		return fmt.Errorf("pgbouncer: writing its configuration: %w", err)
	}
	if err := os.WriteFile(b.userlist(), []byte(strconv.Quote(user)+` ""`+"\n"), 0o600); err != nil {
		return fmt.Errorf("pgbouncer: writing its user list: %w", err)
	}
	return nil
}

// start runs pgbouncer and waits until it accepts connections.
func (b *PgBouncer) start() error {
	prog, args := b.bin, []string{b.ini()}
	if b.asOwner {
		args = append([]string{"-u", "postgres", "--", prog}, args...)
		prog = "runuser"
	}
	var out bytes.Buffer
	cmd := exec.Command(prog, args...)
	cmd.Dir = b.dir
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgbouncer: starting %s: %w", b.bin, err)
	}
	b.cmd, b.exited = cmd, make(chan struct{})
	exited := b.exited
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port))
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(b.Log())
			return fmt.Errorf("pgbouncer exited at start: %s\n%s%s", cmd.ProcessState, out.String(), log)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b.kill()
			return fmt.Errorf("pgbouncer: not accepting connections on %s after 10 s", addr)
		}
	}
}

// Port returns the TCP port PgBouncer listens on, on 127.0.0.1.
func (b *PgBouncer) Port() int { return b.port }

// URL returns the server's URL with its host and port replaced by
// PgBouncer's, and database instead of the URL's own if not empty. The
// query parameters stay; ClientURL adds the one pgx needs.
func (b *PgBouncer) URL(database string) string {
	u := *b.target
	u.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port))
	if database != "" {
		u.Path = "/" + database
	}
	return u.String()
}

// ClientURL is URL(database) with default_query_exec_mode=cache_describe, the
// setting pgx needs through a pooler in transaction mode (docs/poolers.md).
func (b *PgBouncer) ClientURL(database string) string {
	u, _ := url.Parse(b.URL(database)) // it parsed in StartPgBouncer
	q := u.Query()
	q.Set("default_query_exec_mode", "cache_describe")
	u.RawQuery = q.Encode()
	return u.String()
}

// Exited is closed when the PgBouncer process ends (Stop, or a crash).
func (b *PgBouncer) Exited() <-chan struct{} { return b.exited }

// Restart starts PgBouncer again, on the same port, after it ended (a crash)
// or stops it first.
func (b *PgBouncer) Restart() error {
	b.kill()
	return b.start()
}

// Stop stops PgBouncer at once (clients' connections are closed) and
// deletes its directory.
func (b *PgBouncer) Stop() error {
	b.kill()
	if err := os.RemoveAll(b.dir); err != nil {
		return fmt.Errorf("pgbouncer: removing its directory: %w", err)
	}
	return nil
}

// kill stops the process, if it runs, and waits for it. pgbouncer's own pid
// (not runuser's) is read from its pid file; SIGTERM is its immediate
// shutdown.
func (b *PgBouncer) kill() {
	select {
	case <-b.exited:
		return
	default:
	}
	// runuser, signalled, waits 2 s before it kills its child: signal
	// pgbouncer itself, and runuser ends with it.
	signalled := false
	if pid, err := os.ReadFile(filepath.Join(b.dir, "pgbouncer.pid")); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(pid))); err == nil && n > 0 {
			signalled = syscall.Kill(n, syscall.SIGTERM) == nil
		}
	}
	if !signalled {
		_ = b.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-b.exited:
	case <-time.After(10 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.exited
	}
}
