package main

// weir soak's command line: its flags and their checks, which fill a
// soak.Config, and the hidden worker command that the soak re-executes this
// binary as. cmd/weir/internal/soak runs the soak.

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/weirq/weir/cmd/weir/internal/soak"
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
runnable again within lease + rescue interval, or a leader term after a
leader's death (G9); with --global-limit N, never more than N of the queue's
handlers running at once, and with --key-limit N never more than N of one
key's, as the audit trail's times show them (G11). It
prints a table on stdout and exits 1 if any check failed.

Faults (--faults, comma-separated; "all" or "none"; default
restart,kill,pause,connkill,overrun,stubborn), each at a random 75% to 125%
of its interval:

    restart    SIGTERM one worker every --restart-every, start a replacement
    kill       SIGKILL one worker every --kill-every, start a replacement
    killleader SIGKILL the maintenance leader every --killleader-every (a
               random worker when none leads), start a replacement
    pause      SIGSTOP one worker every --pause-every for --pause-for (past its
               leases: they are rescued while it sleeps), then SIGCONT
    connkill   pg_terminate_backend of every worker session every --connkill-every
    pgrestart  restart PostgreSQL every --pgrestart-every (needs --start-postgres):
               a fast restart, then a crash with the server down for
               --pgrestart-down, in turn
    failover   crash the PostgreSQL primary every --failover-every, promote
               its standby, rebuild the old primary as the new standby (needs
               --start-postgres, which then starts a primary and a --standby
               standby; everything connects through their multi-host URL)
    snapshot   every --snapshot-every, a session of its own holds a REPEATABLE
               READ snapshot open for --snapshot-for (VACUUM then removes
               nothing: claims must stay fast, docs/design/storage.md)
    overrun    1% of jobs outlast their timeout on the first attempt
    stubborn   0.5% of jobs ignore cancellation (and their timeout) for up to
               three stop budgets

The soak works in its own schema (--schema, default weir_soak), which it
creates, marks as its own with a comment, migrates and keeps for inspection; a
later run drops and recreates a schema that has the mark, and refuses any
other existing schema. It needs
PostgreSQL: SQLite is refused. With --start-postgres it starts a throwaway
cluster (initdb and pg_ctl from PATH or /usr/lib/postgresql/*/bin) instead of
connecting to --database-url, and deletes it at the end; with the failover
fault, a primary and a streaming standby (--standby sync or async).

Flags:
`)
	fs, _ := soakFlagSet(false)
	printDefaults(w, fs)
}

// soakFlags are weir soak's flags.
type soakFlags struct {
	cfg    soak.Config
	faults string // parsed into cfg.Faults

	// The worker process's own.
	worker     bool
	workerName string
}

const defaultSoakFaults = "restart,kill,pause,connkill,overrun,stubborn"

// soakFlagSet returns the flag set of weir soak; hidden adds the worker
// process's flags, which the help does not show.
func soakFlagSet(hidden bool) (*flag.FlagSet, *soakFlags) {
	f := &soakFlags{}
	c := &f.cfg
	fs := newFlagSet("weir soak")
	fs.StringVar(&c.URL, "database-url", "", "PostgreSQL `URL` (default $"+envDatabaseURL+")")
	fs.StringVar(&c.Schema, "schema", "weir_soak", "`NAME` of the soak's own schema")
	fs.DurationVar(&c.Duration, "duration", 2*time.Minute, "how long to insert jobs and inject faults, before the drain")
	fs.IntVar(&c.Workers, "workers", 3, "worker processes, `K`")
	fs.IntVar(&c.Concurrency, "concurrency", 16, "handlers at once in each worker")
	fs.IntVar(&c.GlobalLimit, "global-limit", 0, "the soak queue's global limit, `N` jobs running at once across the workers (0: none), checked as G11")
	fs.IntVar(&c.KeyLimit, "key-limit", 0, "the soak queue's limit per key, `N` jobs of one key (of 8, drawn at random) running at once across the workers (0: none), checked as G11")
	fs.Float64Var(&c.Rate, "rate", 100, "jobs inserted per second")
	fs.StringVar(&f.faults, "faults", defaultSoakFaults, "faults to inject: a comma-separated `LIST`, all or none")
	fs.DurationVar(&c.RestartEvery, "restart-every", 8*time.Second, "interval of graceful restarts")
	fs.DurationVar(&c.KillEvery, "kill-every", 30*time.Second, "interval of SIGKILLs")
	fs.DurationVar(&c.KillLeaderEvery, "killleader-every", 30*time.Second, "interval of SIGKILLs of the maintenance leader")
	fs.DurationVar(&c.ConnKillEvery, "connkill-every", 15*time.Second, "interval of connection kills")
	fs.DurationVar(&c.PauseEvery, "pause-every", 20*time.Second, "interval of pauses (SIGSTOP)")
	fs.DurationVar(&c.PauseFor, "pause-for", 5*time.Second, "how long a paused worker stays frozen")
	fs.DurationVar(&c.PGRestartEvery, "pgrestart-every", 2*time.Minute, "interval of PostgreSQL restarts")
	fs.DurationVar(&c.FailoverEvery, "failover-every", time.Minute, "interval of failovers")
	fs.DurationVar(&c.SnapshotEvery, "snapshot-every", time.Minute, "interval of snapshots held open")
	fs.DurationVar(&c.SnapshotFor, "snapshot-for", 20*time.Second, "how long each snapshot is held open")
	fs.StringVar(&c.Standby, "standby", "sync", "the failover fault's standby: sync or async (async loses what it had not received)")
	fs.DurationVar(&c.PGRestartDown, "pgrestart-down", time.Second, "how long every second PostgreSQL restart (a crash) keeps the server down")
	fs.DurationVar(&c.Lease, "lease", 3*time.Second, "the workers' lease duration")
	fs.DurationVar(&c.Heartbeat, "heartbeat", 500*time.Millisecond, "the workers' heartbeat interval")
	fs.DurationVar(&c.Rescue, "rescue", time.Second, "the workers' rescue interval")
	fs.DurationVar(&c.StopBudget, "stop-budget", 3*time.Second, "each graceful stop's budget")
	fs.DurationVar(&c.JobTimeout, "job-timeout", 300*time.Millisecond, "the timeout of overrun and stubborn jobs")
	fs.DurationVar(&c.G9Slack, "g9-slack", 500*time.Millisecond, "allowance over the G9 bound for a killed worker's jobs, for statement latency")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", 2*time.Minute, "how long the drain waits for the next job to be final (it goes on while jobs become final)")
	fs.BoolVar(&c.PgBouncer, "pgbouncer", false, "start a PgBouncer in transaction mode in front of the database; the workers connect through it (implies --poll-only)")
	fs.BoolVar(&c.PollOnly, "poll-only", false, "the workers' clients poll for jobs and listen for nothing (weir.Config.PollOnly)")
	fs.BoolVar(&c.StartPostgres, "start-postgres", false, "start a throwaway PostgreSQL cluster instead of using --database-url")
	fs.BoolVar(&c.KeepPostgres, "keep-postgres", false, "leave the --start-postgres cluster running at the end (it is kept, stopped, after a failed run)")
	fs.StringVar(&c.LogPath, "log", "", "`FILE` for the workers' logs (default: a new file in the temporary directory)")
	fs.Uint64Var(&c.Seed, "seed", 0, "seed of the job mix and the choice of victims (default: random)")
	if hidden {
		fs.BoolVar(&f.worker, "worker", false, "run as a worker process of a soak")
		fs.StringVar(&f.workerName, "worker-name", "", "the worker's name")
	}
	return fs, f
}

// check validates the flags before anything runs, and fills in the database
// URL from the environment.
func (f *soakFlags) check(e *env, fs *flag.FlagSet) error {
	if f.worker {
		if err := f.cfg.WorkerSettings.Validate(); err != nil {
			return usagef("soak: %v", err)
		}
		if f.workerName == "" {
			return usagef("soak: --worker needs --worker-name")
		}
		if f.cfg.URL = e.getenv(envDatabaseURL); f.cfg.URL == "" {
			return usagef("soak: the worker needs %s", envDatabaseURL)
		}
		return nil
	}
	if f.workerName != "" {
		return usagef("soak: --worker-name is only for --worker")
	}
	f.cfg.Faults = parseFaults(f.faults)
	if f.cfg.PgBouncer {
		f.cfg.PollOnly = true // LISTEN does not work through PgBouncer in transaction mode
	}
	if err := f.cfg.Validate(); err != nil {
		return usagef("soak: %v", err)
	}
	if !slices.Contains(f.cfg.Faults, "failover") {
		for _, name := range []string{"standby", "failover-every"} {
			if isSet(fs, name) {
				return usagef("soak: --%s is only for the failover fault", name)
			}
		}
	}
	if f.cfg.StartPostgres {
		if isSet(fs, "database-url") {
			return usagef("soak: --start-postgres and --database-url exclude each other: the soak uses the cluster it starts")
		}
		return nil
	}
	if !isSet(fs, "database-url") {
		f.cfg.URL = e.getenv(envDatabaseURL)
	}
	if f.cfg.URL == "" {
		return usagef("soak: no database URL: pass --database-url, set %s, or pass --start-postgres", envDatabaseURL)
	}
	if _, ok := sqlitePath(f.cfg.URL); ok {
		return usagef("soak: weir soak runs on PostgreSQL only, and the database URL names a SQLite database")
	}
	pcfg, err := postgresConfig(f.cfg.URL)
	if err != nil {
		return err
	}
	if f.cfg.PgBouncer {
		return checkPgBouncerTarget(f.cfg.URL, pcfg.ConnConfig.Password, "soak")
	}
	return nil
}

// checkPgBouncerTarget checks that the database weir starts a PgBouncer in
// front of (soak --pgbouncer, bench --start-pgbouncer) is named by a
// postgres:// URL without a password: that PgBouncer only trusts.
func checkPgBouncerTarget(rawURL, password, cmd string) error {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Host == "" {
		return usagef("%s: the PgBouncer weir starts needs a postgres:// URL with a host; the database URL is not one", cmd)
	}
	if password != "" {
		return usagef("%s: the PgBouncer weir starts authenticates nobody (trust): use a database URL without a password, for a server that trusts 127.0.0.1", cmd)
	}
	return nil
}

// parseFaults splits --faults into fault names; Config.Validate checks them.
func parseFaults(list string) []string {
	switch strings.TrimSpace(list) {
	case "none", "":
		return nil
	case "all":
		return soak.FaultNames()
	}
	var names []string
	for item := range strings.SplitSeq(list, ",") {
		names = append(names, strings.TrimSpace(item))
	}
	return names
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
		w := soak.WorkerConfig{WorkerSettings: f.cfg.WorkerSettings, Name: f.workerName, URL: f.cfg.URL}
		return soak.RunWorker(ctx, w, e.stdin, e.stdout, e.stderr)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("soak: cannot find this program to start workers: %v", err)
	}
	f.cfg.WorkerCommand = soakWorkerCommand(self)
	return soak.Run(ctx, f.cfg, e.stdout, e.stderr)
}

// soakWorkerCommand returns the command that runs a worker process: the weir
// binary at self as `weir soak --worker`, which runSoak hands to
// soak.RunWorker, with the database URL in the environment, where no process
// list shows it.
func soakWorkerCommand(self string) func(soak.WorkerConfig) *exec.Cmd {
	return func(w soak.WorkerConfig) *exec.Cmd {
		cmd := exec.Command(self, "soak", "--worker", "--worker-name", w.Name, "--schema", w.Schema,
			"--concurrency", strconv.Itoa(w.Concurrency), "--global-limit", strconv.Itoa(w.GlobalLimit),
			"--key-limit", strconv.Itoa(w.KeyLimit), "--lease", w.Lease.String(),
			"--heartbeat", w.Heartbeat.String(), "--rescue", w.Rescue.String(),
			"--stop-budget", w.StopBudget.String(), "--job-timeout", w.JobTimeout.String())
		if w.PollOnly {
			cmd.Args = append(cmd.Args, "--poll-only")
		}
		cmd.Env = append(os.Environ(), envDatabaseURL+"="+w.URL)
		return cmd
	}
}
