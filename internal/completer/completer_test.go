package completer

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirq/weir/internal/clock"
	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/internal/lease"
	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirdriver/weirpgx"
	"github.com/weirq/weir/weirmigrate"
	"github.com/weirq/weir/weirtype"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// waitLimit bounds every wait for something that should happen much sooner.
const waitLimit = 30 * time.Second

// countingExec is the real executor; it records the size of each finalize
// statement it sends.
type countingExec struct {
	weirdriver.Executor
	mu      sync.Mutex
	batches []int
}

func (e *countingExec) JobFinalize(ctx context.Context, params []*weirdriver.JobFinalizeParams) ([]bool, error) {
	e.mu.Lock()
	e.batches = append(e.batches, len(params))
	e.mu.Unlock()
	return e.Executor.JobFinalize(ctx, params)
}

func (e *countingExec) sizes() []int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.batches)
}

// env is one test's schema, migrated, and a completer on it whose clock the
// test moves.
type env struct {
	schema string
	pool   *pgxpool.Pool
	exec   *countingExec
	leases *lease.Table
	clk    *clock.Fake
	c      *Completer

	finalized, released atomic.Int64
	mu                  sync.Mutex
	written, stale      []*Finalization
	abandoned           map[int64]string // job id → why
	warnings            []string
	rooms               int
}

func setup(t *testing.T) *env {
	t.Helper()
	e := &env{schema: dbtest.Schema(t), pool: dbtest.Pool(t, nil), abandoned: map[int64]string{},
		clk: clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))}
	d, err := weirpgx.New(e.pool, &weirpgx.Config{Schema: e.schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := weirmigrate.New(d).Up(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	e.exec = &countingExec{Executor: d.Executor()}
	e.leases = lease.NewTable(func(*lease.Job, string) {})
	e.c = New(Config{
		Exec: e.exec, Leases: e.leases, LeaseBudget: waitLimit, Clock: e.clk,
		Finalized: &e.finalized, Released: &e.released,
		Warn: func(msg string, attrs ...any) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.warnings = append(e.warnings, fmt.Sprint(msg, " ", attrs))
		},
		Written: func(f *Finalization) { e.note(&e.written, f) },
		Stale:   func(f *Finalization) { e.note(&e.stale, f) },
		Abandoned: func(f *Finalization, why string) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.abandoned[f.Job.Row.ID] = why
		},
		Room: func() {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.rooms++
		},
	})
	return e
}

func (e *env) note(list *[]*Finalization, f *Finalization) {
	e.mu.Lock()
	defer e.mu.Unlock()
	*list = append(*list, f)
}

// ids returns the job ids of list, sorted.
func (e *env) ids(list []*Finalization) []int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	var ids []int64
	for _, f := range list {
		ids = append(ids, f.Job.Row.ID)
	}
	slices.Sort(ids)
	return ids
}

// claim inserts n jobs, claims them for a minute, and holds their leases in
// the table, trusted for a minute by the fake clock.
func (e *env) claim(t *testing.T, n int) []*lease.Job {
	t.Helper()
	params := make([]*weirdriver.JobInsertParams, n)
	for i := range params {
		params[i] = &weirdriver.JobInsertParams{Kind: "k", Queue: "q", Args: json.RawMessage(`{}`), Priority: 1, MaxAttempts: 3}
	}
	if _, err := e.exec.JobInsert(t.Context(), params); err != nil {
		t.Fatal(err)
	}
	var jobs []*lease.Job
	for len(jobs) < n {
		rows, _, err := e.exec.JobClaim(t.Context(), &weirdriver.JobClaimParams{Queue: "q", Max: n - len(jobs), ClientID: "c", LeaseDuration: time.Minute})
		if err != nil || len(rows) == 0 {
			t.Fatalf("claimed %d of %d jobs: %v", len(jobs), n, err)
		}
		for _, r := range rows {
			jobs = append(jobs, lease.NewJob(r, nil, e.clk.Now().Add(time.Minute)))
		}
	}
	e.leases.Add(jobs)
	return jobs
}

// done returns the finalization of j's completion.
func done(j *lease.Job) *Finalization {
	return &Finalization{Job: j, Params: weirdriver.JobFinalizeParams{ID: j.Row.ID, LeaseToken: j.Token, Outcome: weirdriver.OutcomeCompleted}}
}

// run runs the completer until the test ends, or until the returned stop is
// called; stop returns once Run has.
func (e *env) run(t *testing.T) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		e.c.Run(ctx)
	}()
	stop = func() {
		cancel()
		<-returned
	}
	t.Cleanup(stop)
	return stop
}

// drained waits until every finalization submitted is resolved.
func (e *env) drained(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	defer cancel()
	if err := e.c.WaitDrained(ctx); err != nil {
		t.Fatalf("outcomes not resolved within %v: %v", waitLimit, err)
	}
}

// states returns the state of each job of the schema, by id.
func (e *env) states(t *testing.T) map[int64]weirtype.JobState {
	t.Helper()
	rows, err := e.pool.Query(t.Context(), "SELECT id, state FROM "+pgx.Identifier{e.schema, "weir_job"}.Sanitize())
	if err != nil {
		t.Fatal(err)
	}
	states := map[int64]weirtype.JobState{}
	for rows.Next() {
		var id int64
		var s string
		if err := rows.Scan(&id, &s); err != nil {
			t.Fatal(err)
		}
		states[id] = weirtype.JobState(s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return states
}

// refuseWrites makes every update of the schema's jobs fail, as a database
// that refuses writes does, until the returned allow is called.
func (e *env) refuseWrites(t *testing.T) (allow func()) {
	t.Helper()
	fn := pgx.Identifier{e.schema, "refuse_writes"}.Sanitize()
	_, err := e.pool.Exec(t.Context(), `CREATE FUNCTION `+fn+`() RETURNS trigger LANGUAGE plpgsql AS
		$$BEGIN RAISE EXCEPTION 'test: writes refused'; END$$;
		CREATE TRIGGER refuse_writes BEFORE UPDATE ON `+pgx.Identifier{e.schema, "weir_job"}.Sanitize()+`
		FOR EACH ROW EXECUTE FUNCTION `+fn+`()`)
	if err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		if _, err := e.pool.Exec(t.Context(), "DROP TRIGGER refuse_writes ON "+pgx.Identifier{e.schema, "weir_job"}.Sanitize()); err != nil {
			t.Fatal(err)
		}
	}
}

// awaitRetry waits until the completer waits to retry a failed write, and
// returns how long it waits.
func (e *env) awaitRetry(t *testing.T) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	defer cancel()
	left, err := e.clk.AwaitArmed(ctx, 1)
	if err != nil || len(left) != 1 {
		t.Fatalf("no retry planned within %v: %v %v", waitLimit, left, err)
	}
	return left[0]
}

// TestBatches: outcomes queued faster than they are written go out in
// statements of at most maxBatch each; every one is written and counted, the
// prefetched jobs given back are counted as released, and the leases leave the
// table.
func TestBatches(t *testing.T) {
	t.Parallel()
	e := setup(t)
	jobs := e.claim(t, maxBatch+500)
	for i, j := range jobs {
		f := done(j)
		if i < 10 {
			f.Prefetched, f.Params.Outcome = true, weirdriver.OutcomeReturn
		}
		e.c.Submit(f)
	}
	e.run(t)
	e.drained(t)
	if got := e.exec.sizes(); !slices.Equal(got, []int{maxBatch, 500}) {
		t.Fatalf("finalize statements of %v outcomes, want [%d 500]", got, maxBatch)
	}
	if n := len(e.ids(e.written)); n != len(jobs) || e.finalized.Load() != int64(len(jobs)) || e.released.Load() != 10 {
		t.Fatalf("written %d, finalized %d, released %d; want %d, %d, 10", n, e.finalized.Load(), e.released.Load(), len(jobs), len(jobs))
	}
	counts := map[weirtype.JobState]int{}
	for _, s := range e.states(t) {
		counts[s]++
	}
	if counts[weirtype.JobStateCompleted] != len(jobs)-10 || counts[weirtype.JobStateAvailable] != 10 {
		t.Fatalf("job states %v, want %d completed and 10 available", counts, len(jobs)-10)
	}
	if held := e.leases.Snapshot(e.clk.Now(), time.Hour).IDs; len(held) != 0 {
		t.Fatalf("the table still holds %d leases whose outcome was written", len(held))
	}
}

// TestFencedWrites: in one batch, an outcome under the lease held is written,
// and one under a lease lost (another token, or a job another write ended)
// changes nothing and is reported stale, not counted; once Stop has begun,
// the stale jobs are listed as unwritten.
func TestFencedWrites(t *testing.T) {
	t.Parallel()
	e := setup(t)
	jobs := e.claim(t, 3)
	held, otherToken, ended := jobs[0], jobs[1], jobs[2]
	if applied, err := e.exec.Executor.JobFinalize(t.Context(), []*weirdriver.JobFinalizeParams{
		{ID: ended.Row.ID, LeaseToken: ended.Token, Outcome: weirdriver.OutcomeDiscard},
	}); err != nil || !applied[0] {
		t.Fatalf("discarding job %d: %v %v", ended.Row.ID, applied, err)
	}
	e.c.BeginStop()
	stale := done(otherToken)
	stale.Params.LeaseToken++
	for _, f := range []*Finalization{done(held), stale, done(ended)} {
		e.c.Submit(f)
	}
	e.run(t)
	e.drained(t)
	if got := e.exec.sizes(); len(got) != 1 {
		t.Fatalf("finalize statements %v, want one", got)
	}
	want := []int64{otherToken.Row.ID, ended.Row.ID}
	slices.Sort(want)
	if w, s := e.ids(e.written), e.ids(e.stale); !slices.Equal(w, []int64{held.Row.ID}) || !slices.Equal(s, want) {
		t.Fatalf("written %v, stale %v; want [%d], %v", w, s, held.Row.ID, want)
	}
	if e.finalized.Load() != 1 {
		t.Fatalf("finalized %d, want 1", e.finalized.Load())
	}
	states := e.states(t)
	if states[held.Row.ID] != weirtype.JobStateCompleted || states[otherToken.Row.ID] != weirtype.JobStateRunning ||
		states[ended.Row.ID] != weirtype.JobStateDiscarded {
		t.Fatalf("states %v: a stale write changed a job, or the held one was not written", states)
	}
	unwritten := e.c.UnwrittenJobs()
	slices.Sort(unwritten)
	if !slices.Equal(unwritten, want) {
		t.Fatalf("unwritten %v, want the stale jobs %v", unwritten, want)
	}
}

// TestCompletedInTx: an outcome whose handler completed its job in its own
// transaction matches nothing once that transaction committed; the completer
// then reads that the transaction ended the job under the same lease, and
// reports it written with the outcome the transaction wrote. One whose
// transaction rolled back is written as usual; one whose lease was lost
// meanwhile is stale.
func TestCompletedInTx(t *testing.T) {
	t.Parallel()
	e := setup(t)
	jobs := e.claim(t, 3)
	committed, rolledBack, lost := jobs[0], jobs[1], jobs[2]
	for _, c := range []struct {
		j      *lease.Job
		commit bool
	}{{committed, true}, {rolledBack, false}} {
		tx, err := e.exec.Begin(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := tx.JobComplete(t.Context(), &weirdriver.JobCompleteParams{ID: c.j.Row.ID, LeaseToken: c.j.Token}); err != nil || !ok {
			t.Fatalf("completing job %d in a transaction: %v %v", c.j.Row.ID, ok, err)
		}
		end := tx.Rollback
		if c.commit {
			end = tx.Commit
		}
		if err := end(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.pool.Exec(t.Context(), "UPDATE "+pgx.Identifier{e.schema, "weir_job"}.Sanitize()+
		" SET lease_token = lease_token + 1 WHERE id = $1", lost.Row.ID); err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		f := done(j)
		f.Params.Outcome, f.CompletedInTx = weirdriver.OutcomeRetry, true // what the handler returned afterwards
		e.c.Submit(f)
	}
	e.run(t)
	e.drained(t)
	e.mu.Lock()
	defer e.mu.Unlock()
	byID := map[int64]*Finalization{}
	for _, f := range e.written {
		byID[f.Job.Row.ID] = f
	}
	if f := byID[committed.Row.ID]; f == nil || !f.EndedInTx || f.Params.Outcome != weirdriver.OutcomeCompleted {
		t.Fatalf("the job its transaction completed: written %+v, want EndedInTx with outcome completed", f)
	}
	if f := byID[rolledBack.Row.ID]; f == nil || f.EndedInTx || f.Params.Outcome != weirdriver.OutcomeRetry {
		t.Fatalf("the job whose transaction rolled back: written %+v, want its own outcome", f)
	}
	if len(e.stale) != 1 || e.stale[0].Job != lost {
		t.Fatalf("stale %d outcomes, want only the lost lease's", len(e.stale))
	}
}

// TestRetryBackoff: a write the database refuses is retried after 10 ms, then
// after twice as long each time up to a second, with a warning each time; it
// is written once the database takes it.
func TestRetryBackoff(t *testing.T) {
	t.Parallel()
	e := setup(t)
	j := e.claim(t, 1)[0]
	allow := e.refuseWrites(t)
	e.c.Submit(done(j))
	e.run(t)
	want := []time.Duration{10, 20, 40, 80, 160, 320, 640, 1000, 1000}
	for i, w := range want {
		w *= time.Millisecond
		if got := e.awaitRetry(t); got != w {
			t.Fatalf("retry %d waits %v, want %v", i+1, got, w)
		}
		if i == len(want)-1 {
			allow()
		}
		e.clk.Advance(w)
	}
	e.drained(t)
	if got := e.ids(e.written); !slices.Equal(got, []int64{j.Row.ID}) {
		t.Fatalf("written %v, want job %d", got, j.Row.ID)
	}
	if s := e.states(t)[j.Row.ID]; s != weirtype.JobStateCompleted {
		t.Fatalf("job %s after the retries", s)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.warnings) != len(want) || !strings.Contains(e.warnings[0], "writes refused") {
		t.Fatalf("%d warnings, want %d naming the database's error; the first: %q", len(e.warnings), len(want), e.warnings[0])
	}
}

// TestRetryOnlyUnderTrustedLease: a write that failed is retried only while
// its lease is trusted; past the lease's local deadline it is abandoned, and
// the job is left to rescue. A first write goes out whatever the lease: it is
// fenced.
func TestRetryOnlyUnderTrustedLease(t *testing.T) {
	t.Parallel()
	e := setup(t)
	jobs := e.claim(t, 2)
	retried, expired := jobs[0], jobs[1]
	// expired's lease is past its local deadline, but still held in the
	// database: its first write applies.
	expired = lease.NewJob(expired.Row, nil, e.clk.Now().Add(-time.Second))
	e.leases.Add([]*lease.Job{expired})
	e.c.Submit(done(expired))
	e.run(t)
	e.drained(t)
	if got := e.ids(e.written); !slices.Equal(got, []int64{expired.Row.ID}) {
		t.Fatalf("written %v: the first write under an expired local lease did not go out", got)
	}

	e.refuseWrites(t)
	e.c.Submit(done(retried))
	e.awaitRetry(t)
	e.clk.Advance(time.Minute) // past the lease's local deadline
	e.drained(t)
	e.mu.Lock()
	why := e.abandoned[retried.Row.ID]
	e.mu.Unlock()
	if !strings.Contains(why, "lease lost or expired") {
		t.Fatalf("abandoned with %q, want the lease's expiry", why)
	}
	if got := e.exec.sizes(); len(got) != 2 {
		t.Fatalf("finalize statements %v: the write was retried under an expired lease", got)
	}
	if s := e.states(t)[retried.Row.ID]; s != weirtype.JobStateRunning {
		t.Fatalf("the abandoned job is %s, want running (for rescue)", s)
	}
}

// TestStopAbandons: when Run's context ends, the outcomes still queued, and a
// write waiting to be retried, are abandoned for Stop; one submitted after is
// abandoned at once. From BeginStop on, those whose handler ran are listed as
// unwritten, the prefetched ones are not.
func TestStopAbandons(t *testing.T) {
	t.Parallel()
	e := setup(t)
	jobs := e.claim(t, 4)
	e.refuseWrites(t)
	e.c.BeginStop()
	e.c.Submit(done(jobs[0]))
	stop := e.run(t)
	e.awaitRetry(t) // jobs[0]'s write failed
	e.c.Submit(done(jobs[1]))
	prefetched := done(jobs[2])
	prefetched.Prefetched = true
	e.c.Submit(prefetched)
	stop()
	e.c.Submit(done(jobs[3]))
	e.drained(t)
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, want := range []string{"stop budget ran out", "stop budget ran out", "stop budget ran out", "the client had stopped"} {
		if got := e.abandoned[jobs[i].Row.ID]; got != want {
			t.Errorf("job %d abandoned with %q, want %q", i, got, want)
		}
	}
	unwritten := e.c.UnwrittenJobs()
	slices.Sort(unwritten)
	if want := []int64{jobs[0].Row.ID, jobs[1].Row.ID, jobs[3].Row.ID}; !slices.Equal(unwritten, want) {
		t.Fatalf("unwritten %v, want %v (not the prefetched job)", unwritten, want)
	}
}

// TestBacklogFull: MaxBacklog outcomes waiting make Full report true, with
// one warning however often it is asked; Room is called once the backlog
// falls below it.
func TestBacklogFull(t *testing.T) {
	t.Parallel()
	e := setup(t)
	// Outcomes of jobs that do not exist: each write is a real, stale one.
	for i := range MaxBacklog - 1 {
		e.c.Submit(done(lease.NewJob(&weirtype.JobRow{ID: int64(1_000_000 + i), LeaseToken: 1}, nil, e.clk.Now().Add(time.Hour))))
	}
	if e.c.Full() {
		t.Fatalf("Full with %d outcomes waiting", MaxBacklog-1)
	}
	e.c.Submit(done(lease.NewJob(&weirtype.JobRow{ID: 1, LeaseToken: 1}, nil, e.clk.Now().Add(time.Hour))))
	for range 2 { // asked twice: one warning
		if !e.c.Full() {
			t.Fatalf("not Full with %d outcomes waiting", MaxBacklog)
		}
	}
	e.run(t)
	e.drained(t)
	if e.c.Full() {
		t.Fatal("still Full once the backlog was written")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.rooms != 1 || len(e.warnings) != 1 || !strings.Contains(e.warnings[0], "claims pause") {
		t.Fatalf("Room called %d times, warnings %q; want 1 and one about the pause", e.rooms, e.warnings)
	}
}
