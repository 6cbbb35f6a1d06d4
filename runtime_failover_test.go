package weir_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirq/weir"
	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/internal/pgcluster"
	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirdriver/weirpgx"
	"github.com/weirq/weir/weirmigrate"
	"github.com/weirq/weir/weirtype"
)

// TestFailoverSync is G1 and G3 across a failover to a synchronous standby:
// a client works jobs through the pair's multi-host URL; the primary crashes
// mid-drain and the standby is promoted. Every job completes, no lease's
// outcome is written after a later lease of its job, and the client's pool,
// its LISTEN connection and its leader election find the new primary by
// themselves: a job inserted afterwards is claimed on its notification, and
// the client leads on the new primary.
func TestFailoverSync(t *testing.T) {
	t.Parallel()
	pair, newPool := startFailoverPair(t, true)
	ctx := testCtx(t)
	admin := newPool()
	adminDriver := migrateFailoverSchema(t, admin)
	// Every lease that leaves the running state, in the transaction that
	// ends it.
	if _, err := admin.Exec(ctx, `
CREATE TABLE `+failoverSchema+`.lease_end (job_id bigint, token bigint, state text, seq bigserial);
CREATE FUNCTION `+failoverSchema+`.log_end() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO `+failoverSchema+`.lease_end (job_id, token, state) VALUES (OLD.id, OLD.lease_token, NEW.state);
	RETURN NULL;
END $$;
CREATE TRIGGER log_end AFTER UPDATE ON `+failoverSchema+`.weir_job FOR EACH ROW
	WHEN (OLD.state = 'running' AND (NEW.state <> 'running' OR NEW.lease_token <> OLD.lease_token))
	EXECUTE FUNCTION `+failoverSchema+`.log_end();`); err != nil {
		t.Fatal(err)
	}
	inserter, err := weir.NewClient(adminDriver, nil)
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	runs := map[int64]int{}
	workDriver, err := weirpgx.New(newPool(), &weirpgx.Config{Schema: failoverSchema})
	if err != nil {
		t.Fatal(err)
	}
	cfg := fastConfig(probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
		mu.Lock()
		runs[job.ID]++
		mu.Unlock()
		select { // a little work, so that the crash finds jobs running
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	}), nil)
	cfg.FetchPollInterval = time.Minute // after the drain, only a notification wakes the producer
	client, err := weir.NewClient(workDriver, cfg)
	if err != nil {
		t.Fatal(err)
	}

	const n = 1500
	params := make([]weir.InsertManyParams, n)
	for i := range params {
		params[i] = weir.InsertManyParams{Args: probeArgs{Name: "f"}}
	}
	if _, err := inserter.InsertMany(ctx, params); err != nil {
		t.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = client.Stop(context.Background())
		}
	}()
	count := func(where string) int {
		var c int
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM "+failoverSchema+".weir_job WHERE "+where).Scan(&c); err != nil {
			return -1 // the primary is away: not yet
		}
		return c
	}
	waitFor(t, 30*time.Second, "a third of the jobs to complete", func() bool { return count("state = 'completed'") >= n/3 })
	if err := pair.CrashPrimary(); err != nil {
		t.Fatal(err)
	}
	crashed := time.Now()
	mu.Lock()
	t.Logf("crashed the primary with %d of %d jobs started", len(runs), n)
	mu.Unlock()
	if err := pair.Promote(); err != nil {
		t.Fatal(err)
	}
	t.Logf("crash and promotion in %s", time.Since(crashed).Round(time.Millisecond))
	waitFor(t, 30*time.Second, "every job to complete on the new primary", func() bool { return count("state = 'completed'") == n })
	t.Logf("drained %s after the crash", time.Since(crashed).Round(time.Millisecond))

	// The LISTEN connection is back, on the new primary: a job inserted now
	// is claimed on its notification, well before the minute's poll.
	late, err := inserter.Insert(ctx, probeArgs{Name: "late"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	inserted := time.Now()
	waitFor(t, 20*time.Second, "the job inserted after the failover to complete", func() bool {
		return count("state = 'completed' AND id = "+itoa(late.Job.ID)) == 1
	})
	t.Logf("a job inserted after the failover completed in %s", time.Since(inserted).Round(time.Millisecond))

	// The client leads on the new primary.
	waitFor(t, 20*time.Second, "the client to lead on the new primary", func() bool {
		var id string
		err := admin.QueryRow(ctx, "SELECT leader_id FROM "+failoverSchema+".weir_leader WHERE name = 'maintenance' AND expires_at > now()").Scan(&id)
		return err == nil && id == client.ID() && client.IsLeader()
	})

	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil {
		t.Errorf("Stop: %v", err)
	}
	stopped = true

	// G1: every job completed, each run at least once.
	if c := count("state <> 'completed'"); c != 0 {
		t.Fatalf("%d jobs not completed", c)
	}
	mu.Lock()
	again := 0
	for _, r := range runs {
		again += r - 1
	}
	ran := len(runs)
	mu.Unlock()
	if ran != n+1 {
		t.Errorf("%d jobs ran, want %d", ran, n+1)
	}
	// G3: each job completed once, by its last lease; no lease ended after a
	// later one of its job.
	type end struct {
		token int64
		state string
	}
	rows, err := admin.Query(ctx, "SELECT job_id, token, state FROM "+failoverSchema+".lease_end ORDER BY seq")
	if err != nil {
		t.Fatal(err)
	}
	ends := map[int64][]end{}
	var id int64
	var e end
	if _, err := pgx.ForEachRow(rows, []any{&id, &e.token, &e.state}, func() error {
		ends[id] = append(ends[id], e)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	completions, stale := 0, 0
	for id, es := range ends {
		for i, e := range es {
			if e.state == "completed" {
				completions++
				if i != len(es)-1 {
					t.Errorf("job %d: completed by lease %d, then its lease changed again: %v", id, e.token, es)
				}
			}
			if i > 0 && e.token <= es[i-1].token {
				stale++
				t.Errorf("job %d: lease %d ended after lease %d: a stale outcome won (%v)", id, e.token, es[i-1].token, es)
			}
		}
	}
	if completions != n+1 {
		t.Errorf("%d completions recorded, want %d", completions, n+1)
	}
	st := client.Stats()
	t.Logf("%d jobs, %d re-runs after the crash; stale writes fenced %d, leases lost %d, abandoned %d, rescued %d, elections %d",
		n+1, again, st.StaleWrites, st.LeasesLost, st.Abandoned, st.Rescued, st.LeaderElections)
}

// TestFailoverAsyncTokens is G3 across a failover to an asynchronous standby
// that lacks the old primary's last claim: the new primary claims the job
// again, and its token must differ from the one the old primary gave, so
// that the first lease's outcome cannot land on the second.
func TestFailoverAsyncTokens(t *testing.T) {
	t.Parallel()
	pair, newPool := startFailoverPair(t, false)
	ctx := testCtx(t)
	driver := migrateFailoverSchema(t, newPool())
	client, err := weir.NewClient(driver, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := client.Insert(ctx, probeArgs{Name: "rewound"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	claim := func(who string) *weirdriver.JobFinalizeParams {
		t.Helper()
		var jobs []*weirtype.JobRow
		waitFor(t, 30*time.Second, who+"'s claim", func() bool {
			jobs, _, err = driver.Executor().JobClaim(ctx, &weirdriver.JobClaimParams{
				Queue: weir.DefaultQueue, Max: 1, ClientID: who, LeaseDuration: time.Hour,
			})
			return err == nil // the pool's connections to a dead primary fail once
		})
		if len(jobs) != 1 || jobs[0].ID != res.Job.ID {
			t.Fatalf("%s claimed %d jobs, want job %d", who, len(jobs), res.Job.ID)
		}
		return &weirdriver.JobFinalizeParams{ID: jobs[0].ID, LeaseToken: jobs[0].LeaseToken, Outcome: weirdriver.OutcomeCompleted}
	}

	// The insert reaches the standby; the claim does not.
	if _, err := pair.CutReplication(); err != nil {
		t.Fatal(err)
	}
	first := claim("old-primary")
	if err := pair.CrashPrimary(); err != nil {
		t.Fatal(err)
	}
	if err := pair.Promote(); err != nil {
		t.Fatal(err)
	}
	second := claim("new-primary")
	if second.LeaseToken == first.LeaseToken {
		t.Fatalf("the new primary gave token %d again", first.LeaseToken)
	}
	applied, err := driver.Executor().JobFinalize(ctx, []*weirdriver.JobFinalizeParams{first})
	if err != nil || applied[0] {
		t.Fatalf("the lost lease's outcome: applied %v, %v; want refused", applied, err)
	}
	applied, err = driver.Executor().JobFinalize(ctx, []*weirdriver.JobFinalizeParams{second})
	if err != nil || !applied[0] {
		t.Fatalf("the live lease's outcome: applied %v, %v", applied, err)
	}
}

// failoverSchema is the schema of the failover tests, each on its own pair.
const failoverSchema = "weir_failover"

// startFailoverPair starts a primary and a streaming standby, synchronous or
// not, stopped at cleanup, and returns it with a maker of pools on its
// multi-host URL. Where PostgreSQL is not installed it skips the test, or fails
// it with WEIR_REQUIRE_PG_BINARIES=1 (dbtest.Started).
func startFailoverPair(t *testing.T, sync bool) (*pgcluster.Pair, func() *pgxpool.Pool) {
	t.Helper()
	pair, err := pgcluster.StartPair(pgcluster.PairOptions{DirPrefix: "weir-failover-test-", Database: "failover", Sync: sync})
	dbtest.Started(t, err)
	t.Cleanup(func() { _ = pair.Stop() })
	return pair, func() *pgxpool.Pool {
		cfg, err := pgxpool.ParseConfig(pair.URL())
		if err != nil {
			t.Fatal(err)
		}
		cfg.ConnConfig.ConnectTimeout = 2 * time.Second
		pool, err := pgxpool.NewWithConfig(testCtx(t), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		return pool
	}
}

// migrateFailoverSchema creates and migrates failoverSchema through pool and
// returns a driver on it.
func migrateFailoverSchema(t *testing.T, pool *pgxpool.Pool) *weirpgx.Driver {
	t.Helper()
	if _, err := pool.Exec(testCtx(t), "CREATE SCHEMA "+failoverSchema); err != nil {
		t.Fatal(err)
	}
	driver, err := weirpgx.New(pool, &weirpgx.Config{Schema: failoverSchema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := weirmigrate.New(driver).Up(testCtx(t), nil); err != nil {
		t.Fatal(err)
	}
	return driver
}
