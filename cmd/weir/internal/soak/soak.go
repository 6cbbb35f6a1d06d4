// Package soak is weir soak: it starts worker processes of the weir binary,
// feeds them probe jobs at a fixed rate while a fault schedule restarts,
// kills and disconnects them, then drains the queue and checks the audit
// trail against the delivery contract. docs/design/reliability.md describes the
// design and the latest long run.
//
// cmd/weir turns the command line into a Config and calls Run; each worker
// process that Run starts (Config.WorkerCommand) calls RunWorker. The checks
// are pure functions over the audit trail (check.go), tested against
// hand-made trails.
package soak

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
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
	"github.com/weirq/weir/internal/pgcluster"
	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirdriver/weirpgx"
)

// WorkerSettings are what every worker process of a run runs with.
type WorkerSettings struct {
	// Schema is the soak's own schema. Run creates it and marks it as its
	// own with a comment, and drops and recreates a schema that has the mark;
	// it refuses any other existing schema.
	Schema string
	// Concurrency is how many handlers each worker runs at once: 1 to 1000.
	Concurrency int
	// GlobalLimit, when positive, is the soak queue's global limit, which
	// every worker declares: at most that many of its jobs running at once
	// across the workers (G11). 0: none. At most weirdriver.MaxGlobalLimit.
	GlobalLimit int
	// KeyLimit, when positive, is the soak queue's limit per key, which
	// every worker declares: at most that many of its jobs with the same
	// args.key (1 to soakKeys, drawn at random) running at once across the
	// workers (G11). 0: none, and the jobs have no key. At most
	// weirdriver.MaxKeyLimit.
	KeyLimit int
	// Lease, Heartbeat and Rescue are the workers' lease duration, heartbeat
	// interval and rescue interval; Lease is at least 3 × Heartbeat.
	Lease, Heartbeat, Rescue time.Duration
	// StopBudget is each graceful stop's budget.
	StopBudget time.Duration
	// JobTimeout is the timeout of the overrun and stubborn jobs, which they
	// are meant to outlast.
	JobTimeout time.Duration
	// PollOnly runs the workers' clients with weir.Config.PollOnly.
	PollOnly bool
}

// WorkerConfig is what one worker process runs with.
type WorkerConfig struct {
	WorkerSettings
	// Name is the worker's name, wS.G for slot S and generation G: its
	// client's ID, and in its sessions' application_name.
	Name string
	// URL is the PostgreSQL database to work on.
	URL string
}

// Config is what Run runs with. Every duration is positive unless its
// comment says otherwise.
type Config struct {
	WorkerSettings
	// URL is the PostgreSQL database to run on, when StartPostgres is not set.
	URL string
	// StartPostgres starts a throwaway cluster (initdb and pg_ctl from PATH
	// or /usr/lib/postgresql/*/bin) to run on instead of URL, and deletes it
	// at the end; after a failed run it is kept, stopped, for its audit
	// trail. KeepPostgres leaves it running at the end.
	StartPostgres, KeepPostgres bool
	// PgBouncer starts a PgBouncer in transaction mode in front of the
	// database, through which the workers connect (pgbouncer.go).
	PgBouncer bool
	// Duration is how long jobs are inserted and faults injected, before the
	// drain.
	Duration time.Duration
	// Workers is how many worker processes run at once: 1 to 32.
	Workers int
	// Rate is how many jobs are inserted per second: over 0, at most 100,000.
	Rate float64
	// Faults are the faults to inject, by the names FaultNames lists.
	Faults []string
	// RestartEvery, KillEvery, PauseEvery, ConnKillEvery and PGRestartEvery
	// are the intervals of the restart, kill, pause, connkill and pgrestart
	// faults; each wait is drawn from 75% to 125% of its interval.
	RestartEvery, KillEvery, PauseEvery, ConnKillEvery, PGRestartEvery time.Duration
	// KillLeaderEvery is the interval of the killleader fault: a SIGKILL of
	// the maintenance leader.
	KillLeaderEvery time.Duration
	// SnapshotEvery and SnapshotFor are the interval of the snapshot fault
	// and how long each snapshot is held.
	SnapshotEvery, SnapshotFor time.Duration
	// FailoverEvery is the interval of the failover fault (failover.go).
	FailoverEvery time.Duration
	// Standby is the failover fault's standby: "sync" (synchronous) or
	// "async".
	Standby string
	// PauseFor is how long a paused worker stays frozen.
	PauseFor time.Duration
	// PGRestartDown is how long every second PostgreSQL restart (a crash)
	// keeps the server down; zero or more.
	PGRestartDown time.Duration
	// G9Slack is the allowance over the G9 bound for a killed
	// worker's jobs to be runnable again, for statement latency; zero or more.
	G9Slack time.Duration
	// DrainTimeout bounds the drain's wait for the next job to become final.
	DrainTimeout time.Duration
	// LogPath is the file for the workers' logs; empty: a new file in the
	// temporary directory.
	LogPath string
	// Seed seeds the job mix and the choice of victims; zero: a random seed.
	Seed uint64
	// WorkerCommand returns the command that runs a worker process: this
	// program again, made to call RunWorker with w. Run sets its standard
	// streams, starts it and signals it.
	WorkerCommand func(w WorkerConfig) *exec.Cmd
}

// FaultNames lists the faults Config.Faults may name, in the order the
// report shows them: the faults of the schedule, and the probe modes of jobs
// that misbehave (overrun, stubborn).
func FaultNames() []string {
	return []string{faultRestart, faultKill, faultKillLeader, faultPause, faultConnKill, faultPGRestart, faultFailover,
		faultSnapshot, modeOverrun, modeStubborn}
}

// Validate checks s, naming the flag of weir soak that sets a wrong field.
func (s *WorkerSettings) Validate() error {
	if e, ok := errors.AsType[*weirpgx.SchemaError](weirpgx.ValidateSchema(s.Schema)); ok {
		return fmt.Errorf("bad --schema: %s", e.Message)
	}
	if err := positive(
		flagValue{"lease", s.Lease}, flagValue{"heartbeat", s.Heartbeat}, flagValue{"rescue", s.Rescue},
		flagValue{"stop-budget", s.StopBudget}, flagValue{"job-timeout", s.JobTimeout},
	); err != nil {
		return err
	}
	if s.Lease < 3*s.Heartbeat {
		return fmt.Errorf("--lease %s is under 3× --heartbeat %s", s.Lease, s.Heartbeat)
	}
	if s.Concurrency < 1 || s.Concurrency > 1000 {
		return fmt.Errorf("--concurrency %d is outside 1..1000", s.Concurrency)
	}
	if s.GlobalLimit < 0 || s.GlobalLimit > weirdriver.MaxGlobalLimit {
		return fmt.Errorf("--global-limit %d is outside 0..%d", s.GlobalLimit, weirdriver.MaxGlobalLimit)
	}
	if s.KeyLimit < 0 || s.KeyLimit > weirdriver.MaxKeyLimit {
		return fmt.Errorf("--key-limit %d is outside 0..%d", s.KeyLimit, weirdriver.MaxKeyLimit)
	}
	return nil
}

// Validate checks c, naming the flag of weir soak that sets a wrong field. It
// does not look at URL: any connection string will do, and Run says so when
// it does not connect.
func (c *Config) Validate() error {
	if err := c.WorkerSettings.Validate(); err != nil {
		return err
	}
	if err := positive(
		flagValue{"duration", c.Duration}, flagValue{"restart-every", c.RestartEvery}, flagValue{"kill-every", c.KillEvery},
		flagValue{"connkill-every", c.ConnKillEvery}, flagValue{"pgrestart-every", c.PGRestartEvery},
		flagValue{"killleader-every", c.KillLeaderEvery},
		flagValue{"snapshot-every", c.SnapshotEvery}, flagValue{"snapshot-for", c.SnapshotFor},
		flagValue{"pause-every", c.PauseEvery}, flagValue{"pause-for", c.PauseFor}, flagValue{"drain-timeout", c.DrainTimeout},
	); err != nil {
		return err
	}
	if c.PGRestartDown < 0 {
		return fmt.Errorf("--pgrestart-down %s is negative", c.PGRestartDown)
	}
	if c.G9Slack < 0 {
		return fmt.Errorf("--g9-slack %s is negative", c.G9Slack)
	}
	if c.Workers < 1 || c.Workers > 32 {
		return fmt.Errorf("--workers %d is outside 1..32", c.Workers)
	}
	if !(c.Rate > 0 && c.Rate <= 100000) {
		return fmt.Errorf("--rate %g is outside (0, 100000] jobs per second", c.Rate)
	}
	for _, name := range c.Faults {
		if !slices.Contains(FaultNames(), name) {
			return fmt.Errorf("--faults: unknown fault %q (known: %s, all, none)", name, strings.Join(FaultNames(), ", "))
		}
	}
	if slices.Contains(c.Faults, faultPause) && len(pauseSignals) == 0 {
		return errors.New("the pause fault needs SIGSTOP and SIGCONT, which this system does not have")
	}
	if c.KeepPostgres && !c.StartPostgres {
		return errors.New("--keep-postgres is only for --start-postgres")
	}
	if slices.Contains(c.Faults, faultPGRestart) && !c.StartPostgres {
		return errors.New("the pgrestart fault needs --start-postgres: weir soak restarts only a server it started itself")
	}
	return c.validateFailover()
}

// flagValue is a duration and the flag that sets it.
type flagValue struct {
	flag string
	d    time.Duration
}

// positive checks that every one of ds is positive.
func positive(ds ...flagValue) error {
	for _, v := range ds {
		if v.d <= 0 {
			return fmt.Errorf("--%s %s must be positive", v.flag, v.d)
		}
	}
	return nil
}

// Run runs a soak with cfg: it prints its progress on stderr and the table of
// the run and the violations found on stdout, and returns an error when it
// could not run or when the run broke the contract.
func Run(ctx context.Context, cfg Config, stdout, stderr io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("soak: %v", err)
	}
	if cfg.WorkerCommand == nil {
		return errors.New("soak: Config.WorkerCommand is nil: the soak cannot start its workers")
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	enabled := map[string]bool{}
	for _, name := range cfg.Faults {
		enabled[name] = true
	}
	s := &soakRun{cfg: &cfg, enabled: enabled, stdout: stdout, stderr: stderr, seed: seed, slots: make([]*workerProc, cfg.Workers)}
	return s.run(ctx)
}

// soakRun is one run of the orchestrator.
type soakRun struct {
	cfg            *Config
	enabled        map[string]bool // cfg.Faults
	stdout, stderr io.Writer
	seed           uint64
	url            string

	pool    *pgxpool.Pool
	client  *weir.Client
	cluster *pgcluster.Cluster
	fo      *failoverState // with the failover fault: the primary and standby
	bouncer *soakBouncer   // with Config.PgBouncer
	logFile *os.File
	logMu   sync.Mutex
	// offset is the database clock minus the local clock; every time the
	// orchestrator records is moved to the database clock with it.
	offset time.Duration
	begin  time.Time

	mu            sync.Mutex
	procs         []*workerProc // every worker process started
	slots         []*workerProc // the current process of each slot
	gens          []int
	stopping      bool // the run is ending: no replacements
	faults        []faultEvent
	inserted      []int64
	insertedAt    []time.Time // when the insert of each of inserted returned
	insertErrors  int
	startFailures int
	pgRestarts    int
	skipped       map[string]int // faults skipped for want of a victim
	wg            sync.WaitGroup // the goroutines of the processes and the schedule
}

// workerProc is one worker process; its fields after exited are guarded by
// soakRun.mu.
type workerProc struct {
	name   string
	slot   int
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	ready  chan struct{}
	exited chan struct{}

	isReady    bool
	stopping   bool // SIGTERM sent
	killed     bool // SIGKILL sent
	paused     bool // SIGSTOP sent, SIGCONT not yet
	final      bool
	startedAt  time.Time
	sigtermAt  time.Time
	killedAt   time.Time
	exitAt     time.Time
	exitStatus string
	report     *stopReport
}

func (s *soakRun) run(ctx context.Context) (err error) {
	cfg := s.cfg
	if cfg.StartPostgres && s.enabled[faultFailover] {
		if err := s.startPair(); err != nil {
			return err
		}
		defer func() { s.endPair(err) }() // err: run's result
	} else if cfg.StartPostgres {
		fmt.Fprintln(s.stderr, "soak: starting a throwaway PostgreSQL cluster")
		c, startErr := pgcluster.Start(pgcluster.Options{
			DirPrefix: "weir-soak-pg-",
			Database:  "soak",
			Settings:  []string{"max_connections=200"},
		})
		if startErr != nil {
			return fmt.Errorf("soak: --start-postgres: %v", startErr)
		}
		s.cluster = c
		defer func() { s.endCluster(err) }() // err: run's result
		s.url = c.URL()
		fmt.Fprintf(s.stderr, "soak: PostgreSQL %s in %s\n", c.Version(), c.Dir())
	} else {
		s.url = cfg.URL
	}
	if err := s.open(ctx); err != nil {
		return err
	}
	defer s.pool.Close()
	if cfg.PgBouncer {
		if err := s.startBouncer(); err != nil {
			return err
		}
		defer s.stopBouncer()
	}
	if err := prepareSoakSchema(ctx, s.pool, cfg.Schema, s.settingsJSON()); err != nil {
		return fmt.Errorf("soak: %v", err)
	}
	if err := s.openLog(); err != nil {
		return err
	}
	defer s.logFile.Close()
	if err := s.measureOffset(ctx); err != nil {
		return fmt.Errorf("soak: read the database clock: %v", err)
	}
	fmt.Fprintf(s.stderr, "soak: %s, %d workers × %d handlers, %g jobs/s, faults %s, schema %s, seed %d, worker logs in %s\n",
		cfg.Duration, cfg.Workers, cfg.Concurrency, cfg.Rate, s.faultList(), cfg.Schema, s.seed, s.logFile.Name())

	s.begin = time.Now()
	for slot := range cfg.Workers {
		s.startWorker(slot)
	}
	if err := s.waitReady(ctx, 60*time.Second); err != nil {
		s.shutdown()
		return err
	}

	// The load and the faults, for --duration.
	loadCtx, stopLoad := context.WithTimeout(ctx, cfg.Duration)
	defer stopLoad()
	var load sync.WaitGroup
	load.Go(func() { s.produce(loadCtx) })
	load.Go(func() { s.progress(loadCtx) })
	s.schedule(loadCtx, &load)
	<-loadCtx.Done()
	load.Wait()
	if ctx.Err() != nil {
		s.shutdown()
		return errors.New("soak: interrupted")
	}

	// The drain: every job final, then every worker stopped gracefully.
	drainErr := s.drain(ctx)
	s.shutdown()
	if ctx.Err() != nil {
		return errors.New("soak: interrupted")
	}
	if drainErr != nil {
		fmt.Fprintf(s.stderr, "soak: %v\n", drainErr)
	}

	data, err := s.collect(ctx)
	if err != nil {
		return fmt.Errorf("soak: read the audit trail: %v", err)
	}
	report := checkSoak(data)
	if report.Table, err = s.readTableStats(ctx); err != nil {
		fmt.Fprintf(s.stderr, "soak: %v\n", err)
	}
	s.record(ctx, data)
	s.printReport(s.stdout, report, time.Since(s.begin))
	if n := len(report.Violations); n > 0 {
		return fmt.Errorf("soak: %d violations of the contract (see above; schema %s holds the audit trail)", n, cfg.Schema)
	}
	return nil
}

func (s *soakRun) faultList() string {
	var on []string
	for _, name := range FaultNames() {
		if s.enabled[name] {
			on = append(on, name)
		}
	}
	if len(on) == 0 {
		return "none"
	}
	return strings.Join(on, ",")
}

func (s *soakRun) settingsJSON() string {
	cfg := s.cfg
	b, _ := json.Marshal(map[string]any{
		"duration": cfg.Duration.String(), "workers": cfg.Workers, "concurrency": cfg.Concurrency, "rate": cfg.Rate,
		"faults": s.faultList(), "restart_every": cfg.RestartEvery.String(), "kill_every": cfg.KillEvery.String(),
		"connkill_every": cfg.ConnKillEvery.String(), "pgrestart_every": cfg.PGRestartEvery.String(),
		"killleader_every": cfg.KillLeaderEvery.String(), "failover_every": cfg.FailoverEvery.String(), "standby": cfg.Standby,
		"lease": cfg.Lease.String(), "heartbeat": cfg.Heartbeat.String(), "rescue": cfg.Rescue.String(),
		"stop_budget": cfg.StopBudget.String(), "job_timeout": cfg.JobTimeout.String(), "seed": s.seed,
		"pgbouncer": cfg.PgBouncer, "poll_only": cfg.PollOnly, "global_limit": cfg.GlobalLimit,
		"key_limit": cfg.KeyLimit,
	})
	return string(b)
}

func (s *soakRun) openLog() error {
	var err error
	if s.cfg.LogPath != "" {
		s.logFile, err = os.OpenFile(s.cfg.LogPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	} else {
		s.logFile, err = os.CreateTemp("", "weir-soak-*.log")
	}
	if err != nil {
		return fmt.Errorf("soak: open the log: %v", err)
	}
	return nil
}

// logf writes a line to the workers' log, after the time since the start.
func (s *soakRun) logf(format string, args ...any) {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	fmt.Fprintf(s.logFile, "%8.3fs orchestrator: %s\n", time.Since(s.begin).Seconds(), fmt.Sprintf(format, args...))
}

// open connects the orchestrator's pool and its insert-only client.
func (s *soakRun) open(ctx context.Context) error {
	pcfg, err := pgurl.Config(s.url)
	if err != nil {
		return err
	}
	pcfg.ConnConfig.RuntimeParams["application_name"] = "weir-soak:" + s.cfg.Schema
	pcfg.MaxConns = 6
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("cannot open the database: %s", pgurl.Redact(err.Error(), s.url, pcfg.ConnConfig.Password))
	}
	if err := pgurl.Ping(ctx, pool, pcfg, s.url); err != nil {
		pool.Close()
		return err
	}
	driver, err := weirpgx.New(pool, &weirpgx.Config{Schema: s.cfg.Schema})
	if err != nil {
		pool.Close()
		return err
	}
	s.client, err = weir.NewClient(driver, &weir.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		pool.Close()
		return err
	}
	s.pool = pool
	return nil
}

// measureOffset estimates the database clock minus the local clock from the
// quickest of a few round trips.
func (s *soakRun) measureOffset(ctx context.Context) error {
	best := time.Duration(-1)
	for range 7 {
		t0 := time.Now()
		var db time.Time
		if err := s.pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&db); err != nil {
			return err
		}
		rtt := time.Since(t0)
		if best < 0 || rtt < best {
			best = rtt
			s.offset = db.Sub(t0.Add(rtt / 2))
		}
	}
	return nil
}

// dbTime moves a local time to the database clock.
func (s *soakRun) dbTime(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.Round(0).Add(s.offset)
}

// startWorker starts a new process in slot. A process that fails to start is
// counted, and its slot tried again a second later.
func (s *soakRun) startWorker(slot int) {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return
	}
	for len(s.gens) <= slot {
		s.gens = append(s.gens, 0)
	}
	s.gens[slot]++
	name := fmt.Sprintf("w%d.%d", slot+1, s.gens[slot])
	p := &workerProc{name: name, slot: slot, ready: make(chan struct{}), exited: make(chan struct{})}
	s.slots[slot] = p
	s.procs = append(s.procs, p)
	s.mu.Unlock()

	cmd := s.cfg.WorkerCommand(WorkerConfig{WorkerSettings: s.cfg.WorkerSettings, Name: name, URL: s.workerURL()})
	p.cmd = cmd
	stdin, err1 := cmd.StdinPipe()
	stdout, err2 := cmd.StdoutPipe()
	stderr, err3 := cmd.StderrPipe()
	err := errors.Join(err1, err2, err3)
	if err == nil {
		err = cmd.Start()
	}
	s.mu.Lock()
	p.startedAt = time.Now()
	p.stdin = stdin
	s.mu.Unlock()
	if err != nil {
		s.logf("%s: start: %v", name, err)
		s.exited(p, "start: "+err.Error())
		return
	}
	s.logf("%s: started, pid %d", name, cmd.Process.Pid)
	var pipes sync.WaitGroup
	pipes.Go(func() { s.readStdout(p, stdout) })
	pipes.Go(func() { s.copyLog(p, stderr) })
	s.wg.Go(func() {
		pipes.Wait()
		err := cmd.Wait()
		status := "exit status 0"
		if err != nil {
			status = err.Error()
		}
		s.exited(p, status)
	})
}

// readStdout reads a worker's "ready" and "stop {json}" lines.
func (s *soakRun) readStdout(p *workerProc, r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "ready":
			s.mu.Lock()
			p.isReady = true
			s.mu.Unlock()
			close(p.ready)
		case strings.HasPrefix(line, "stop "):
			var rep stopReport
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "stop ")), &rep); err != nil {
				s.logf("%s: bad stop report %q: %v", p.name, line, err)
				continue
			}
			s.mu.Lock()
			p.report = &rep
			s.mu.Unlock()
			s.logf("%s: stopped in %s: %s", p.name, rep.Took, orNone(rep.Error))
		default:
			s.logf("%s: stdout: %s", p.name, line)
		}
	}
}

// copyLog copies a worker's stderr to the log, each line after its name.
func (s *soakRun) copyLog(p *workerProc, r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		s.logMu.Lock()
		fmt.Fprintf(s.logFile, "%8.3fs %s: %s\n", time.Since(s.begin).Seconds(), p.name, sc.Text())
		s.logMu.Unlock()
	}
}

// exited records that p's process ended, and replaces a worker that failed to
// start or died on its own.
func (s *soakRun) exited(p *workerProc, status string) {
	s.mu.Lock()
	p.exitAt = time.Now()
	p.exitStatus = status
	told := p.stopping || p.killed
	replace := !told && s.slots[p.slot] == p && !s.stopping
	if !p.isReady && !told {
		s.startFailures++
	}
	s.mu.Unlock()
	close(p.exited)
	if !told {
		s.logf("%s: exited by itself: %s", p.name, status)
	}
	if replace {
		s.wg.Go(func() {
			time.Sleep(time.Second) // pacing: a server that is restarting refuses for a while
			s.startWorker(p.slot)
		})
	}
}

// waitReady waits until every slot's worker is ready.
func (s *soakRun) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		s.mu.Lock()
		ready := 0
		for _, p := range s.slots {
			if p != nil && p.isReady {
				ready++
			}
		}
		failures := s.startFailures
		s.mu.Unlock()
		if ready == len(s.slots) {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("soak: %d of %d workers ready after %s (%d failed to start; see %s)",
				ready, len(s.slots), timeout, failures, s.logFile.Name())
		}
		time.Sleep(50 * time.Millisecond) // polls the processes' state, which has no single signal
	}
}

// victim picks a ready worker that was told nothing yet, or nil: the one
// named prefer if it is one, otherwise a random one.
func (s *soakRun) victim(rng *rand.Rand, prefer string) *workerProc {
	var ok []*workerProc
	for _, p := range s.slots {
		if p != nil && p.isReady && !p.stopping && !p.killed && !p.paused {
			select {
			case <-p.exited:
			default:
				ok = append(ok, p)
			}
		}
	}
	if len(ok) == 0 {
		return nil
	}
	for _, p := range ok {
		if prefer != "" && p.name == prefer {
			return p
		}
	}
	return ok[rng.IntN(len(ok))]
}

// leader returns the name of the worker that leads maintenance (and fires the
// periodic workload), or "" when none does or the database does not answer.
func (s *soakRun) leader(ctx context.Context) string {
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var name string
	_ = s.pool.QueryRow(qctx, "SELECT leader_id FROM "+pgx.Identifier{s.cfg.Schema, "weir_leader"}.Sanitize()+
		" WHERE name = 'maintenance' AND expires_at > now()").Scan(&name)
	return name
}

// takeVictim picks a victim for a fault of kind and marks it with mark,
// both under s.mu. While no worker is ready (all starting, stopping, killed or
// paused) it looks again every 50 ms, so that a fault comes late rather than
// not at all; if ctx ends first, it counts the fault as skipped and returns
// nil.
func (s *soakRun) takeVictim(ctx context.Context, kind string, rng *rand.Rand, mark func(*workerProc)) *workerProc {
	return s.takeVictimPreferring(ctx, kind, rng, "", mark)
}

// takeVictimPreferring is takeVictim, choosing the worker named prefer when it
// is ready.
func (s *soakRun) takeVictimPreferring(ctx context.Context, kind string, rng *rand.Rand, prefer string, mark func(*workerProc)) *workerProc {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		s.mu.Lock()
		if p := s.victim(rng, prefer); p != nil {
			mark(p)
			s.mu.Unlock()
			return p
		}
		s.mu.Unlock()
		select {
		case <-tick.C:
		case <-ctx.Done():
			s.mu.Lock()
			if s.skipped == nil {
				s.skipped = map[string]int{}
			}
			s.skipped[kind]++
			s.mu.Unlock()
			s.logf("%s skipped: no ready worker before the end", kind)
			return nil
		}
	}
}

func (s *soakRun) addFault(f faultEvent) {
	s.mu.Lock()
	s.faults = append(s.faults, f)
	s.mu.Unlock()
}

// schedule starts one goroutine per fault with an interval; each injects its
// fault after a delay drawn from 75% to 125% of the interval, again and again
// until ctx ends, so that the faults do not fall in step with each other (a
// kill every 30 s would otherwise always meet a connection kill every 15 s).
func (s *soakRun) schedule(ctx context.Context, wg *sync.WaitGroup) {
	every := map[string]time.Duration{
		faultRestart: s.cfg.RestartEvery, faultKill: s.cfg.KillEvery, faultPause: s.cfg.PauseEvery,
		faultConnKill: s.cfg.ConnKillEvery, faultPGRestart: s.cfg.PGRestartEvery, faultKillLeader: s.cfg.KillLeaderEvery,
		faultFailover: s.cfg.FailoverEvery, faultSnapshot: s.cfg.SnapshotEvery,
	}
	for i, kind := range []string{faultRestart, faultKill, faultPause, faultConnKill, faultPGRestart, faultKillLeader, faultFailover, faultSnapshot} {
		if !s.enabled[kind] {
			continue
		}
		rng := rand.New(rand.NewPCG(s.seed, uint64(i+1)))
		wg.Go(func() {
			next := time.Now()
			for {
				next = next.Add(time.Duration(float64(every[kind]) * (0.75 + 0.5*rng.Float64())))
				t := time.NewTimer(time.Until(next))
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
				s.inject(ctx, kind, rng)
			}
		})
	}
}

func (s *soakRun) inject(ctx context.Context, kind string, rng *rand.Rand) {
	switch kind {
	case faultRestart, faultKill, faultKillLeader:
		// A kill asks who leads first: a killleader fault kills the leader
		// (or a random worker when none leads), and the G9 check holds a kill
		// of the leader, by either fault, to the bound after a leader's death.
		var leader, prefer string
		if kind != faultRestart {
			leader = s.leader(ctx)
		}
		if kind == faultKillLeader {
			prefer = leader
		}
		p := s.takeVictimPreferring(ctx, kind, rng, prefer, func(p *workerProc) {
			now := time.Now()
			if kind == faultRestart {
				p.stopping, p.sigtermAt = true, now
			} else {
				p.killed, p.killedAt = true, now
			}
			f := faultEvent{Kind: kind, Worker: p.name, At: now}
			if kind != faultRestart {
				f.Kind = faultKill // both kill faults are kills to the checker
				if leader != "" && p.name == leader {
					f.Detail = "leader"
				}
			}
			s.faults = append(s.faults, f)
		})
		if p == nil {
			return
		}
		sig := syscall.SIGTERM
		if kind != faultRestart {
			sig = syscall.SIGKILL
		}
		if err := p.cmd.Process.Signal(sig); err != nil {
			s.logf("%s %s: %v", kind, p.name, err)
		}
		s.logf("%s %s", kind, p.name)
		if kind != faultRestart {
			<-p.exited // the replacement starts once the victim is gone
		}
		s.startWorker(p.slot)
	case faultPause:
		var at time.Time
		p := s.takeVictim(ctx, kind, rng, func(p *workerProc) {
			p.paused = true
			at = time.Now()
		})
		if p == nil {
			return
		}
		if err := p.cmd.Process.Signal(pauseSignals[0]); err != nil {
			s.logf("pause %s: %v", p.name, err)
		}
		s.logf("pause %s", p.name)
		t := time.NewTimer(s.cfg.PauseFor)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		if err := p.cmd.Process.Signal(pauseSignals[1]); err != nil {
			s.logf("resume %s: %v", p.name, err)
		}
		s.mu.Lock()
		p.paused = false
		s.faults = append(s.faults, faultEvent{Kind: faultPause, Worker: p.name, At: at, Until: time.Now()})
		s.mu.Unlock()
		s.logf("resume %s", p.name)
	case faultConnKill:
		at := time.Now()
		kctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var n int
		err := s.pool.QueryRow(kctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE starts_with(application_name, $1) AND pid <> pg_backend_pid()`, workerAppPrefix(s.cfg.Schema)).Scan(&n)
		if err != nil {
			s.logf("connkill: %v", err)
			return
		}
		s.addFault(faultEvent{Kind: faultConnKill, At: at, Detail: strconv.Itoa(n)})
		s.logf("connkill: %d backends", n)
	case faultPGRestart:
		at := time.Now()
		s.mu.Lock()
		s.pgRestarts++
		n := s.pgRestarts
		s.mu.Unlock()
		how, err := s.restartPostgres(n)
		if err != nil {
			how += ": " + pgurl.OneLine(err.Error())
		}
		s.addFault(faultEvent{Kind: faultPGRestart, At: at, Until: time.Now(), Detail: how})
		s.logf("pgrestart (%s) in %s", how, time.Since(at))
	case faultFailover:
		s.failover()
	case faultSnapshot:
		s.holdSnapshot(ctx)
	}
}

// holdSnapshot is the snapshot fault: a session of its own takes a REPEATABLE
// READ snapshot (reading no table of weir's, as a long report on other tables
// would) and holds it for SnapshotFor, or until ctx ends. A session that a
// PostgreSQL restart or failover ends just ends the fault early.
func (s *soakRun) holdSnapshot(ctx context.Context) {
	at := time.Now()
	pcfg, err := pgurl.Config(s.url)
	if err != nil {
		s.logf("snapshot: %s", pgurl.OneLine(err.Error()))
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	conn, err := pgx.ConnectConfig(cctx, pcfg.ConnConfig)
	cancel()
	if err != nil {
		s.logf("snapshot: %s", pgurl.OneLine(pgurl.Redact(err.Error(), s.url, pcfg.ConnConfig.Password)))
		return
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var xmin string
	_, err = conn.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ")
	if err == nil {
		err = conn.QueryRow(ctx, "SELECT txid_snapshot_xmin(txid_current_snapshot())::text").Scan(&xmin)
	}
	if err != nil {
		s.logf("snapshot: %s", pgurl.OneLine(err.Error()))
		return
	}
	s.logf("snapshot held (xmin %s)", xmin)
	t := time.NewTimer(s.cfg.SnapshotFor)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
	}
	s.addFault(faultEvent{Kind: faultSnapshot, At: at, Until: time.Now(), Detail: "xmin " + xmin})
	s.logf("snapshot released after %s", time.Since(at).Round(time.Millisecond))
}

// produce inserts probe jobs at the rate, every 50 ms, until ctx ends.
func (s *soakRun) produce(ctx context.Context) {
	rng := rand.New(rand.NewPCG(s.seed, 0))
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	sent := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		due := int(s.cfg.Rate*time.Since(start).Seconds()) - sent
		if due <= 0 {
			continue
		}
		due = min(due, 5000)
		params := make([]weir.InsertManyParams, due)
		for i := range params {
			params[i] = weir.InsertManyParams{Args: s.probeArgs(rng), InsertOpts: &weir.InsertOpts{Queue: soakQueue}}
		}
		sent += due
		ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		res, err := s.client.InsertMany(ictx, params)
		cancel()
		s.mu.Lock()
		if err != nil {
			s.insertErrors++
		}
		acked := time.Now()
		for _, r := range res {
			s.inserted = append(s.inserted, r.Job.ID)
			s.insertedAt = append(s.insertedAt, acked)
		}
		s.mu.Unlock()
		if err != nil {
			s.logf("insert %d jobs: %v", due, err)
		}
	}
}

// probeArgs draws a job from the mix. docs/design/reliability.md lists it.
func (s *soakRun) probeArgs(rng *rand.Rand) soakProbeArgs {
	args := s.probeMode(rng)
	if s.cfg.KeyLimit > 0 {
		args.Key = 1 + rng.IntN(soakKeys)
	}
	return args
}

// soakKeys is how many keys the jobs have under --key-limit.
const soakKeys = 8

// probeMode draws what a job does from the mix.
func (s *soakRun) probeMode(rng *rand.Rand) soakProbeArgs {
	budget := int(s.cfg.StopBudget.Milliseconds())
	x := rng.Float64()
	switch {
	case s.enabled[modeStubborn] && x < 0.005:
		return soakProbeArgs{Mode: modeStubborn, MS: budget/2 + rng.IntN(5*budget/2+1)}
	case s.enabled[modeOverrun] && x >= 0.005 && x < 0.015:
		return soakProbeArgs{Mode: modeOverrun}
	case x < 0.035:
		return soakProbeArgs{Mode: modeFail, MS: rng.IntN(20)}
	case x < 0.055: // longer than a stop's budget: cancelled and released when a stop comes
		return soakProbeArgs{Mode: modeOK, MS: budget + rng.IntN(budget+1)}
	case x < 0.155:
		return soakProbeArgs{Mode: modeOK, MS: 200 + rng.IntN(1300)}
	case x < 0.255:
		return soakProbeArgs{Mode: modeTx, MS: 200 + rng.IntN(1300)}
	}
	return soakProbeArgs{Mode: modeOK, MS: rng.IntN(20)}
}

// progress prints a line on stderr every few seconds until ctx ends.
func (s *soakRun) progress(ctx context.Context) {
	every := 10 * time.Second
	if s.cfg.Duration < time.Minute {
		every = 5 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.printProgress(context.WithoutCancel(ctx), "")
	}
}

func (s *soakRun) printProgress(ctx context.Context, phase string) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var final, pending, execs int64
	err := s.pool.QueryRow(qctx, "SELECT count(*) FILTER (WHERE finalized_at IS NOT NULL), count(*) FILTER (WHERE finalized_at IS NULL), (SELECT count(*) FROM "+
		pgx.Identifier{s.cfg.Schema, "soak_exec"}.Sanitize()+") FROM "+pgx.Identifier{s.cfg.Schema, "weir_job"}.Sanitize()+
		" WHERE queue = '"+soakQueue+"'").Scan(&final, &pending, &execs)
	s.mu.Lock()
	counts := map[string]int{}
	for _, f := range s.faults {
		counts[f.Kind]++
	}
	inserted, live := len(s.inserted), 0
	for _, p := range s.slots {
		if p != nil && p.isReady {
			live++
		}
	}
	s.mu.Unlock()
	line := fmt.Sprintf("%6.0fs %s inserted %d", time.Since(s.begin).Seconds(), phase, inserted)
	if err == nil {
		line += fmt.Sprintf("  final %d  pending %d  executions %d", final, pending, execs)
	} else {
		line += "  (database: " + pgurl.OneLine(err.Error()) + ")"
	}
	line += fmt.Sprintf("  restarts %d  kills %d  pauses %d  connkills %d  pgrestarts %d  workers ready %d",
		counts[faultRestart], counts[faultKill], counts[faultPause], counts[faultConnKill], counts[faultPGRestart], live)
	if s.enabled[faultFailover] {
		line += fmt.Sprintf("  failovers %d", counts[faultFailover])
	}
	if s.enabled[faultSnapshot] {
		line += fmt.Sprintf("  snapshots %d", counts[faultSnapshot])
	}
	fmt.Fprintln(s.stderr, strings.Join(strings.Fields(line), " "))
}

// drain waits until every job is final.
func (s *soakRun) drain(ctx context.Context) error {
	s.printProgress(ctx, "draining:")
	// The drain lasts as long as jobs keep becoming final: a backlog the load
	// left behind takes what it takes, and only DrainTimeout without progress
	// ends it.
	deadline := time.Now().Add(s.cfg.DrainTimeout)
	fewest := -1
	lastLine := time.Now()
	job := pgx.Identifier{s.cfg.Schema, "weir_job"}.Sanitize()
	for {
		var pending int
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := s.pool.QueryRow(qctx, "SELECT count(*) FROM "+job+" WHERE finalized_at IS NULL AND queue = '"+soakQueue+"'").Scan(&pending)
		cancel()
		if err == nil && pending == 0 {
			s.printProgress(ctx, "drained:")
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err == nil && (fewest < 0 || pending < fewest) {
			fewest = pending
			deadline = time.Now().Add(s.cfg.DrainTimeout)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d jobs not final after %s of the drain without progress", pending, s.cfg.DrainTimeout)
		}
		if time.Since(lastLine) >= 5*time.Second {
			s.printProgress(ctx, "draining:")
			lastLine = time.Now()
		}
		time.Sleep(200 * time.Millisecond) // polls the database, which has no signal for "all final"
	}
}

// shutdown stops every worker gracefully and waits for every process. A
// worker still starting is let get ready first, so that its stop is a real
// graceful stop of a started client.
func (s *soakRun) shutdown() {
	s.mu.Lock()
	s.stopping = true
	starting := slices.Clone(s.procs)
	s.mu.Unlock()
	getReady := time.NewTimer(60 * time.Second)
	defer getReady.Stop()
	for _, p := range starting {
		select {
		case <-p.ready:
		case <-p.exited:
		case <-getReady.C:
		}
	}
	s.mu.Lock()
	var live []*workerProc
	for _, p := range s.procs {
		select {
		case <-p.exited:
			continue
		default:
		}
		if !p.stopping && !p.killed {
			p.stopping, p.final, p.sigtermAt = true, true, time.Now()
			if p.cmd.Process != nil {
				_ = p.cmd.Process.Signal(syscall.SIGTERM)
			}
		}
		live = append(live, p)
	}
	s.mu.Unlock()
	limit := time.NewTimer(s.cfg.StopBudget + 10*time.Second)
	defer limit.Stop()
	for _, p := range live {
		select {
		case <-p.exited:
		case <-limit.C:
			s.logf("%s: still running %s after SIGTERM; killing it", p.name, s.cfg.StopBudget+10*time.Second)
			for _, q := range live {
				if q.cmd.Process != nil {
					_ = q.cmd.Process.Kill()
				}
			}
		}
	}
	for _, p := range live {
		if p.stdin != nil {
			_ = p.stdin.Close()
		}
	}
	s.wg.Wait()
}

// collect reads the audit trail and puts together what the checks need.
func (s *soakRun) collect(ctx context.Context) (*soakData, error) {
	cfg := s.cfg
	d := &soakData{Settings: soakSettings{
		Lease: cfg.Lease, Heartbeat: cfg.Heartbeat, Rescue: cfg.Rescue, StopBudget: cfg.StopBudget,
		G9Slack: cfg.G9Slack, ExitSlack: time.Second, GlobalLimit: cfg.GlobalLimit, KeyLimit: cfg.KeyLimit,
	}}
	table := func(name string) string { return pgx.Identifier{cfg.Schema, name}.Sanitize() }
	var err error
	d.Jobs, err = queryRows(ctx, s.pool, "SELECT id, state, lease_token, coalesce(attempted_by, ''), attempt, coalesce(args->>'key', '') FROM "+table("weir_job")+
		" WHERE queue = '"+soakQueue+"'",
		func(r pgx.CollectableRow) (finalJob, error) {
			var j finalJob
			err := r.Scan(&j.ID, &j.State, &j.Token, &j.AttemptedBy, &j.Attempt, &j.Key)
			return j, err
		})
	if err != nil {
		return nil, err
	}
	d.PeriodicSlots, err = queryRows(ctx, s.pool, "SELECT (metadata->>'weir.slot')::timestamptz FROM "+table("weir_job")+
		" WHERE queue = '"+soakPeriodicQueue+"' AND metadata->>'weir.periodic' = '"+soakPeriodicName+"'",
		func(r pgx.CollectableRow) (time.Time, error) {
			var at time.Time
			err := r.Scan(&at)
			return at, err
		})
	if err != nil {
		return nil, err
	}
	d.Execs, err = queryRows(ctx, s.pool, "SELECT id, job_id, lease_token, attempt, worker, mode, started_at, ended_at, coalesce(result, ''), progress_lease FROM "+table("soak_exec"),
		func(r pgx.CollectableRow) (auditExec, error) {
			var x auditExec
			var ended *time.Time
			err := r.Scan(&x.ID, &x.JobID, &x.Token, &x.Attempt, &x.Worker, &x.Mode, &x.Started, &ended, &x.Result, &x.ProgressLease)
			if ended != nil {
				x.Ended = *ended
			}
			return x, err
		})
	if err != nil {
		return nil, err
	}
	d.Ends, err = queryRows(ctx, s.pool, `SELECT job_id, lease_token, coalesce(holder, ''), attempt_before, attempt_after, state,
		released, coalesce(error, ''), expires_at, at FROM `+table("soak_lease_end"),
		func(r pgx.CollectableRow) (leaseEnd, error) {
			var e leaseEnd
			var expires *time.Time
			err := r.Scan(&e.JobID, &e.Token, &e.Holder, &e.AttemptBefore, &e.AttemptAfter, &e.State, &e.Released, &e.Error, &expires, &e.At)
			if expires != nil {
				e.ExpiresAt = *expires
			}
			return e, err
		})
	if err != nil {
		return nil, err
	}
	d.Promotions, err = queryRows(ctx, s.pool, "SELECT job_id, lease_token, at FROM "+table("soak_promoted"),
		func(r pgx.CollectableRow) (promotion, error) {
			var p promotion
			err := r.Scan(&p.JobID, &p.Token, &p.At)
			return p, err
		})
	if err != nil {
		return nil, err
	}

	d.AsyncWindows = s.asyncWindows()
	s.mu.Lock()
	defer s.mu.Unlock()
	d.Inserted = slices.Clone(s.inserted)
	for _, at := range s.insertedAt {
		d.InsertedAt = append(d.InsertedAt, s.dbTime(at))
	}
	for _, p := range s.procs {
		w := workerRun{
			Name: p.name, Start: s.dbTime(p.startedAt), Killed: p.killed, KilledAt: s.dbTime(p.killedAt),
			Stopped: p.stopping, Final: p.final, SigtermAt: s.dbTime(p.sigtermAt), ExitAt: s.dbTime(p.exitAt),
			ExitStatus: p.exitStatus, Report: p.report,
		}
		// A worker that never got ready and was told nothing failed to start:
		// counted apart, not a death.
		w.Died = !p.stopping && !p.killed && p.isReady
		d.Workers = append(d.Workers, w)
	}
	for _, fe := range s.faults {
		fe.At, fe.Until = s.dbTime(fe.At), s.dbTime(fe.Until)
		d.Faults = append(d.Faults, fe)
	}
	return d, nil
}

// queryRows runs sql and collects its rows with scan.
func queryRows[T any](ctx context.Context, pool *pgxpool.Pool, sql string, scan pgx.RowToFunc[T]) ([]T, error) {
	rows, err := pool.Query(ctx, sql)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scan)
}

// record keeps the workers and the faults in the schema, for inspection.
func (s *soakRun) record(ctx context.Context, d *soakData) {
	batch := &pgx.Batch{}
	table := func(name string) string { return pgx.Identifier{s.cfg.Schema, name}.Sanitize() }
	for _, w := range d.Workers {
		var report []byte
		if w.Report != nil {
			report, _ = json.Marshal(w.Report)
		}
		batch.Queue("INSERT INTO "+table("soak_worker")+` VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
			w.Name, nullTime(w.Start), nullTime(w.KilledAt), nullTime(w.SigtermAt), nullTime(w.ExitAt),
			w.Final, w.Died, w.ExitStatus, report)
	}
	for _, f := range d.Faults {
		batch.Queue("INSERT INTO "+table("soak_fault")+" VALUES ($1, $2, $3, $4, $5)",
			f.Kind, f.Worker, f.At, nullTime(f.Until), f.Detail)
	}
	if err := s.pool.SendBatch(ctx, batch).Close(); err != nil {
		fmt.Fprintf(s.stderr, "soak: record the workers and faults: %v\n", err)
	}
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// endCluster deals with the throwaway cluster at the end of the run: kept
// running with --keep-postgres; else stopped, and deleted unless the run
// failed, in which case its directory keeps the audit trail.
func (s *soakRun) endCluster(runErr error) {
	c := s.cluster
	switch {
	case s.cfg.KeepPostgres:
		fmt.Fprintf(s.stderr, "soak: the cluster keeps running at %s; stop it with: %s\n", c.URL(), c.Command("stop"))
	case runErr != nil:
		if err := c.Shutdown(); err != nil {
			fmt.Fprintf(s.stderr, "soak: %v\n", err)
		}
		fmt.Fprintf(s.stderr, "soak: the stopped cluster in %s keeps the audit trail (database soak, schema %s); start it with: %s\n",
			c.Dir(), s.cfg.Schema, c.Command("start"))
	default:
		if err := c.Stop(); err != nil {
			fmt.Fprintf(s.stderr, "soak: %v\n", err)
		}
	}
}

// restartPostgres restarts the cluster's server for the nth pgrestart fault
// and says how. The odd restarts are fast shutdowns (sessions are
// terminated, a checkpoint is written) followed at once by a start; the even
// ones are crashes (immediate mode: no checkpoint, crash recovery at the
// start) with the server down for --pgrestart-down.
func (s *soakRun) restartPostgres(n int) (string, error) {
	server, done := s.pgServer() // with a standby: the primary, between failovers
	defer done()
	if n%2 == 1 {
		return "fast", server.Restart()
	}
	down := s.cfg.PGRestartDown
	how := fmt.Sprintf("immediate, down %s", down)
	if err := server.Crash(); err != nil {
		return how, err
	}
	time.Sleep(down) // the fault: the server stays down this long
	return how, server.StartServer()
}
