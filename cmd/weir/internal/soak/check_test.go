package soak

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirq/weir/weirdriver"
)

// soakT0 is the start of the hand-made soak logs.
var soakT0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// at is soakT0 plus sec seconds.
func at(sec float64) time.Time { return soakT0.Add(time.Duration(sec * float64(time.Second))) }

// cleanSoak is a hand-made audit trail of a run that keeps the contract: one
// graceful restart (w1.1, which abandons a stubborn handler, releases a job
// and returns a prefetched one), one kill (w2.1, with a job running and one
// prefetched), a connection kill that costs a lease, a pause that costs
// another, planned failures, and the final stops of w1.2 and w2.2.
func cleanSoak() *soakData {
	d := &soakData{
		Settings: soakSettings{Lease: 3 * time.Second, Heartbeat: 500 * time.Millisecond, Rescue: time.Second,
			StopBudget: 3 * time.Second, G9Slack: 500 * time.Millisecond, ExitSlack: time.Second},
		Workers: []workerRun{
			{Name: "w1.1", Start: at(0), Stopped: true, SigtermAt: at(10), ExitAt: at(13.01),
				Report: &stopReport{Budget: 3 * time.Second, Took: 3 * time.Second, Abandoned: []leaseRef{{5, 1}}}},
			{Name: "w2.1", Start: at(0), Killed: true, KilledAt: at(20)},
			{Name: "w1.2", Start: at(10), Stopped: true, Final: true, SigtermAt: at(40), ExitAt: at(40.5),
				Report: &stopReport{Budget: 3 * time.Second, Took: 400 * time.Millisecond, StaleWrites: 1}},
			{Name: "w2.2", Start: at(20), Stopped: true, Final: true, SigtermAt: at(40), ExitAt: at(40.3),
				Report: &stopReport{Budget: 3 * time.Second, Took: 200 * time.Millisecond}},
		},
		Faults: []faultEvent{
			{Kind: faultRestart, Worker: "w1.1", At: at(10)},
			{Kind: faultKill, Worker: "w2.1", At: at(20), Detail: "leader"},
			{Kind: faultConnKill, At: at(26), Detail: "12"},
			{Kind: faultPause, Worker: "w2.2", At: at(30), Until: at(35)},
		},
		Inserted: []int64{1, 2, 3, 4, 5, 6, 7, 8, 9},
	}
	// The periodic workload fired every second from 1 to 39, across the
	// restart and the kill, each slot once (in no particular order).
	for sec := 39; sec >= 1; sec-- {
		d.PeriodicSlots = append(d.PeriodicSlots, at(float64(sec)))
	}
	exec := func(job, token int64, worker, mode string, start, end float64, result string) {
		x := auditExec{ID: int64(len(d.Execs) + 1), JobID: job, Token: token, Attempt: int(token), Worker: worker,
			Mode: mode, Started: at(start), Result: result}
		if end > 0 {
			x.Ended = at(end)
		}
		d.Execs = append(d.Execs, x)
	}
	end := func(job, token int64, holder, state string, sec float64, e leaseEnd) {
		e.JobID, e.Token, e.Holder, e.State, e.At = job, token, holder, state, at(sec)
		if e.AttemptBefore == 0 && e.AttemptAfter == 0 {
			e.AttemptBefore, e.AttemptAfter = int(token), int(token)
		}
		if e.ExpiresAt.IsZero() {
			e.ExpiresAt = at(sec + 2)
		}
		d.Ends = append(d.Ends, e)
	}
	rescued := func(expires float64) leaseEnd {
		return leaseEnd{Error: weirdriver.DefaultRescueError, ExpiresAt: at(expires)}
	}
	completed := func(job, token int64, worker string, start float64) {
		exec(job, token, worker, modeOK, start, start+0.01, "ok")
		end(job, token, worker, "completed", start+0.02, leaseEnd{})
		d.Jobs = append(d.Jobs, finalJob{ID: job, State: "completed", Token: token, AttemptedBy: worker, Attempt: int(token)})
	}

	// 1: completed at once.
	completed(1, 1, "w1.1", 1)
	// 2: a planned failure, then completed.
	exec(2, 1, "w1.1", modeFail, 2, 2.01, "failed")
	end(2, 1, "w1.1", "retryable", 2.02, leaseEnd{Error: "soak probe token=1: planned failure of the first attempt"})
	completed(2, 2, "w2.1", 3)
	// 3: running at the kill of w2.1, rescued 3.2 s after it, run again.
	exec(3, 1, "w2.1", modeOK, 19, 0, "")
	end(3, 1, "w2.1", "retryable", 23.2, rescued(22.5))
	d.Promotions = append(d.Promotions, promotion{JobID: 3, Token: 1, At: at(23.25)})
	completed(3, 2, "w2.2", 24)
	// 4: cancelled by w1.1's stop and released, run again.
	exec(4, 1, "w1.1", modeOK, 9, 12, "shutdown")
	end(4, 1, "w1.1", "available", 12.01, leaseEnd{Released: true, AttemptAfter: 0, AttemptBefore: 1})
	completed(4, 2, "w1.2", 14)
	// 5: a stubborn handler abandoned by w1.1's stop, rescued after expiry.
	exec(5, 1, "w1.1", modeStubborn, 9.5, 0, "")
	end(5, 1, "w1.1", "retryable", 16.5, rescued(15.9))
	completed(5, 2, "w1.2", 17)
	// 6: prefetched by w1.1 and returned at its stop.
	end(6, 1, "w1.1", "available", 10.1, leaseEnd{AttemptBefore: 1, AttemptAfter: 0})
	completed(6, 2, "w1.2", 11)
	// 7: prefetched by w2.1 at the kill, rescued.
	end(7, 1, "w2.1", "retryable", 23.3, rescued(22.9))
	d.Promotions = append(d.Promotions, promotion{JobID: 7, Token: 1, At: at(23.35)})
	completed(7, 2, "w2.2", 24)
	// 8: its lease lapsed after the connection kill; run again.
	exec(8, 1, "w2.2", modeOK, 25, 27.9, "lease lost")
	end(8, 1, "w2.2", "retryable", 28.5, rescued(28))
	completed(8, 2, "w1.2", 29)
	// 9: its worker w2.2 was frozen past the lease; the handler went on after
	// the pause, while the job already ran again elsewhere.
	exec(9, 1, "w2.2", modeOK, 29.5, 35.2, "lease lost")
	end(9, 1, "w2.2", "retryable", 33.5, rescued(33))
	completed(9, 2, "w1.2", 34)
	// The second attempts of the jobs whose first attempt ran resume from its
	// progress.
	for i := range d.Execs {
		if x := &d.Execs[i]; x.Token == 2 && slices.Contains([]int64{2, 3, 4, 5, 8, 9}, x.JobID) {
			from := int64(1)
			x.ProgressLease = &from
		}
	}
	return d
}

func TestSoakCheckClean(t *testing.T) {
	t.Parallel()
	r := checkSoak(cleanSoak())
	for _, v := range r.Violations {
		t.Errorf("clean log: %s: %s", v.Guarantee, v.Msg)
	}
	want := soakReport{
		Inserted: 9, Jobs: 9, Executions: 15, Restarts: 1, Kills: 1, LeaderKills: 1, Pauses: 1, ConnKills: 1, BackendsKilled: 12,
		GracefulStops: 3, Retries: 1, Releases: 1, Returns: 1, Rescues: 5, StaleRejected: 1, Overlaps: 1, Resumed: 6,
		WorstStop: 3 * time.Second, WorstExit: 3010 * time.Millisecond, WorstRerun: 3350 * time.Millisecond, G9Checked: 2,
		PeriodicSlots: 39, PeriodicFirst: at(1), PeriodicLast: at(39),
	}
	got := *r
	got.States, got.Duplicates, got.Violations = nil, nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("report\n got %+v\nwant %+v", got, want)
	}
	if fmt.Sprint(r.Duplicates) != fmt.Sprint(map[string]int{dupCrash: 1, dupAbandoned: 1, dupLeaseLost: 1, dupPaused: 1}) {
		t.Errorf("duplicates %v", r.Duplicates)
	}
	if r.States["completed"] != 9 || len(r.States) != 1 {
		t.Errorf("states %v", r.States)
	}
}

// TestSoakCheckViolations breaks the clean log in each way the checks know,
// and wants each breach found under its guarantee.
func TestSoakCheckViolations(t *testing.T) {
	t.Parallel()
	findExec := func(d *soakData, job, token int64) *auditExec {
		for i := range d.Execs {
			if d.Execs[i].JobID == job && d.Execs[i].Token == token {
				return &d.Execs[i]
			}
		}
		panic(fmt.Sprintf("no execution %d/%d", job, token))
	}
	findEnd := func(d *soakData, job, token int64) *leaseEnd {
		for i := range d.Ends {
			if d.Ends[i].JobID == job && d.Ends[i].Token == token {
				return &d.Ends[i]
			}
		}
		panic(fmt.Sprintf("no lease end %d/%d", job, token))
	}
	findJob := func(d *soakData, id int64) *finalJob {
		for i := range d.Jobs {
			if d.Jobs[i].ID == id {
				return &d.Jobs[i]
			}
		}
		panic(fmt.Sprintf("no job %d", id))
	}
	worker := func(d *soakData, name string) *workerRun {
		for i := range d.Workers {
			if d.Workers[i].Name == name {
				return &d.Workers[i]
			}
		}
		panic("no worker " + name)
	}
	for _, tt := range []struct {
		name      string
		breakIt   func(d *soakData)
		guarantee string
		contains  string
	}{
		{"periodic slot twice", func(d *soakData) { d.PeriodicSlots = append(d.PeriodicSlots, at(20)) }, "G10",
			"periodic slot 2026-03-01T12:00:20Z fired twice"},
		{"periodic slots missing", func(d *soakData) {
			d.PeriodicSlots = slices.DeleteFunc(d.PeriodicSlots, func(s time.Time) bool { return s.After(at(20)) && s.Before(at(23)) })
		}, "G10", "periodic slots from 2026-03-01T12:00:21Z to 2026-03-01T12:00:22Z never fired"},
		{"no periodic slot", func(d *soakData) { d.PeriodicSlots = nil }, "G10", "no periodic slot fired"},
		{"job gone", func(d *soakData) {
			d.Jobs = slices.DeleteFunc(d.Jobs, func(j finalJob) bool { return j.ID == 1 })
		}, "G1", "job 1 was inserted and is gone"},
		{"job not final", func(d *soakData) { findJob(d, 2).State = "available" }, "G1", "job 2 is available after the drain"},
		{"outcome lost at a graceful stop", func(d *soakData) {
			// Job 4's handler returned ok during w1.1's stop, but its lease
			// was rescued: the Awa bug.
			x := findExec(d, 4, 1)
			x.Result, x.Ended = "ok", at(11.9)
			e := findEnd(d, 4, 1)
			*e = leaseEnd{JobID: 4, Token: 1, Holder: "w1.1", AttemptBefore: 1, AttemptAfter: 1, State: "retryable",
				Error: weirdriver.DefaultRescueError, ExpiresAt: at(13.5), At: at(13.9)}
		}, "G2", "returned during w1.1's graceful stop"},
		{"ran again after completed", func(d *soakData) {
			d.Execs = append(d.Execs, auditExec{ID: 99, JobID: 1, Token: 2, Attempt: 2, Worker: "w1.2", Mode: modeOK,
				Started: at(15), Ended: at(15.1), Result: "ok"})
			d.Ends = append(d.Ends, leaseEnd{JobID: 1, Token: 2, Holder: "w1.2", AttemptBefore: 2, AttemptAfter: 2,
				State: "completed", ExpiresAt: at(18), At: at(15.2)})
			j := findJob(d, 1)
			j.Token, j.AttemptedBy = 2, "w1.2"
		}, "G2", "job 1: ran again (lease 2) after lease 1 ended it completed"},
		{"progress of its own lease", func(d *soakData) {
			own := int64(2)
			findExec(d, 2, 2).ProgressLease = &own
		}, "G3", "job 2: the attempt under lease 2 started with progress of lease 2"},
		{"progress of a lease that never ran", func(d *soakData) {
			never := int64(1)
			findExec(d, 6, 2).ProgressLease = &never // lease 1 was prefetched and returned
		}, "G3", "job 6: the attempt under lease 2 started with progress of lease 1"},
		{"completed before its handler returned", func(d *soakData) { findEnd(d, 2, 2).At = at(3.005) }, "G3",
			"completed 5ms before its handler returned"},
		{"another lease's error", func(d *soakData) {
			findEnd(d, 2, 1).Error = "soak probe token=7: planned failure of the first attempt"
		}, "G3", "with the error of lease 7"},
		{"an error not from the probe", func(d *soakData) { findEnd(d, 2, 1).Error = "boom" }, "G3", "not the probe's"},
		{"completed with no handler", func(d *soakData) {
			e := findEnd(d, 6, 1)
			e.State, e.AttemptAfter = "completed", 1
		}, "G3", "completed, but no handler ran under this lease"},
		{"completed after a failure", func(d *soakData) {
			findEnd(d, 2, 1).State, findEnd(d, 2, 1).Error = "completed", ""
		}, "G3", `completed, but its handler recorded "failed"`},
		{"released after ok", func(d *soakData) { findExec(d, 4, 1).Result = "ok" }, "G3",
			"released at shutdown, but its handler returned ok"},
		{"returned after it ran", func(d *soakData) {
			d.Execs = append(d.Execs, auditExec{ID: 98, JobID: 6, Token: 1, Attempt: 1, Worker: "w1.1", Mode: modeOK,
				Started: at(9.8), Result: ""})
		}, "G3", "returned as never started, but its handler ran on w1.1"},
		{"one lease run twice", func(d *soakData) {
			x := *findExec(d, 1, 1)
			x.ID, x.Worker = 97, "w2.1"
			d.Execs = append(d.Execs, x)
		}, "G3", "lease token 1 ran twice"},
		{"final row of another lease", func(d *soakData) { findJob(d, 1).Token = 3 }, "G3", "its last lease to end was 1"},
		{"claimed by one, run by another", func(d *soakData) { findEnd(d, 1, 1).Holder = "w2.1" }, "G3",
			"claimed by w2.1 but run by w1.1"},
		{"rescued before expiry", func(d *soakData) { findEnd(d, 7, 1).ExpiresAt = at(24) }, "G3", "before its lease expired"},
		{"lease left running", func(d *soakData) { findEnd(d, 2, 1).State = "running" }, "G3", "left running for running"},
		{"lease never ended", func(d *soakData) {
			d.Ends = slices.DeleteFunc(d.Ends, func(e leaseEnd) bool { return e.JobID == 8 && e.Token == 1 })
		}, "G3", "ran again under lease 2 although lease 1 never ended"},
		{"stop over budget", func(d *soakData) { worker(d, "w1.1").Report.Took = 3200 * time.Millisecond }, "G4",
			"Stop took 3.2s with a budget of 3s"},
		{"no stop report", func(d *soakData) { worker(d, "w1.2").Report = nil }, "G4", "w1.2 printed no stop report"},
		{"slow exit", func(d *soakData) { worker(d, "w2.2").ExitAt = at(46) }, "G4", "w2.2 exited 6s after SIGTERM"},
		{"late rescue after a kill", func(d *soakData) {
			findEnd(d, 3, 1).At = at(25)
			d.Promotions[0].At = at(25.01)
		}, "G9", "rescued 5s and runnable 5.01s after the kill; the bound is 4s"},
		{"rescued in time, runnable late", func(d *soakData) { d.Promotions[1].At = at(24.6) }, "G9",
			"job 7: lease 1 of w2.1, killed at 2026-03-01T12:00:20Z, rescued 3.3s and runnable 4.6s after the kill"},
		{"rescued, never runnable", func(d *soakData) { d.Promotions = d.Promotions[:1] }, "G9",
			"job 7: lease 1 of w2.1, killed at 2026-03-01T12:00:20Z, was rescued but never made available again"},
		{"duplicate of a job not running at the kill", func(d *soakData) {
			// Job 3's lease lapsed before w2.1 was killed, with no fault to
			// explain it.
			x := findExec(d, 3, 1)
			x.Started = at(14)
			e := findEnd(d, 3, 1)
			e.ExpiresAt, e.At = at(18), at(18.5)
			x2 := findExec(d, 3, 2)
			x2.Worker, x2.Started, x2.Ended = "w1.2", at(19), at(19.01)
			e2 := findEnd(d, 3, 2)
			e2.Holder, e2.At = "w1.2", at(19.02)
			findJob(d, 3).AttemptedBy = "w1.2"
		}, "G9", "lapsed at"},
		{"lease lost with no fault", func(d *soakData) {
			d.Faults = slices.DeleteFunc(d.Faults, func(f faultEvent) bool { return f.Kind == faultConnKill })
		}, "G9", "job 8: lease 1 on w2.2 lapsed at"},
		{"lease lost with no pause", func(d *soakData) {
			d.Faults = slices.DeleteFunc(d.Faults, func(f faultEvent) bool { return f.Kind == faultPause })
		}, "G9", "job 9: lease 1 on w2.2 lapsed at"},
		{"lease lost after a pause", func(d *soakData) {
			// w2.2 woke a heartbeat and more before its trust in lease 1 of
			// job 9 ended (at 33 − 0.5 s at the latest): the pause does not
			// explain the lapse.
			d.Faults[3].Until = at(31.9)
		}, "G9", "job 9: lease 1 on w2.2 lapsed at"},
		{"worker died", func(d *soakData) {
			w := worker(d, "w2.2")
			w.Stopped, w.Final, w.Died, w.ExitStatus = false, false, true, "exit status 2"
		}, "RUN", "w2.2 exited on its own: exit status 2"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := cleanSoak()
			tt.breakIt(d)
			r := checkSoak(d)
			found := false
			for _, v := range r.Violations {
				if v.Guarantee == tt.guarantee && strings.Contains(v.Msg, tt.contains) {
					found = true
				}
			}
			if !found {
				t.Errorf("no %s violation containing %q; got %+v", tt.guarantee, tt.contains, r.Violations)
			}
		})
	}
}

// unwrittenAtStop is a clean soak in which w1.1's graceful stop said outcomes
// went unwritten, and job 4, whose handler there returned ok, was rescued
// after its lease lapsed during that stop.
func unwrittenAtStop() *soakData {
	d := cleanSoak()
	d.Workers[0].Report.Unwritten = true
	for i := range d.Execs {
		if x := &d.Execs[i]; x.JobID == 4 && x.Token == 1 {
			x.Result, x.Ended = "ok", at(11.9)
		}
	}
	for i := range d.Ends {
		if e := &d.Ends[i]; e.JobID == 4 && e.Token == 1 {
			*e = leaseEnd{JobID: 4, Token: 1, Holder: "w1.1", AttemptBefore: 1, AttemptAfter: 1, State: "retryable",
				Error: weirdriver.DefaultRescueError, ExpiresAt: at(13.5), At: at(16)}
		}
	}
	return d
}

// TestSoakCheckFrozenAtTrustEnd: a worker frozen until after its trust in a
// lease ended gives the lease up on waking, and the lease lapses up to a
// heartbeat after the pause (the database's end of it comes later than the
// client's): the pause explains the re-run.
func TestSoakCheckFrozenAtTrustEnd(t *testing.T) {
	t.Parallel()
	for _, until := range []float64{32.1, 32.8} { // job 9's lease lapsed at 33, heartbeat 0.5 s
		d := cleanSoak()
		d.Faults[3].Until = at(until)
		if r := checkSoak(d); len(r.Violations) != 0 || r.Duplicates[dupPaused] != 1 {
			t.Errorf("a pause until %.1f s: violations %+v, duplicates %v", until, r.Violations, r.Duplicates)
		}
	}
}

// TestSoakCheckDBDownAtStop: an outcome that a graceful stop could not write
// while the server was restarting is allowed (the contract bounds Stop, and
// rescue must then run the job again), and counted apart.
func TestSoakCheckDBDownAtStop(t *testing.T) {
	t.Parallel()
	d := unwrittenAtStop()
	d.Faults = append(d.Faults, faultEvent{Kind: faultPGRestart, At: at(11), Until: at(14)})
	r := checkSoak(d)
	if len(r.Violations) != 0 || r.Duplicates[dupDBDownStop] != 1 {
		t.Fatalf("violations %+v, duplicates %v", r.Violations, r.Duplicates)
	}
}

// TestSoakCheckBudgetOutAtStop: an outcome left unwritten by a graceful stop
// whose error said so (its budget ran out, or it named the job) is allowed (G2
// is promised for a Stop that returns nil) and counted apart; a stop that said
// outcomes went unwritten but neither ran out of budget nor named this job
// violates G2.
func TestSoakCheckBudgetOutAtStop(t *testing.T) {
	t.Parallel()
	check := func(report func(*stopReport)) *soakReport {
		d := unwrittenAtStop()
		report(d.Workers[0].Report)
		return checkSoak(d)
	}
	if r := check(func(s *stopReport) { s.BudgetOut = true }); len(r.Violations) != 0 || r.Duplicates[dupBudgetOut] != 1 {
		t.Fatalf("budget ran out: violations %+v, duplicates %v", r.Violations, r.Duplicates)
	}
	if r := check(func(s *stopReport) { s.UnwrittenJobs = []int64{3, 4} }); len(r.Violations) != 0 || r.Duplicates[dupBudgetOut] != 1 {
		t.Fatalf("job named: violations %+v, duplicates %v", r.Violations, r.Duplicates)
	}
	if r := check(func(s *stopReport) { s.UnwrittenJobs = []int64{3} }); r.byGuarantee("G2") != 1 || r.Duplicates[dupBudgetOut] != 0 {
		t.Fatalf("another job named: violations %+v, duplicates %v", r.Violations, r.Duplicates)
	}
}

// TestUnwrittenJobs reads the jobs a Stop's error names.
func TestUnwrittenJobs(t *testing.T) {
	t.Parallel()
	for msg, want := range map[string][]int64{
		"weir: stop: the outcomes of jobs [7032 12] were not written: their leases were lost": {7032, 12},
		"weir: stop: some outcomes were not written before the deadline":                      nil,
		"weir: stop: the outcomes of jobs [7032":                                              nil,
	} {
		if got := unwrittenJobs(msg); !slices.Equal(got, want) {
			t.Errorf("%q: %v, want %v", msg, got, want)
		}
	}
}

// TestSoakCheckG9Faulted: a killed worker's job made runnable late is not held
// to G9's bound when a database fault, or a pause that could freeze the
// maintenance leader, came between the kill and then; a pause that began
// before the kill does not excuse it.
func TestSoakCheckG9Faulted(t *testing.T) {
	t.Parallel()
	late := func(extra faultEvent) *soakReport {
		d := cleanSoak()
		for i := range d.Ends {
			if e := &d.Ends[i]; e.JobID == 3 && e.Token == 1 {
				e.At = at(25)
			}
		}
		d.Promotions[0].At = at(25.01)
		d.Faults = append(d.Faults, extra)
		return checkSoak(d)
	}
	for _, tt := range []struct {
		f       faultEvent
		faulted int // job 7 of the same kill is runnable at 23.35 s
	}{
		{faultEvent{Kind: faultConnKill, At: at(24), Detail: "3"}, 1},
		{faultEvent{Kind: faultPGRestart, At: at(19), Until: at(21)}, 2},
		{faultEvent{Kind: faultPause, Worker: "w1.2", At: at(21), Until: at(26)}, 2},
	} {
		if r := late(tt.f); len(r.Violations) != 0 || r.G9Faulted != tt.faulted || r.WorstRerunFaulted != 5010*time.Millisecond {
			t.Errorf("with %s at %s: violations %+v, %d faulted (worst %s)", tt.f.Kind, tt.f.At, r.Violations, r.G9Faulted, r.WorstRerunFaulted)
		}
	}
	if r := late(faultEvent{Kind: faultPause, Worker: "w1.2", At: at(19), Until: at(24)}); r.byGuarantee("G9") != 1 {
		t.Errorf("a pause before the kill excused a late job: %+v", r.Violations)
	}
}

// TestSoakCheckG9LeaderKilled: a killed worker's job may be runnable again a
// leader term (3 s here) after the last kill of a leader before then, when
// that is later than lease + rescue interval; a leader kill that leaves the
// job late past that bound, or that came after the job was runnable, excuses
// nothing.
func TestSoakCheckG9LeaderKilled(t *testing.T) {
	t.Parallel()
	late := func(leaderKill time.Time) *soakReport {
		d := cleanSoak()
		for i := range d.Ends {
			if e := &d.Ends[i]; e.JobID == 3 && e.Token == 1 {
				e.At = at(25) // w2.1 was killed at 20 s
			}
		}
		d.Promotions[0].At = at(25.01)
		d.Faults = append(d.Faults, faultEvent{Kind: faultKill, Worker: "w1.2", At: leaderKill, Detail: "leader"})
		return checkSoak(d)
	}
	if r := late(at(22.5)); len(r.Violations) != 0 {
		t.Errorf("a leader killed at 22.5 s allows until 26 s: %+v", r.Violations)
	}
	if r := late(at(21)); r.byGuarantee("G9") != 1 {
		t.Errorf("a leader killed at 21 s allows only until 24.5 s: %+v", r.Violations)
	}
	if r := late(at(26)); r.byGuarantee("G9") != 1 {
		t.Errorf("a leader killed after the job was runnable excused it: %+v", r.Violations)
	}
}

// TestSoakCheckKeyLimit: under a limit per key, the clean log's jobs 4 and 5
// (key a), which run at once around 11 s beside job 6 (key b), pass a limit
// of 2 per key and break a limit of 1 per key, once, naming key a's
// executions; jobs without a key count under the empty key.
func TestSoakCheckKeyLimit(t *testing.T) {
	t.Parallel()
	keyed := func() *soakData {
		d := cleanSoak()
		for i := range d.Jobs {
			switch d.Jobs[i].ID {
			case 4, 5:
				d.Jobs[i].Key = "a"
			case 6:
				d.Jobs[i].Key = "b"
			}
		}
		return d
	}
	d := keyed()
	d.Settings.KeyLimit = 2
	r := checkSoak(d)
	for _, v := range r.Violations {
		t.Errorf("2 per key: %s: %s", v.Guarantee, v.Msg)
	}
	if r.G11KeyMost != 2 || r.KeyLimit != 2 {
		t.Errorf("2 per key: most of one key %d, limit %d; want 2, 2", r.G11KeyMost, r.KeyLimit)
	}

	d = keyed()
	d.Settings.KeyLimit = 1
	r = checkSoak(d)
	if n := r.byGuarantee("G11"); n < 1 {
		t.Fatalf("1 per key: no G11 violation: %+v", r.Violations)
	}
	found := false
	for _, v := range r.Violations {
		if v.Guarantee == "G11" && strings.Contains(v.Msg, `2 handlers of key "a" ran at once`) &&
			strings.Contains(v.Msg, "job 4 lease") && strings.Contains(v.Msg, "job 5 lease") {
			found = true
		}
		if v.Guarantee == "G11" && strings.Contains(v.Msg, `of key "b"`) {
			t.Errorf("1 per key: key b ran one at a time: %s", v.Msg)
		}
	}
	if !found {
		t.Errorf("1 per key: no violation names key a's two executions: %+v", r.Violations)
	}
}

// TestSoakCheckGlobalLimit: under a global limit, the clean log's executions
// (at most 3 at once: jobs 4, 5 and 6 around 11 s, job 5 bounded by its
// lease's end since its handler recorded none) pass a limit of 3 and break a
// limit of 2, once, naming the executions; the zombie handler of job 9, past
// its lease, is counted only until the lease ended.
func TestSoakCheckGlobalLimit(t *testing.T) {
	t.Parallel()
	d := cleanSoak()
	d.Settings.GlobalLimit = 3
	r := checkSoak(d)
	for _, v := range r.Violations {
		t.Errorf("limit 3: %s: %s", v.Guarantee, v.Msg)
	}
	if r.G11Most != 3 || r.G11Unbounded != 0 || r.GlobalLimit != 3 {
		t.Errorf("limit 3: most %d, unbounded %d, limit %d; want 3, 0, 3", r.G11Most, r.G11Unbounded, r.GlobalLimit)
	}

	d = cleanSoak()
	d.Settings.GlobalLimit = 2
	r = checkSoak(d)
	if n := r.byGuarantee("G11"); n != 1 {
		t.Fatalf("limit 2: %d G11 violations, want 1: %+v", n, r.Violations)
	}
	for _, v := range r.Violations {
		if v.Guarantee == "G11" && (!strings.Contains(v.Msg, "3 handlers of the queue ran at once") ||
			!strings.Contains(v.Msg, "job 6 lease 2 on w1.2")) {
			t.Errorf("limit 2: %s", v.Msg)
		}
	}

	// Job 9's first handler ran on to 35.2 s, past its lease (33.5 s), beside
	// its second execution at 34 s: counted to its end, the two would overlap
	// and break a limit of 1 there too.
	d = cleanSoak()
	d.Settings.GlobalLimit = 1
	r = checkSoak(d)
	for _, v := range r.Violations {
		if v.Guarantee == "G11" && strings.Contains(v.Msg, "job 9 lease 1") && strings.Contains(v.Msg, "job 9 lease 2") {
			t.Errorf("limit 1: the handler past its lease was counted: %s", v.Msg)
		}
	}
}
