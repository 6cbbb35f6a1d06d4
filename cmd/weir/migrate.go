package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/weirq/weir/weirmigrate"
)

var migrateCommand = &command{
	name:    "migrate",
	summary: "apply, revert or list weir's schema migrations",
	usage:   migrateUsage,
	run:     runMigrate,
}

const migrateSynopsis = `Usage:

    weir migrate up     [--database-url URL] [--schema NAME] [--target-version N]
    weir migrate down   [--database-url URL] [--schema NAME] [--steps N | --all | --target-version N] [--force]
    weir migrate status [--database-url URL] [--schema NAME] [--json]

up applies the pending migrations, all of them or up to --target-version, and
creates the schema if it does not exist.
down reverts the latest migration, or the latest --steps N, or all of them with
--all (dropping weir's tables), or every one above --target-version. It refuses
to drop what users wrote (jobs and their outputs, periodic schedules, queue
settings) while there is any, saying what it would drop, unless --force.
status lists every migration this weir knows and whether it is applied, and any
newer migration the database has. It exits 0 when this weir can run against
the schema, 3 when migrations are pending, and 1 when the schema has a newer
migration that is not marked compatible.

Each run is one transaction: it applies everything or nothing. Concurrent runs
on the same schema wait for each other.
`

var migrateGroup = &actionGroup{
	name: "migrate", actions: []string{"up", "down", "status"}, synopsis: migrateSynopsis,
	flags: func(action string) *flag.FlagSet { fs, _ := migrateFlags(action); return fs },
}

func migrateUsage(w io.Writer) { migrateGroup.usage(w) }

// migrateOpts are the flags of weir migrate's actions.
type migrateOpts struct {
	db            dbFlags
	steps         int
	all           bool
	targetVersion int
	force         bool
	json          bool
}

func migrateFlags(action string) (*flag.FlagSet, *migrateOpts) {
	o := &migrateOpts{}
	fs := newFlagSet("weir migrate " + action)
	o.db.register(fs)
	switch action {
	case "up":
		fs.IntVar(&o.targetVersion, "target-version", 0, "apply migrations up to version `N` only (default: the latest)")
	case "down":
		fs.IntVar(&o.steps, "steps", 1, "revert the latest `N` migrations")
		fs.BoolVar(&o.all, "all", false, "revert every migration, dropping weir's tables")
		fs.IntVar(&o.targetVersion, "target-version", 0, "revert every migration above version `N` (0: all)")
		fs.BoolVar(&o.force, "force", false, "revert even when that drops jobs, periodic schedules or queue settings, which are lost")
	case "status":
		fs.BoolVar(&o.json, "json", false, "print JSON: {version, applied, pending, unknown}")
	}
	return fs, o
}

func runMigrate(ctx context.Context, e *env, args []string) error {
	action, err := migrateGroup.action(e, args)
	if err != nil {
		return err
	}
	fs, o := migrateFlags(action)
	if err := parseFlags(e, fs, args[1:], migrateUsage); err != nil {
		return err
	}
	if err := o.db.resolve(e, fs); err != nil {
		return err
	}
	if action == "down" {
		given := 0
		for _, name := range []string{"steps", "all", "target-version"} {
			if isSet(fs, name) {
				given++
			}
		}
		if given > 1 {
			return usagef("%s: give at most one of --steps, --all and --target-version", cmdName(fs))
		}
		if o.steps < 1 {
			return usagef("%s: --steps must be at least 1, got %d", cmdName(fs), o.steps)
		}
	}
	if isSet(fs, "target-version") && o.targetVersion < 0 {
		return usagef("%s: --target-version must not be negative, got %d", cmdName(fs), o.targetVersion)
	}
	// Checked before the database is opened, so that a mistake does not leave
	// behind the SQLite file that migrate up creates.
	if isSet(fs, "target-version") {
		lowest, latest := 0, len(migrationsFor(o.db.url))
		if action == "up" {
			lowest = 1
		}
		if o.targetVersion < lowest || o.targetVersion > latest {
			return usagef("%s: --target-version %d is out of range %d..%d", cmdName(fs), o.targetVersion, lowest, latest)
		}
	}

	o.db.create = action == "up" // only migrate up may create a SQLite file
	db, err := o.db.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	m := weirmigrate.New(db.driver)

	switch action {
	case "up":
		done, err := m.Up(ctx, &weirmigrate.UpOpts{TargetVersion: o.targetVersion})
		if err != nil {
			return migrateErr(cmdName(fs), err)
		}
		if len(done) == 0 {
			fmt.Fprintln(e.stdout, "already up to date")
		}
		for _, mig := range done {
			fmt.Fprintf(e.stdout, "applied %s\n", mig)
		}
	case "down":
		opts := &weirmigrate.DownOpts{Steps: o.steps}
		switch {
		case o.all:
			opts = &weirmigrate.DownOpts{All: true}
		case isSet(fs, "target-version"):
			opts = &weirmigrate.DownOpts{TargetVersion: o.targetVersion, All: o.targetVersion == 0}
		}
		opts.Force = o.force
		done, err := m.Down(ctx, opts)
		if dropErr, ok := errors.AsType[*weirmigrate.DropsDataError](err); ok {
			return fmt.Errorf("%s: %s, in %s schema %q; nothing was reverted (pass --force to drop them)",
				cmdName(fs), dropErr.Lost(), dropErr.Driver, dropErr.Schema)
		}
		if err != nil {
			return migrateErr(cmdName(fs), err)
		}
		if len(done) == 0 {
			fmt.Fprintln(e.stdout, "nothing to revert")
		}
		for _, mig := range done {
			fmt.Fprintf(e.stdout, "reverted %s\n", mig)
		}
	case "status":
		return migrateStatus(ctx, e, cmdName(fs), m, o.json)
	}
	return nil
}

// errPending is returned by migrate status when migrations are pending; it
// exits with exitPending and prints nothing more, since the status did.
var errPending = errors.New("migrations are pending")

// migrateStatus prints the status of every migration and returns errPending
// when some are pending, or an error naming the newer migrations that are not
// marked compatible, so that a deploy script can gate on the exit status.
func migrateStatus(ctx context.Context, e *env, cmd string, m *weirmigrate.Migrator, asJSON bool) error {
	status, err := m.Status(ctx)
	if err != nil {
		return migrateErr(cmd, err)
	}
	if asJSON {
		err = writeJSON(e.stdout, statusJSON(status))
	} else {
		err = writeStatusTable(e.stdout, status)
	}
	if err != nil {
		return err
	}
	for _, s := range status {
		if !s.Applied {
			return errPending
		}
	}
	if err := m.Check(ctx); err != nil {
		return migrateErr(cmd, err)
	}
	return nil
}

func writeStatusTable(w io.Writer, status []weirmigrate.Status) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tNAME\tSTATUS\tAPPLIED AT")
	for _, s := range status {
		state, at := "pending", "-"
		if s.Applied {
			state, at = "applied", formatTime(s.AppliedAt)
		}
		if s.Unknown {
			state = "unknown-incompatible"
			if s.Compatible {
				state = "unknown-compatible"
			}
		}
		fmt.Fprintf(tw, "%03d\t%s\t%s\t%s\n", s.Version, termSafe(s.Name), state, at)
	}
	return tw.Flush()
}

// migrationJSON is one migration in migrate status --json.
type migrationJSON struct {
	Version   int        `json:"version"`
	Name      string     `json:"name"`
	AppliedAt *time.Time `json:"applied_at,omitempty"`
	// Compatible is set for unknown migrations only: whether they were recorded
	// as compatible with older weirs.
	Compatible *bool `json:"compatible,omitempty"`
}

// statusReport is what migrate status --json prints. Version is the newest
// applied migration, 0 when none is; Unknown lists the migrations the database
// has that this weir does not know.
type statusReport struct {
	Version int             `json:"version"`
	Applied []migrationJSON `json:"applied"`
	Pending []migrationJSON `json:"pending"`
	Unknown []migrationJSON `json:"unknown"`
}

func statusJSON(status []weirmigrate.Status) *statusReport {
	r := &statusReport{Applied: []migrationJSON{}, Pending: []migrationJSON{}, Unknown: []migrationJSON{}}
	for _, s := range status {
		j := migrationJSON{Version: s.Version, Name: s.Name}
		if s.Applied {
			r.Version = s.Version
			j.AppliedAt = utcPtr(&s.AppliedAt)
		}
		switch {
		case s.Unknown:
			j.Compatible = &s.Compatible
			r.Unknown = append(r.Unknown, j)
		case s.Applied:
			r.Applied = append(r.Applied, j)
		default:
			r.Pending = append(r.Pending, j)
		}
	}
	return r
}

// migrateErr is the error command cmd prints for err of weirmigrate: what
// stood in the way, after the command's name, without weirmigrate's own name
// and method, which mean nothing to a user.
func migrateErr(cmd string, err error) error {
	if e, ok := errors.AsType[*weirmigrate.OpError](err); ok {
		return fmt.Errorf("%s: %w", cmd, e.Err)
	}
	return err
}
