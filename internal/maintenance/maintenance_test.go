package maintenance_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/internal/maintenance"
	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirdriver/weirpgx"
	"github.com/weirq/weir/weirmigrate"
	"github.com/weirq/weir/weirtype"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// Short intervals so that elections and failovers happen within a test.
const (
	electInterval = 50 * time.Millisecond
	leaderTTL     = 300 * time.Millisecond
	// waitLimit bounds every wait for something that should happen much sooner.
	waitLimit = 10 * time.Second
)

// bundle is one test's schema, migrated, with a driver on a pool of its own.
type bundle struct {
	schema string
	pool   *pgxpool.Pool
	exec   weirdriver.Executor
}

func setup(t *testing.T) *bundle {
	t.Helper()
	b := &bundle{schema: dbtest.Schema(t), pool: dbtest.Pool(t, nil)}
	d, err := weirpgx.New(b.pool, &weirpgx.Config{Schema: b.schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := weirmigrate.New(d).Up(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	b.exec = d.Executor()
	return b
}

// ownPool returns a driver on the bundle's schema with a pool of its own, which
// the test may close to cut the driver off the database.
func (b *bundle) ownPool(t *testing.T) (*pgxpool.Pool, weirdriver.Executor) {
	t.Helper()
	pool := dbtest.Pool(t, nil)
	d, err := weirpgx.New(pool, &weirpgx.Config{Schema: b.schema})
	if err != nil {
		t.Fatal(err)
	}
	return pool, d.Executor()
}

// config returns a config with short elections for client id, and the rescue
// interval and retentions of a client's defaults.
func config(t *testing.T, id string) *maintenance.Config {
	return &maintenance.Config{
		ClientID:           id,
		Logger:             slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})).With("test_client", id),
		ElectInterval:      electInterval,
		LeaderTTL:          leaderTTL,
		RescueInterval:     15 * time.Second,
		CompletedRetention: 24 * time.Hour,
		CancelledRetention: 7 * 24 * time.Hour,
		DiscardedRetention: 7 * 24 * time.Hour,
	}
}

// taskConfig returns a config for tests of the maintenance tasks, with elections
// slow enough that a loaded machine does not make the leader lose its term.
func taskConfig(t *testing.T, id string) *maintenance.Config {
	cfg := config(t, id)
	cfg.ElectInterval, cfg.LeaderTTL = time.Second, 10*time.Second
	return cfg
}

// start starts a service and stops it when the test ends (before the pools it
// uses are closed, since those were made earlier).
func start(t *testing.T, exec weirdriver.Executor, cfg *maintenance.Config) *maintenance.Service {
	t.Helper()
	s := maintenance.New(exec, cfg)
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop(t, s) })
	return s
}

func stop(t *testing.T, s *maintenance.Service) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.Stop(ctx)
}

// leaders returns the indexes of the services that lead now.
func leaders(svcs []*maintenance.Service) []int {
	var ls []int
	for i, s := range svcs {
		if s.IsLeader() {
			ls = append(ls, i)
		}
	}
	return ls
}

// awaitLeader polls until exactly one service leads and returns it. It fails the
// test if two ever lead at once.
func awaitLeader(t *testing.T, svcs []*maintenance.Service) int {
	t.Helper()
	var leader int
	awaitCond(t, "one leader", svcs, func() bool {
		ls := leaders(svcs)
		if len(ls) == 1 {
			leader = ls[0]
			return true
		}
		return false
	})
	return leader
}

// awaitCond polls cond every millisecond until it holds, for at most waitLimit,
// and checks at every poll that no two of svcs lead at once.
func awaitCond(t *testing.T, what string, svcs []*maintenance.Service, cond func() bool) time.Time {
	t.Helper()
	return awaitCondWithin(t, waitLimit, what, svcs, cond)
}

// awaitCondWithin is awaitCond with its own limit.
func awaitCondWithin(t *testing.T, within time.Duration, what string, svcs []*maintenance.Service, cond func() bool) time.Time {
	t.Helper()
	ticker := time.NewTicker(time.Millisecond)
	defer ticker.Stop()
	limit := time.NewTimer(within)
	defer limit.Stop()
	for {
		if ls := leaders(svcs); len(ls) > 1 {
			t.Fatalf("services %v lead at once", ls)
		}
		if cond() {
			return time.Now()
		}
		select {
		case <-ticker.C:
		case <-limit.C:
			t.Fatalf("no %s within %v", what, within)
		}
	}
}

// awaitStopped waits until s no longer leads and returns the latest moment,
// taken just before a look, at which it still did: its local deadline was
// later. Unlike the moment the wait ends, which a loaded machine delays, it
// bounds the deadline from below whatever the scheduling.
func awaitStopped(t *testing.T, what string, svcs []*maintenance.Service, s *maintenance.Service) time.Time {
	t.Helper()
	var led time.Time
	awaitCond(t, what, svcs, func() bool {
		before := time.Now()
		if s.IsLeader() {
			led = before
			return false
		}
		return true
	})
	return led
}

// observe checks every millisecond for d that no two of svcs lead at once, and
// returns how many times it looked.
func observe(t *testing.T, svcs []*maintenance.Service, d time.Duration) int {
	t.Helper()
	ticker := time.NewTicker(time.Millisecond)
	defer ticker.Stop()
	end := time.NewTimer(d)
	defer end.Stop()
	for n := 0; ; n++ {
		if ls := leaders(svcs); len(ls) > 1 {
			t.Fatalf("services %v lead at once", ls)
		}
		select {
		case <-ticker.C:
		case <-end.C:
			return n
		}
	}
}

func leaderGet(t *testing.T, exec weirdriver.Executor) string {
	t.Helper()
	l, err := exec.LeaderGet(t.Context(), maintenance.LeaderName)
	if errors.Is(err, weirdriver.ErrNotFound) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return l.ID
}

// recorder wraps an executor and records when the service sent its latest
// successful election, and when it sent each rescue. With stuck set, elections
// block, ignoring their context, until release is closed: a wedged connection.
type recorder struct {
	weirdriver.Executor
	stuck   atomic.Bool
	release chan struct{}

	mu      sync.Mutex
	elected time.Time   // when the latest successful election was sent
	rescues []time.Time // when each rescue was sent
}

func newRecorder(exec weirdriver.Executor) *recorder {
	return &recorder{Executor: exec, release: make(chan struct{})}
}

func (r *recorder) LeaderElect(ctx context.Context, p *weirdriver.LeaderElectParams) (bool, error) {
	if r.stuck.Load() {
		<-r.release
	}
	sent := time.Now()
	ok, err := r.Executor.LeaderElect(ctx, p)
	if ok && err == nil {
		r.mu.Lock()
		r.elected = sent
		r.mu.Unlock()
	}
	return ok, err
}

func (r *recorder) JobRescue(ctx context.Context, p *weirdriver.JobRescueParams) ([]*weirtype.JobRow, error) {
	r.mu.Lock()
	r.rescues = append(r.rescues, time.Now())
	r.mu.Unlock()
	return r.Executor.JobRescue(ctx, p)
}

func (r *recorder) lastElected() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.elected
}

func (r *recorder) rescuesAfter(at time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, t := range r.rescues {
		if !t.Before(at) {
			n++
		}
	}
	return n
}

func TestOneLeader(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var svcs []*maintenance.Service
	for i := range 3 {
		svcs = append(svcs, start(t, b.exec, config(t, fmt.Sprintf("client-%d", i))))
	}
	awaitLeader(t, svcs)
	n := observe(t, svcs, time.Second)
	t.Logf("looked %d times", n)

	// The store agrees on who leads. A renewal cannot fail between the two looks
	// at IsLeader on a healthy database, but tolerate it rather than flake.
	awaitCond(t, "leader the store agrees on", svcs, func() bool {
		before := leaders(svcs)
		id := leaderGet(t, b.exec)
		after := leaders(svcs)
		return len(before) == 1 && slices.Equal(before, after) && id == fmt.Sprintf("client-%d", before[0])
	})
	var elections int64
	for _, s := range svcs {
		elections += s.Stats().Elections
	}
	if elections < 1 {
		t.Fatalf("elections: %d", elections)
	}
}

// slowElections wraps an executor whose elections take twice the election
// interval before they reach the database: a loaded database.
type slowElections struct{ weirdriver.Executor }

func (s slowElections) LeaderElect(ctx context.Context, p *weirdriver.LeaderElectParams) (bool, error) {
	delay := time.NewTimer(2 * electInterval)
	defer delay.Stop()
	select {
	case <-ctx.Done():
		return false, ctx.Err()
	case <-delay.C:
	}
	return s.Executor.LeaderElect(ctx, p)
}

// An election slower than the election interval still wins a term, shorter by
// the wait, and a renewal that slow still renews it.
func TestSlowElectionsWin(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := start(t, slowElections{b.exec}, config(t, "slow"))
	awaitLeader(t, []*maintenance.Service{s})
	first, err := b.exec.LeaderGet(t.Context(), maintenance.LeaderName)
	if err != nil {
		t.Fatal(err)
	}
	awaitCond(t, "a renewal", nil, func() bool {
		l, err := b.exec.LeaderGet(t.Context(), maintenance.LeaderName)
		return err == nil && l.ID == "slow" && l.ExpiresAt.After(first.ExpiresAt)
	})
}

func TestFailover(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var (
		svcs  []*maintenance.Service
		pools []*pgxpool.Pool
		recs  []*recorder
	)
	for i := range 3 {
		pool, exec := b.ownPool(t)
		rec := newRecorder(exec)
		svcs = append(svcs, start(t, rec, config(t, fmt.Sprintf("client-%d", i))))
		pools, recs = append(pools, pool), append(recs, rec)
	}
	id := func(i int) string { return fmt.Sprintf("client-%d", i) }

	// A graceful stop resigns: the term is gone at once, and another client
	// takes over without waiting for it to expire.
	first := awaitLeader(t, svcs)
	stop(t, svcs[first])
	if svcs[first].IsLeader() {
		t.Fatal("stopped service still leads")
	}
	if got := leaderGet(t, b.exec); got == id(first) {
		t.Fatalf("stopped service %s still holds the term", got)
	}
	second := awaitLeader(t, svcs)
	if second == first {
		t.Fatal("stopped service leads again")
	}

	// A crash: the leader's database goes away, so it can neither renew nor
	// resign. It must stop leading before its term can expire in the store, and
	// the survivor takes over once it has.
	pools[second].Close()
	led := awaitStopped(t, "end of the cut-off leader's term", svcs, svcs[second])
	renewed := recs[second].lastElected()
	if !led.Before(renewed.Add(leaderTTL)) {
		t.Fatalf("cut-off leader still led %v after its last renewal was sent, not only before the TTL %v", led.Sub(renewed), leaderTTL)
	}
	t.Logf("cut-off leader last seen leading %v after its last renewal was sent", led.Sub(renewed))
	third := awaitLeader(t, svcs)
	if third == first || third == second {
		t.Fatalf("leader %d, want the survivor", third)
	}
	if got := leaderGet(t, b.exec); got != id(third) {
		t.Fatalf("store says %q leads, want %s", got, id(third))
	}
	observe(t, svcs, 100*time.Millisecond)
}

// A leader whose election call hangs, ignoring its context (a wedged
// connection), stops leading and sends no statement after its local deadline,
// and another client takes over.
func TestStuckElectorStopsAtLocalDeadline(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := newRecorder(b.exec)
	cfg := config(t, "stuck")
	cfg.RescueInterval = 5 * time.Millisecond
	stuck := start(t, rec, cfg)
	t.Cleanup(func() { close(rec.release) }) // runs before the Stop of start's cleanup
	svcs := []*maintenance.Service{stuck}
	awaitLeader(t, svcs)

	rec.stuck.Store(true)
	other := start(t, b.exec, config(t, "other"))
	svcs = append(svcs, other)
	led := awaitStopped(t, "end of the stuck leader's term", svcs, stuck)
	renewed := rec.lastElected()
	localDeadline := renewed.Add(leaderTTL - electInterval)
	if !led.Before(renewed.Add(leaderTTL)) {
		t.Fatalf("stuck leader still led %v after its last renewal was sent, not only before the TTL %v", led.Sub(renewed), leaderTTL)
	}
	t.Logf("stuck leader last seen leading %v after its last renewal was sent", led.Sub(renewed))
	awaitCond(t, "takeover", svcs, other.IsLeader)
	// The slack covers the moment between the service's look at its deadline and
	// the recorder's look at the clock.
	if n := rec.rescuesAfter(localDeadline.Add(10 * time.Millisecond)); n > 0 {
		t.Fatalf("stuck leader sent %d rescues after its local deadline", n)
	}
	if got := leaderGet(t, b.exec); got != "other" {
		t.Fatalf("store says %q leads, want other", got)
	}
}

// insertJobs inserts n jobs into queue with maxAttempts, due at scheduledAt (zero: now).
func insertJobs(t *testing.T, exec weirdriver.Executor, queue string, n, maxAttempts int, scheduledAt time.Time) []*weirtype.JobRow {
	t.Helper()
	var params []*weirdriver.JobInsertParams
	for range n {
		params = append(params, &weirdriver.JobInsertParams{
			Kind: "noop", Queue: queue, Args: json.RawMessage(`{}`), Priority: 2,
			MaxAttempts: maxAttempts, ScheduledAt: scheduledAt,
		})
	}
	res, err := exec.JobInsert(t.Context(), params)
	if err != nil {
		t.Fatal(err)
	}
	jobs := make([]*weirtype.JobRow, len(res))
	for i, r := range res {
		jobs[i] = r.Job
	}
	return jobs
}

func claim(t *testing.T, exec weirdriver.Executor, queue string, n int, lease time.Duration) []*weirtype.JobRow {
	t.Helper()
	jobs, _, err := exec.JobClaim(t.Context(), &weirdriver.JobClaimParams{
		Queue: queue, Max: n, ClientID: "lost-worker", LeaseDuration: lease,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != n {
		t.Fatalf("claimed %d jobs, want %d", len(jobs), n)
	}
	return jobs
}

func getJob(t *testing.T, exec weirdriver.Executor, id int64) *weirtype.JobRow {
	t.Helper()
	job, err := exec.JobGet(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return job
}

func TestRescue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	retried := insertJobs(t, b.exec, "q", 3, 3, time.Time{})
	last := insertJobs(t, b.exec, "q", 1, 1, time.Time{})[0]
	claim(t, b.exec, "q", 4, time.Microsecond)

	cfg := taskConfig(t, "leader")
	cfg.RescueInterval = 50 * time.Millisecond
	// Only the rescue pass itself can make the rescued jobs available.
	cfg.ScheduleInterval = time.Hour
	reported := make(chan *weirtype.JobRow, 10)
	cfg.Rescued = func(row *weirtype.JobRow) { reported <- row }
	s := start(t, b.exec, cfg)

	rescued := func(job *weirtype.JobRow) bool {
		if len(job.Errors) != 1 {
			return false
		}
		e := job.Errors[0]
		return e.Error == weirdriver.DefaultRescueError && e.Attempt == 1 && job.LeaseExpiresAt == nil
	}
	awaitCond(t, "rescue", nil, func() bool {
		for _, j := range retried {
			job := getJob(t, b.exec, j.ID)
			if job.State != weirtype.JobStateAvailable || !rescued(job) {
				return false
			}
		}
		job := getJob(t, b.exec, last.ID)
		return job.State == weirtype.JobStateDiscarded && job.FinalizedAt != nil && rescued(job)
	})
	// The counter follows the commit that the test has seen.
	awaitCond(t, "Stats().Rescued = 4", nil, func() bool { return s.Stats().Rescued == 4 })
	// Each job is reported once, as the rescue left it, with the lost lease's token.
	want := map[int64]weirtype.JobState{last.ID: weirtype.JobStateDiscarded}
	for _, j := range retried {
		want[j.ID] = weirtype.JobStateRetryable
	}
	for range 4 {
		select {
		case row := <-reported:
			if st, ok := want[row.ID]; !ok || row.State != st || row.LeaseToken == 0 || row.Attempt != 1 {
				t.Fatalf("reported %+v; want one of %v, once", row, want)
			}
			delete(want, row.ID)
		case <-time.After(10 * time.Second):
			t.Fatalf("jobs %v not reported", want)
		}
	}
	select {
	case row := <-reported:
		t.Fatalf("job %d reported again", row.ID)
	default:
	}
}

// TestBatchesFencedByLeadership checks that a service that still believes it leads,
// but whose term the database gave to another client, changes nothing: each batch
// first renews the term in its own transaction and is refused.
func TestBatchesFencedByLeadership(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := taskConfig(t, "deposed")
	cfg.ElectInterval, cfg.LeaderTTL = time.Minute, 3*time.Minute // no renewal during the test
	cfg.RescueInterval = 20 * time.Millisecond
	cfg.Rescued = func(row *weirtype.JobRow) { t.Errorf("a refused batch reported job %d rescued", row.ID) }
	s := start(t, b.exec, cfg)
	awaitCond(t, "leadership", nil, s.IsLeader)
	// Another client takes the term behind the service's back.
	if _, err := b.pool.Exec(t.Context(), "UPDATE "+b.schema+".weir_leader SET leader_id = 'usurper', expires_at = now() + interval '1 hour'"); err != nil {
		t.Fatal(err)
	}
	job := insertJobs(t, b.exec, "q", 1, 3, time.Time{})[0]
	claim(t, b.exec, "q", 1, time.Microsecond)
	before := s.Stats().Refused
	awaitCond(t, "a refused batch", nil, func() bool { return s.Stats().Refused > before+1 })
	if got := getJob(t, b.exec, job.ID); got.State != weirtype.JobStateRunning || len(got.Errors) != 0 {
		t.Fatalf("a deposed leader rescued the job: %+v", got)
	}
	if id := leaderGet(t, b.exec); id != "usurper" {
		t.Fatalf("leader %q after the deposed service's batches", id)
	}
}

// A backlog larger than a batch clears in one run.
func TestRescueBatches(t *testing.T) {
	t.Parallel()
	b := setup(t)
	insertJobs(t, b.exec, "q", 7, 3, time.Time{})
	claim(t, b.exec, "q", 7, time.Microsecond)

	cfg := taskConfig(t, "leader")
	cfg.RescueInterval = time.Hour // only the run at the start of the term
	cfg.BatchSize = 2
	s := start(t, b.exec, cfg)
	awaitCond(t, "rescue of the backlog", nil, func() bool { return s.Stats().Rescued == 7 })
	if got := s.Stats().Elections; got != 1 {
		t.Fatalf("elections: %d, want 1 (a second term would rescue again)", got)
	}
}

// runningJobs counts the jobs of b's schema that are running.
func runningJobs(t *testing.T, b *bundle) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(t.Context(), "SELECT count(*) FROM "+b.schema+".weir_job WHERE state = 'running'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// slowBatches wraps an executor whose transactions' rescues of more than most
// rows run until their context ends: a database too slow for a batch that
// size. It records the limit of every rescue sent.
type slowBatches struct {
	weirdriver.Executor
	most int

	mu     sync.Mutex
	limits []int
}

func (s *slowBatches) Begin(ctx context.Context) (weirdriver.ExecutorTx, error) {
	tx, err := s.Executor.Begin(ctx)
	return &slowBatchesTx{ExecutorTx: tx, s: s}, err
}

type slowBatchesTx struct {
	weirdriver.ExecutorTx
	s *slowBatches
}

func (tx *slowBatchesTx) JobRescue(ctx context.Context, p *weirdriver.JobRescueParams) ([]*weirtype.JobRow, error) {
	tx.s.mu.Lock()
	tx.s.limits = append(tx.s.limits, p.Limit)
	tx.s.mu.Unlock()
	if p.Limit > tx.s.most {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return tx.ExecutorTx.JobRescue(ctx, p)
}

// A backlog clears on a database too slow to change a full batch before the
// term's deadline: each batch cut by its deadline halves the next.
func TestRescueBatchesShrinkWhenTooSlow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	insertJobs(t, b.exec, "q", 300, 3, time.Time{})
	claim(t, b.exec, "q", 300, time.Microsecond)

	slow := &slowBatches{Executor: b.exec, most: 100}
	cfg := config(t, "leader")
	cfg.RescueInterval = 10 * time.Millisecond
	s := start(t, slow, cfg)
	// Every batch over 100 rows costs a term: a minute covers a loaded machine.
	awaitCondWithin(t, time.Minute, "rescue of the backlog", nil, func() bool { return s.Stats().Rescued == 300 })
	if n := runningJobs(t, b); n != 0 {
		t.Fatalf("%d jobs still running after the service counted 300 rescued", n)
	}
	slow.mu.Lock()
	defer slow.mu.Unlock()
	// 1000, 500, 250 and 125 run out of time, each halving the next; 62 fits,
	// and a full batch doubles the next, which runs out again. (On a loaded
	// machine a batch may also be cut before it sends its rescue: then a limit
	// is missing from the list, which still halves on.)
	if len(slow.limits) == 0 || slow.limits[0] > 1000 {
		t.Fatalf("rescue limits %v, want them to start at most at 1000", slow.limits)
	}
	for i, l := range slow.limits {
		if l <= slow.most {
			return
		}
		if i > 0 && l > slow.limits[i-1]/2 {
			t.Fatalf("rescue limits %v: %d after %d, which ran out of time", slow.limits, l, slow.limits[i-1])
		}
	}
	t.Fatalf("rescue limits %v never came down to %d", slow.limits, slow.most)
}

func TestSchedule(t *testing.T) {
	t.Parallel()
	b := setup(t)
	job := insertJobs(t, b.exec, "q", 1, 3, time.Now().Add(200*time.Millisecond))[0]
	if job.State != weirtype.JobStateScheduled {
		t.Fatalf("inserted job is %s, want scheduled", job.State)
	}
	cfg := taskConfig(t, "leader")
	cfg.ScheduleInterval = 10 * time.Millisecond
	s := start(t, b.exec, cfg)

	// One statement reads the state and whether the job is due, both by the
	// database clock that promotion uses.
	q := fmt.Sprintf("SELECT state, scheduled_at <= now() FROM %s WHERE id = $1",
		pgx.Identifier{b.schema, "weir_job"}.Sanitize())
	sawScheduled := false
	awaitCond(t, "promotion", nil, func() bool {
		var (
			state string
			due   bool
		)
		if err := b.pool.QueryRow(t.Context(), q, job.ID).Scan(&state, &due); err != nil {
			t.Fatal(err)
		}
		switch state {
		case string(weirtype.JobStateScheduled):
			sawScheduled = true
			return false
		case string(weirtype.JobStateAvailable):
			if !due {
				t.Fatal("job became available before it was due")
			}
			return true
		default:
			t.Fatalf("job is %s", state)
			return false
		}
	})
	if !sawScheduled {
		t.Log("promotion came before the first look; the insert check still showed it scheduled")
	}
	// The counter follows the commit that the test has seen.
	awaitCond(t, "Stats().Scheduled = 1", nil, func() bool { return s.Stats().Scheduled == 1 })
}

// finalJobs makes n jobs of queue final with outcome and, if age > 0, moves
// their finalized_at age into the past.
func finalJobs(t *testing.T, b *bundle, queue string, n int, outcome weirdriver.Outcome, age time.Duration) []int64 {
	t.Helper()
	insertJobs(t, b.exec, queue, n, 3, time.Time{})
	jobs := claim(t, b.exec, queue, n, time.Minute)
	var (
		params []*weirdriver.JobFinalizeParams
		ids    []int64
	)
	for _, j := range jobs {
		params = append(params, &weirdriver.JobFinalizeParams{ID: j.ID, LeaseToken: j.LeaseToken, Outcome: outcome})
		ids = append(ids, j.ID)
	}
	applied, err := b.exec.JobFinalize(t.Context(), params)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(applied, false) {
		t.Fatalf("finalize: %v", applied)
	}
	if age > 0 {
		q := fmt.Sprintf("UPDATE %s SET finalized_at = now() - $2::bigint * interval '1 microsecond' WHERE id = ANY($1)",
			pgx.Identifier{b.schema, "weir_job"}.Sanitize())
		if _, err := b.pool.Exec(t.Context(), q, ids, age.Microseconds()); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

func exists(t *testing.T, exec weirdriver.Executor, id int64) bool {
	t.Helper()
	_, err := exec.JobGet(t.Context(), id)
	if errors.Is(err, weirdriver.ErrNotFound) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

func TestPrune(t *testing.T) {
	t.Parallel()

	t.Run("Retention", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		oldCompleted := finalJobs(t, b, "a", 3, weirdriver.OutcomeCompleted, 2*time.Hour)
		newCompleted := finalJobs(t, b, "b", 2, weirdriver.OutcomeCompleted, 0)
		oldCancelled := finalJobs(t, b, "c", 1, weirdriver.OutcomeCancel, 2*time.Hour)

		cfg := taskConfig(t, "leader")
		cfg.PruneInterval = 10 * time.Millisecond
		cfg.CompletedRetention = time.Hour
		cfg.CancelledRetention = 3 * time.Hour
		s := start(t, b.exec, cfg)
		awaitCond(t, "prune", nil, func() bool {
			return !slices.ContainsFunc(oldCompleted, func(id int64) bool { return exists(t, b.exec, id) })
		})
		for _, id := range slices.Concat(newCompleted, oldCancelled) {
			if !exists(t, b.exec, id) {
				t.Fatalf("job %d within its retention was pruned", id)
			}
		}
		// The counter follows the commit that the test has seen.
		awaitCond(t, "Stats().Pruned = 3", nil, func() bool { return s.Stats().Pruned == 3 })
	})

	t.Run("KeepForever", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		oldCompleted := finalJobs(t, b, "a", 2, weirdriver.OutcomeCompleted, 2*time.Hour)
		// Old discarded jobs are pruned by the same statement that leaves the
		// completed ones alone, so their going shows that a prune ran.
		oldDiscarded := finalJobs(t, b, "b", 2, weirdriver.OutcomeDiscard, 2*time.Hour)

		cfg := taskConfig(t, "leader")
		cfg.PruneInterval = 10 * time.Millisecond
		cfg.CompletedRetention = -1
		cfg.DiscardedRetention = time.Hour
		s := start(t, b.exec, cfg)
		awaitCond(t, "prune", nil, func() bool {
			return !slices.ContainsFunc(oldDiscarded, func(id int64) bool { return exists(t, b.exec, id) })
		})
		for _, id := range oldCompleted {
			if !exists(t, b.exec, id) {
				t.Fatalf("completed job %d was pruned though kept forever", id)
			}
		}
		// The counter follows the commit that the test has seen.
		awaitCond(t, "Stats().Pruned = 2", nil, func() bool { return s.Stats().Pruned == 2 })
	})
}

// TestForgetClients checks that the leader deletes the client registry rows
// whose heartbeat is older than ClientStaleAfter, at the start of its term,
// and leaves fresh ones.
func TestForgetClients(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, id := range []string{"crashed", "alive"} {
		if _, err := b.exec.ClientRegister(t.Context(), &weirdriver.ClientRegisterParams{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.pool.Exec(t.Context(), "UPDATE "+pgx.Identifier{b.schema, "weir_client"}.Sanitize()+
		" SET heartbeat_at = now() - interval '1 hour' WHERE id = 'crashed'"); err != nil {
		t.Fatal(err)
	}
	cfg := taskConfig(t, "leader")
	cfg.ClientStaleAfter = time.Minute
	s := start(t, b.exec, cfg)
	awaitCond(t, "the stale row forgotten", nil, func() bool {
		rows, err := b.exec.ClientList(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return len(rows) == 1 && rows[0].ID == "alive"
	})
	// The counter follows the commit that the test has seen.
	awaitCond(t, "Stats().ForgottenClients = 1", nil, func() bool { return s.Stats().ForgottenClients == 1 })
}

func TestLifecycle(t *testing.T) {
	t.Parallel()

	t.Run("StopBeforeStart", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		s := maintenance.New(b.exec, config(t, "c"))
		stop(t, s)
		stop(t, s)
		if err := s.Start(t.Context()); !errors.Is(err, maintenance.ErrStopped) {
			t.Fatalf("Start after Stop: %v, want ErrStopped", err)
		}
		if s.IsLeader() {
			t.Fatal("leads without starting")
		}
	})

	t.Run("StopTwice", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		s := start(t, b.exec, config(t, "c"))
		awaitCond(t, "leader", nil, s.IsLeader)
		if err := s.Start(t.Context()); !errors.Is(err, maintenance.ErrStopped) {
			t.Fatalf("second Start: %v, want ErrStopped", err)
		}
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() { stop(t, s) })
		}
		wg.Wait()
		stop(t, s)
		if s.IsLeader() {
			t.Fatal("leads after Stop")
		}
		if got := leaderGet(t, b.exec); got != "" {
			t.Fatalf("%q holds the term after Stop", got)
		}
	})

	t.Run("ContextEndsService", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx, cancel := context.WithCancel(t.Context())
		s := maintenance.New(b.exec, config(t, "c"))
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stop(t, s) })
		awaitCond(t, "leader", nil, s.IsLeader)
		cancel()
		awaitCond(t, "resignation", nil, func() bool { return !s.IsLeader() && leaderGet(t, b.exec) == "" })
	})

	t.Run("InvalidConfig", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// valid returns a config that Start accepts, changed by change.
		valid := func(change func(*maintenance.Config)) *maintenance.Config {
			cfg := &maintenance.Config{ClientID: "c", RescueInterval: time.Second,
				CompletedRetention: time.Hour, CancelledRetention: time.Hour, DiscardedRetention: time.Hour}
			change(cfg)
			return cfg
		}
		for name, cfg := range map[string]*maintenance.Config{
			"no client id": valid(func(c *maintenance.Config) { c.ClientID = "" }),
			"short ttl": valid(func(c *maintenance.Config) {
				c.ElectInterval, c.LeaderTTL = time.Second, 2*time.Second
			}),
			"negative":           valid(func(c *maintenance.Config) { c.RescueInterval = -time.Second }),
			"negative size":      valid(func(c *maintenance.Config) { c.BatchSize = -1 }),
			"negative staleness": valid(func(c *maintenance.Config) { c.ClientStaleAfter = -time.Minute }),
			"no rescue":          valid(func(c *maintenance.Config) { c.RescueInterval = 0 }),
			"no retention":       valid(func(c *maintenance.Config) { c.DiscardedRetention = 0 }),
		} {
			s := maintenance.New(b.exec, cfg)
			if err := s.Start(t.Context()); err == nil {
				stop(t, s)
				t.Errorf("%s: Start accepted %+v", name, cfg)
			}
			stop(t, s)
		}
		s := maintenance.New(nil, valid(func(*maintenance.Config) {}))
		if err := s.Start(t.Context()); err == nil {
			t.Error("Start accepted a nil executor")
		}
		stop(t, s)
	})
}

// hangingElections wraps an executor whose elections wait until their
// context ends, telling entered when one begins.
type hangingElections struct {
	weirdriver.Executor
	entered chan struct{}
}

func (h hangingElections) LeaderElect(ctx context.Context, _ *weirdriver.LeaderElectParams) (bool, error) {
	select {
	case h.entered <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return false, ctx.Err()
}

// Stop cuts an election in flight at once: with a term of a minute, the
// election could otherwise run for most of it, and Stop with it.
func TestStopCutsElection(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := hangingElections{Executor: b.exec, entered: make(chan struct{}, 1)}
	cfg := config(t, "hanging")
	cfg.ElectInterval, cfg.LeaderTTL = time.Second, time.Minute
	s := maintenance.New(h, cfg)
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	<-h.entered
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		s.Stop(context.Background()) // no deadline: only the cut can end the election
	}()
	select {
	case <-stopped:
	case <-time.After(waitLimit):
		t.Fatalf("Stop still waits for the election after %v", waitLimit)
	}
}

// TestRescuePlannedByExpiry: the leader rescues a lease as it expires, not up
// to a rescue interval later. The lease here expires a second after the term's
// first pass, and the rescue interval is an hour.
func TestRescuePlannedByExpiry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	job := insertJobs(t, b.exec, "q", 1, 3, time.Time{})[0]
	cfg := taskConfig(t, "leader")
	cfg.RescueInterval = time.Hour
	cfg.ScheduleInterval = time.Hour
	reported := make(chan *weirtype.JobRow, 1)
	cfg.Rescued = func(row *weirtype.JobRow) { reported <- row }
	start(t, b.exec, cfg)
	// Claimed once the service leads (its first pass found nothing to rescue),
	// with a lease of a second.
	awaitCond(t, "the first rescue pass", nil, func() bool { return leaderGet(t, b.exec) == "leader" })
	claimed := claim(t, b.exec, "q", 1, time.Second)[0]
	select {
	case row := <-reported:
		if row.ID != job.ID || row.LeaseToken != claimed.LeaseToken {
			t.Fatalf("rescued job %d token %d, want job %d token %d", row.ID, row.LeaseToken, job.ID, claimed.LeaseToken)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the lease was not rescued within 30 s of its expiry with an hour's rescue interval")
	}
	// The schedule pass that follows a rescue makes it available at once (the
	// schedule interval is an hour).
	awaitCond(t, "the rescued job available", nil, func() bool {
		return getJob(t, b.exec, job.ID).State == weirtype.JobStateAvailable
	})
}

// TestElectionAtTermEnd: a client that lost an election tries again as the
// holder's term ends, not an election interval later, so that after a leader
// dies another leads a statement's time after its term expires. Here a dead
// client's term has a second left and the election interval is a minute.
func TestElectionAtTermEnd(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if ok, err := b.exec.LeaderElect(t.Context(), &weirdriver.LeaderElectParams{
		Name: maintenance.LeaderName, LeaderID: "dead", TTL: time.Second,
	}); err != nil || !ok {
		t.Fatalf("the dead client's term: %v %v", ok, err)
	}
	cfg := config(t, "survivor")
	cfg.ElectInterval, cfg.LeaderTTL = time.Minute, 3*time.Minute
	s := start(t, b.exec, cfg)
	awaitCondWithin(t, 30*time.Second, "the survivor to lead", []*maintenance.Service{s}, s.IsLeader)
}
