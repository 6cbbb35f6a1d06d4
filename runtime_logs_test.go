package weir_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirq/weir"
)

// linesPerSecond is the documented rate limit: at most 10 lines a second for
// each message, level and kind.
const linesPerSecond = 10

// jsonLogs is a Config.Logger's output as JSON lines, for tests to read back.
type jsonLogs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write takes one record: slog's JSON handler writes each in one call.
func (l *jsonLogs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *jsonLogs) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func (l *jsonLogs) raw() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// records returns the records whose message is msg, each as its JSON object
// (numbers as json.Number).
func (l *jsonLogs) records(t testing.TB, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(l.raw()) {
		d := json.NewDecoder(strings.NewReader(line))
		d.UseNumber()
		var rec map[string]any
		if err := d.Decode(&rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// one returns the single record with message msg whose job_id is id (any record
// with msg when id is 0), failing unless there is exactly one, at level, with
// every attribute of want (compared as printed).
func (l *jsonLogs) one(t testing.TB, level slog.Level, msg string, id int64, want map[string]any) map[string]any {
	t.Helper()
	var found []map[string]any
	for _, rec := range l.records(t, msg) {
		if id == 0 || fmt.Sprint(rec["job_id"]) == itoa(id) {
			found = append(found, rec)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d lines %q for job %d, want 1; the log:\n%s", len(found), msg, id, l.raw())
	}
	rec := found[0]
	if rec["level"] != level.String() {
		t.Errorf("line %q at %v, want %v", msg, rec["level"], level)
	}
	for k, v := range want {
		if got, ok := rec[k]; !ok || fmt.Sprint(got) != fmt.Sprint(v) {
			t.Errorf("line %q: %s = %v, want %v; the line: %v", msg, k, got, v, rec)
		}
	}
	return rec
}

// jobAttrs are the attributes every line about job row under lease token has.
func jobAttrs(row *weir.JobRow, token int64) map[string]any {
	return map[string]any{
		"job_id": row.ID, "kind": row.Kind, "queue": row.Queue, "attempt": row.Attempt,
		"max_attempts": row.MaxAttempts, "lease_token": token,
	}
}

// with returns m with the pairs kv added.
func with(m map[string]any, kv ...any) map[string]any {
	for i := 0; i < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

// checkLimited checks that of n lines msg about kind, each was logged or
// counted in a summary line, and that no more were logged than the limit
// allows in the elapsed time.
func checkLimited(t testing.TB, logs *jsonLogs, msg, kind string, n int, elapsed time.Duration) {
	t.Helper()
	logged := len(logs.records(t, msg))
	suppressed := 0
	for _, rec := range logs.records(t, "weir: suppressed similar lines") {
		if rec["message"] != msg || rec["key"] != kind {
			continue
		}
		k, err := rec["suppressed"].(json.Number).Int64()
		if err != nil || k <= 0 {
			t.Fatalf("summary line %v", rec)
		}
		suppressed += int(k)
	}
	// Each window of a second, the first opening with the first line, logs at
	// most the limit.
	most := linesPerSecond * (int(elapsed/time.Second) + 1)
	if logged+suppressed != n || logged > most {
		t.Fatalf("%q: %d lines logged and %d counted as suppressed in %s, want %d in all and at most %d logged",
			msg, logged, suppressed, elapsed, n, most)
	}
}

// TestFailuresAreLogged checks that a failed attempt is one WARN line with the
// job's attributes, its error and retry time (and the stack of a panic), and a
// discarded job one ERROR line; that no line holds a job's args; and that when
// one kind fails a thousand times, every failure is either logged, at most ten
// lines a second, or counted in a summary line.
func TestFailuresAreLogged(t *testing.T) {
	t.Parallel()
	begin := time.Now()
	b := setup(t, nil)
	logs := &jsonLogs{}
	cfg := fastConfig(probeWorkers(func(_ context.Context, job *weir.Job[probeArgs]) error {
		switch {
		case job.Args.Name == "panic":
			panic("handler exploded")
		case strings.HasPrefix(job.Args.Name, "many"):
			return errors.New("many fail")
		}
		return errors.New("failed on purpose: " + job.Args.Name)
	}), map[string]weir.QueueConfig{weir.DefaultQueue: {MaxWorkers: 50}})
	cfg.Logger = logs.logger()
	cfg.RetryPolicy = retryLater{}
	c := b.start(t, cfg)

	fail := b.insertProbe(t, "retry-me", &weir.InsertOpts{MaxAttempts: 5})
	boom := b.insertProbe(t, "panic", &weir.InsertOpts{MaxAttempts: 5})
	last := b.insertProbe(t, "last-try", &weir.InsertOpts{MaxAttempts: 1})
	waitFor(t, 30*time.Second, "the three outcomes", func() bool {
		return b.job(t, fail).State == weir.JobStateRetryable && b.job(t, boom).State == weir.JobStateRetryable &&
			b.job(t, last).State == weir.JobStateDiscarded
	})
	row := func(id int64) (*weir.JobRow, int64) { j := b.job(t, id); return j, j.LeaseToken }

	// Many failures of one kind, with args that must stay out of the log.
	const many = 1000
	params := make([]weir.InsertManyParams, many)
	for i := range params {
		params[i] = weir.InsertManyParams{Args: probeArgs{Name: "many-s3cret"}, InsertOpts: &weir.InsertOpts{MaxAttempts: 5}}
	}
	if _, err := b.client.InsertMany(testCtx(t), params); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the many failures", func() bool {
		return b.count(t, "args->>'name' = 'many-s3cret' AND state = 'retryable'") == many
	})
	if err := c.Stop(testCtx(t)); err != nil { // flushes the summaries
		t.Fatal(err)
	}
	elapsed := time.Since(begin)

	const failed = "weir: job attempt failed"
	for _, rec := range logs.records(t, failed) {
		if _, ok := rec["retry_at"]; !ok {
			t.Errorf("a failed attempt without retry_at: %v", rec)
		}
	}
	// The flood came after these three: they are among a second's first ten
	// lines, so the limit did not hold them back.
	j, token := row(fail)
	logs.one(t, slog.LevelWarn, failed, fail, with(jobAttrs(j, token), "error", "failed on purpose: retry-me"))
	j, token = row(boom)
	rec := logs.one(t, slog.LevelWarn, failed, boom, with(jobAttrs(j, token), "error", "panic: handler exploded"))
	if stack, _ := rec["stack"].(string); !strings.Contains(stack, "runtime_logs_test.go") {
		t.Errorf("the panic's stack does not show the handler: %v", rec)
	}
	j, token = row(last)
	rec = logs.one(t, slog.LevelError, "weir: job discarded", last, with(jobAttrs(j, token), "error", "failed on purpose: last-try"))
	if _, ok := rec["retry_at"]; ok {
		t.Errorf("a discarded job with a retry time: %v", rec)
	}

	checkLimited(t, logs, failed, "probe", many+2, elapsed)
	if strings.Contains(logs.raw(), "s3cret") {
		t.Fatal("a job's args are in the log")
	}
}

// retryLater retries a failed job in an hour, so that it stays retryable.
type retryLater struct{}

func (retryLater) NextRetry(*weir.JobRow) time.Time { return time.Now().Add(time.Hour) }

// TestLeaseLossIsLogged checks the WARN lines of a lease lost, by renewal (the
// token moved on) and by the local deadline (renewals cannot get through), each
// with its reason, and of the stale write that follows the first.
func TestLeaseLossIsLogged(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	logs := &jsonLogs{}
	returned := make(chan int64, 10)
	cfg := fastConfig(probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
		<-ctx.Done()
		defer func() { returned <- job.ID }()
		return nil
	}), nil)
	cfg.Logger = logs.logger()
	c := b.start(t, cfg)

	moved := b.insertProbe(t, "moved", nil)
	waitFor(t, 10*time.Second, "the job to run", func() bool { return b.job(t, moved).State == weir.JobStateRunning })
	row := b.job(t, moved)
	if _, err := b.pool.Exec(testCtx(t), "UPDATE "+b.schema+".weir_job SET lease_token = lease_token + 1 WHERE id = $1", moved); err != nil {
		t.Fatal(err)
	}
	<-returned
	waitFor(t, 10*time.Second, "the stale write", func() bool { return c.Stats().StaleWrites == 1 })

	locked := b.insertProbe(t, "locked", nil)
	waitFor(t, 10*time.Second, "the job to run", func() bool { return b.job(t, locked).State == weir.JobStateRunning })
	lockedRow := b.job(t, locked)
	lock := b.lockRow(t, locked)
	<-returned // cancelled at the local deadline
	b.waitForFinalizeBlockedBy(t, lock)
	if err := lock.Rollback(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the outcome", func() bool { return b.job(t, locked).State == weir.JobStateCompleted })
	// The first job, rescued meanwhile, may run again: its handler waits for
	// the shutdown's cancel.
	if err := c.StopAndCancel(testCtx(t)); err != nil {
		t.Fatal(err)
	}

	logs.one(t, slog.LevelWarn, "weir: lease lost", moved,
		with(jobAttrs(row, row.LeaseToken), "reason", "renewal found the lease gone"))
	logs.one(t, slog.LevelWarn, "weir: stale write ignored: the lease was lost", moved,
		with(jobAttrs(row, row.LeaseToken), "outcome", "completed"))
	logs.one(t, slog.LevelWarn, "weir: lease lost", locked,
		with(jobAttrs(lockedRow, lockedRow.LeaseToken), "reason", "no renewal reached the database in time"))
}

// TestLeaseLossFloodIsLimited checks that a thousand leases lost at once, their
// thousand stale writes, and the rescue of the thousand jobs once their leases
// expire, are each logged at most ten lines a second, the rest counted in
// summary lines.
func TestLeaseLossFloodIsLimited(t *testing.T) {
	t.Parallel()
	begin := time.Now()
	b := setup(t, nil)
	logs := &jsonLogs{}
	const n = 1000
	var started atomic.Int32
	cfg := fastConfig(probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
		started.Add(1)
		<-ctx.Done()
		return nil
	}), map[string]weir.QueueConfig{weir.DefaultQueue: {MaxWorkers: n, Prefetch: -1}})
	cfg.Logger = logs.logger()
	// A lease long enough that only the moved tokens lose them. Elections
	// every second (terms of 3 s): a thousand rows rescued at once need more
	// than the 200 ms a 100 ms interval leaves a batch on a loaded machine.
	cfg.HeartbeatInterval, cfg.LeaseDuration = 200*time.Millisecond, 30*time.Second
	cfg.RescueInterval = time.Second
	params := make([]weir.InsertManyParams, n)
	for i := range params {
		params[i] = weir.InsertManyParams{Args: probeArgs{Name: "flood"}}
	}
	if _, err := b.client.InsertMany(testCtx(t), params); err != nil {
		t.Fatal(err)
	}
	c := b.start(t, cfg)
	waitFor(t, time.Minute, "every handler to start", func() bool { return started.Load() == n })
	if _, err := b.pool.Exec(testCtx(t), "UPDATE "+b.schema+".weir_job SET lease_token = lease_token + 1"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "every write to come back stale", func() bool { return c.Stats().StaleWrites == n })
	// The jobs stay running under the moved tokens until their leases expire;
	// then the client, which leads, rescues them all.
	if _, err := b.pool.Exec(testCtx(t), "UPDATE "+b.schema+".weir_job SET lease_expires_at = now() - interval '1 hour'"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "every job rescued", func() bool { return c.Stats().Rescued == n })
	// The rescued jobs run again; their handlers wait for the shutdown's cancel.
	// Stop awaits the rescue's lines before it logs the summaries.
	if err := c.StopAndCancel(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(begin)
	if s := c.Stats(); s.LeasesLost != n {
		t.Fatalf("stats %+v, want %d leases lost", s, n)
	}
	checkLimited(t, logs, "weir: lease lost", "probe", n, elapsed)
	checkLimited(t, logs, "weir: stale write ignored: the lease was lost", "probe", n, elapsed)
	checkLimited(t, logs, "weir: job rescued: its lease expired", "probe", n, elapsed)
}

// TestRescueIsLogged checks that a job the leader rescues from an expired lease
// is one line with the attributes of the lost lease and the state the rescue
// left it in: WARN when it will be retried, ERROR when it was discarded.
func TestRescueIsLogged(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	logs := &jsonLogs{}
	g := newGate()
	defer g.open()
	cfg := fastConfig(probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
		g.started <- job.ID
		<-g.ch // ignores its context
		return nil
	}), map[string]weir.QueueConfig{weir.DefaultQueue: {MaxWorkers: 2, Prefetch: -1}})
	// No renewal during the test: only the forced expiry ends the leases.
	cfg.HeartbeatInterval, cfg.LeaseDuration = 10*time.Second, 60*time.Second
	cfg.Logger = logs.logger()
	c := b.start(t, cfg)
	retried := b.insertProbe(t, "retried", &weir.InsertOpts{MaxAttempts: 5})
	discarded := b.insertProbe(t, "discarded", &weir.InsertOpts{MaxAttempts: 1})
	g.expectStarted(t)
	g.expectStarted(t)
	before := map[int64]*weir.JobRow{retried: b.job(t, retried), discarded: b.job(t, discarded)}
	b.expireLease(t, retried)
	b.expireLease(t, discarded)
	const msg = "weir: job rescued: its lease expired"
	waitFor(t, 20*time.Second, "both rescues logged", func() bool { return len(logs.records(t, msg)) == 2 })
	g.open()
	if err := c.Stop(testCtx(t)); err != nil && !strings.Contains(err.Error(), "may run again") {
		t.Fatal(err)
	}
	r := before[retried]
	logs.one(t, slog.LevelWarn, msg, retried, with(jobAttrs(r, r.LeaseToken), "state", "retryable"))
	r = before[discarded]
	logs.one(t, slog.LevelError, msg, discarded, with(jobAttrs(r, r.LeaseToken), "state", "discarded"))
}

// TestLeaderChangeIsLogged checks the INFO lines of leadership won and ended,
// with the client's id and why it ended: another client took the term, and the
// client stopped.
func TestLeaderChangeIsLogged(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	logs := &jsonLogs{}
	cfg := fastConfig(probeWorkers(func(context.Context, *weir.Job[probeArgs]) error { return nil }), nil)
	cfg.ID = "logged-leader"
	cfg.Logger = logs.logger()
	c := b.start(t, cfg)
	waitFor(t, 10*time.Second, "leadership", c.IsLeader)

	// Another client takes the term over: the next renewal finds it gone.
	if _, err := b.pool.Exec(testCtx(t), "UPDATE "+b.schema+".weir_leader SET leader_id = 'usurper', expires_at = now() + interval '1 hour'"); err != nil {
		t.Fatal(err)
	}
	const ended = "weir: leadership ended"
	waitFor(t, 10*time.Second, "the term to end", func() bool { return len(logs.records(t, ended)) == 1 })
	logs.one(t, slog.LevelInfo, "weir: leadership won", 0, map[string]any{"client_id": "logged-leader"})
	logs.one(t, slog.LevelInfo, ended, 0, map[string]any{"client_id": "logged-leader", "reason": "another client leads"})

	// Win again, then stop.
	if _, err := b.pool.Exec(testCtx(t), "DELETE FROM "+b.schema+".weir_leader"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "leadership again", c.IsLeader)
	if err := c.Stop(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, rec := range logs.records(t, ended) {
		if rec["level"] != "INFO" || rec["client_id"] != "logged-leader" {
			t.Errorf("line %v", rec)
		}
		reasons = append(reasons, fmt.Sprint(rec["reason"]))
	}
	if fmt.Sprint(reasons) != "[another client leads stopping]" || len(logs.records(t, "weir: leadership won")) != 2 {
		t.Fatalf("ended %q; the log:\n%s", reasons, logs.raw())
	}
}

// TestPlainDrainLogsNoLockWarning: a drain that nothing else touches logs no
// warning about a segment of the ready list locked by another transaction,
// though the leader compacts the list while claims, which lock its segments
// too, run. Jobs are inserted while the client drains them, so that the
// segments written to and emptied change every second. (That a segment a
// transaction keeps locked is still warned about is internal/maintenance's
// TestCompactWarnsWhileSegmentStaysLocked.)
func TestPlainDrainLogsNoLockWarning(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	// The list on, as under a held snapshot: a plain drain with it off
	// does not compact.
	if err := b.driver.ReadyListOn(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	filenodes := func() string {
		t.Helper()
		var s string
		if err := b.pool.QueryRow(testCtx(t), `SELECT string_agg(pg_relation_filenode(c.oid)::text, ' ' ORDER BY c.relname)
			FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
			WHERE s.nspname = $1 AND c.relname LIKE 'weir\_ready\_%' AND c.relkind = 'r'`, b.schema).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := filenodes()
	logs := &jsonLogs{}
	c := b.start(t, &weir.Config{
		Workers: probeWorkers(func(context.Context, *weir.Job[probeArgs]) error { return nil }),
		Queues:  map[string]weir.QueueConfig{weir.DefaultQueue: {MaxWorkers: 100}},
		Logger:  logs.logger(),
	})
	// Jobs go in until a segment was compacted (its file changed), so that
	// compactions ran while the client claimed.
	const per, most = 1000, 400_000
	batch := make([]weir.InsertManyParams, per)
	for i := range batch {
		batch[i] = weir.InsertManyParams{Args: probeArgs{Name: "x"}}
	}
	n := 0
	for filenodes() == before {
		if n >= most {
			t.Fatalf("no segment of the ready list was compacted while %d jobs were drained", n)
		}
		if _, err := b.client.InsertMany(testCtx(t), batch); err != nil {
			t.Fatal(err)
		}
		n += per
	}
	waitFor(t, 2*time.Minute, "the drain", func() bool { return c.Stats().Finalized >= int64(n) })
	if err := c.Stop(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	const msg = "weir: maintenance: a segment of the ready list is locked by another transaction; " +
		"claims slow down while it holds the lock and a snapshot is held open"
	if recs := logs.records(t, msg); len(recs) != 0 {
		t.Fatalf("a plain drain warned %d times: %v", len(recs), recs)
	}
}
