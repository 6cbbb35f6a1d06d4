package weirpgx

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirmigrate"
)

// modeSetup returns the pool executor of a driver on a fresh migrated schema,
// and the schema; tweak configures its pool.
func modeSetup(t *testing.T, tweak func(*pgxpool.Config)) (*executor, *pgxpool.Pool, string) {
	t.Helper()
	pool := dbtest.Pool(t, tweak)
	schema := dbtest.Schema(t)
	d, err := New(pool, &Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := weirmigrate.New(d).Up(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	return d.Executor().(*executor), pool, schema
}

func modeOf(t *testing.T, e *executor) int64 {
	t.Helper()
	var v int64
	if err := e.db.QueryRow(t.Context(), e.q.readyModeRead).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v % 4
}

func readyRows(t *testing.T, pool *pgxpool.Pool, schema string) int64 {
	t.Helper()
	var n int64
	if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM "+pgx.Identifier{schema, "weir_ready"}.Sanitize()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func insertN(t *testing.T, e *executor, queue string, n int) {
	t.Helper()
	params := make([]*weirdriver.JobInsertParams, n)
	for i := range params {
		params[i] = &weirdriver.JobInsertParams{Kind: "k", Queue: queue, Args: json.RawMessage(`{}`),
			Priority: 1 + i%4, MaxAttempts: 3}
	}
	if _, err := e.JobInsert(t.Context(), params); err != nil {
		t.Fatal(err)
	}
}

// TestReadyOffByDefault: a new schema has the list off: inserts write no
// rows, and claims take the jobs from the job table, in claim order.
func TestReadyOffByDefault(t *testing.T) {
	t.Parallel()
	e, pool, schema := modeSetup(t, nil)
	if m := modeOf(t, e); m != readyOff {
		t.Fatalf("a new schema's mode is %d, want off", m)
	}
	insertN(t, e, "q", 50)
	if n := readyRows(t, pool, schema); n != 0 {
		t.Fatalf("the list holds %d rows with the list off, want none", n)
	}
	var got []*claimPlace
	for {
		jobs, _, err := e.JobClaim(t.Context(), &weirdriver.JobClaimParams{Queue: "q", Max: 7, ClientID: "c", LeaseDuration: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if len(jobs) == 0 {
			break
		}
		for _, j := range jobs {
			got = append(got, &claimPlace{j.Priority, j.ScheduledAt, j.ID})
		}
	}
	if len(got) != 50 {
		t.Fatalf("claimed %d jobs, want 50", len(got))
	}
	if !slices.IsSortedFunc(got, func(a, b *claimPlace) int { return a.cmp(b) }) {
		t.Fatal("jobs not claimed in claim order (priority, scheduled time, id)")
	}
}

// claimPlace is a job's place in the claim order.
type claimPlace struct {
	priority int
	at       time.Time
	id       int64
}

func (a *claimPlace) cmp(b *claimPlace) int {
	switch {
	case a.priority != b.priority:
		return a.priority - b.priority
	case !a.at.Equal(b.at):
		return a.at.Compare(b.at)
	}
	return int(a.id - b.id)
}

// TestReadyTurnOnWaitsForWriters: a transaction that wrote jobs while the
// list was off (so without rows) and is still open holds the list's turning
// on back; once it commits, its jobs get rows and claims from the list take
// them.
func TestReadyTurnOnWaitsForWriters(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	e, pool, schema := modeSetup(t, nil)
	writer, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	wexec := &executor{db: writer, q: e.q}
	params := []*weirdriver.JobInsertParams{{Kind: "k", Queue: "w", Args: json.RawMessage(`{}`), Priority: 2, MaxAttempts: 3}}
	if _, err := wexec.JobInsert(ctx, params); err != nil {
		t.Fatal(err)
	}
	// While the writer is open, turning on cannot finish.
	short, cancel := context.WithTimeout(ctx, time.Second)
	err = e.readyEnsureOn(short)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("turning on with a writer open: %v, want it to wait for the writer", err)
	}
	if m := modeOf(t, e); m != readyWriting {
		t.Fatalf("mode %d while the writer is open, want writing", m)
	}
	if err := writer.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.readyEnsureOn(ctx); err != nil {
		t.Fatal(err)
	}
	if m := modeOf(t, e); m != readyOn {
		t.Fatalf("mode %d, want on", m)
	}
	if n := readyRows(t, pool, schema); n != 1 {
		t.Fatalf("the list holds %d rows, want the writer's job's", n)
	}
	// Written while writing: rows of their own.
	insertN(t, e, "w", 3)
	jobs, _, err := e.JobClaim(ctx, &weirdriver.JobClaimParams{Queue: "w", Max: 10, ClientID: "c", LeaseDuration: time.Minute})
	if err != nil || len(jobs) != 4 {
		t.Fatalf("claim from the list: %d jobs, %v; want 4", len(jobs), err)
	}
}

// TestReadyTurnsOnUnderHeldSnapshot: claims that walk the index's entries of
// jobs claimed while a snapshot is held turn the list on at the leader's
// next look; once the snapshot ends and probes find the walk short, it turns
// off, and its rows are cleared.
func TestReadyTurnsOnUnderHeldSnapshot(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	// One connection, so that the claims' statistics are this backend's,
	// flushed on demand.
	e, pool, schema := modeSetup(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	flush := func() {
		t.Helper()
		if _, err := pool.Exec(ctx, "SELECT pg_stat_force_next_flush()"); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
	}
	step, err := e.readyMode(ctx) // the first look: the counts to compare with
	if err != nil || step.mode != readyOff {
		t.Fatalf("first look: %+v, %v", step, err)
	}
	holder, err := pgx.Connect(ctx, dbtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.WithoutCancel(ctx))
	if _, err := holder.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ"); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "weir_job"}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	insertN(t, e, "held", 50000)
	for claimed := 0; claimed < 50000; {
		jobs, _, err := e.JobClaim(ctx, &weirdriver.JobClaimParams{Queue: "held", Max: 1000, ClientID: "c", LeaseDuration: time.Minute})
		if err != nil || len(jobs) == 0 {
			t.Fatalf("claim: %d jobs, %v", len(jobs), err)
		}
		claimed += len(jobs)
	}
	flush()
	if step, err = e.readyMode(ctx); err != nil || step.mode != readyOn || !step.changed {
		t.Fatalf("after claims walked the held entries: %+v, %v; want the list turned on", step, err)
	}
	insertN(t, e, "held", 10)
	if n := readyRows(t, pool, schema); n != 10 {
		t.Fatalf("the list holds %d rows after 10 inserts with the list on, want 10", n)
	}
	claimAll := func() {
		t.Helper()
		for {
			jobs, _, err := e.JobClaim(ctx, &weirdriver.JobClaimParams{Queue: "held", Max: 1000, ClientID: "c", LeaseDuration: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if len(jobs) == 0 {
				return
			}
		}
	}
	claimAll()
	// A busy queue: between two probes its jobs are inserted and claimed.
	// Each probe walks the range of the claim order that the previous one
	// noted in the list, whose jobs were claimed since.
	busyProbe := func() readyModeStep {
		t.Helper()
		insertN(t, e, "held", 1500)
		e.compact.mode.nextProbe = time.Time{}
		step, err := e.readyMode(ctx)
		if err != nil {
			t.Fatal(err)
		}
		claimAll()
		return step
	}
	// While the snapshot is held the probes find the walk long.
	for i := range readyProbeShort + 2 {
		if step := busyProbe(); step.mode != readyOn {
			t.Fatalf("probe %d with the snapshot held: %+v, want the list kept on", i+1, step)
		}
	}
	if _, err := holder.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	// The first readyProbeShort-1 probes cannot turn it off; then it turns
	// off as soon as no snapshot in the database keeps the entries (other
	// tests running beside this one may hold one for a while).
	for i := range readyProbeShort - 1 {
		if step := busyProbe(); step.mode != readyOn {
			t.Fatalf("probe %d after the snapshot ended: %+v, want the list still on", i+1, step)
		}
	}
	for i := 0; modeOf(t, e) != readyOff; i++ {
		if i == 200 {
			t.Fatal("the list still on after 200 more probes since the snapshot ended")
		}
		busyProbe()
	}
	if m := modeOf(t, e); m != readyOff {
		t.Fatalf("mode %d after short probes, want off", m)
	}
	if _, err := e.ReadyCompact(ctx, &weirdriver.ReadyCompactParams{Every: true}); err != nil {
		t.Fatal(err)
	}
	if n := readyRows(t, pool, schema); n != 0 {
		t.Fatalf("the list holds %d rows after a compaction with the list off, want none", n)
	}
	insertN(t, e, "held", 10)
	jobs, _, err := e.JobClaim(ctx, &weirdriver.JobClaimParams{Queue: "held", Max: 100, ClientID: "c", LeaseDuration: time.Minute})
	if err != nil || len(jobs) != 10 {
		t.Fatalf("claim with the list off again: %d jobs, %v; want the 10", len(jobs), err)
	}
}

// TestReadyOnForKeys: a queue limited per key turns the list on before its
// limit is set, and keeps it on; a claim of such a queue that finds the list
// off takes nothing and has the client come back soon.
func TestReadyOnForKeys(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	e, _, _ := modeSetup(t, nil)
	insertN(t, e, "keyed", 5)
	if err := e.QueueSetKeyLimit(ctx, "keyed", weirdriver.KeyLimitParams{Key: "args.tenant", Limit: 1}); err != nil {
		t.Fatal(err)
	}
	if m := modeOf(t, e); m != readyOn {
		t.Fatalf("mode %d after a limit per key was set, want on", m)
	}
	e.compact.mode.nextProbe = time.Time{}
	for range readyProbeShort + 1 {
		e.compact.mode.nextProbe = time.Time{}
		if step, err := e.readyMode(ctx); err != nil || step.mode != readyOn {
			t.Fatalf("a look with a queue limited per key: %+v, %v; want the list kept on", step, err)
		}
	}
	jobs, _, err := e.JobClaim(ctx, &weirdriver.JobClaimParams{Queue: "keyed", Max: 5, ClientID: "c", LeaseDuration: time.Minute})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("claim of the keyed queue: %d jobs, %v; want 1 (one key, limit 1)", len(jobs), err)
	}
	// Off by hand (as a leader that decided before the limit was set
	// would): the keyed claim waits, and the leader's next look turns it on.
	if _, err := e.db.Exec(ctx, e.q.readyModeSet, int64(100)); err != nil {
		t.Fatal(err)
	}
	jobs, lim, err := e.JobClaim(ctx, &weirdriver.JobClaimParams{Queue: "keyed", Max: 5, ClientID: "c2", LeaseDuration: time.Minute})
	if err != nil || len(jobs) != 0 || lim.Wait != 100*time.Millisecond {
		t.Fatalf("keyed claim with the list off: %d jobs, %+v, %v; want none and a wait of 100ms", len(jobs), lim, err)
	}
	if step, err := e.readyMode(ctx); err != nil || step.mode != readyOn || !step.changed {
		t.Fatalf("the leader's look with a keyed queue and the list off: %+v, %v; want it turned on", step, err)
	}
}

// TestReadyDownListsEveryJob: reverting the mode's migration leaves the list
// on for good, so the jobs written while it was off get their rows, and the
// claims that follow take them from the list.
func TestReadyDownListsEveryJob(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	e, pool, schema := modeSetup(t, nil)
	insertN(t, e, "down", 20)
	d, err := New(pool, &Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := weirmigrate.New(d).Down(ctx, &weirmigrate.DownOpts{Steps: 1}); err != nil {
		t.Fatal(err)
	}
	if n := readyRows(t, pool, schema); n != 20 {
		t.Fatalf("the list holds %d rows after the migration was reverted, want the 20 jobs'", n)
	}
	insertN(t, e, "down", 5)
	if n := readyRows(t, pool, schema); n != 25 {
		t.Fatalf("the list holds %d rows after 5 more inserts, want 25", n)
	}
	if _, err := weirmigrate.New(d).Up(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if m := modeOf(t, e); m != readyOn {
		t.Fatalf("mode %d after migrating up again a schema with jobs, want on", m)
	}
	jobs, _, err := e.JobClaim(ctx, &weirdriver.JobClaimParams{Queue: "down", Max: 100, ClientID: "c", LeaseDuration: time.Minute})
	if err != nil || len(jobs) != 25 {
		t.Fatalf("claim: %d jobs, %v; want 25", len(jobs), err)
	}
}

// TestReadyKeyLimitWithWriterOpen: setting a limit per key while a
// transaction that wrote jobs stays open (the caller's own, say) does not wait
// for it for ever: the limit is set after readyOnWait, the queue's claims take
// nothing while the list is being turned on, and the leader finishes turning
// it on once the transaction ends.
func TestReadyKeyLimitWithWriterOpen(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	e, _, _ := modeSetup(t, nil)
	writer, err := e.db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	wexec := &executor{db: writer, q: e.q}
	params := []*weirdriver.JobInsertParams{{Kind: "k", Queue: "keyed", Args: json.RawMessage(`{}`), Priority: 2, MaxAttempts: 3}}
	if _, err := wexec.JobInsert(ctx, params); err != nil {
		t.Fatal(err)
	}
	if err := e.QueueSetKeyLimit(ctx, "keyed", weirdriver.KeyLimitParams{Key: "args.tenant", Limit: 1}); err != nil {
		t.Fatalf("set a limit per key with a writer open: %v", err)
	}
	if m := modeOf(t, e); m != readyWriting {
		t.Fatalf("mode %d with the writer open, want writing", m)
	}
	jobs, lim, err := e.JobClaim(ctx, &weirdriver.JobClaimParams{Queue: "keyed", Max: 5, ClientID: "c", LeaseDuration: time.Minute})
	if err != nil || len(jobs) != 0 || lim.Wait != 100*time.Millisecond {
		t.Fatalf("keyed claim while the list is turned on: %d jobs, %+v, %v; want none and a wait of 100ms", len(jobs), lim, err)
	}
	if err := writer.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if step, err := e.readyMode(ctx); err != nil || step.mode != readyOn {
		t.Fatalf("the leader's look once the writer ended: %+v, %v; want the list on", step, err)
	}
	jobs, _, err = e.JobClaim(ctx, &weirdriver.JobClaimParams{Queue: "keyed", Max: 5, ClientID: "c", LeaseDuration: time.Minute})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("keyed claim with the list on: %d jobs, %v; want the writer's job", len(jobs), err)
	}
}
