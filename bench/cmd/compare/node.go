package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirq/weir/internal/weirbench"
)

var (
	nodeProgram = flag.String("node", "node", "the Node.js `PROGRAM` that runs graphile and pgboss (Debian's node, 20 or later)")
	nodeDir     = flag.String("node-dir", "node", "the `DIR` that holds peer.js and the packages of graphile and pgboss (bench/node, installed by its install.sh)")
)

// nodeReadyTimeout bounds a peer process's start, until it has connected.
const nodeReadyTimeout = time.Minute

// nodeSystem is a peer that runs on Node.js, graphile-worker or pg-boss: each
// client is a process of bench/node/peer.js, driven over its stdin and stdout
// (the line protocol peer.js describes). peer.js holds each peer's settings
// and says what they are when it migrates.
type nodeSystem struct {
	name   string // "graphile" or "pgboss", peer.js's name
	schema string
	table  string // the job table, in schema
	// deletes: a completed job's row is deleted (graphile-worker).
	deletes bool
	// row is W4's ceiling statement, with %s for the schema.
	row string

	info struct { // what peer.js printed once it had migrated
		Package  string            `json:"package"`
		Version  string            `json:"version"`
		Settings map[string]string `json:"settings"`
	}
}

// graphileSystem is graphile-worker: its job table is _private_jobs, and it
// deletes a job once completed.
func graphileSystem() *nodeSystem {
	return &nodeSystem{
		name: "graphile", schema: "weirbench_graphile", table: "_private_jobs", deletes: true,
		// The task's row exists once the single inserts have run (add_job makes
		// it); without it task_id is null and the insert fails, as it should.
		row: `INSERT INTO %[1]s._private_jobs (task_id, payload) VALUES ` +
			`((SELECT id FROM %[1]s._private_tasks WHERE identifier = 'noop'), '{"seq": 0}')`,
	}
}

// pgbossSystem is pg-boss: its job table is partitioned by queue, and the
// partition of queue "noop" is named from the SHA-224 of the name, as
// pg-boss's create_queue names it.
func pgbossSystem() *nodeSystem {
	sum := sha256.Sum224([]byte("noop"))
	return &nodeSystem{
		name: "pgboss", schema: "weirbench_pgboss", table: "j" + hex.EncodeToString(sum[:]),
		// Into the partitioned table, as pg-boss's own insert does.
		row: `INSERT INTO %[1]s.job (name, data, policy) VALUES ('noop', '{"seq": 0}', 'standard')`,
	}
}

func (s *nodeSystem) Name() string     { return s.name }
func (s *nodeSystem) Schema() string   { return s.schema }
func (s *nodeSystem) JobTable() string { return pgx.Identifier{s.schema, s.table}.Sanitize() }

// DeletesCompleted implements weirbench.CompletedDeleter.
func (s *nodeSystem) DeletesCompleted() bool { return s.deletes }

// RowInsert implements weirbench.RowInserter.
func (s *nodeSystem) RowInsert() string {
	return fmt.Sprintf(s.row, pgx.Identifier{s.schema}.Sanitize())
}

// nodeWorkloads are the workloads a Node.js peer runs. The others need a
// worker process of this program (W5, W6, W8), or are not asked of the peers
// (W7).
var nodeWorkloads = []string{"drain", "mixed", "latency", "latency-defaults", "bulk", "single1", "single8"}

// Runs implements weirbench.WorkloadFilter.
func (s *nodeSystem) Runs(workload string) bool { return slices.Contains(nodeWorkloads, workload) }

func (s *nodeSystem) Describe(set weirbench.Settings) string {
	if d, ok := s.info.Settings[set.String()]; ok {
		return d
	}
	return "(not known before peer.js has migrated)"
}

// peerScript returns the paths of node and of peer.js, or an error that says
// what is missing and how to install it.
func (s *nodeSystem) peerScript() (node, script string, err error) {
	node, err = exec.LookPath(*nodeProgram)
	if err != nil {
		return "", "", fmt.Errorf("%s: Node.js not found (--node %q): install Debian's nodejs and npm, then run bench/node/install.sh", s.name, *nodeProgram)
	}
	script, err = filepath.Abs(filepath.Join(*nodeDir, "peer.js"))
	if err == nil {
		_, err = os.Stat(script)
	}
	if err != nil {
		return "", "", fmt.Errorf("%s: no peer.js in --node-dir %q (run from bench/, or name bench/node): %w", s.name, *nodeDir, err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(script), "node_modules")); err != nil {
		return "", "", fmt.Errorf("%s: the Node.js packages are not installed in %s: run bench/node/install.sh", s.name, filepath.Dir(script))
	}
	return node, script, nil
}

// command is peer.js in mode for pool's database, killed if ctx ends; the
// database URL goes in the environment, not on the command line.
func (s *nodeSystem) command(ctx context.Context, pool *pgxpool.Pool, mode string, client string) (*exec.Cmd, error) {
	node, script, err := s.peerScript()
	if err != nil {
		return nil, err
	}
	url := pool.Config().ConnString()
	if !strings.HasPrefix(url, "postgres://") && !strings.HasPrefix(url, "postgresql://") {
		return nil, fmt.Errorf("%s: Node.js's driver takes the database as a URL (postgres://...), not in keyword=value form", s.name)
	}
	cmd := exec.CommandContext(ctx, node, script, s.name, mode)
	cmd.Dir = filepath.Dir(script)
	cmd.Env = append(os.Environ(),
		"WEIRBENCH_DATABASE_URL="+url,
		"WEIRBENCH_SCHEMA="+s.schema,
		// The engine waits for the connections of its application name to
		// close, so that their table statistics are flushed: peer.js's carry it.
		"WEIRBENCH_APP=weirbench_"+s.name,
		"WEIRBENCH_MAX_CONNS="+strconv.Itoa(int(pool.Config().MaxConns)),
		"WEIRBENCH_CLIENT="+client,
	)
	return cmd, nil
}

// Migrate has peer.js migrate the schema and make the queue, and keeps what it
// says of its version and settings.
func (s *nodeSystem) Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	cmd, err := s.command(ctx, pool, "migrate", "{}")
	if err != nil {
		return err
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return fmt.Errorf("%s: migrate: %w: %s", s.name, err, lastLines(stderr.String(), 5))
	}
	if stderr.Len() > 0 {
		fmt.Fprintf(os.Stderr, "%s: migrate: %s\n", s.name, lastLines(stderr.String(), 5))
	}
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &s.info); err != nil {
		return fmt.Errorf("%s: migrate: what peer.js printed is not its JSON: %w", s.name, err)
	}
	var found bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", s.JobTable()).Scan(&found); err != nil {
		return fmt.Errorf("%s: look for its job table: %w", s.name, err)
	}
	if !found {
		return fmt.Errorf("%s: no job table %s after migrating", s.name, s.JobTable())
	}
	return nil
}

// lastLines is the last n lines of s, on one line.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], " / ")
}

// Open starts a client process and waits until it has connected.
func (s *nodeSystem) Open(pool *pgxpool.Pool, cfg weirbench.ClientConfig) (weirbench.Client, error) {
	if cfg.GlobalLimit > 0 || cfg.KeyLimit > 0 {
		return nil, fmt.Errorf("%s: no limits in the benchmark's adapter", s.name)
	}
	spec, err := json.Marshal(map[string]any{
		"work": cfg.Work, "settings": cfg.Settings.String(), "workers": cfg.MaxWorkers, "onStart": cfg.OnStart != nil,
	})
	if err != nil {
		return nil, err
	}
	// The process lives as long as the client: Close ends it.
	cmd, err := s.command(context.Background(), pool, "client", string(spec))
	if err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	c := &nodeClient{name: s.name, cmd: cmd, onStart: cfg.OnStart, logger: logger,
		pending: map[int64]chan error{}, ready: make(chan struct{}), exited: make(chan struct{})}
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: start peer.js: %w", s.name, err)
	}
	var readers sync.WaitGroup
	readers.Go(func() { c.readStdout(stdout) })
	readers.Go(func() { c.readStderr(stderr) })
	go func() {
		readers.Wait()
		c.waitErr = cmd.Wait()
		c.fail(fmt.Errorf("%s: peer.js exited (%v): %s", s.name, c.waitErr, c.lastErr()))
		close(c.exited)
	}()
	select {
	case <-c.ready:
		return c, nil
	case <-c.exited:
		return nil, c.failed()
	case <-time.After(nodeReadyTimeout):
		c.Close()
		return nil, fmt.Errorf("%s: peer.js not ready within %s: %s", s.name, nodeReadyTimeout, c.lastErr())
	}
}

// nodeClient is one peer.js process. Requests carry a number, and their
// answers come back with it; the reader hands each to its waiting request.
//
// Pickup latency crosses the pipe twice: the answer to an insert (after which
// the workload records the insert's return) and the line "started <seq>" (on
// which OnStart is called) both come from the process over its stdout and are
// read by the same goroutine, so each end of the measure is late by about
// the same time, a few tens of microseconds on an idle machine, and the
// differences mostly cancel.
type nodeClient struct {
	name    string
	cmd     *exec.Cmd
	onStart func(int64)
	logger  *slog.Logger

	stdin     io.WriteCloser
	writeMu   sync.Mutex
	next      atomic.Int64
	completed atomic.Int64

	mu      sync.Mutex
	pending map[int64]chan error
	err     error    // once the process is gone
	stderr  []string // its last lines

	ready     chan struct{}
	readyOnce sync.Once
	exited    chan struct{}
	waitErr   error
	closeOnce sync.Once
}

func (c *nodeClient) readStdout(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		first, rest, _ := strings.Cut(line, " ")
		switch first {
		case "started":
			if seq, err := strconv.ParseInt(rest, 10, 64); err == nil && c.onStart != nil {
				c.onStart(seq)
			}
		case "completed":
			if n, err := strconv.ParseInt(rest, 10, 64); err == nil {
				c.completed.Store(n)
			}
		case "ready":
			c.readyOnce.Do(func() { close(c.ready) })
		default:
			id, err := strconv.ParseInt(first, 10, 64)
			if err != nil {
				c.logger.Warn(c.name+": unexpected line from peer.js", "line", line)
				continue
			}
			var answer error
			if msg, ok := strings.CutPrefix(rest, "error "); ok {
				answer = fmt.Errorf("%s: %s", c.name, msg)
			} else if rest != "ok" {
				answer = fmt.Errorf("%s: unexpected answer %q", c.name, rest)
			}
			c.mu.Lock()
			ch := c.pending[id]
			delete(c.pending, id)
			c.mu.Unlock()
			if ch != nil {
				ch <- answer
			}
		}
	}
}

// readStderr passes the process's warnings on and keeps its last lines for
// the error if it fails.
func (c *nodeClient) readStderr(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		c.mu.Lock()
		c.stderr = append(c.stderr[max(0, len(c.stderr)-4):], line)
		c.mu.Unlock()
		c.logger.Warn(line)
	}
}

func (c *nodeClient) lastErr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.stderr) == 0 {
		return "nothing on stderr"
	}
	return strings.Join(c.stderr, " / ")
}

// fail answers every pending request with err, and every later one.
func (c *nodeClient) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
	}
	for id, ch := range c.pending {
		ch <- c.err
		delete(c.pending, id)
	}
}

func (c *nodeClient) failed() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// request sends op with args and waits for its answer.
func (c *nodeClient) request(ctx context.Context, op string, args ...int64) error {
	id := c.next.Add(1)
	ch := make(chan error, 1)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return c.err
	}
	c.pending[id] = ch
	c.mu.Unlock()
	line := strconv.FormatInt(id, 10) + " " + op
	for _, a := range args {
		line += " " + strconv.FormatInt(a, 10)
	}
	c.writeMu.Lock()
	_, err := io.WriteString(c.stdin, line+"\n")
	c.writeMu.Unlock()
	if err != nil {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		return fmt.Errorf("%s: write to peer.js: %w", c.name, err)
	}
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		// The answer may still come; the channel has room for it.
		return ctx.Err()
	}
}

func (c *nodeClient) InsertMany(ctx context.Context, first int64, n int) error {
	return c.request(ctx, "insertMany", first, int64(n))
}

func (c *nodeClient) Insert(ctx context.Context, seq int64) error {
	return c.request(ctx, "insert", seq)
}

func (c *nodeClient) Start(ctx context.Context) error { return c.request(ctx, "start") }

func (c *nodeClient) Completed() int64 { return c.completed.Load() }

// Stop stops the peer's workers; peer.js answers once every completion it
// counted has been written.
func (c *nodeClient) Stop(ctx context.Context) error { return c.request(ctx, "stop") }

// Close closes the process's stdin, on which it closes its client and its
// pool and exits, and waits for it (killing it after 30 s).
func (c *nodeClient) Close() {
	c.closeOnce.Do(func() {
		_ = c.stdin.Close()
		select {
		case <-c.exited:
		case <-time.After(30 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.exited
		}
		if c.waitErr != nil {
			c.logger.Warn(c.name+": peer.js did not exit cleanly", "error", c.waitErr, "stderr", c.lastErr())
		}
	})
}
