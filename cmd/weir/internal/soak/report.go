package soak

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// printReport prints the table of the run and the violations found.
func (s *soakRun) printReport(w io.Writer, r *soakReport, took time.Duration) {
	cfg := s.cfg
	fmt.Fprintf(w, "weir soak: %s of load + drain in %s; %d workers × %d handlers; %g jobs/s; faults %s\n",
		cfg.Duration, took.Round(time.Second), cfg.Workers, cfg.Concurrency, cfg.Rate, s.faultList())
	fmt.Fprintf(w, "lease %s, heartbeat %s, rescue %s, stop budget %s; schema %s; seed %d\n\n",
		cfg.Lease, cfg.Heartbeat, cfg.Rescue, cfg.StopBudget, cfg.Schema, s.seed)
	s.mu.Lock()
	insertErrors, startFailures, skipped := s.insertErrors, s.startFailures, s.skipped
	s.mu.Unlock()
	printSoakTable(w, r, cfg.StopBudget, insertErrors, startFailures, skipped)
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
	row("kills (SIGKILL)", fmt.Sprintf("%d (%d of the maintenance leader)", r.Kills, r.LeaderKills))
	row("pauses (SIGSTOP)", r.Pauses)
	row("connection kills", fmt.Sprintf("%d (%d backends)", r.ConnKills, r.BackendsKilled))
	row("PostgreSQL restarts", r.PGRestarts)
	if r.Failovers > 0 {
		row("failovers (crash the primary, promote the standby)", r.Failovers)
	}
	if len(skipped) > 0 {
		row("faults skipped (no ready worker before the end)", fmt.Sprint(skipped))
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
	row("executions resumed from an earlier lease's progress", r.Resumed)
	row("lost jobs", r.Lost)
	if r.AsyncLost > 0 || r.Failovers > 0 {
		row("jobs lost in an asynchronous standby's unreplicated window (allowed, not above)",
			fmt.Sprintf("%d (%d ids given again to later jobs)", r.AsyncLost, r.AsyncReused))
	}
	row("stale wins", r.StaleWins)
	row("stale writes rejected (reported at stops)", r.StaleRejected)
	row("worst stop / budget", fmt.Sprintf("%s / %s (+100ms allowed)", r.WorstStop.Round(time.Millisecond), budget))
	row("worst SIGTERM to exit", r.WorstExit.Round(time.Millisecond))
	row("periodic slots fired (every second)", fmt.Sprintf("%d, %s to %s", r.PeriodicSlots,
		r.PeriodicFirst.Format(time.TimeOnly), r.PeriodicLast.Format(time.TimeOnly)))
	if limit := r.GlobalLimit; limit > 0 {
		row("most handlers of the queue at once (G11)", fmt.Sprintf("%d, global limit %d (%d executions without an end not counted)",
			r.G11Most, limit, r.G11Unbounded))
	}
	if limit := r.KeyLimit; limit > 0 {
		row("most handlers of one key at once (G11)", fmt.Sprintf("%d, limit %d per key", r.G11KeyMost, limit))
	}
	row("worst kill to runnable again (G9)", fmt.Sprintf("%s over %d jobs", r.WorstRerun.Round(time.Millisecond), r.G9Checked))
	row("  the same with a database fault or a pause in between (not bounded)", fmt.Sprintf("%s over %d jobs",
		r.WorstRerunFaulted.Round(time.Millisecond), r.G9Faulted))
	if r.Table != nil {
		row("job table at the end", r.Table)
	}
	tw.Flush()

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "CHECK\tRESULT\n")
	for _, g := range []struct{ id, what string }{
		{"G1", "every job final, none lost"},
		{"G2", "no duplicate after a graceful stop"},
		{"G3", "no outcome written by a stale lease"},
		{"G4", "every stop within budget + 100ms"},
		{"G9", "duplicates only after a kill, runnable within the bound"},
		{"G10", "each periodic slot fired once, none missing"},
		{"G11", "never more handlers at once than the global limit, nor of one key than its limit"},
		{"RUN", "no worker died on its own"},
	} {
		if g.id == "G11" && r.GlobalLimit == 0 && r.KeyLimit == 0 {
			continue // no limit: nothing to check
		}
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
