package lease

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// table returns a table and the reasons its lost callback was given, by job id.
func table(t *testing.T) (*Table, map[int64]string) {
	t.Helper()
	lost := map[int64]string{}
	return NewTable(func(j *Job, why string) { lost[j.Row.ID] = why }), lost
}

func job(id, token int64, deadline time.Time) *Job {
	return NewJob(&weirtype.JobRow{ID: id, LeaseToken: token}, nil, deadline)
}

// TestLostWhileBuffered: a lease lost before its handler starts is forgotten,
// and the handler never starts.
func TestLostWhileBuffered(t *testing.T) {
	tab, lost := table(t)
	now := time.Now()
	j := job(1, 7, now)
	tab.Add([]*Job{j})
	tab.Expire(now)
	if lost[1] == "" {
		t.Fatal("the expired lease was not reported lost")
	}
	if tab.MarkRunning(j, context.Background()) {
		t.Fatal("MarkRunning started a job whose lease was lost")
	}
	if snap := tab.Snapshot(time.Now(), 0); len(snap.IDs) != 0 {
		t.Fatalf("snapshot %v still holds the lost lease", snap.IDs)
	}
}

// TestApplyRenewal: a renewal moves the deadlines it renewed, cancels the
// handlers an operator cancelled, loses the leases it found gone, and leaves
// alone a lease claimed again (another token) since its snapshot.
func TestApplyRenewal(t *testing.T) {
	tab, lost := table(t)
	now := time.Now()
	renewed, cancelled, gone, reclaimed := job(1, 1, now.Add(time.Second/2)), job(2, 1, now.Add(time.Hour)), job(3, 1, now.Add(time.Hour)), job(4, 1, now.Add(time.Hour))
	tab.Add([]*Job{renewed, cancelled, gone, reclaimed})
	for _, j := range []*Job{renewed, cancelled, gone, reclaimed} {
		if !tab.MarkRunning(j, context.Background()) {
			t.Fatalf("job %d: MarkRunning refused", j.Row.ID)
		}
	}
	snap := tab.Snapshot(now, 0)
	newer := job(4, 2, now.Add(time.Hour)) // job 4 was taken again under token 2
	tab.Add([]*Job{newer})
	tab.ApplyRenewal(snap, &weirdriver.JobRenewResult{
		Renewed: []int64{1}, CancelRequested: []int64{2}, Lost: []int64{3, 4},
	}, now.Add(time.Minute))

	if !tab.Valid(renewed, now.Add(time.Second)) {
		t.Error("the renewed lease's deadline did not move")
	}
	if got := context.Cause(tab.Start(cancelled, 0)); !errors.Is(got, weirtype.ErrJobCancelRequested) {
		t.Errorf("the cancelled job's handler: cause %v, want ErrJobCancelRequested", got)
	}
	if got := context.Cause(tab.Start(gone, 0)); !errors.Is(got, weirtype.ErrLeaseLost) || lost[3] == "" {
		t.Errorf("the lost lease's handler: cause %v, reported %q; want ErrLeaseLost, reported", got, lost[3])
	}
	if _, ok := lost[4]; ok || tab.Start(reclaimed, 0).Err() != nil {
		t.Error("a renewal of the old token lost the lease claimed again since")
	}
}

// TestLostWhileFinalizing: a lease lost while its outcome is written is not
// reported (the write says what happened) and is no longer trusted.
func TestLostWhileFinalizing(t *testing.T) {
	tab, lost := table(t)
	now := time.Now()
	j := job(1, 1, now)
	tab.Add([]*Job{j})
	tab.MarkRunning(j, context.Background())
	tab.MarkReturned(j)
	tab.Expire(now)
	if len(lost) != 0 {
		t.Fatalf("reported %v for a finalizing job", lost)
	}
	if tab.Valid(j, now.Add(-time.Second)) {
		t.Fatal("a lost lease is still trusted")
	}
	if rows := tab.Running(); len(rows) != 0 {
		t.Fatalf("a finalizing job is listed running: %v", rows)
	}
}

// TestProgressSentOnce: a renewal carries the progress that changed since a
// write last carried it, and only that; a renewal that renewed marks what it
// carried as sent, one that did not (busy) leaves it to the next; a change
// made while a renewal was in flight is sent again; the outcome takes what no
// renewal carried; SetProgress and RecordOutput refuse a returned handler.
func TestProgressSentOnce(t *testing.T) {
	tab, _ := table(t)
	now := time.Now()
	a, b := job(1, 1, now.Add(time.Hour)), job(2, 1, now.Add(time.Hour))
	tab.Add([]*Job{a, b})
	for _, j := range []*Job{a, b} {
		if !tab.MarkRunning(j, context.Background()) {
			t.Fatal("MarkRunning refused")
		}
		if FromContext(tab.Start(j, 0)) != j {
			t.Fatal("the handler's context does not carry its job")
		}
	}
	progressOf := func(r *Renewal, id int64) string {
		for i, x := range r.IDs {
			if x == id && r.Progress != nil {
				return string(r.Progress[i])
			}
		}
		return ""
	}
	if snap := tab.Snapshot(time.Now(), 0); snap.Progress != nil {
		t.Fatalf("a snapshot without changes carries progress %q", snap.Progress)
	}
	tab.SetProgress(a, json.RawMessage(`1`))
	tab.SetProgress(a, json.RawMessage(`2`))
	snap := tab.Snapshot(time.Now(), 0)
	if progressOf(snap, 1) != "2" || progressOf(snap, 2) != "" {
		t.Fatalf("snapshot carries %q for a and %q for b, want the latest for a only", progressOf(snap, 1), progressOf(snap, 2))
	}
	// Busy: not renewed, so sent again next time.
	tab.ApplyRenewal(snap, &weirdriver.JobRenewResult{Renewed: []int64{2}, Busy: []int64{1}}, now.Add(time.Hour))
	if snap = tab.Snapshot(time.Now(), 0); progressOf(snap, 1) != "2" {
		t.Fatalf("after a busy renewal the snapshot carries %q, want 2 again", progressOf(snap, 1))
	}
	// A change while the renewal is in flight stays to send.
	tab.SetProgress(a, json.RawMessage(`3`))
	tab.ApplyRenewal(snap, &weirdriver.JobRenewResult{Renewed: []int64{1, 2}}, now.Add(time.Hour))
	if snap = tab.Snapshot(time.Now(), 0); progressOf(snap, 1) != "3" {
		t.Fatalf("a change during the renewal: snapshot carries %q, want 3", progressOf(snap, 1))
	}
	tab.ApplyRenewal(snap, &weirdriver.JobRenewResult{Renewed: []int64{1, 2}}, now.Add(time.Hour))
	if snap = tab.Snapshot(time.Now(), 0); snap.Progress != nil {
		t.Fatalf("after the renewal wrote it the snapshot carries %q", snap.Progress)
	}
	// The outcome takes only what no renewal carried.
	if ret := tab.MarkReturned(a); ret.Progress != nil {
		t.Fatalf("the outcome carries %s, which a renewal wrote", ret.Progress)
	}
	tab.SetProgress(b, json.RawMessage(`"b"`))
	if ok, _ := tab.RecordOutput(b, json.RawMessage(`"out"`)); !ok {
		t.Fatal("RecordOutput refused a running handler")
	}
	if ret := tab.MarkReturned(b); string(ret.Progress) != `"b"` || string(ret.Output) != `"out"` {
		t.Fatalf("the outcome carries progress %s output %s", ret.Progress, ret.Output)
	}
	if tab.SetProgress(b, json.RawMessage(`4`)) {
		t.Fatal("SetProgress took a value after the handler returned")
	}
	if ok, _ := tab.RecordOutput(b, json.RawMessage(`4`)); ok {
		t.Fatal("RecordOutput took a value after the handler returned")
	}
	if snap = tab.Snapshot(time.Now(), 0); snap.Progress != nil {
		t.Fatalf("after the outcome took it the snapshot carries %q", snap.Progress)
	}
}

// TestSnapshotSparesWaitingOutcomes: a renewal leaves out a lease whose handler
// returned while it has more than keep left (its outcome's write is due and a
// renewal of the row would only hold the lock that write waits for), and renews
// it once it has less; running and buffered leases are always renewed.
func TestSnapshotSparesWaitingOutcomes(t *testing.T) {
	tab, _ := table(t)
	now := time.Now()
	const keep = 10 * time.Second
	buffered := job(1, 1, now.Add(time.Minute))
	running := job(2, 1, now.Add(time.Minute))
	fresh := job(3, 1, now.Add(time.Minute))      // returned, lease far from its end
	aging := job(4, 1, now.Add(keep-time.Second)) // returned, lease nearing its end
	tab.Add([]*Job{buffered, running, fresh, aging})
	for _, j := range []*Job{running, fresh, aging} {
		if !tab.MarkRunning(j, context.Background()) {
			t.Fatalf("job %d: MarkRunning refused", j.Row.ID)
		}
	}
	tab.MarkReturned(fresh)
	tab.MarkReturned(aging)
	got := tab.Snapshot(now, keep).IDs
	slices.Sort(got)
	if want := []int64{1, 2, 4}; !slices.Equal(got, want) {
		t.Fatalf("renewed %v, want %v", got, want)
	}
	if got := tab.Snapshot(now.Add(time.Minute-keep+time.Second), keep).IDs; !slices.Contains(got, 3) {
		t.Fatalf("renewed %v: the waiting outcome's lease is not renewed as its end nears", got)
	}
}

// TestSnapshotLeavesOutExpired: a lease past its local deadline is not
// renewed, though no deadline check has found it lost yet (the process was
// frozen past the deadline, and the heartbeat's tick came first on waking): the
// client gives the lease up, so a renewal would only keep the job from rescue
// for a whole lease. The deadline check then finds it lost.
func TestSnapshotLeavesOutExpired(t *testing.T) {
	tab, lost := table(t)
	now := time.Now()
	running, returned, buffered := job(1, 1, now), job(2, 1, now.Add(-time.Second)), job(3, 1, now)
	live := job(4, 1, now.Add(time.Millisecond))
	tab.Add([]*Job{running, returned, buffered, live})
	for _, j := range []*Job{running, returned, live} {
		if !tab.MarkRunning(j, context.Background()) {
			t.Fatalf("job %d: MarkRunning refused", j.Row.ID)
		}
	}
	tab.MarkReturned(returned)
	if got := tab.Snapshot(now, time.Minute).IDs; !slices.Equal(got, []int64{4}) {
		t.Fatalf("renewed %v, want only the lease still within its deadline, 4", got)
	}
	tab.Expire(now)
	if lost[1] == "" || lost[3] == "" || lost[4] != "" {
		t.Fatalf("lost %v, want 1 and 3 (2's outcome is abandoned by the completer), not 4", lost)
	}
}

// TestCancelRunningIn: cancelling one queue's handlers (a queue being removed)
// cancels its running jobs only, and RunningIn lists them; a buffered job of
// the queue is neither.
func TestCancelRunningIn(t *testing.T) {
	tab, _ := table(t)
	deadline := time.Now().Add(time.Hour)
	inQueue := func(id int64, queue string) *Job {
		return NewJob(&weirtype.JobRow{ID: id, LeaseToken: 1, Queue: queue}, nil, deadline)
	}
	removed, other, buffered := inQueue(1, "removed"), inQueue(2, "other"), inQueue(3, "removed")
	tab.Add([]*Job{removed, other, buffered})
	for _, j := range []*Job{removed, other} {
		if !tab.MarkRunning(j, context.Background()) {
			t.Fatalf("job %d: MarkRunning refused", j.Row.ID)
		}
	}
	if rows := tab.RunningIn("removed"); len(rows) != 1 || rows[0].ID != 1 {
		t.Fatalf("RunningIn: %v, want job 1", rows)
	}
	cause := errors.New("removed")
	tab.CancelRunningIn("removed", cause)
	if got := context.Cause(tab.Start(removed, 0)); got != cause {
		t.Errorf("the removed queue's handler: cause %v", got)
	}
	if err := tab.Start(other, 0).Err(); err != nil {
		t.Errorf("the other queue's handler was cancelled: %v", err)
	}
	if len(tab.Running()) != 2 {
		t.Errorf("Running: %v, want both running jobs", tab.Running())
	}
}

// TestStartTimeout: the context Start returns carries the job and reports the
// attempt's deadline; at the timeout it ends with context.DeadlineExceeded and
// the cause ErrJobTimeout, and so do contexts derived from it; a handler that
// returned first is not cancelled for its timeout; a timeout that is not
// positive sets no deadline.
func TestStartTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tab, _ := table(t)
		slow, quick, none := job(1, 1, time.Now().Add(time.Hour)), job(2, 1, time.Now().Add(time.Hour)), job(3, 1, time.Now().Add(time.Hour))
		tab.Add([]*Job{slow, quick, none})
		for _, j := range []*Job{slow, quick, none} {
			if !tab.MarkRunning(j, context.Background()) {
				t.Fatal("MarkRunning refused")
			}
		}
		start := time.Now()
		ctx := tab.Start(slow, time.Second)
		derived, cancel := context.WithTimeout(ctx, time.Hour)
		defer cancel()
		if d, ok := derived.Deadline(); !ok || !d.Equal(start.Add(time.Second)) {
			t.Fatalf("deadline %v, %v; want %v", d, ok, start.Add(time.Second))
		}
		if FromContext(derived) != slow {
			t.Fatal("a context derived from the handler's does not carry its job")
		}
		quickCtx := tab.Start(quick, time.Second)
		tab.MarkReturned(quick)
		if _, ok := tab.Start(none, 0).Deadline(); ok {
			t.Fatal("a timeout of 0 set a deadline")
		}
		<-derived.Done()
		if waited := time.Since(start); waited != time.Second {
			t.Fatalf("the timeout fired after %v, want 1s", waited)
		}
		for _, c := range []context.Context{ctx, derived} {
			if !errors.Is(context.Cause(c), weirtype.ErrJobTimeout) {
				t.Fatalf("cause %v, want ErrJobTimeout", context.Cause(c))
			}
		}
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			t.Fatalf("Err %v, want DeadlineExceeded", ctx.Err())
		}
		if got := context.Cause(quickCtx); got != context.Canceled {
			t.Fatalf("a handler returned before its timeout: cause %v, want context.Canceled", got)
		}
	})
}

// TestTimeoutsInOrder: attempts with different timeouts, started at different
// times, each end at their own deadline, whichever of them returned in
// between; the one timer follows the earliest deadline left.
func TestTimeoutsInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tab, _ := table(t)
		start := time.Now()
		type attempt struct {
			after, timeout time.Duration // started after, with timeout
			returnAt       time.Duration // returned at, if before its deadline
		}
		attempts := []attempt{
			{0, 3 * time.Second, 0},
			{0, time.Second, 0},
			{100 * time.Millisecond, time.Second, 500 * time.Millisecond}, // between two of its list
			{200 * time.Millisecond, time.Second, 0},
			{300 * time.Millisecond, 500 * time.Millisecond, 0},
			{400 * time.Millisecond, 2 * time.Second, 600 * time.Millisecond}, // alone in its list
			{700 * time.Millisecond, 250 * time.Millisecond, 0},               // earlier than every other deadline
		}
		ended := make([]time.Duration, len(attempts))
		var wg sync.WaitGroup
		for i, a := range attempts {
			j := job(int64(i+1), 1, start.Add(time.Hour))
			tab.Add([]*Job{j})
			tab.MarkRunning(j, context.Background())
			wg.Go(func() {
				time.Sleep(a.after)
				ctx := tab.Start(j, a.timeout)
				if a.returnAt > 0 {
					time.Sleep(a.returnAt - a.after)
					tab.MarkReturned(j)
					return
				}
				<-ctx.Done()
				ended[i] = time.Since(start)
				if !errors.Is(context.Cause(ctx), weirtype.ErrJobTimeout) {
					t.Errorf("attempt %d: cause %v", i, context.Cause(ctx))
				}
			})
		}
		wg.Wait()
		for i, a := range attempts {
			if a.returnAt == 0 && ended[i] != a.after+a.timeout {
				t.Errorf("attempt %d (started at %v, timeout %v) ended at %v", i, a.after, a.timeout, ended[i])
			}
		}
		if len(tab.timeouts.lists) != 0 || !tab.timeouts.at.IsZero() {
			t.Errorf("%d lists left, timer at %v; want none", len(tab.timeouts.lists), tab.timeouts.at)
		}
	})
}
