package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/weirq/weir"
)

var periodicCommand = &command{
	name:    "periodic",
	summary: "list periodic jobs' schedules; pause, resume, trigger or delete one",
	usage:   periodicUsage,
	run:     runPeriodic,
}

const periodicSynopsis = `Usage:

    weir periodic list    [--json]
    weir periodic pause   NAME
    weir periodic resume  NAME
    weir periodic trigger NAME
    weir periodic delete  NAME

Each action also takes --database-url URL and --schema NAME.

list prints every schedule the clients registered (Config.PeriodicJobs): its
spec and time zone, next and last run, the client that leads and fires it, and
whether it is paused or orphaned (no leader declares it, so it does not fire),
as a table or, with --json, as a JSON array.
pause stops the schedule from firing until it is resumed; the slots missed
meanwhile follow its CatchUp. resume lets it fire again.
trigger makes the schedule due now: the leader fires it within an election
interval (at most 5 s), and its next slot still comes.
delete removes an orphaned schedule. A schedule the leader declares is refused:
remove it from the clients' config first.
Each change prints the schedule afterwards (--json: as a JSON object).
`

var periodicGroup = &actionGroup{
	name: "periodic", actions: []string{"list", "pause", "resume", "trigger", "delete"}, synopsis: periodicSynopsis,
	flags: func(action string) *flag.FlagSet { fs, _ := periodicFlags(action); return fs },
}

func periodicUsage(w io.Writer) { periodicGroup.usage(w) }

type periodicOpts struct {
	db   dbFlags
	json bool
}

func periodicFlags(action string) (*flag.FlagSet, *periodicOpts) {
	o := &periodicOpts{}
	fs := newFlagSet("weir periodic " + action)
	o.db.register(fs)
	fs.BoolVar(&o.json, "json", false, "print JSON")
	return fs, o
}

func runPeriodic(ctx context.Context, e *env, args []string) error {
	action, err := periodicGroup.action(e, args)
	if err != nil {
		return err
	}
	fs, o := periodicFlags(action)
	positional, err := parseArgs(e, fs, args[1:], periodicUsage)
	if err != nil {
		return err
	}
	if err := o.db.resolve(e, fs); err != nil {
		return err
	}
	name, err := nameArg(fs, action, positional, "periodic job name")
	if err != nil {
		return err
	}
	client, closeDB, err := openClient(ctx, &o.db)
	if err != nil {
		return err
	}
	defer closeDB()
	if action == "list" {
		rows, err := client.PeriodicList(ctx)
		if err != nil {
			return o.db.clientErr(fs, err)
		}
		return printPeriodic(e.stdout, rows, o.json)
	}
	op := map[string]func(context.Context, string) (*weir.PeriodicRow, error){
		"pause": client.PeriodicPause, "resume": client.PeriodicResume,
		"trigger": client.PeriodicTrigger, "delete": client.PeriodicDelete,
	}[action]
	row, err := op(ctx, name)
	if errors.Is(err, weir.ErrInvalid) {
		return usagef("%s: %v", cmdName(fs), err)
	}
	switch {
	case errors.Is(err, weir.ErrPeriodicDeclared):
		return fmt.Errorf("%s: periodic job %q: the leader declares it; remove it from the clients' config first, or pause it",
			cmdName(fs), termSafe(name))
	case errors.Is(err, weir.ErrNotFound):
		return fmt.Errorf("%s: no periodic job %q", cmdName(fs), termSafe(name))
	}
	if err != nil {
		return o.db.clientErr(fs, err)
	}
	if o.json {
		return writeJSON(e.stdout, row)
	}
	verb := map[string]string{"pause": "paused", "resume": "resumed", "trigger": "triggered", "delete": "deleted"}[action]
	_, err = fmt.Fprintf(e.stdout, "periodic job %s %s\n", termSafe(row.Name), verb)
	return err
}

func printPeriodic(w io.Writer, rows []*weir.PeriodicRow, asJSON bool) error {
	if asJSON {
		if rows == nil {
			rows = []*weir.PeriodicRow{} // [], not null
		}
		return writeJSON(w, rows)
	}
	if len(rows) == 0 {
		_, err := fmt.Fprintln(w, "no periodic jobs")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSCHEDULE\tTIME ZONE\tNEXT RUN\tLAST RUN\tSTATUS\tLEADER")
	for _, r := range rows {
		status := "active"
		switch {
		case r.OrphanedAt != nil:
			status = "orphaned"
		case r.PausedAt != nil:
			status = "paused"
		}
		last := "-"
		if r.LastRunAt != nil {
			last = r.LastRunAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", termSafe(r.Name), termSafe(r.Spec), termSafe(r.TimeZone),
			r.NextRunAt.UTC().Format(time.RFC3339), last, status, termSafe(r.DeclaredBy))
	}
	return tw.Flush()
}
