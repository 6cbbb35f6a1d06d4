package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
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
    weir migrate down   [--database-url URL] [--schema NAME] [--steps N | --all | --target-version N]
    weir migrate status [--database-url URL] [--schema NAME]

up applies the pending migrations, all of them or up to --target-version, and
creates the schema if it does not exist.
down reverts the latest migration, or the latest --steps N, or all of them with
--all (dropping weir's tables), or every one above --target-version.
status lists every migration this weir knows and whether it is applied.

Each run is one transaction: it applies everything or nothing. Concurrent runs
on the same schema wait for each other.
`

func migrateUsage(w io.Writer) {
	fmt.Fprint(w, migrateSynopsis)
	for _, action := range []string{"up", "down", "status"} {
		fs, _ := migrateFlags(action)
		fmt.Fprintf(w, "\nFlags of %s:\n\n", fs.Name())
		printDefaults(w, fs)
	}
}

// migrateOpts are the flags of weir migrate's actions.
type migrateOpts struct {
	db            dbFlags
	steps         int
	all           bool
	targetVersion int
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
	}
	return fs, o
}

func runMigrate(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 {
		return usagef("migrate: missing action: up, down or status (run `weir migrate -h`)")
	}
	action := args[0]
	switch action {
	case "-h", "-help", "--help":
		migrateUsage(e.stdout)
		return flag.ErrHelp
	case "up", "down", "status":
	default:
		return usagef("migrate: unknown action %q: want up, down or status (run `weir migrate -h`)", action)
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
			return migrateErr(err)
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
		done, err := m.Down(ctx, opts)
		if err != nil {
			return migrateErr(err)
		}
		if len(done) == 0 {
			fmt.Fprintln(e.stdout, "nothing to revert")
		}
		for _, mig := range done {
			fmt.Fprintf(e.stdout, "reverted %s\n", mig)
		}
	case "status":
		status, err := m.Status(ctx)
		if err != nil {
			return migrateErr(err)
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "VERSION\tNAME\tSTATUS\tAPPLIED AT")
		for _, s := range status {
			state, at := "pending", "-"
			if s.Applied {
				state, at = "applied", s.AppliedAt.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%03d\t%s\t%s\t%s\n", s.Version, s.Name, state, at)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// migrateErr drops weirmigrate's package prefix, which means nothing to a user.
func migrateErr(err error) error {
	return fmt.Errorf("%s", strings.TrimPrefix(err.Error(), "weirmigrate: "))
}
