package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/weirq/weir"
)

var clientsCommand = &command{
	name:    "clients",
	summary: "list the running clients: their queues, held leases and last heartbeat",
	usage:   clientsUsage,
	run:     runClients,
}

const clientsSynopsis = `Usage:

    weir clients list [--json]

It also takes --database-url URL and --schema NAME.

list prints the client registry: every started client, with its host,
process id, weir version, the queues it works (each with its MaxWorkers), the
running jobs it holds, when it started, its last heartbeat and whether it
leads maintenance, as a table or, with --json, as a JSON array. Each client
refreshes its row every 5 s and deletes it when it stops; the leader forgets
the row of a client that crashed a minute after its last heartbeat. The
registry is informational: clients that only insert are not in it, and a
client missing from it still runs its jobs.
`

var clientsGroup = &actionGroup{
	name: "clients", actions: []string{"list"}, synopsis: clientsSynopsis,
	flags: func(action string) *flag.FlagSet { fs, _ := clientsFlags(action); return fs },
}

func clientsUsage(w io.Writer) { clientsGroup.usage(w) }

type clientsOpts struct {
	db   dbFlags
	json bool
}

func clientsFlags(action string) (*flag.FlagSet, *clientsOpts) {
	o := &clientsOpts{}
	fs := newFlagSet("weir clients " + action)
	o.db.register(fs)
	fs.BoolVar(&o.json, "json", false, "print a JSON array of clients")
	return fs, o
}

func runClients(ctx context.Context, e *env, args []string) error {
	action, err := clientsGroup.action(e, args)
	if err != nil {
		return err
	}
	fs, o := clientsFlags(action)
	positional, err := parseArgs(e, fs, args[1:], clientsUsage)
	if err != nil {
		return err
	}
	if err := o.db.resolve(e, fs); err != nil {
		return err
	}
	if _, err := nameArg(fs, action, positional, ""); err != nil {
		return err
	}
	client, closeDB, err := openClient(ctx, &o.db)
	if err != nil {
		return err
	}
	defer closeDB()
	rows, err := client.ClientList(ctx)
	if err != nil {
		return o.db.clientErr(fs, err)
	}
	return printClients(e.stdout, rows, o.json)
}

func printClients(w io.Writer, rows []*weir.ClientRow, asJSON bool) error {
	if asJSON {
		if rows == nil {
			rows = []*weir.ClientRow{} // [], not null
		}
		return writeJSON(w, rows)
	}
	if len(rows) == 0 {
		_, err := fmt.Fprintln(w, "no clients")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tHOST\tPID\tVERSION\tQUEUES\tLEASES\tSTARTED\tHEARTBEAT\tLEADER")
	for _, r := range rows {
		queues := make([]string, len(r.Queues))
		for i, q := range r.Queues {
			queues[i] = fmt.Sprintf("%s:%d", q.Name, q.MaxWorkers)
		}
		leader := "no"
		if r.Leader {
			leader = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%s\t%s\t%s\n", termSafe(r.ID), termSafe(r.Host), r.PID,
			termSafe(orDash(r.Version)), termSafe(orDash(strings.Join(queues, ","))), r.HeldLeases,
			r.StartedAt.UTC().Format(time.RFC3339), r.HeartbeatAt.UTC().Format(time.RFC3339), leader)
	}
	return tw.Flush()
}
