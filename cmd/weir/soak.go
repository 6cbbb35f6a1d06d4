package main

// weir soak: starts worker processes of this binary, feeds them probe jobs at
// a fixed rate while a fault schedule restarts, kills and disconnects them,
// then drains the queue and checks the audit trail against the delivery
// contract. docs/reliability.md describes the design and the latest long run.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
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
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirq/weir"
	"github.com/weirq/weir/cmd/weir/internal/pgurl"
	"github.com/weirq/weir/internal/pgcluster"
	"github.com/weirq/weir/weirdriver/weirpgx"
	"github.com/weirq/weir/weirmigrate"
)

var soakCommand = &command{
	name:    "soak",
	summary: "run worker processes under faults and check the delivery contract",
	usage:   soakUsage,
	run:     runSoak,
}

func soakUsage(w io.Writer) {
	fmt.Fprint(w, `Usage:

    weir soak [--database-url URL] [--schema NAME] [--duration D] [--faults LIST] [flags]
    weir soak --start-postgres --faults all [flags]

soak checks weir's delivery contract on a live PostgreSQL: it starts --workers
worker processes of this binary, each running a probe job that records every
execution in an audit table, inserts probe jobs at --rate per second, and
injects faults on a schedule. After --duration it stops the faults and the
inserts, waits until every job is final, stops the workers gracefully and
checks the audit trail: every job final (G1), no duplicate execution after a
graceful stop (G2), no outcome written by a stale lease (G3), every stop within
its budget + 100ms (G4), duplicates only of jobs running at a SIGKILL, each
runnable again within lease + rescue interval (G9). It prints a table on
stdout and exits 1 if any check failed.

Faults (--faults, comma-separated; "all" or "none"; default
restart,kill,pause,connkill,overrun,stubborn), each at a random 75% to 125%
of its interval:

    restart    SIGTERM one worker every --restart-every, start a replacement
    kill       SIGKILL one worker every --kill-every, start a replacement
    pause      SIGSTOP one worker every --pause-every for --pause-for (past its
               leases: they are rescued while it sleeps), then SIGCONT
    connkill   pg_terminate_backend of every worker session every --connkill-every
    pgrestart  restart PostgreSQL every --pgrestart-every (needs --start-postgres):
               a fast restart, then a crash with the server down for
               --pgrestart-down, in turn
    overrun    1% of jobs outlast their timeout on the first attempt
    stubborn   0.5% of jobs ignore cancellation (and their timeout) for up to
               three stop budgets

The soak works in its own schema (--schema, default weir_soak), which it
creates, marks as its own with a comment, migrates and keeps for inspection; a
later run drops and recreates a schema that has the mark, and refuses any
other existing schema. It needs
PostgreSQL: SQLite is refused. With --start-postgres it starts a throwaway
cluster (initdb and pg_ctl from PATH or /usr/lib/postgresql/*/bin) instead of
connecting to --database-url, and deletes it at the end.

Flags:
`)
	fs, _ := soakFlagSet(false)
	printDefaults(w, fs)
}

// soakFlags are weir soak's flags; the worker process gets the ones it needs.
type soakFlags struct {
	url           string
	schema        string
	duration      time.Duration
	workers       int
	concurrency   int
	rate          float64
	faults        string
	restartEvery  time.Duration
	killEvery     time.Duration
	connKillEvery time.Duration
	pgRestartEach time.Duration
	pgDown        time.Duration
	pauseEvery    time.Duration
	pauseFor      time.Duration
	lease         time.Duration
	heartbeat     time.Duration
	rescue        time.Duration
	stopBudget    time.Duration
	jobTimeout    time.Duration
	g9Slack       time.Duration
	drainTimeout  time.Duration
	startPostgres bool
	keepPostgres  bool
	logPath       string
	seed          uint64

	// The worker process's own.
	worker     bool
	workerName string

	enabled map[string]bool // the faults, parsed
}

// The faults --faults knows, in the order the table shows them.
var soakFaultNames = []string{faultRestart, faultKill, faultPause, faultConnKill, faultPGRestart, modeOverrun, modeStubborn}

const defaultSoakFaults = "restart,kill,pause,connkill,overrun,stubborn"

// soakFlagSet returns the flag set of weir soak; hidden adds the worker
// process's flags, which the help does not show.
func soakFlagSet(hidden bool) (*flag.FlagSet, *soakFlags) {
	f := &soakFlags{}
	fs := newFlagSet("weir soak")
	fs.StringVar(&f.url, "database-url", "", "PostgreSQL `URL` (default $"+envDatabaseURL+")")
	fs.StringVar(&f.schema, "schema", "weir_soak", "`NAME` of the soak's own schema")
	fs.DurationVar(&f.duration, "duration", 2*time.Minute, "how long to insert jobs and inject faults, before the drain")
	fs.IntVar(&f.workers, "workers", 3, "worker processes, `K`")
	fs.IntVar(&f.concurrency, "concurrency", 16, "handlers at once in each worker")
	fs.Float64Var(&f.rate, "rate", 100, "jobs inserted per second")
	fs.StringVar(&f.faults, "faults", defaultSoakFaults, "faults to inject: a comma-separated `LIST`, all or none")
	fs.DurationVar(&f.restartEvery, "restart-every", 8*time.Second, "interval of graceful restarts")
	fs.DurationVar(&f.killEvery, "kill-every", 30*time.Second, "interval of SIGKILLs")
	fs.DurationVar(&f.connKillEvery, "connkill-every", 15*time.Second, "interval of connection kills")
	fs.DurationVar(&f.pauseEvery, "pause-every", 20*time.Second, "interval of pauses (SIGSTOP)")
	fs.DurationVar(&f.pauseFor, "pause-for", 5*time.Second, "how long a paused worker stays frozen")
	fs.DurationVar(&f.pgRestartEach, "pgrestart-every", 2*time.Minute, "interval of PostgreSQL restarts")
	fs.DurationVar(&f.pgDown, "pgrestart-down", time.Second, "how long every second PostgreSQL restart (a crash) keeps the server down")
	fs.DurationVar(&f.lease, "lease", 3*time.Second, "the workers' lease duration")
	fs.DurationVar(&f.heartbeat, "heartbeat", 500*time.Millisecond, "the workers' heartbeat interval")
	fs.DurationVar(&f.rescue, "rescue", time.Second, "the workers' rescue interval")
	fs.DurationVar(&f.stopBudget, "stop-budget", 3*time.Second, "each graceful stop's budget")
	fs.DurationVar(&f.jobTimeout, "job-timeout", 300*time.Millisecond, "the timeout of overrun and stubborn jobs")
	fs.DurationVar(&f.g9Slack, "g9-slack", 500*time.Millisecond, "allowance over lease + rescue interval for a killed worker's jobs, for statement latency")
	fs.DurationVar(&f.drainTimeout, "drain-timeout", 2*time.Minute, "how long to wait for every job to be final")
	fs.BoolVar(&f.startPostgres, "start-postgres", false, "start a throwaway PostgreSQL cluster instead of using --database-url")
	fs.BoolVar(&f.keepPostgres, "keep-postgres", false, "leave the --start-postgres cluster running at the end (it is kept, stopped, after a failed run)")
	fs.StringVar(&f.logPath, "log", "", "`FILE` for the workers' logs (default: a new file in the temporary directory)")
	fs.Uint64Var(&f.seed, "seed", 0, "seed of the job mix and the choice of victims (default: random)")
	if hidden {
		fs.BoolVar(&f.worker, "worker", false, "run as a worker process of a soak")
		fs.StringVar(&f.workerName, "worker-name", "", "the worker's name")
	}
	return fs, f
}

// check validates the flags before anything runs.
func (f *soakFlags) check(e *env, fs *flag.FlagSet) error {
	if err := weirpgx.ValidateSchema(f.schema); err != nil {
		return usagef("soak: bad --schema: %s", strings.TrimPrefix(err.Error(), "weirpgx: "))
	}
	positive := []struct {
		name string
		d    time.Duration
	}{
		{"duration", f.duration}, {"restart-every", f.restartEvery}, {"kill-every", f.killEvery},
		{"connkill-every", f.connKillEvery}, {"pgrestart-every", f.pgRestartEach}, {"pause-every", f.pauseEvery},
		{"pause-for", f.pauseFor}, {"lease", f.lease},
		{"heartbeat", f.heartbeat}, {"rescue", f.rescue}, {"stop-budget", f.stopBudget},
		{"job-timeout", f.jobTimeout}, {"drain-timeout", f.drainTimeout},
	}
	for _, p := range positive {
		if p.d <= 0 {
			return usagef("soak: --%s %s must be positive", p.name, p.d)
		}
	}
	if f.pgDown < 0 {
		return usagef("soak: --pgrestart-down %s is negative", f.pgDown)
	}
	if f.g9Slack < 0 {
		return usagef("soak: --g9-slack %s is negative", f.g9Slack)
	}
	if f.lease < 3*f.heartbeat {
		return usagef("soak: --lease %s is under 3× --heartbeat %s", f.lease, f.heartbeat)
	}
	if f.concurrency < 1 || f.concurrency > 1000 {
		return usagef("soak: --concurrency %d is outside 1..1000", f.concurrency)
	}
	if f.worker {
		if f.workerName == "" {
			return usagef("soak: --worker needs --worker-name")
		}
		return nil
	}
	if f.workerName != "" {
		return usagef("soak: --worker-name is only for --worker")
	}
	if f.workers < 1 || f.workers > 32 {
		return usagef("soak: --workers %d is outside 1..32", f.workers)
	}
	if !(f.rate > 0 && f.rate <= 100000) {
		return usagef("soak: --rate %g is outside (0, 100000] jobs per second", f.rate)
	}
	enabled, err := parseFaults(f.faults)
	if err != nil {
		return err
	}
	f.enabled = enabled
	if enabled[faultPause] && len(pauseSignals) == 0 {
		return usagef("soak: the pause fault needs SIGSTOP and SIGCONT, which this system does not have")
	}
	if f.keepPostgres && !f.startPostgres {
		return usagef("soak: --keep-postgres is only for --start-postgres")
	}
	if f.startPostgres {
		if isSet(fs, "database-url") {
			return usagef("soak: --start-postgres and --database-url exclude each other: the soak uses the cluster it starts")
		}
	} else {
		if enabled[faultPGRestart] {
			return usagef("soak: the pgrestart fault needs --start-postgres: weir soak restarts only a server it started itself")
		}
		if !isSet(fs, "database-url") {
			f.url = e.getenv(envDatabaseURL)
		}
		if f.url == "" {
			return usagef("soak: no database URL: pass --database-url, set %s, or pass --start-postgres", envDatabaseURL)
		}
		if _, ok := sqlitePath(f.url); ok {
			return usagef("soak: weir soak runs on PostgreSQL only, and the database URL names a SQLite database")
		}
		if _, err := postgresConfig(f.url); err != nil {
			return err
		}
	}
	return nil
}

// parseFaults parses --faults.
func parseFaults(list string) (map[string]bool, error) {
	enabled := map[string]bool{}
	switch strings.TrimSpace(list) {
	case "none", "":
		return enabled, nil
	case "all":
		for _, name := range soakFaultNames {
			enabled[name] = true
		}
		return enabled, nil
	}
	for item := range strings.SplitSeq(list, ",") {
		item = strings.TrimSpace(item)
		if !slices.Contains(soakFaultNames, item) {
			return nil, usagef("soak: --faults: unknown fault %q (known: %s, all, none)", item, strings.Join(soakFaultNames, ", "))
		}
		enabled[item] = true
	}
	return enabled, nil
}

func runSoak(ctx context.Context, e *env, args []string) error {
	fs, f := soakFlagSet(true)
	if err := parseFlags(e, fs, args, soakUsage); err != nil {
		return err
	}
	if err := f.check(e, fs); err != nil {
		return err
	}
	if f.worker {
		return runSoakWorker(ctx, e, f)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("soak: cannot find this program to start workers: %v", err)
	}
	seed := f.seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	s := &soakRun{e: e, f: f, self: self, seed: seed, slots: make([]*workerProc, f.workers)}
	return s.run(ctx)
}

// soakRun is one run of the orchestrator.
type soakRun struct {
	e    *env
	f    *soakFlags
	self string
	seed uint64
	url  string

	pool    *pgxpool.Pool
	client  *weir.Client
	cluster *pgcluster.Cluster
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
	f := s.f
	if f.startPostgres {
		fmt.Fprintln(s.e.stderr, "soak: starting a throwaway PostgreSQL cluster")
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
		fmt.Fprintf(s.e.stderr, "soak: PostgreSQL %s in %s\n", c.Version(), c.Dir())
	} else {
		s.url = f.url
	}
	if err := s.open(ctx); err != nil {
		return err
	}
	defer s.pool.Close()
	if err := prepareSoakSchema(ctx, s.pool, f.schema, s.settingsJSON()); err != nil {
		return fmt.Errorf("soak: %v", err)
	}
	if err := s.openLog(); err != nil {
		return err
	}
	defer s.logFile.Close()
	if err := s.measureOffset(ctx); err != nil {
		return fmt.Errorf("soak: read the database clock: %v", err)
	}
	fmt.Fprintf(s.e.stderr, "soak: %s, %d workers × %d handlers, %g jobs/s, faults %s, schema %s, seed %d, worker logs in %s\n",
		f.duration, f.workers, f.concurrency, f.rate, s.faultList(), f.schema, s.seed, s.logFile.Name())

	s.begin = time.Now()
	for slot := range f.workers {
		s.startWorker(slot)
	}
	if err := s.waitReady(ctx, 60*time.Second); err != nil {
		s.shutdown()
		return err
	}

	// The load and the faults, for --duration.
	loadCtx, stopLoad := context.WithTimeout(ctx, f.duration)
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
		fmt.Fprintf(s.e.stderr, "soak: %v\n", drainErr)
	}

	data, err := s.collect(ctx)
	if err != nil {
		return fmt.Errorf("soak: read the audit trail: %v", err)
	}
	report := checkSoak(data)
	s.record(ctx, data)
	s.printReport(s.e.stdout, report, time.Since(s.begin))
	if n := len(report.Violations); n > 0 {
		return fmt.Errorf("soak: %d violations of the contract (see above; schema %s holds the audit trail)", n, f.schema)
	}
	return nil
}

func (s *soakRun) faultList() string {
	var on []string
	for _, name := range soakFaultNames {
		if s.f.enabled[name] {
			on = append(on, name)
		}
	}
	if len(on) == 0 {
		return "none"
	}
	return strings.Join(on, ",")
}

func (s *soakRun) settingsJSON() string {
	f := s.f
	b, _ := json.Marshal(map[string]any{
		"duration": f.duration.String(), "workers": f.workers, "concurrency": f.concurrency, "rate": f.rate,
		"faults": s.faultList(), "restart_every": f.restartEvery.String(), "kill_every": f.killEvery.String(),
		"connkill_every": f.connKillEvery.String(), "pgrestart_every": f.pgRestartEach.String(),
		"lease": f.lease.String(), "heartbeat": f.heartbeat.String(), "rescue": f.rescue.String(),
		"stop_budget": f.stopBudget.String(), "job_timeout": f.jobTimeout.String(), "seed": s.seed,
	})
	return string(b)
}

func (s *soakRun) openLog() error {
	var err error
	if s.f.logPath != "" {
		s.logFile, err = os.OpenFile(s.f.logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
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
	cfg, err := postgresConfig(s.url)
	if err != nil {
		return err
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "weir-soak:" + s.f.schema
	cfg.MaxConns = 6
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("cannot open the database: %s", pgurl.Redact(err.Error(), s.url, cfg.ConnConfig.Password))
	}
	if err := pgurl.Ping(ctx, pool, cfg, s.url); err != nil {
		pool.Close()
		return err
	}
	driver, err := weirpgx.New(pool, &weirpgx.Config{Schema: s.f.schema})
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

// soakSchemaMark is the comment by which weir soak knows a schema as its own:
// it puts it on every schema it creates, and drops only a schema that has it.
const soakSchemaMark = "weir soak: scratch schema made by weir soak, which drops and recreates it at its next run"

// prepareSoakSchema makes schema ready for a run: created, with the mark, or,
// when an earlier soak made it (it has the mark), dropped and created again;
// migrated; with the audit tables and the trigger that records every lease
// that leaves the running state. A schema without the mark is refused, even
// empty, even holding tables named as the soak's: the soak drops its schema
// with everything in it, so it must be one the soak made.
func prepareSoakSchema(ctx context.Context, pool *pgxpool.Pool, schema, settings string) error {
	var (
		comment *string
		tables  []string
	)
	err := pool.QueryRow(ctx, `SELECT obj_description(n.oid, 'pg_namespace'),
		coalesce((SELECT array_agg(c.relname::text ORDER BY c.relname) FROM pg_class c
			WHERE c.relnamespace = n.oid AND c.relkind IN ('r', 'p', 'v', 'm', 'f')), '{}')
		FROM pg_namespace n WHERE n.nspname = $1`, schema).Scan(&comment, &tables)
	ident := pgx.Identifier{schema}.Sanitize()
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return fmt.Errorf("look at schema %s: %v", schema, err)
	case comment != nil && *comment == soakSchemaMark:
		if _, err := pool.Exec(ctx, "DROP SCHEMA "+ident+" CASCADE"); err != nil {
			return fmt.Errorf("drop the earlier soak's schema %s: %v", schema, err)
		}
	case len(tables) > 0:
		return fmt.Errorf("schema %s holds tables that weir soak did not make (%s): it lacks the soak's mark, "+
			"and the soak drops its schema at the next run: name another with --schema",
			schema, strings.Join(tables, ", "))
	default:
		return fmt.Errorf("schema %s exists and weir soak did not make it (it lacks the soak's mark), "+
			"and the soak drops its schema at the next run: name one that does not exist with --schema", schema)
	}
	// The schema and its mark come in one transaction, so that a schema
	// without the mark is never the soak's.
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("create schema %s: %v", schema, err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "CREATE SCHEMA "+ident); err != nil {
		return fmt.Errorf("create schema %s: %v", schema, err)
	}
	if _, err := tx.Exec(ctx, "COMMENT ON SCHEMA "+ident+" IS '"+soakSchemaMark+"'"); err != nil {
		return fmt.Errorf("mark schema %s: %v", schema, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("create schema %s: %v", schema, err)
	}
	driver, err := weirpgx.New(pool, &weirpgx.Config{Schema: schema})
	if err != nil {
		return err
	}
	if _, err := weirmigrate.New(driver).Up(ctx, nil); err != nil {
		return fmt.Errorf("migrate schema %s: %v", schema, err)
	}
	ddl := strings.ReplaceAll(`
CREATE TABLE {s}.soak_run (started_at timestamptz NOT NULL DEFAULT now(), settings jsonb NOT NULL);
CREATE TABLE {s}.soak_exec (
	id bigserial PRIMARY KEY,
	job_id bigint NOT NULL,
	lease_token bigint NOT NULL,
	attempt integer NOT NULL,
	worker text NOT NULL,
	pid integer NOT NULL,
	mode text NOT NULL,
	nonce text NOT NULL,
	started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	ended_at timestamptz,
	result text,
	UNIQUE (job_id, lease_token, nonce)
);
CREATE TABLE {s}.soak_lease_end (
	job_id bigint NOT NULL,
	lease_token bigint NOT NULL,
	holder text,
	attempt_before integer NOT NULL,
	attempt_after integer NOT NULL,
	state text NOT NULL,
	released boolean NOT NULL,
	error text,
	expires_at timestamptz,
	at timestamptz NOT NULL
);
CREATE TABLE {s}.soak_promoted (job_id bigint NOT NULL, lease_token bigint NOT NULL, at timestamptz NOT NULL);
CREATE TABLE {s}.soak_fault (kind text NOT NULL, worker text, at timestamptz NOT NULL, until timestamptz, detail text);
CREATE TABLE {s}.soak_worker (
	name text PRIMARY KEY, started_at timestamptz, killed_at timestamptz, sigterm_at timestamptz,
	exit_at timestamptz, final boolean, died boolean, exit_status text, report jsonb
);
CREATE FUNCTION {s}.soak_log() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF OLD.state = 'running' THEN
		INSERT INTO {s}.soak_lease_end VALUES (OLD.id, OLD.lease_token, OLD.attempted_by, OLD.attempt,
			NEW.attempt, NEW.state, NEW.release_count > OLD.release_count,
			CASE WHEN jsonb_array_length(NEW.errors) > jsonb_array_length(OLD.errors)
				THEN NEW.errors -> -1 ->> 'error' END,
			OLD.lease_expires_at, clock_timestamp());
	ELSE
		INSERT INTO {s}.soak_promoted VALUES (NEW.id, NEW.lease_token, clock_timestamp());
	END IF;
	RETURN NULL;
END $$;
CREATE TRIGGER soak_log AFTER UPDATE ON {s}.weir_job FOR EACH ROW
	WHEN (OLD.state = 'running' AND (NEW.state <> 'running' OR NEW.lease_token <> OLD.lease_token)
		OR OLD.state IN ('retryable', 'scheduled') AND NEW.state = 'available')
	EXECUTE FUNCTION {s}.soak_log();
`, "{s}", ident)
	if _, err := pool.Exec(ctx, ddl); err != nil {
		return fmt.Errorf("create the audit tables in %s: %v", schema, err)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO "+ident+".soak_run (settings) VALUES ($1)", settings); err != nil {
		return fmt.Errorf("record the run: %v", err)
	}
	return nil
}

// workerArgs are the command line of a worker process.
func (s *soakRun) workerArgs(name string) []string {
	f := s.f
	return []string{"soak", "--worker", "--worker-name", name, "--schema", f.schema,
		"--concurrency", strconv.Itoa(f.concurrency), "--lease", f.lease.String(),
		"--heartbeat", f.heartbeat.String(), "--rescue", f.rescue.String(),
		"--stop-budget", f.stopBudget.String(), "--job-timeout", f.jobTimeout.String()}
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

	cmd := exec.Command(s.self, s.workerArgs(name)...)
	cmd.Env = append(os.Environ(), envDatabaseURL+"="+s.url)
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

// victim picks a random ready worker that was told nothing yet, or nil.
func (s *soakRun) victim(rng *rand.Rand) *workerProc {
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
	return ok[rng.IntN(len(ok))]
}

// takeVictim picks a victim for a fault of kind and marks it with mark,
// both under s.mu. If there is no victim, it counts the fault as skipped
// and returns nil.
func (s *soakRun) takeVictim(kind string, rng *rand.Rand, mark func(*workerProc)) *workerProc {
	s.mu.Lock()
	p := s.victim(rng)
	if p == nil {
		if s.skipped == nil {
			s.skipped = map[string]int{}
		}
		s.skipped[kind]++
		s.mu.Unlock()
		s.logf("%s skipped: no ready worker", kind)
		return nil
	}
	mark(p)
	s.mu.Unlock()
	return p
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
		faultRestart: s.f.restartEvery, faultKill: s.f.killEvery, faultPause: s.f.pauseEvery,
		faultConnKill: s.f.connKillEvery, faultPGRestart: s.f.pgRestartEach,
	}
	for i, kind := range []string{faultRestart, faultKill, faultPause, faultConnKill, faultPGRestart} {
		if !s.f.enabled[kind] {
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
	case faultRestart, faultKill:
		p := s.takeVictim(kind, rng, func(p *workerProc) {
			now := time.Now()
			if kind == faultRestart {
				p.stopping, p.sigtermAt = true, now
			} else {
				p.killed, p.killedAt = true, now
			}
			s.faults = append(s.faults, faultEvent{Kind: kind, Worker: p.name, At: now})
		})
		if p == nil {
			return
		}
		sig := syscall.SIGTERM
		if kind == faultKill {
			sig = syscall.SIGKILL
		}
		if err := p.cmd.Process.Signal(sig); err != nil {
			s.logf("%s %s: %v", kind, p.name, err)
		}
		s.logf("%s %s", kind, p.name)
		if kind == faultKill {
			<-p.exited // the replacement starts once the victim is gone
		}
		s.startWorker(p.slot)
	case faultPause:
		var at time.Time
		p := s.takeVictim(kind, rng, func(p *workerProc) {
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
		t := time.NewTimer(s.f.pauseFor)
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
			WHERE starts_with(application_name, $1) AND pid <> pg_backend_pid()`, workerAppPrefix(s.f.schema)).Scan(&n)
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
	}
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
		due := int(s.f.rate*time.Since(start).Seconds()) - sent
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
		for _, r := range res {
			s.inserted = append(s.inserted, r.Job.ID)
		}
		s.mu.Unlock()
		if err != nil {
			s.logf("insert %d jobs: %v", due, err)
		}
	}
}

// probeArgs draws a job from the mix. docs/reliability.md lists it.
func (s *soakRun) probeArgs(rng *rand.Rand) soakProbeArgs {
	budget := int(s.f.stopBudget.Milliseconds())
	x := rng.Float64()
	switch {
	case s.f.enabled[modeStubborn] && x < 0.005:
		return soakProbeArgs{Mode: modeStubborn, MS: budget/2 + rng.IntN(5*budget/2+1)}
	case s.f.enabled[modeOverrun] && x >= 0.005 && x < 0.015:
		return soakProbeArgs{Mode: modeOverrun}
	case x < 0.035:
		return soakProbeArgs{Mode: modeFail, MS: rng.IntN(20)}
	case x < 0.055: // longer than a stop's budget: cancelled and released when a stop comes
		return soakProbeArgs{Mode: modeOK, MS: budget + rng.IntN(budget+1)}
	case x < 0.155:
		return soakProbeArgs{Mode: modeOK, MS: 200 + rng.IntN(1300)}
	}
	return soakProbeArgs{Mode: modeOK, MS: rng.IntN(20)}
}

// progress prints a line on stderr every few seconds until ctx ends.
func (s *soakRun) progress(ctx context.Context) {
	every := 10 * time.Second
	if s.f.duration < time.Minute {
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
		pgx.Identifier{s.f.schema, "soak_exec"}.Sanitize()+") FROM "+pgx.Identifier{s.f.schema, "weir_job"}.Sanitize()).Scan(&final, &pending, &execs)
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
	fmt.Fprintln(s.e.stderr, strings.Join(strings.Fields(line), " "))
}

// drain waits until every job is final.
func (s *soakRun) drain(ctx context.Context) error {
	s.printProgress(ctx, "draining:")
	deadline := time.Now().Add(s.f.drainTimeout)
	lastLine := time.Now()
	job := pgx.Identifier{s.f.schema, "weir_job"}.Sanitize()
	for {
		var pending int
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := s.pool.QueryRow(qctx, "SELECT count(*) FROM "+job+" WHERE finalized_at IS NULL").Scan(&pending)
		cancel()
		if err == nil && pending == 0 {
			s.printProgress(ctx, "drained:")
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d jobs not final after the drain's %s", pending, s.f.drainTimeout)
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
	limit := time.NewTimer(s.f.stopBudget + 10*time.Second)
	defer limit.Stop()
	for _, p := range live {
		select {
		case <-p.exited:
		case <-limit.C:
			s.logf("%s: still running %s after SIGTERM; killing it", p.name, s.f.stopBudget+10*time.Second)
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
	f := s.f
	d := &soakData{Settings: soakSettings{
		Lease: f.lease, Heartbeat: f.heartbeat, Rescue: f.rescue, StopBudget: f.stopBudget,
		G9Slack: f.g9Slack, ExitSlack: time.Second,
	}}
	table := func(name string) string { return pgx.Identifier{f.schema, name}.Sanitize() }
	var err error
	d.Jobs, err = queryRows(ctx, s.pool, "SELECT id, state, lease_token, coalesce(attempted_by, ''), attempt FROM "+table("weir_job"),
		func(r pgx.CollectableRow) (finalJob, error) {
			var j finalJob
			err := r.Scan(&j.ID, &j.State, &j.Token, &j.AttemptedBy, &j.Attempt)
			return j, err
		})
	if err != nil {
		return nil, err
	}
	d.Execs, err = queryRows(ctx, s.pool, "SELECT id, job_id, lease_token, attempt, worker, mode, started_at, ended_at, coalesce(result, '') FROM "+table("soak_exec"),
		func(r pgx.CollectableRow) (auditExec, error) {
			var x auditExec
			var ended *time.Time
			err := r.Scan(&x.ID, &x.JobID, &x.Token, &x.Attempt, &x.Worker, &x.Mode, &x.Started, &ended, &x.Result)
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

	s.mu.Lock()
	defer s.mu.Unlock()
	d.Inserted = slices.Clone(s.inserted)
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
	table := func(name string) string { return pgx.Identifier{s.f.schema, name}.Sanitize() }
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
		fmt.Fprintf(s.e.stderr, "soak: record the workers and faults: %v\n", err)
	}
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// printReport prints the table of the run and the violations found.
func (s *soakRun) printReport(w io.Writer, r *soakReport, took time.Duration) {
	f := s.f
	fmt.Fprintf(w, "weir soak: %s of load + drain in %s; %d workers × %d handlers; %g jobs/s; faults %s\n",
		f.duration, took.Round(time.Second), f.workers, f.concurrency, f.rate, s.faultList())
	fmt.Fprintf(w, "lease %s, heartbeat %s, rescue %s, stop budget %s; schema %s; seed %d\n\n",
		f.lease, f.heartbeat, f.rescue, f.stopBudget, f.schema, s.seed)
	s.mu.Lock()
	insertErrors, startFailures, skipped := s.insertErrors, s.startFailures, s.skipped
	s.mu.Unlock()
	printSoakTable(w, r, f.stopBudget, insertErrors, startFailures, skipped)
}

// printSoakTable prints r as a table, then the checks and the violations.
func printSoakTable(w io.Writer, r *soakReport, budget time.Duration, insertErrors, startFailures int, skipped map[string]int) {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	row := func(name string, value any) { fmt.Fprintf(tw, "%s\t%v\n", name, value) }
	row("MEASURE", "VALUE")
	row("jobs inserted", fmt.Sprintf("%d (%d insert batches failed)", r.Inserted, insertErrors))
	var states []string
	for _, st := range []string{"completed", "discarded", "cancelled", "available", "retryable", "scheduled", "running"} {
		if r.States[st] > 0 {
			states = append(states, fmt.Sprintf("%s %d", st, r.States[st]))
		}
	}
	row("jobs in the table", fmt.Sprintf("%d (%s)", r.Jobs, strings.Join(states, ", ")))
	row("executions", r.Executions)
	row("graceful restarts", r.Restarts)
	row("graceful stops, final ones included", r.GracefulStops)
	row("kills (SIGKILL)", r.Kills)
	row("pauses (SIGSTOP)", r.Pauses)
	row("connection kills", fmt.Sprintf("%d (%d backends)", r.ConnKills, r.BackendsKilled))
	row("PostgreSQL restarts", r.PGRestarts)
	if len(skipped) > 0 {
		row("faults skipped (no ready worker)", fmt.Sprint(skipped))
	}
	row("worker start failures", startFailures)
	row("retries (planned failures, timeouts)", r.Retries)
	row("releases at a stop", r.Releases)
	row("prefetched jobs returned at a stop", r.Returns)
	row("leases rescued", r.Rescues)
	total := 0
	for _, c := range dupCauses {
		total += r.Duplicates[c.cause]
	}
	row("duplicate executions", total)
	for _, c := range dupCauses {
		if n := r.Duplicates[c.cause]; n > 0 || c.allowed {
			verdict := "allowed"
			if !c.allowed {
				verdict = "VIOLATION"
			}
			row("  "+c.label, fmt.Sprintf("%d (%s)", n, verdict))
		}
	}
	row("overlapping executions (a handler past its lost lease)", r.Overlaps)
	row("lost jobs", r.Lost)
	row("stale wins", r.StaleWins)
	row("stale writes rejected (reported at stops)", r.StaleRejected)
	row("worst stop / budget", fmt.Sprintf("%s / %s (+100ms allowed)", r.WorstStop.Round(time.Millisecond), budget))
	row("worst SIGTERM to exit", r.WorstExit.Round(time.Millisecond))
	row("worst kill to runnable again (G9)", fmt.Sprintf("%s over %d jobs", r.WorstRerun.Round(time.Millisecond), r.G9Checked))
	row("  the same with a database fault or a pause in between (not bounded)", fmt.Sprintf("%s over %d jobs",
		r.WorstRerunFaulted.Round(time.Millisecond), r.G9Faulted))
	tw.Flush()

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "CHECK\tRESULT\n")
	for _, g := range []struct{ id, what string }{
		{"G1", "every job final, none lost"},
		{"G2", "no duplicate after a graceful stop"},
		{"G3", "no outcome written by a stale lease"},
		{"G4", "every stop within budget + 100ms"},
		{"G9", "duplicates only after a kill, within lease + rescue"},
		{"RUN", "no worker died on its own"},
	} {
		result := "ok"
		if n := r.byGuarantee(g.id); n > 0 {
			result = fmt.Sprintf("FAILED: %d violations", n)
		}
		fmt.Fprintf(tw, "%s %s\t%s\n", g.id, g.what, result)
	}
	tw.Flush()

	shown := map[string]int{}
	for _, v := range r.Violations {
		shown[v.Guarantee]++
		if shown[v.Guarantee] <= 10 {
			fmt.Fprintf(w, "%s: %s\n", v.Guarantee, v.Msg)
		}
	}
	var keys []string
	for g := range shown {
		keys = append(keys, g)
	}
	slices.Sort(keys)
	for _, g := range keys {
		if n := shown[g]; n > 10 {
			fmt.Fprintf(w, "%s: ... and %d more\n", g, n-10)
		}
	}
}

// endCluster deals with the throwaway cluster at the end of the run: kept
// running with --keep-postgres; else stopped, and deleted unless the run
// failed, in which case its directory keeps the audit trail.
func (s *soakRun) endCluster(runErr error) {
	c := s.cluster
	switch {
	case s.f.keepPostgres:
		fmt.Fprintf(s.e.stderr, "soak: the cluster keeps running at %s; stop it with: %s\n", c.URL(), c.Command("stop"))
	case runErr != nil:
		if err := c.Shutdown(); err != nil {
			fmt.Fprintf(s.e.stderr, "soak: %v\n", err)
		}
		fmt.Fprintf(s.e.stderr, "soak: the stopped cluster in %s keeps the audit trail (database soak, schema %s); start it with: %s\n",
			c.Dir(), s.f.schema, c.Command("start"))
	default:
		if err := c.Stop(); err != nil {
			fmt.Fprintf(s.e.stderr, "soak: %v\n", err)
		}
	}
}

// restartPostgres restarts the cluster's server for the nth pgrestart fault
// and says how. The odd restarts are fast shutdowns (sessions are
// terminated, a checkpoint is written) followed at once by a start; the even
// ones are crashes (immediate mode: no checkpoint, crash recovery at the
// start) with the server down for --pgrestart-down.
func (s *soakRun) restartPostgres(n int) (string, error) {
	if n%2 == 1 {
		return "fast", s.cluster.Restart()
	}
	down := s.f.pgDown
	how := fmt.Sprintf("immediate, down %s", down)
	if err := s.cluster.Crash(); err != nil {
		return how, err
	}
	time.Sleep(down) // the fault: the server stays down this long
	return how, s.cluster.StartServer()
}
