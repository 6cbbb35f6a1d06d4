package weirpgx_test

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

	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirdriver/weirpgx"
	"github.com/weirq/weir/weirmigrate"
)

// readySetup is setup that also returns the pool and the schema, for the ready
// list's tests, which look at its tables directly.
func readySetup(t *testing.T) (weirdriver.Executor, *pgxpool.Pool, string) {
	t.Helper()
	pool := dbtest.Pool(t, nil)
	schema := dbtest.Schema(t)
	d, err := weirpgx.New(pool, &weirpgx.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := weirmigrate.New(d).Up(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	if err := d.ReadyListOn(t.Context()); err != nil {
		t.Fatal(err)
	}
	return d.Executor(), pool, schema
}

func insertJobs(t *testing.T, exec weirdriver.Executor, queue string, n int, at time.Time) {
	t.Helper()
	params := make([]*weirdriver.JobInsertParams, n)
	for i := range params {
		params[i] = &weirdriver.JobInsertParams{Kind: "k", Queue: queue, Args: json.RawMessage(`{}`),
			Priority: 2, MaxAttempts: 3, ScheduledAt: at}
	}
	if _, err := exec.JobInsert(t.Context(), params); err != nil {
		t.Fatal(err)
	}
}

// readyIDs returns the job ids of queue's rows in the ready list, sorted.
func readyIDs(t *testing.T, pool *pgxpool.Pool, schema, queue string) []int64 {
	t.Helper()
	var ids []int64
	if err := pool.QueryRow(t.Context(), "SELECT coalesce(array_agg(job_id ORDER BY job_id), '{}') FROM "+
		pgx.Identifier{schema, "weir_ready"}.Sanitize()+" WHERE queue = $1", queue).Scan(&ids); err != nil {
		t.Fatal(err)
	}
	return ids
}

// availableIDs returns the ids of queue's available jobs, sorted.
func availableIDs(t *testing.T, pool *pgxpool.Pool, schema, queue string) []int64 {
	t.Helper()
	var ids []int64
	if err := pool.QueryRow(t.Context(), "SELECT coalesce(array_agg(id ORDER BY id), '{}') FROM "+
		pgx.Identifier{schema, "weir_job"}.Sanitize()+" WHERE queue = $1 AND state = 'available'", queue).Scan(&ids); err != nil {
		t.Fatal(err)
	}
	return ids
}

func claimAll(t *testing.T, exec weirdriver.Executor, queue string) []int64 {
	t.Helper()
	var ids []int64
	for {
		jobs, _, err := exec.JobClaim(t.Context(), &weirdriver.JobClaimParams{Queue: queue, Max: 500, ClientID: "c", LeaseDuration: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if len(jobs) == 0 {
			return ids
		}
		for _, j := range jobs {
			ids = append(ids, j.ID)
		}
	}
}

// TestReadyListFollowsJobs: every way a job becomes available writes its row
// in the ready list (the triggers on weir_job), whoever writes it; a
// claim takes the rows; a row whose job is no longer available is skipped and
// dropped by the claim that meets it.
func TestReadyListFollowsJobs(t *testing.T) {
	t.Parallel()
	exec, pool, schema := readySetup(t)
	ctx := t.Context()
	job := pgx.Identifier{schema, "weir_job"}.Sanitize()
	const q = "follow"
	want := func(what string) {
		t.Helper()
		if got, avail := readyIDs(t, pool, schema, q), availableIDs(t, pool, schema, q); !slices.Equal(got, avail) {
			t.Fatalf("%s: ready list %v, available jobs %v", what, got, avail)
		}
	}

	insertJobs(t, exec, q, 3, time.Time{})
	insertJobs(t, exec, q, 1, time.Now().Add(time.Hour)) // scheduled: no row
	bulk := []*weirdriver.JobInsertParams{{Kind: "k", Queue: q, Args: json.RawMessage(`{}`), Priority: 2, MaxAttempts: 3}}
	if _, err := exec.JobInsertBulk(ctx, bulk); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "SELECT * FROM "+pgx.Identifier{schema, "weir_enqueue"}.Sanitize()+"('k', queue => $1)", q); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO "+job+" (queue, kind, args, max_attempts) VALUES ($1, 'k', '{}', 3)", q); err != nil {
		t.Fatal(err)
	}
	want("after inserts")
	if n := len(readyIDs(t, pool, schema, q)); n != 6 {
		t.Fatalf("ready list holds %d rows, want 6", n)
	}

	// The scheduled job comes due and is promoted.
	if _, err := pool.Exec(ctx, "UPDATE "+job+" SET scheduled_at = now() - interval '1 second' WHERE state = 'scheduled'"); err != nil {
		t.Fatal(err)
	}
	if _, err := exec.JobSchedule(ctx, 100); err != nil {
		t.Fatal(err)
	}
	want("after promotion")

	claimed := claimAll(t, exec, q)
	if len(claimed) != 7 {
		t.Fatalf("claimed %d jobs, want 7", len(claimed))
	}
	want("after the claims")

	// A retry due now and a release make two jobs available again.
	jobs, err := exec.JobGet(ctx, claimed[0])
	if err != nil {
		t.Fatal(err)
	}
	other, err := exec.JobGet(ctx, claimed[1])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.JobFinalize(ctx, []*weirdriver.JobFinalizeParams{
		{ID: jobs.ID, LeaseToken: jobs.LeaseToken, Outcome: weirdriver.OutcomeRetry},
		{ID: other.ID, LeaseToken: other.LeaseToken, Outcome: weirdriver.OutcomeRelease},
	}); err != nil {
		t.Fatal(err)
	}
	want("after a retry and a release")

	// A cancelled available job leaves a stale row, which a claim skips and drops.
	if _, err := exec.JobCancel(ctx, jobs.ID); err != nil {
		t.Fatal(err)
	}
	if got := readyIDs(t, pool, schema, q); len(got) != 2 {
		t.Fatalf("ready list %v, want the two rows (one stale)", got)
	}
	if got := claimAll(t, exec, q); !slices.Equal(got, []int64{other.ID}) {
		t.Fatalf("claimed %v, want only %d", got, other.ID)
	}
	want("after the stale row was met")
}

// TestReadyCompactUnderHeldSnapshot: under a snapshot held open, the rows
// claims delete stay in their segment (VACUUM could not remove them);
// compaction truncates the segment, so that they are gone, and moves the rows
// of jobs still available, which claims then find.
func TestReadyCompactUnderHeldSnapshot(t *testing.T) {
	t.Parallel()
	exec, pool, schema := readySetup(t)
	ctx := t.Context()
	const q = "held"

	holder, err := pgx.Connect(ctx, dbtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.Background())
	if _, err := holder.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ"); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, "SELECT count(*) FROM pg_class"); err != nil {
		t.Fatal(err)
	}

	insertJobs(t, exec, q, 2000, time.Time{})
	jobs, _, err := exec.JobClaim(ctx, &weirdriver.JobClaimParams{Queue: q, Max: 1990, ClientID: "c", LeaseDuration: time.Minute})
	if err != nil || len(jobs) != 1990 {
		t.Fatalf("claim: %d jobs, %v", len(jobs), err)
	}
	size := func() int64 {
		t.Helper()
		var n int64
		if err := pool.QueryRow(ctx, `SELECT sum(pg_relation_size(c.oid)) FROM pg_class c
			JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1 AND c.relname LIKE 'weir\_ready\_%' AND c.relkind = 'r'`, schema).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := size()
	// VACUUM cannot remove the deleted rows while the snapshot is held.
	if _, err := pool.Exec(ctx, "VACUUM "+pgx.Identifier{schema, "weir_ready"}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	if after := size(); after != before {
		t.Fatalf("VACUUM under the snapshot changed the segments from %d to %d bytes", before, after)
	}
	res, err := exec.(weirdriver.ReadyCompacter).ReadyCompact(ctx, &weirdriver.ReadyCompactParams{Every: true})
	if err != nil {
		t.Fatal(err)
	}
	// The 10 rows move once, or again each time the segment they moved to is
	// compacted after theirs.
	if res.Compacted != 4 || res.Moved < 10 || res.Moved%10 != 0 || res.Busy != 0 {
		t.Fatalf("compaction %+v, want 4 segments compacted and the 10 rows moved", res)
	}
	if after := size(); after >= before/10 {
		t.Fatalf("segments hold %d bytes after compaction, %d before: the dead rows are still there", after, before)
	}
	if got, avail := readyIDs(t, pool, schema, q), availableIDs(t, pool, schema, q); len(got) != 10 || !slices.Equal(got, avail) {
		t.Fatalf("ready list %v, available jobs %v", got, avail)
	}
	if got := claimAll(t, exec, q); len(got) != 10 {
		t.Fatalf("claimed %d jobs after compaction, want 10", len(got))
	}
}

// TestReadyCompactSkipsLockedSegment: a segment that another transaction holds
// (here one that inserted a job and has not committed) is not waited for long:
// compaction reports it busy, with how many compactions in a row found it so,
// and leaves it as it was; the job is claimed once its transaction commits,
// and a compaction that emptied the segment starts the count afresh.
func TestReadyCompactSkipsLockedSegment(t *testing.T) {
	t.Parallel()
	exec, _, _ := readySetup(t)
	ctx := t.Context()
	compact := func() weirdriver.ReadyCompactResult {
		t.Helper()
		res, err := exec.(weirdriver.ReadyCompacter).ReadyCompact(ctx, &weirdriver.ReadyCompactParams{Every: true})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	lock := func() weirdriver.ExecutorTx {
		t.Helper()
		tx, err := exec.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		insertJobs(t, tx, "busy", 1, time.Time{})
		return tx
	}
	tx := lock()
	start := time.Now()
	if res := compact(); res.Busy != 1 || res.BusyTries != 1 || res.Compacted != 3 {
		t.Fatalf("compaction %+v, want 1 segment busy (first try) and 3 compacted", res)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("compaction took %v: it waited for the lock", d)
	}
	if res := compact(); res.Busy != 1 || res.BusyTries != 2 {
		t.Fatalf("second compaction %+v, want the segment busy for the second time in a row", res)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if res := compact(); res.Busy != 0 || res.BusyTries != 0 {
		t.Fatalf("compaction after the commit %+v, want nothing busy", res)
	}
	if got := claimAll(t, exec, "busy"); len(got) != 1 {
		t.Fatalf("claimed %d jobs, want 1", len(got))
	}
	lock()
	if res := compact(); res.Busy != 1 || res.BusyTries != 1 {
		t.Fatalf("compaction %+v, want the segment busy for the first time since it was emptied", res)
	}
}

// TestReadyRepair: available jobs written while the triggers were off (a
// restore that disables them) have no row; a repair adds one for each, and
// only for them.
func TestReadyRepair(t *testing.T) {
	t.Parallel()
	exec, pool, schema := readySetup(t)
	ctx := t.Context()
	job := pgx.Identifier{schema, "weir_job"}.Sanitize()
	insertJobs(t, exec, "repair", 2, time.Time{})
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, "SET session_replication_role = replica; INSERT INTO "+job+
		" (queue, kind, args, max_attempts) SELECT 'repair', 'k', '{}', 3 FROM generate_series(1, 3); RESET session_replication_role")
	conn.Release()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(readyIDs(t, pool, schema, "repair")); n != 2 {
		t.Fatalf("ready list holds %d rows before the repair, want 2", n)
	}
	res, err := exec.(weirdriver.ReadyCompacter).ReadyCompact(ctx, &weirdriver.ReadyCompactParams{Repair: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Repaired != 3 {
		t.Fatalf("repaired %d rows, want 3", res.Repaired)
	}
	if got := claimAll(t, exec, "repair"); len(got) != 5 {
		t.Fatalf("claimed %d jobs, want 5", len(got))
	}
}

// TestReadyCompactRace: inserts, claims and compactions of every segment run
// at once; every job is claimed exactly once and none is left behind.
func TestReadyCompactRace(t *testing.T) {
	t.Parallel()
	exec, pool, schema := readySetup(t)
	ctx := t.Context()
	const (
		q         = "race"
		inserters = 3
		batches   = 40
		batch     = 25
		total     = inserters * batches * batch
	)
	var (
		wg, claimers sync.WaitGroup
		seen         sync.Map
		claimedN     atomic.Int64
		dup          atomic.Int64
		inserting    atomic.Int64
		errs         = make(chan error, 16)
	)
	inserting.Store(inserters)
	for range inserters {
		wg.Go(func() {
			defer inserting.Add(-1)
			for range batches {
				params := make([]*weirdriver.JobInsertParams, batch)
				for i := range params {
					params[i] = &weirdriver.JobInsertParams{Kind: "k", Queue: q, Args: json.RawMessage(`{}`), Priority: 1 + i%4, MaxAttempts: 3}
				}
				if _, err := exec.JobInsert(ctx, params); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	// Each claimer stops at its first empty claim once every insert is done:
	// a job left available then was lost by the ready list.
	for range 3 {
		claimers.Go(func() {
			for {
				done := inserting.Load() == 0
				jobs, _, err := exec.JobClaim(ctx, &weirdriver.JobClaimParams{Queue: q, Max: 20, ClientID: "c", LeaseDuration: time.Minute})
				if err != nil {
					errs <- err
					return
				}
				for _, j := range jobs {
					if _, loaded := seen.LoadOrStore(j.ID, true); loaded {
						dup.Add(1)
					}
				}
				claimedN.Add(int64(len(jobs)))
				if len(jobs) == 0 && done {
					return
				}
			}
		})
	}
	compactions := 0
	stop := make(chan struct{})
	var compactor sync.WaitGroup
	compactor.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := exec.(weirdriver.ReadyCompacter).ReadyCompact(ctx, &weirdriver.ReadyCompactParams{Every: true}); err != nil {
				errs <- err
				return
			}
			compactions++
		}
	})
	wg.Wait()
	claimers.Wait()
	close(stop)
	compactor.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if claimedN.Load() != total || dup.Load() != 0 {
		t.Fatalf("claimed %d jobs (%d twice), want each of %d once; %d left available",
			claimedN.Load(), dup.Load(), total, len(availableIDs(t, pool, schema, q)))
	}
	if compactions < 2 {
		t.Fatalf("only %d compactions ran during the race", compactions)
	}
	t.Logf("%d compactions", compactions)
}

// TestReadyPickKeepsIndexOrder: a list analyzed while empty, then filled with
// a backlog, makes the planner sort (or hash) every row at each claim if it
// may (measured: 100 ms a claim over 135,000 rows, against under 1 ms). The
// claim's walk runs in weir_ready_claim, whose settings forbid it: the plan
// walks each segment's index in order and merges them.
func TestReadyPickKeepsIndexOrder(t *testing.T) {
	t.Parallel()
	exec, pool, schema := readySetup(t)
	ctx := t.Context()
	ready := pgx.Identifier{schema, "weir_ready"}.Sanitize()
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+ready); err != nil {
		t.Fatal(err)
	}
	insertJobs(t, exec, "pick", 5000, time.Time{})

	var config []string
	if err := pool.QueryRow(ctx, `SELECT proconfig FROM pg_proc WHERE oid = $1::regprocedure`,
		pgx.Identifier{schema, "weir_ready_claim"}.Sanitize()+"(text, integer, bigint, text, integer[], text[], boolean)").Scan(&config); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"enable_sort=off", "enable_bitmapscan=off", "enable_hashjoin=off", "enable_mergejoin=off", "enable_seqscan=off"} {
		if !slices.Contains(config, want) {
			t.Fatalf("weir_ready_claim's settings %v lack %s", config, want)
		}
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // read only
	for _, s := range config {
		name, value, _ := strings.Cut(s, "=")
		if name == "search_path" {
			continue
		}
		if _, err := tx.Exec(ctx, "SELECT set_config($1, $2, true)", name, value); err != nil {
			t.Fatal(err)
		}
	}
	var plan []byte
	if err := tx.QueryRow(ctx, `EXPLAIN (FORMAT JSON) SELECT r.tableoid, r.ctid, r.job_id FROM `+ready+` r
		WHERE r.queue = 'pick' AND r.scheduled_at <= now()
		ORDER BY r.priority, r.scheduled_at, r.job_id LIMIT 10 FOR UPDATE OF r SKIP LOCKED`).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	var root []map[string]any
	if err := json.Unmarshal(plan, &root); err != nil {
		t.Fatal(err)
	}
	var nodes []string
	walkNodes(root[0]["Plan"], func(n map[string]any) { nodes = append(nodes, n["Node Type"].(string)) })
	if !slices.Contains(nodes, "Merge Append") || slices.Contains(nodes, "Sort") || slices.Contains(nodes, "Bitmap Heap Scan") {
		t.Fatalf("the pick's plan is %v, want the segments' indexes merged in order\n%s", nodes, plan)
	}
	if got := claimAll(t, exec, "pick"); len(got) != 5000 {
		t.Fatalf("claimed %d jobs, want 5000", len(got))
	}
}

// walkNodes calls fn on every node of an EXPLAIN (FORMAT JSON) plan.
func walkNodes(node any, fn func(map[string]any)) {
	m, ok := node.(map[string]any)
	if !ok {
		return
	}
	fn(m)
	if kids, ok := m["Plans"].([]any); ok {
		for _, k := range kids {
			walkNodes(k, fn)
		}
	}
}

// TestKeySkipScanStartsAtItsKey: the skip scan over a queue's keys goes on
// from where the last one stopped, and finds that key through the key index
// instead of walking every key before it. A counted claim
// whose head is all of a key at its limit scans the keys; the scan's last
// stop is set after 6,000 of the 6,050 other keys, and the claim reads far
// fewer entries of the key index than the 6,000 keys before the stop.
func TestKeySkipScanStartsAtItsKey(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	// One connection, so that the claim's statistics are flushed where the
	// test asks.
	pool := dbtest.Pool(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	schema := dbtest.Schema(t)
	d, err := weirpgx.New(pool, &weirpgx.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := weirmigrate.New(d).Up(ctx, nil); err != nil {
		t.Fatal(err)
	}
	exec := d.Executor()
	const q = "skipscan"
	if err := exec.QueueSetKeyLimit(ctx, q, weirdriver.KeyLimitParams{Key: "args.c", Limit: 1}); err != nil {
		t.Fatal(err)
	}
	insert := func(keys ...string) {
		t.Helper()
		params := make([]*weirdriver.JobInsertParams, len(keys))
		for i, k := range keys {
			params[i] = &weirdriver.JobInsertParams{Kind: "k", Queue: q, Args: json.RawMessage(`{"c": "` + k + `"}`),
				Priority: 2, MaxAttempts: 3}
		}
		if _, err := exec.JobInsert(ctx, params); err != nil {
			t.Fatal(err)
		}
	}
	claim := func() []string {
		t.Helper()
		jobs, _, err := exec.JobClaim(ctx, &weirdriver.JobClaimParams{Queue: q, Max: 1, ClientID: "c", LeaseDuration: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, j := range jobs {
			var args struct{ C string }
			if err := json.Unmarshal(j.Args, &args); err != nil {
				t.Fatal(err)
			}
			keys = append(keys, args.C)
		}
		return keys
	}
	insert("a-hot")
	if got := claim(); !slices.Equal(got, []string{"a-hot"}) {
		t.Fatalf("first claim took %v, want the job of a-hot", got)
	}
	// The head of the list: 150 jobs of a-hot, at its limit; then a job of
	// each of 6,050 keys.
	hot := make([]string, 150)
	for i := range hot {
		hot[i] = "a-hot"
	}
	insert(hot...)
	keys := make([]string, 6050)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%05d", i)
	}
	insert(keys...)
	if _, err := pool.Exec(ctx, "INSERT INTO "+pgx.Identifier{schema, "weir_key_scan"}.Sanitize()+
		" (queue, after) VALUES ($1, $2)", q, keys[5999]); err != nil {
		t.Fatal(err)
	}
	read := func() int64 {
		t.Helper()
		if _, err := pool.Exec(ctx, "SELECT pg_stat_force_next_flush()"); err != nil {
			t.Fatal(err)
		}
		var n int64
		if err := pool.QueryRow(ctx, `SELECT coalesce(sum(idx_tup_read), 0) FROM pg_stat_user_indexes
			WHERE schemaname = $1 AND indexrelname LIKE 'weir\_ready\__\_queue\_key\_%'`, schema).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := read()
	if got := claim(); !slices.Equal(got, []string{keys[6000]}) {
		t.Fatalf("claim took %v, want the job of %s, the first key after the last scan's stop", got, keys[6000])
	}
	// 100 here; 6,251 when the scan walked the keys before its stop.
	if n := read() - before; n > 1000 {
		t.Fatalf("the claim read %d entries of the key index: it walked the keys before the last scan's stop", n)
	}
}
