package soak

// The end checks of weir soak: pure functions over what the audit tables, the
// worker processes and the fault schedule recorded. docs/design/reliability.md gives
// the rules in prose; docs/design/contract.md defines the guarantees they check.

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/weirq/weir/weirdriver"
)

// soakSettings are the run's timings that the checks measure against.
type soakSettings struct {
	Lease, Heartbeat, Rescue time.Duration
	// StopBudget is each graceful stop's budget: Stop must return within it
	// plus stopAllowance (G4).
	StopBudget time.Duration
	// G9Slack is added to lease duration + rescue interval for the rescue
	// statement's own latency and the timers' scheduling.
	G9Slack time.Duration
	// ExitSlack bounds the time from Stop's return to the process's exit, as
	// the orchestrator sees it (signal delivery, printing the report, exit).
	ExitSlack time.Duration
	// GlobalLimit is the queue's global limit (G11); 0: none, not checked.
	// KeyLimit is its limit per key; 0: none, not checked.
	GlobalLimit, KeyLimit int
}

// stopAllowance is what G4 allows past Stop's deadline.
const stopAllowance = 100 * time.Millisecond

// leaseRef names one lease: a job and the token of one claim of it.
type leaseRef struct {
	JobID int64 `json:"job_id"`
	Token int64 `json:"lease_token"`
}

// auditExec is one execution of the probe handler: a row of soak_exec.
type auditExec struct {
	ID      int64
	JobID   int64
	Token   int64
	Attempt int
	Worker  string
	Mode    string
	Started time.Time
	Ended   time.Time // zero when the handler recorded no end
	Result  string    // what the handler returned: "ok" or why it failed
	// ProgressLease is the lease named by the progress the attempt started
	// with (every attempt records its own lease as progress); nil for none.
	ProgressLease *int64
}

func (x *auditExec) ref() leaseRef { return leaseRef{x.JobID, x.Token} }

// leaseEnd is one lease leaving the running state, as the trigger on weir_job
// recorded it, in the transaction that ended it: a row of soak_lease_end.
type leaseEnd struct {
	JobID         int64
	Token         int64
	Holder        string // attempted_by: the client that claimed this lease
	AttemptBefore int
	AttemptAfter  int
	State         string // the state the job went to
	Released      bool   // release_count grew: a release at shutdown
	Error         string // the error entry the transition appended, if any
	ExpiresAt     time.Time
	At            time.Time
}

func (e *leaseEnd) ref() leaseRef { return leaseRef{e.JobID, e.Token} }

// promotion is a job made available again (from retryable or scheduled) by
// the schedule pass, as the trigger recorded it: a row of soak_promoted.
type promotion struct {
	JobID int64
	Token int64 // the job's lease token then: that of the lease that ended last
	At    time.Time
}

// finalJob is a job's row after the drain.
type finalJob struct {
	ID          int64
	State       string
	Token       int64
	AttemptedBy string
	Attempt     int
	// Key is the job's args.key, "" when it has none.
	Key string
}

// stopReport is what a worker process says about its graceful stop.
type stopReport struct {
	Budget time.Duration `json:"budget"`
	Took   time.Duration `json:"took"`
	Error  string        `json:"error,omitempty"`
	// Abandoned are the handlers that had not returned when Stop returned.
	Abandoned []leaseRef `json:"abandoned,omitempty"`
	// Unwritten is set when Stop said some outcomes were not written;
	// UnwrittenJobs are the jobs it named, and BudgetOut is set when it said
	// outcomes were left unwritten because its budget ran out (naming none).
	Unwritten         bool    `json:"unwritten,omitempty"`
	UnwrittenJobs     []int64 `json:"unwritten_jobs,omitempty"`
	BudgetOut         bool    `json:"budget_out,omitempty"`
	StaleWrites       int64   `json:"stale_writes"`
	LeasesLost        int64   `json:"leases_lost"`
	AbandonedOutcomes int64   `json:"abandoned_outcomes"`
}

// workerRun is one worker process from start to exit, on the database clock.
type workerRun struct {
	Name  string
	Start time.Time
	// Killed: the orchestrator sent SIGKILL at KilledAt.
	Killed   bool
	KilledAt time.Time
	// Stopped: the orchestrator sent SIGTERM at SigtermAt; the process exited
	// at ExitAt. Final marks the stops at the end of the run.
	Stopped   bool
	Final     bool
	SigtermAt time.Time
	ExitAt    time.Time
	// Died: the process exited without being told to (a crash of the worker
	// itself), with ExitStatus.
	Died       bool
	ExitStatus string
	Report     *stopReport // nil when the worker printed none
}

// The faults of the schedule.
const (
	faultRestart = "restart" // SIGTERM one worker, start a replacement
	faultKill    = "kill"    // SIGKILL one worker, start a replacement
	// faultKillLeader SIGKILLs the maintenance leader; it is logged as a
	// kill with Detail "leader", as is a kill fault that hit the leader.
	faultKillLeader = "killleader"
	faultPause      = "pause"     // SIGSTOP one worker for a while, then SIGCONT
	faultConnKill   = "connkill"  // pg_terminate_backend of every worker session
	faultPGRestart  = "pgrestart" // restart the PostgreSQL server
	// faultSnapshot holds a REPEATABLE READ snapshot open in a session of
	// its own for a while: VACUUM removes nothing that died meanwhile, and
	// claims must stay fast through the ready list (docs/design/storage.md).
	faultSnapshot = "snapshot"
)

// faultEvent is one fault the schedule injected, on the database clock. A
// PostgreSQL restart and a pause last from At to Until; the other faults are
// instants.
type faultEvent struct {
	Kind   string
	Worker string
	At     time.Time
	Until  time.Time
	Detail string
}

func (f *faultEvent) until() time.Time {
	if f.Until.IsZero() {
		return f.At
	}
	return f.Until
}

// soakData is everything the checks look at.
type soakData struct {
	Settings soakSettings
	// Inserted are the ids the producer's inserts returned.
	Inserted   []int64
	Jobs       []finalJob
	Execs      []auditExec
	Ends       []leaseEnd
	Promotions []promotion
	Workers    []workerRun
	Faults     []faultEvent
	// PeriodicSlots are the slots of the periodic workload's jobs, one per job.
	PeriodicSlots []time.Time
	// InsertedAt is when the insert of each of Inserted returned;
	// AsyncWindows are the failover fault's unreplicated windows (failover.go).
	InsertedAt   []time.Time
	AsyncWindows []timeWindow
}

// The causes of a duplicate execution: a job run again after an execution
// whose lease ended without its outcome (a rescue), or after a final outcome.
const (
	dupCrash      = "crash"        // running at a SIGKILL: G9 allows it
	dupPaused     = "paused"       // its worker was frozen past its lease
	dupAbandoned  = "abandoned"    // the handler ignored cancellation past a stop's budget
	dupLeaseLost  = "lease lost"   // the worker ran on but its lease lapsed during a database fault
	dupDBDownStop = "db down"      // a graceful stop could not write an outcome: the server was restarting
	dupBudgetOut  = "budget out"   // a graceful stop left the outcome unwritten, and its error said so
	dupUnwritten  = "unwritten"    // a handler returned during a graceful stop, its outcome was lost: G2
	dupUnexplain  = "unexplained"  // none of the above
	dupAfterFinal = "after final"  // the job ran again after its outcome was final
	dupOrder      = "out of order" // no lease end for the earlier execution
)

// dupCauses lists the causes in the order the table shows them, and whether
// the contract allows them.
var dupCauses = []struct {
	cause, label string
	allowed      bool
}{
	{dupCrash, "running at a SIGKILL (G9)", true},
	{dupPaused, "worker frozen (SIGSTOP) past the lease", true},
	{dupAbandoned, "handler ignored cancellation past the stop budget", true},
	{dupLeaseLost, "lease lapsed during a database fault", true},
	{dupDBDownStop, "outcome unwritable at a stop: server restarting", true},
	{dupBudgetOut, "outcome unwritten at a stop that said so", true},
	{dupAsyncUndone, "outcome undone by an asynchronous failover", true},
	{dupUnwritten, "outcome lost at a graceful stop (G2)", false},
	{dupAfterFinal, "ran again after a final outcome", false},
	{dupUnexplain, "unexplained", false},
	{dupOrder, "earlier lease never ended", false},
}

// violation is one breach of the contract.
type violation struct {
	Guarantee string // G1, G2, G3, G4, G9, G10, G11, or RUN for the soak's own sanity
	Msg       string
}

// soakReport is the outcome of the checks.
type soakReport struct {
	Inserted, Jobs, Executions  int
	States                      map[string]int
	Restarts, Kills, PGRestarts int
	LeaderKills                 int // kills of the maintenance leader
	Pauses                      int
	ConnKills, BackendsKilled   int
	GracefulStops               int
	Retries, Releases, Returns  int
	Rescues                     int
	Duplicates                  map[string]int
	// Overlaps counts executions that started while an earlier execution of
	// the same job had not yet recorded its end (a handler still running after
	// its lease was lost, which is allowed).
	Overlaps int
	// Resumed counts executions that started with the progress an earlier
	// lease of their job wrote.
	Resumed       int
	Lost          int
	StaleWins     int
	StaleRejected int64
	WorstStop     time.Duration
	WorstExit     time.Duration
	// WorstRerun is the longest time from a kill until a job the killed
	// worker held was runnable again, among the G9Checked jobs: those with no
	// database fault, and no pause beginning, between the kill and then. The
	// G9Faulted others are not held to the bound; WorstRerunFaulted is their
	// longest.
	WorstRerun        time.Duration
	G9Checked         int
	G9Faulted         int
	WorstRerunFaulted time.Duration
	// PeriodicSlots counts the periodic workload's jobs, from PeriodicFirst to
	// PeriodicLast.
	PeriodicSlots               int
	PeriodicFirst, PeriodicLast time.Time
	Violations                  []violation
	// Table is the job table at the end, when it could be read.
	Table *tableStats

	// G11Most is the most executions of the queue counted at once by the G11
	// check; G11Unbounded the executions it could not bound (no end, no
	// lease end).
	G11Most, G11Unbounded int
	// G11KeyMost is the most executions of one key counted at once.
	G11KeyMost int
	// GlobalLimit and KeyLimit are the run's global limit and limit per key;
	// 0: none, and not checked.
	GlobalLimit, KeyLimit int

	// Failovers counts failover faults; AsyncLost the jobs lost because their
	// insert returned inside an unreplicated window of an asynchronous one,
	// AsyncReused those of them whose id a later insert returned again.
	Failovers, AsyncLost, AsyncReused int
}

// byGuarantee counts the violations of g.
func (r *soakReport) byGuarantee(g string) int {
	n := 0
	for _, v := range r.Violations {
		if v.Guarantee == g {
			n++
		}
	}
	return n
}

// probeToken finds the lease token that the probe handler writes in each of
// its errors.
var probeToken = regexp.MustCompile(`\btoken=(\d+)\b`)

// endKind says how a lease ended.
type endKind int

const (
	endRescue endKind = iota
	endCompleted
	endDiscarded
	endRetry
	endRelease
	endReturn
	endOther
)

func classifyEnd(e *leaseEnd) endKind {
	switch {
	case e.State == "running":
		return endOther
	case e.Error == weirdriver.DefaultRescueError:
		return endRescue
	case e.State == "completed":
		return endCompleted
	case e.State == "discarded":
		return endDiscarded
	case (e.State == "available" || e.State == "retryable") && e.Error != "":
		return endRetry
	case e.State == "available" && e.Released:
		return endRelease
	case e.State == "available" && e.AttemptAfter == e.AttemptBefore-1:
		return endReturn
	}
	return endOther
}

// checkSoak runs every check over d.
func checkSoak(d *soakData) *soakReport {
	c := &checker{d: d, r: &soakReport{States: map[string]int{}, Duplicates: map[string]int{}}}
	c.index()
	c.checkG1()
	c.checkInsertedTwice()
	c.checkEnds()
	c.checkFinalRows()
	c.checkDuplicates()
	c.checkProgress()
	c.checkG9()
	c.checkStops()
	c.checkPeriodic()
	c.checkG11()
	return c.r
}

// checkG11: under a global limit, at no instant do more of the queue's
// handlers run than the limit, and under a limit per key, no more of one
// key's. Each execution counts from its start, which it wrote after its claim
// committed, to the first of its end, which it wrote before it returned, and
// the end of its lease, which the trigger wrote in the transaction that ended
// it (all on the server's clock): within the time its lease held, whose count
// the claims keep at most the limit. A handler that ran on past the end of
// its lease is counted only until then, since G11 says nothing of it; an
// execution with neither end is not counted.
func (c *checker) checkG11() {
	global, perKey := c.d.Settings.GlobalLimit, c.d.Settings.KeyLimit
	c.r.GlobalLimit, c.r.KeyLimit = global, perKey
	if global <= 0 && perKey <= 0 {
		return
	}
	type event struct {
		at    time.Time
		delta int
		x     *auditExec
	}
	var events []event
	for _, x := range c.byLease {
		end := x.Ended
		if e := c.ends[x.ref()]; e != nil && (end.IsZero() || e.At.Before(end)) {
			end = e.At
		}
		switch {
		case end.IsZero():
			c.r.G11Unbounded++
			continue
		case !end.After(x.Started):
			continue // its lease had ended before it started: it ran on none
		}
		events = append(events, event{x.Started, 1, x}, event{end, -1, x})
	}
	// Ends before starts at the same instant: the slot was free.
	slices.SortFunc(events, func(a, b event) int {
		if n := a.at.Compare(b.at); n != 0 {
			return n
		}
		return a.delta - b.delta
	})
	all := g11Count{what: "of the queue", limit: global, running: map[*auditExec]bool{}}
	keys := map[string]*g11Count{}
	for _, ev := range events {
		n := all.step(c, ev.x, ev.delta, ev.at)
		c.r.G11Most = max(c.r.G11Most, n)
		if perKey <= 0 {
			continue
		}
		key := ""
		if j := c.jobs[ev.x.JobID]; j != nil {
			key = j.Key
		}
		k := keys[key]
		if k == nil {
			k = &g11Count{what: fmt.Sprintf("of key %q", key), limit: perKey, running: map[*auditExec]bool{}}
			keys[key] = k
		}
		c.r.G11KeyMost = max(c.r.G11KeyMost, k.step(c, ev.x, ev.delta, ev.at))
	}
}

// g11Count follows the executions running at once of the queue, or of one
// key, and reports the first instant of each spell over its limit (0: none).
type g11Count struct {
	what    string
	limit   int
	running map[*auditExec]bool
	over    bool
}

// step applies an execution's start (delta 1) or end (-1) at at, and returns
// how many run then.
func (g *g11Count) step(c *checker, x *auditExec, delta int, at time.Time) int {
	if delta > 0 {
		g.running[x] = true
	} else {
		delete(g.running, x)
	}
	n := len(g.running)
	if g.limit > 0 && n > g.limit && !g.over {
		var names []string
		for x := range g.running {
			names = append(names, fmt.Sprintf("job %d lease %d on %s", x.JobID, x.Token, x.Worker))
		}
		slices.Sort(names)
		c.violate("G11", "%d handlers %s ran at once at %s under a limit of %d: %s",
			n, g.what, at.Format("15:04:05.000000"), g.limit, strings.Join(names, ", "))
	}
	g.over = g.limit > 0 && n > g.limit
	return n
}

// checkPeriodic checks that the every-second periodic job fired each slot
// from its first to its last exactly once (G10): it catches up every missed
// slot, so a gap is a slot weir lost, and a repeat a slot it fired twice.
func (c *checker) checkPeriodic() {
	slots := slices.SortedFunc(slices.Values(c.d.PeriodicSlots), time.Time.Compare)
	c.r.PeriodicSlots = len(slots)
	if len(slots) == 0 {
		c.violate("G10", "no periodic slot fired")
		return
	}
	c.r.PeriodicFirst, c.r.PeriodicLast = slots[0], slots[len(slots)-1]
	for i := 1; i < len(slots); i++ {
		switch d := slots[i].Sub(slots[i-1]); {
		case d == 0:
			c.violate("G10", "periodic slot %s fired twice", slots[i].Format(time.RFC3339))
		case d != time.Second:
			c.violate("G10", "periodic slots from %s to %s never fired", slots[i-1].Add(time.Second).Format(time.RFC3339),
				slots[i].Add(-time.Second).Format(time.RFC3339))
		}
	}
}

type checker struct {
	d *soakData
	r *soakReport

	jobs    map[int64]*finalJob
	execs   map[int64][]*auditExec // by job, by token
	byLease map[leaseRef]*auditExec
	ends    map[leaseRef]*leaseEnd
	lastEnd map[int64]*leaseEnd // the highest token's end, by job
	kinds   map[leaseRef]endKind
	// promoted is when each job was made available again after the end of
	// one of its leases, the first time.
	promoted map[leaseRef]time.Time
	workers  map[string]*workerRun
}

func (c *checker) violate(g, format string, args ...any) {
	c.r.Violations = append(c.r.Violations, violation{g, fmt.Sprintf(format, args...)})
}

func (c *checker) index() {
	d, r := c.d, c.r
	c.jobs = map[int64]*finalJob{}
	for i := range d.Jobs {
		c.jobs[d.Jobs[i].ID] = &d.Jobs[i]
	}
	c.execs = map[int64][]*auditExec{}
	c.byLease = map[leaseRef]*auditExec{}
	for i := range d.Execs {
		x := &d.Execs[i]
		if prev := c.byLease[x.ref()]; prev != nil {
			c.violate("G3", "job %d: lease token %d ran twice (%s and %s)", x.JobID, x.Token, prev.Worker, x.Worker)
			continue
		}
		c.byLease[x.ref()] = x
		c.execs[x.JobID] = append(c.execs[x.JobID], x)
	}
	for _, xs := range c.execs {
		slices.SortFunc(xs, func(a, b *auditExec) int { return int(a.Token - b.Token) })
	}
	c.ends = map[leaseRef]*leaseEnd{}
	c.lastEnd = map[int64]*leaseEnd{}
	c.kinds = map[leaseRef]endKind{}
	for i := range d.Ends {
		e := &d.Ends[i]
		if c.ends[e.ref()] != nil {
			c.violate("G3", "job %d: lease token %d ended twice", e.JobID, e.Token)
			continue
		}
		c.ends[e.ref()] = e
		c.kinds[e.ref()] = classifyEnd(e)
		if last := c.lastEnd[e.JobID]; last == nil || e.Token > last.Token {
			c.lastEnd[e.JobID] = e
		}
	}
	c.promoted = map[leaseRef]time.Time{}
	for _, p := range d.Promotions {
		ref := leaseRef{p.JobID, p.Token}
		if first, ok := c.promoted[ref]; !ok || p.At.Before(first) {
			c.promoted[ref] = p.At
		}
	}
	c.workers = map[string]*workerRun{}
	for i := range d.Workers {
		c.workers[d.Workers[i].Name] = &d.Workers[i]
	}
	r.Inserted, r.Jobs, r.Executions = len(d.Inserted), len(d.Jobs), len(c.byLease)
	for _, f := range d.Faults {
		switch f.Kind {
		case faultRestart:
			r.Restarts++
		case faultKill:
			r.Kills++
			if f.Detail == "leader" {
				r.LeaderKills++
			}
		case faultPause:
			r.Pauses++
		case faultConnKill:
			r.ConnKills++
			if n, err := strconv.Atoi(f.Detail); err == nil {
				r.BackendsKilled += n
			}
		case faultPGRestart:
			r.PGRestarts++
		}
	}
}

// checkG1: every job the producer inserted exists after the drain, and every
// job is final.
func (c *checker) checkG1() {
	for i, id := range c.d.Inserted {
		if c.jobs[id] == nil && !c.lostInAsyncWindow(i) {
			c.r.Lost++
			c.violate("G1", "job %d was inserted and is gone", id)
		}
	}
	for _, j := range c.d.Jobs {
		c.r.States[j.State]++
		switch j.State {
		case "completed", "discarded", "cancelled":
		default:
			c.r.Lost++
			c.violate("G1", "job %d is %s after the drain", j.ID, j.State)
		}
	}
	for id := range c.execs {
		if c.jobs[id] == nil {
			c.violate("G1", "job %d ran but is not in the table", id)
		}
	}
}

// checkEnds checks that every outcome written matches the execution that held
// the lease: a write under a lease whose handler had not returned, or that
// carries another lease's error, was written by a stale owner (G3).
func (c *checker) checkEnds() {
	for i := range c.d.Ends {
		e := &c.d.Ends[i]
		if c.ends[e.ref()] != e {
			continue // a second end of the same lease, already reported
		}
		x := c.byLease[e.ref()]
		stale := func(format string, args ...any) {
			c.r.StaleWins++
			c.violate("G3", "job %d lease %d: "+format, append([]any{e.JobID, e.Token}, args...)...)
		}
		if x != nil && x.Worker != e.Holder {
			stale("claimed by %s but run by %s", e.Holder, x.Worker)
		}
		endedAfter := x != nil && !x.Ended.IsZero() && x.Ended.After(e.At)
		switch c.kinds[e.ref()] {
		case endRescue:
			c.r.Rescues++
			if !e.ExpiresAt.IsZero() && e.At.Before(e.ExpiresAt) {
				stale("rescued at %s, before its lease expired at %s", e.At.Format(time.RFC3339Nano), e.ExpiresAt.Format(time.RFC3339Nano))
			}
		case endCompleted:
			switch {
			case x == nil:
				stale("completed, but no handler ran under this lease")
			case x.Ended.IsZero() || x.Result != "ok":
				stale("completed, but its handler recorded %q", orNone(x.Result))
			case endedAfter:
				stale("completed %s before its handler returned", x.Ended.Sub(e.At))
			}
		case endRetry, endDiscarded:
			m := probeToken.FindStringSubmatch(e.Error)
			switch {
			case m == nil:
				stale("%s with an error that is not the probe's: %q", e.State, e.Error)
			case m[1] != strconv.FormatInt(e.Token, 10):
				stale("%s with the error of lease %s: %q", e.State, m[1], e.Error)
			case endedAfter:
				stale("%s %s before its handler returned", e.State, x.Ended.Sub(e.At))
			}
			if c.kinds[e.ref()] == endRetry {
				c.r.Retries++
			}
		case endRelease:
			c.r.Releases++
			switch {
			case x != nil && x.Result == "ok":
				stale("released at shutdown, but its handler returned ok")
			case endedAfter:
				stale("released %s before its handler returned", x.Ended.Sub(e.At))
			}
		case endReturn:
			c.r.Returns++
			if x != nil {
				stale("returned as never started, but its handler ran on %s", x.Worker)
			}
		default:
			stale("left running for %s (attempt %d to %d, release %v, error %q), which the probe never asks for",
				e.State, e.AttemptBefore, e.AttemptAfter, e.Released, e.Error)
		}
	}
}

// checkFinalRows checks that each final job's row holds the lease that ended
// last, and that every execution's lease ended.
func (c *checker) checkFinalRows() {
	for _, j := range c.d.Jobs {
		last := c.lastEnd[j.ID]
		if last == nil {
			if j.Token != 0 {
				c.violate("G3", "job %d is %s under lease %d, but no lease of it ended", j.ID, j.State, j.Token)
			}
			continue
		}
		if last.Token != j.Token || last.State != j.State || last.Holder != j.AttemptedBy {
			c.violate("G3", "job %d is %s under lease %d of %s, but its last lease to end was %d of %s, to %s",
				j.ID, j.State, j.Token, j.AttemptedBy, last.Token, last.Holder, last.State)
		}
	}
	for ref, x := range c.byLease {
		if c.ends[ref] == nil && c.jobs[ref.JobID] != nil && isFinal(c.jobs[ref.JobID].State) {
			c.violate("G3", "job %d: the lease %d that %s ran under never ended, yet the job is %s",
				ref.JobID, ref.Token, x.Worker, c.jobs[ref.JobID].State)
		}
	}
}

func isFinal(state string) bool {
	return state == "completed" || state == "discarded" || state == "cancelled"
}

// checkDuplicates finds every execution that ran again and says why.
func (c *checker) checkDuplicates() {
	for _, xs := range c.execs {
		for i, x := range xs[:max(len(xs)-1, 0)] {
			next := xs[i+1]
			e := c.ends[x.ref()]
			if !x.Ended.IsZero() && next.Started.Before(x.Ended) {
				c.r.Overlaps++
			}
			if e == nil {
				c.dup(dupOrder, "G3", x, "ran again under lease %d although lease %d never ended", next.Token, x.Token)
				continue
			}
			switch c.kinds[x.ref()] {
			case endRetry, endRelease, endReturn:
				continue // a re-run by design
			case endRescue:
				c.classifyRescued(x, e)
			default:
				c.dup(dupAfterFinal, c.guaranteeOf(x), x, "ran again (lease %d) after lease %d ended it %s",
					next.Token, x.Token, e.State)
			}
		}
	}
}

// checkProgress holds each execution to starting with progress written under
// an earlier lease of its own job that ran (G3 for progress: a write under a
// lease is fenced by its token, so no attempt can see progress from its own,
// a later or another job's lease).
func (c *checker) checkProgress() {
	for _, xs := range c.execs {
		for _, x := range xs {
			if x.ProgressLease == nil {
				continue
			}
			from := *x.ProgressLease
			if from >= x.Token || c.byLease[leaseRef{x.JobID, from}] == nil {
				c.violate("G3", "job %d: the attempt under lease %d started with progress of lease %d, not an earlier lease of the job that ran",
					x.JobID, x.Token, from)
				continue
			}
			c.r.Resumed++
		}
	}
}

// guaranteeOf names the guarantee that a re-run of x's finished work breaks:
// G2 when its worker stopped gracefully, else G9 (it was not running at a kill).
func (c *checker) guaranteeOf(x *auditExec) string {
	if w := c.workers[x.Worker]; w != nil && w.Stopped {
		return "G2"
	}
	return "G9"
}

func (c *checker) dup(cause, g string, x *auditExec, format string, args ...any) {
	c.r.Duplicates[cause]++
	if g != "" {
		c.violate(g, "job %d: "+format, append([]any{x.JobID}, args...)...)
	}
}

// classifyRescued says why x, whose lease was rescued, ran again. The lease
// lapsed at e.ExpiresAt: what its worker was doing then is the cause.
func (c *checker) classifyRescued(x *auditExec, e *leaseEnd) {
	w := c.workers[x.Worker]
	lapsed := e.ExpiresAt
	switch {
	case w == nil:
		c.dup(dupUnexplain, "G9", x, "lease %d of unknown worker %s was rescued", x.Token, x.Worker)
	case w.Killed && !lapsed.Before(w.KilledAt):
		c.r.Duplicates[dupCrash]++ // G9's timing is checked over every rescue in checkG9
	case c.frozenAtTrustEnd(w.Name, lapsed):
		c.r.Duplicates[dupPaused]++
	case w.Stopped && !lapsed.Before(w.SigtermAt):
		switch {
		case w.Report != nil && slices.Contains(w.Report.Abandoned, x.ref()):
			c.r.Duplicates[dupAbandoned]++
		case c.undoneByAsyncFailover(x, e):
			c.r.Duplicates[dupAsyncUndone]++
		case w.Report != nil && w.Report.Unwritten && c.faulted(w.SigtermAt, w.ExitAt, faultPGRestart, faultFailover):
			c.r.Duplicates[dupDBDownStop]++
		// G2 is promised for a Stop that returns nil: this one returned an
		// error naming the job, or saying its budget ran out with outcomes
		// unwritten.
		case w.Report != nil && (w.Report.BudgetOut || slices.Contains(w.Report.UnwrittenJobs, x.JobID)):
			c.r.Duplicates[dupBudgetOut]++
		default:
			c.dup(dupUnwritten, "G2", x, "the handler of lease %d (mode %s, result %q) returned during %s's graceful stop, yet the lease was rescued at %s and the job ran again",
				x.Token, x.Mode, x.Result, w.Name, e.At.Format(time.RFC3339Nano))
		}
	case c.faulted(lapsed.Add(-c.d.Settings.Lease-time.Second), lapsed, faultConnKill, faultPGRestart, faultFailover):
		c.r.Duplicates[dupLeaseLost]++
	default:
		// Not running at a kill, not stopping, no database fault: G9 says
		// only jobs running at a kill may run twice.
		c.dup(dupUnexplain, "G9", x, "lease %d on %s lapsed at %s while the worker ran, with no kill or database fault to explain it, and the job ran again",
			x.Token, x.Worker, lapsed.Format(time.RFC3339Nano))
	}
}

// frozenAtTrustEnd reports whether worker was frozen by a pause fault when it
// had to stop trusting a lease that lapsed at lapsed. A client trusts a lease
// until a heartbeat interval before the database's end of it, counted from
// when it sent the renewal: that end is at most lapsed less a heartbeat, and
// earlier by the renewal's way to the database, allowed here another
// heartbeat. A worker frozen then gives the lease up on waking, though the
// database may hold it a little longer: its lease lapses after the pause.
func (c *checker) frozenAtTrustEnd(worker string, lapsed time.Time) bool {
	hb := c.d.Settings.Heartbeat
	for i := range c.d.Faults {
		f := &c.d.Faults[i]
		if f.Kind == faultPause && f.Worker == worker && !f.At.After(lapsed) && !f.until().Before(lapsed.Add(-2*hb)) {
			return true
		}
	}
	return false
}

// pauseBegan reports whether a pause began within [from, to].
func (c *checker) pauseBegan(from, to time.Time) bool {
	for i := range c.d.Faults {
		f := &c.d.Faults[i]
		if f.Kind == faultPause && !f.At.Before(from) && !f.At.After(to) {
			return true
		}
	}
	return false
}

// faulted reports whether a fault of one of kinds overlapped [from, to].
func (c *checker) faulted(from, to time.Time, kinds ...string) bool {
	for i := range c.d.Faults {
		f := &c.d.Faults[i]
		if slices.Contains(kinds, f.Kind) && !f.At.After(to) && !f.until().Before(from) {
			return true
		}
	}
	return false
}

// checkG9: every job whose lease a killed worker held at the kill is runnable
// again (rescued, and available) within lease duration + rescue interval (+
// slack). Jobs with a connection kill or a PostgreSQL restart between the kill
// and then, or a worker paused in between, are counted apart, not held to the
// bound: rescue needs the database, and a leader frozen after the kill holds
// its term until it expires. (A leader frozen before the kill does not stretch
// the bound: its term ends within a term of the pause.)
//
// When a maintenance leader was killed (the worker itself or another) before
// the job was runnable, the bound is also a leader term after the last such
// kill, if that is later: the term (three election intervals, the election
// interval being the rescue interval capped at 5 s) must expire before
// another client leads and rescues.
func (c *checker) checkG9() {
	s := c.d.Settings
	term := 3 * min(5*time.Second, s.Rescue)
	for i := range c.d.Ends {
		e := &c.d.Ends[i]
		if c.kinds[e.ref()] != endRescue {
			continue
		}
		w := c.workers[e.Holder]
		if w == nil || !w.Killed || e.ExpiresAt.Before(w.KilledAt) {
			continue
		}
		runnable := e.At
		if e.State != "available" {
			promoted, ok := c.promoted[e.ref()]
			if !ok {
				if e.State == "retryable" {
					c.violate("G9", "job %d: lease %d of %s, killed at %s, was rescued but never made available again",
						e.JobID, e.Token, w.Name, w.KilledAt.Format(time.RFC3339Nano))
				}
				continue // discarded or cancelled by the rescue: it never runs again
			}
			runnable = promoted
		}
		late := runnable.Sub(w.KilledAt)
		bound := s.Lease + s.Rescue
		if d, ok := c.lastLeaderKill(runnable); ok {
			bound = max(bound, d.Sub(w.KilledAt)+term)
		}
		if c.faulted(w.KilledAt, runnable, faultConnKill, faultPGRestart, faultFailover) || c.pauseBegan(w.KilledAt, runnable) {
			c.r.G9Faulted++
			c.r.WorstRerunFaulted = max(c.r.WorstRerunFaulted, late)
			continue
		}
		if late > bound+s.G9Slack {
			c.violate("G9", "job %d: lease %d of %s, killed at %s, rescued %s and runnable %s after the kill; the bound is %s (+%s slack)",
				e.JobID, e.Token, w.Name, w.KilledAt.Format(time.RFC3339Nano), e.At.Sub(w.KilledAt).Round(time.Millisecond),
				late.Round(time.Millisecond), bound, s.G9Slack)
		}
		c.r.G9Checked++
		c.r.WorstRerun = max(c.r.WorstRerun, late)
	}
}

// lastLeaderKill returns the last kill of a maintenance leader at or before
// t.
func (c *checker) lastLeaderKill(t time.Time) (time.Time, bool) {
	var last time.Time
	for i := range c.d.Faults {
		if f := &c.d.Faults[i]; f.Kind == faultKill && f.Detail == "leader" && !f.At.After(t) && f.At.After(last) {
			last = f.At
		}
	}
	return last, !last.IsZero()
}

// checkStops: every graceful stop returned within its budget + 100 ms (G4), as
// the worker measured it, and the process exited soon after; no worker died on
// its own.
func (c *checker) checkStops() {
	s := c.d.Settings
	for i := range c.d.Workers {
		w := &c.d.Workers[i]
		switch {
		case w.Died:
			c.violate("RUN", "worker %s exited on its own: %s", w.Name, w.ExitStatus)
		case w.Stopped:
			c.r.GracefulStops++
			if w.Report == nil {
				c.violate("G4", "worker %s printed no stop report (%s)", w.Name, orNone(w.ExitStatus))
				continue
			}
			c.r.StaleRejected += w.Report.StaleWrites
			c.r.WorstStop = max(c.r.WorstStop, w.Report.Took)
			if w.Report.Took > w.Report.Budget+stopAllowance {
				c.violate("G4", "worker %s: Stop took %s with a budget of %s", w.Name, w.Report.Took, w.Report.Budget)
			}
			if !w.ExitAt.IsZero() {
				exit := w.ExitAt.Sub(w.SigtermAt)
				c.r.WorstExit = max(c.r.WorstExit, exit)
				if exit > s.StopBudget+stopAllowance+s.ExitSlack {
					c.violate("G4", "worker %s exited %s after SIGTERM with a budget of %s", w.Name, exit, s.StopBudget)
				}
			}
		}
	}
}

func orNone(s string) string {
	if s == "" {
		return "nothing"
	}
	return s
}
