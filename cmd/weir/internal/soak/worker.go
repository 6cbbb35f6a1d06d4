package soak

// The worker process of a soak: Run starts it with Config.WorkerCommand, which
// re-executes the weir binary (as `weir soak --worker --worker-name NAME
// ...`, with the database URL in WEIR_DATABASE_URL) to call RunWorker. A
// worker runs a client on the soak's queue with the probe handler, prints
// "ready" on stdout once started, and on SIGTERM (or SIGINT) stops gracefully
// within its stop budget and prints one "stop {json}" line, its stopReport. A
// second signal stops it hard (StopAndCancel). When its standard input closes
// (the orchestrator is gone) it stops the same way.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirq/weir"
	"github.com/weirq/weir/cmd/weir/internal/pgurl"
	"github.com/weirq/weir/weirdriver/weirpgx"
)

// soakQueue is the queue the soak's jobs go to.
const soakQueue = "soak"

// The periodic workload: every worker declares the same schedule, which fires
// every second into a queue nobody works; the checks read its jobs' slots.
const (
	soakPeriodicName  = "soak.tick"
	soakPeriodicQueue = "soak-periodic"
)

// soakTickArgs are the periodic job's arguments.
type soakTickArgs struct{}

func (soakTickArgs) Kind() string { return "weir.soak.tick" }

// soakPeriodic is the periodic job every worker declares. It catches up every
// missed slot, so that a slot is missing only if weir lost it.
var soakPeriodic = weir.PeriodicJob{
	Name: soakPeriodicName, Schedule: "* * * * * *", CatchUp: 1000,
	Args: func() (weir.JobArgs, *weir.InsertOpts) {
		return soakTickArgs{}, &weir.InsertOpts{Queue: soakPeriodicQueue}
	},
}

// The probe's modes: what a probe job does when it runs.
const (
	modeOK       = "ok"       // sleeps ms, honouring its context, and succeeds
	modeFail     = "fail"     // its first attempt fails; later ones succeed
	modeOverrun  = "overrun"  // its first attempt outlasts its timeout, which cancels it
	modeStubborn = "stubborn" // sleeps ms ignoring its context, past its timeout, then succeeds
	modeTx       = "tx"       // sleeps ms, then writes its end and completes its job in one transaction
)

// soakProbeArgs are a probe job's arguments.
type soakProbeArgs struct {
	Mode string `json:"mode"`
	MS   int    `json:"ms"`
	// Key is the job's key under the queue's limit per key; 0: none.
	Key int `json:"key,omitempty"`
}

func (soakProbeArgs) Kind() string { return "weir.soak.probe" }

// soakProbe is the probe handler. Every execution writes its start to
// soak_exec, committed before the work begins, and its end (with what the
// handler is about to return), committed before the handler returns.
type soakProbe struct {
	pool    *pgxpool.Pool
	name    string
	pid     int
	timeout time.Duration // the timeout of overrun and stubborn jobs
	start   string        // the audit statements
	end     string

	mu      sync.Mutex
	running map[leaseRef]bool // handlers that have not returned
	// deadline is the stop's deadline once a stop began; handlers that return
	// after it are late: abandoned, by the contract, like those still running.
	deadline time.Time
	late     []leaseRef
}

func newSoakProbe(pool *pgxpool.Pool, schema, name string, timeout time.Duration) *soakProbe {
	table := pgx.Identifier{schema, "soak_exec"}.Sanitize()
	return &soakProbe{
		pool: pool, name: name, pid: os.Getpid(), timeout: timeout, running: map[leaseRef]bool{},
		// The nonce makes a retried insert of the same start idempotent (its
		// first try may have committed before the connection dropped), while two
		// handlers running under one lease would still leave two rows.
		// progress_lease is the lease named by the progress the attempt
		// started with (soakProgress), NULL when there was none.
		start: "INSERT INTO " + table + ` AS x (job_id, lease_token, attempt, worker, pid, mode, nonce, progress_lease)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
			ON CONFLICT (job_id, lease_token, nonce) DO UPDATE SET nonce = x.nonce RETURNING id`,
		// An end already written (by a transaction that completed the job,
		// whose commit's reply was lost) stays.
		// The nonce as well as the id: after a failover to an asynchronous
		// standby the id sequence goes back, and an execution whose start row
		// was lost must not end another execution's row that got its id.
		end: "UPDATE " + table + " SET ended_at = clock_timestamp(), result = $2 WHERE id = $1 AND nonce = $3 AND ended_at IS NULL",
	}
}

// Timeout implements weir.WorkerWithTimeout: overrun and stubborn jobs get the
// short timeout they are meant to outlast.
func (p *soakProbe) Timeout(job *weir.JobRow) time.Duration {
	var args soakProbeArgs
	if json.Unmarshal(job.Args, &args) == nil && (args.Mode == modeOverrun || args.Mode == modeStubborn) {
		return p.timeout
	}
	return 0
}

// Work implements weir.Worker. Every error it returns names the lease token
// (token=N), so that the checks can tell whose error an outcome carries.
func (p *soakProbe) Work(ctx context.Context, job *weir.Job[soakProbeArgs]) error {
	ref := leaseRef{job.ID, job.LeaseToken}
	p.mu.Lock()
	p.running[ref] = true
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.running, ref)
		if !p.deadline.IsZero() && !time.Now().Before(p.deadline) {
			p.late = append(p.late, ref)
		}
		p.mu.Unlock()
	}()

	var nonceBytes [8]byte
	_, _ = rand.Read(nonceBytes[:])
	nonce := hex.EncodeToString(nonceBytes[:])
	var id int64
	err := retryAudit(ctx, func(ctx context.Context) error {
		return p.pool.QueryRow(ctx, p.start, job.ID, job.LeaseToken, job.Attempt, p.name, p.pid,
			job.Args.Mode, nonce, progressLease(job.Progress)).Scan(&id)
	})
	if err != nil {
		return fmt.Errorf("soak probe token=%d: audit start: %w", job.LeaseToken, err)
	}
	// Every attempt records its lease as progress, after its start is
	// audited: the renewals and the outcome write it under this lease, and
	// the check holds each later attempt to seeing only an earlier lease's.
	if err := weir.SetProgress(ctx, soakProgress{Lease: job.LeaseToken}); err != nil {
		return fmt.Errorf("soak probe token=%d: set progress: %w", job.LeaseToken, err)
	}
	result, workErr := p.work(ctx, job)
	if job.Args.Mode == modeTx && workErr == nil {
		// The end and the job's completion commit together, or neither does
		// (G3 for the handler's own writes: a stale lease's end never commits).
		if workErr = p.completeInTx(ctx, id, nonce, job); workErr == nil {
			return nil
		}
		result = "tx: " + workErr.Error()
		if errors.Is(workErr, weir.ErrLeaseLost) {
			result = "lease lost"
		}
	}
	// The end is written even when the handler's context was cancelled, since
	// the handler is about to return; a handler that cannot write it returns
	// an error instead.
	endCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := retryAudit(endCtx, func(ctx context.Context) error {
		_, err := p.pool.Exec(ctx, p.end, id, result, nonce)
		return err
	}); err != nil {
		return fmt.Errorf("soak probe token=%d: audit end: %w", job.LeaseToken, err)
	}
	return workErr
}

// soakProgress is the progress every probe attempt records: its lease token.
type soakProgress struct {
	Lease int64 `json:"lease"`
}

// progressLease returns the lease named by progress, or nil when there is none
// or it is not a probe's (the check reports a lease of 0 as not one that ran).
func progressLease(progress json.RawMessage) *int64 {
	if progress == nil {
		return nil
	}
	var p soakProgress
	if err := json.Unmarshal(progress, &p); err != nil {
		p.Lease = 0
	}
	return &p.Lease
}

// completeInTx writes the execution's end, result ok, and completes the job in
// one transaction. Its error names the lease token.
func (p *soakProbe) completeInTx(ctx context.Context, id int64, nonce string, job *weir.Job[soakProbeArgs]) error {
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, p.end, id, "ok", nonce); err != nil {
			return err
		}
		return weir.JobCompleteTx(ctx, tx, job.JobRow)
	})
	if err != nil {
		return fmt.Errorf("soak probe token=%d: complete in a transaction: %w", job.LeaseToken, err)
	}
	return nil
}

// work does what the job's mode says, and returns the result to record and
// the error to return.
func (p *soakProbe) work(ctx context.Context, job *weir.Job[soakProbeArgs]) (string, error) {
	d := time.Duration(job.Args.MS) * time.Millisecond
	switch job.Args.Mode {
	case modeFail:
		if job.Attempt == 1 {
			return "failed", fmt.Errorf("soak probe token=%d: planned failure of the first attempt", job.LeaseToken)
		}
	case modeOverrun:
		if job.Attempt == 1 {
			d = 10 * p.timeout
		}
	case modeStubborn:
		time.Sleep(d) // ignores every cancellation
		return "ok", nil
	}
	if d <= 0 {
		return "ok", nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return "ok", nil
	case <-ctx.Done():
		cause := context.Cause(ctx)
		return causeName(cause), fmt.Errorf("soak probe token=%d: %w", job.LeaseToken, cause)
	}
}

// causeName is the result a handler records when its context was cancelled.
func causeName(cause error) string {
	switch {
	case errors.Is(cause, weir.ErrShutdown):
		return "shutdown"
	case errors.Is(cause, weir.ErrJobTimeout):
		return "timeout"
	case errors.Is(cause, weir.ErrLeaseLost):
		return "lease lost"
	case errors.Is(cause, weir.ErrJobCancelRequested):
		return "cancel requested"
	}
	return "cancelled"
}

// retryAudit runs an audit statement, trying again when it fails while ctx
// lasts, up to 50 times, 20 ms apart growing to 100 ms: a connection the
// soak terminated fails once, and a connection kill terminates every idle
// connection of the pool at once, each of which then fails one try before
// the pool opens a fresh one. A handler's end must be recorded: without it
// the check counts the handler until its lease ended, which, under a limit
// that counts handlers, is after the next job of its slot may have started.
func retryAudit(ctx context.Context, stmt func(context.Context) error) error {
	var err error
	for try := range 50 {
		if try > 0 {
			t := time.NewTimer(min(time.Duration(try)*20*time.Millisecond, 100*time.Millisecond))
			select {
			case <-ctx.Done():
				t.Stop()
				return errors.Join(err, context.Cause(ctx))
			case <-t.C:
			}
		}
		if err = stmt(ctx); err == nil || ctx.Err() != nil {
			return err
		}
	}
	return err
}

// stopping tells the probe the stop's deadline.
func (p *soakProbe) stopping(deadline time.Time) {
	p.mu.Lock()
	p.deadline = deadline
	p.mu.Unlock()
}

// abandoned lists the handlers that had not returned by the stop's deadline.
func (p *soakProbe) abandoned() []leaseRef {
	p.mu.Lock()
	defer p.mu.Unlock()
	refs := slices.Clone(p.late)
	for ref := range p.running {
		refs = append(refs, ref)
	}
	return refs
}

// workerAppName is the application_name of a worker's sessions; the
// connection-kill fault terminates every session whose name starts with
// workerAppPrefix.
func workerAppName(schema, name string) string { return workerAppPrefix(schema) + name }

func workerAppPrefix(schema string) string { return "weir-soak:" + schema + ":w" }

// RunWorker is the worker process of cfg; stdin is the pipe the orchestrator
// holds open. It returns when it has stopped.
func RunWorker(ctx context.Context, cfg WorkerConfig, stdin io.Reader, stdout, stderr io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("soak worker: %v", err)
	}
	// Its own channel, so that it sees the second signal too (main's context
	// only sees the first).
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGTERM, os.Interrupt)
	defer signal.Stop(signals)

	pcfg, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return fmt.Errorf("database URL does not parse: %s", pgurl.Redact(pgurl.ParseReason(err), cfg.URL, ""))
	}
	pcfg.ConnConfig.RuntimeParams["application_name"] = workerAppName(cfg.Schema, cfg.Name)
	pcfg.MaxConns = int32(min(cfg.Concurrency, 16) + 4)
	startCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(startCtx, pcfg)
	if err != nil {
		return fmt.Errorf("soak worker %s: %s", cfg.Name, pgurl.Redact(err.Error(), cfg.URL, pcfg.ConnConfig.Password))
	}
	// The pool is not closed: Close waits for connections in use, which an
	// abandoned handler may hold. The process exits right after the stop.
	driver, err := weirpgx.New(pool, &weirpgx.Config{Schema: cfg.Schema})
	if err != nil {
		return err
	}
	probe := newSoakProbe(pool, cfg.Schema, cfg.Name, cfg.JobTimeout)
	workers := weir.NewWorkers()
	if err := weir.AddWorkerSafely[soakProbeArgs](workers, probe); err != nil {
		return err
	}
	client, err := weir.NewClient(driver, &weir.Config{
		ID:                 cfg.Name,
		Workers:            workers,
		Queues:             map[string]weir.QueueConfig{soakQueue: soakQueueConfig(cfg.WorkerSettings)},
		PeriodicJobs:       []weir.PeriodicJob{soakPeriodic},
		Logger:             slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		LeaseDuration:      cfg.Lease,
		HeartbeatInterval:  cfg.Heartbeat,
		RescueInterval:     cfg.Rescue,
		FetchPollInterval:  200 * time.Millisecond,
		PollOnly:           cfg.PollOnly,
		RetryPolicy:        weir.ExponentialBackoff{Base: 100 * time.Millisecond, Max: 2 * time.Second},
		CompletedRetention: -1,
		CancelledRetention: -1,
		DiscardedRetention: -1,
	})
	if err != nil {
		return err
	}
	if err := client.Start(startCtx); err != nil {
		return fmt.Errorf("soak worker %s: %s", cfg.Name, pgurl.Redact(err.Error(), cfg.URL, pcfg.ConnConfig.Password))
	}
	fmt.Fprintln(stdout, "ready")

	// The orchestrator holds our standard input open; EOF means it is gone.
	orphaned := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, stdin)
		close(orphaned)
	}()
	select {
	case <-signals:
	case <-ctx.Done(): // main saw the signal first, before ours was registered
	case <-orphaned:
	}
	received := time.Now()
	probe.stopping(received.Add(cfg.StopBudget))
	stopCtx, cancelStop := context.WithDeadline(context.Background(), received.Add(cfg.StopBudget))
	defer cancelStop()
	go func() { // a second signal stops hard; the goroutine ends with the process
		select {
		case <-signals:
			_ = client.StopAndCancel(stopCtx)
		case <-stopCtx.Done():
		}
	}()
	stopErr := client.Stop(stopCtx)
	took := time.Since(received)
	stats := client.Stats()
	report := stopReport{
		Budget: cfg.StopBudget, Took: took, Abandoned: probe.abandoned(),
		StaleWrites: stats.StaleWrites, LeasesLost: stats.LeasesLost, AbandonedOutcomes: stats.Abandoned,
	}
	if stopErr != nil {
		report.Error = stopErr.Error()
		report.Unwritten = strings.Contains(report.Error, "not written")
		report.BudgetOut = strings.Contains(report.Error, "not written before the deadline")
		report.UnwrittenJobs = unwrittenJobs(report.Error)
	}
	line, err := json.Marshal(report)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "stop %s\n", line)
	return nil
}

// unwrittenJobs reads the jobs a Stop's error names as having run without their
// outcomes written ("the outcomes of jobs [1 2 3] were not written").
func unwrittenJobs(stopErr string) []int64 {
	const prefix = "the outcomes of jobs ["
	i := strings.Index(stopErr, prefix)
	if i < 0 {
		return nil
	}
	list, _, ok := strings.Cut(stopErr[i+len(prefix):], "]")
	if !ok {
		return nil
	}
	var ids []int64
	for _, f := range strings.Fields(list) {
		if id, err := strconv.ParseInt(f, 10, 64); err == nil {
			ids = append(ids, id)
		}
	}
	return ids
}

// soakQueueConfig is the soak queue's configuration in every worker: its
// handlers, and the limits the run checks (G11).
func soakQueueConfig(s WorkerSettings) weir.QueueConfig {
	q := weir.QueueConfig{MaxWorkers: s.Concurrency, GlobalLimit: s.GlobalLimit}
	if s.KeyLimit > 0 {
		q.KeyLimit = weir.KeyLimit{Key: "args.key", Limit: s.KeyLimit}
	}
	return q
}
