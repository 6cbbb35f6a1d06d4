package weir_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirq/weir"
	"github.com/weirq/weir/weirdriver/weirpgx"
)

// The crash test runs a worker in a child process (this test binary, re-executed)
// and kills it with SIGKILL.
const (
	childEnv       = "WEIR_TEST_CHILD"
	childURLEnv    = "WEIR_TEST_CHILD_URL"
	childSchemaEnv = "WEIR_TEST_CHILD_SCHEMA"
	crashLease     = time.Second
	crashRescue    = 200 * time.Millisecond
)

// auditProbe records every execution, committed before the handler goes on; jobs
// named "slow" then record their lease token as progress, which only a renewal
// writes, and block until the process dies.
func auditProbe(pool *pgxpool.Pool, schema, worker string) probeFunc {
	return func(ctx context.Context, job *weir.Job[probeArgs]) error {
		_, err := pool.Exec(ctx, "INSERT INTO "+schema+`.audit (job_id, attempt, lease_token, worker, started_at)
			VALUES ($1, $2, $3, $4, clock_timestamp())`, job.ID, job.Attempt, job.LeaseToken, worker)
		if err != nil {
			return err
		}
		if job.Args.Name == "slow" {
			if err := weir.SetProgress(ctx, map[string]int64{"lease": job.LeaseToken}); err != nil {
				return err
			}
			<-ctx.Done()
			return context.Cause(ctx)
		}
		return nil
	}
}

func crashConfig(workers *weir.Workers) *weir.Config {
	cfg := fastConfig(workers, nil)
	cfg.LeaseDuration, cfg.HeartbeatInterval, cfg.RescueInterval = crashLease, 200*time.Millisecond, crashRescue
	cfg.JobTimeout = -1
	return cfg
}

// childDriver connects a child process to the URL and schema its parent put
// in the environment.
func childDriver() (*pgxpool.Pool, *weirpgx.Driver, error) {
	pool, err := pgxpool.New(context.Background(), os.Getenv(childURLEnv))
	if err != nil {
		return nil, nil, err
	}
	driver, err := weirpgx.New(pool, &weirpgx.Config{Schema: os.Getenv(childSchemaEnv)})
	return pool, driver, err
}

// childMain is the worker process: it works the queue until it is killed.
func childMain() int {
	ctx := context.Background()
	schema := os.Getenv(childSchemaEnv)
	pool, driver, err := childDriver()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cfg := crashConfig(probeWorkers(auditProbe(pool, schema, "child")))
	cfg.ID = "child"
	c, err := weir.NewClient(driver, cfg)
	if err == nil {
		err = c.Start(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	select {} // until SIGKILL
}

// TestCrashBound is G9: after a SIGKILL, only the jobs that were running at the
// kill run twice, and each becomes runnable again within lease duration + rescue
// interval. The progress the killed attempts recorded, which their renewals
// wrote, is what the next attempts see.
func TestCrashBound(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := testCtx(t)
	if _, err := b.pool.Exec(ctx, "CREATE TABLE "+b.schema+`.audit (
		job_id bigint, attempt int, lease_token bigint, worker text, started_at timestamptz, progress jsonb)`); err != nil {
		t.Fatal(err)
	}
	var fast, slow []int64
	for i := range 20 {
		fast = append(fast, b.insertProbe(t, "fast"+strconv.Itoa(i), nil))
	}
	for range 3 {
		slow = append(slow, b.insertProbe(t, "slow", nil))
	}

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childEnv+"=1", childURLEnv+"="+b.pool.Config().ConnConfig.ConnString(),
		childSchemaEnv+"="+b.schema)
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	waitFor(t, 30*time.Second, "the child to run every job", func() bool {
		return b.count(t, "state = 'completed'") == 20 && b.count(t, "state = 'running' AND progress IS NOT NULL") == 3
	})
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	var killedAt time.Time
	if err := b.pool.QueryRow(ctx, "SELECT now()").Scan(&killedAt); err != nil {
		t.Fatal(err)
	}

	parent := b.start(t, crashConfig(probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
		_, err := b.pool.Exec(ctx, "INSERT INTO "+b.schema+`.audit (job_id, attempt, lease_token, worker, started_at, progress)
			VALUES ($1, $2, $3, 'parent', clock_timestamp(), $4::text::jsonb)`, job.ID, job.Attempt, job.LeaseToken, progressText(job.Progress))
		return err
	})))
	waitFor(t, 30*time.Second, "every job to complete", func() bool { return b.count(t, "state = 'completed'") == 23 })
	// The parent is the only client left, so it led and rescued every job the
	// child held.
	if s := parent.Stats(); s.Rescued != 3 || s.LeaderElections < 1 {
		t.Errorf("parent's stats %+v, want 3 rescued and a term won", s)
	}

	runs := func(id int64) int {
		var n int
		if err := b.pool.QueryRow(ctx, "SELECT count(*) FROM "+b.schema+".audit WHERE job_id = $1", id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, id := range fast {
		if n := runs(id); n != 1 {
			t.Errorf("job %d finished before the kill and ran %d times", id, n)
		}
	}
	bound := crashLease + crashRescue
	for _, id := range slow {
		if n := runs(id); n != 2 {
			t.Errorf("job %d running at the kill ran %d times, want 2", id, n)
		}
		j := b.job(t, id)
		if len(j.Errors) != 1 {
			t.Fatalf("job %d errors %+v", id, j.Errors)
		}
		// The parent's attempt saw the progress of the child's, written under
		// the child's lease: never a value from its own or a later lease.
		var childToken, parentToken int64
		var seen *int64
		if err := b.pool.QueryRow(ctx, `SELECT
			(SELECT lease_token FROM `+b.schema+`.audit WHERE job_id = $1 AND worker = 'child'),
			(SELECT lease_token FROM `+b.schema+`.audit WHERE job_id = $1 AND worker = 'parent'),
			(SELECT (progress->>'lease')::bigint FROM `+b.schema+`.audit WHERE job_id = $1 AND worker = 'parent')`,
			id).Scan(&childToken, &parentToken, &seen); err != nil {
			t.Fatal(err)
		}
		if seen == nil || *seen != childToken || childToken >= parentToken {
			t.Errorf("job %d: the parent's attempt (lease %d) saw progress of lease %v, want the child's (%d)", id, parentToken, seen, childToken)
		}
		// The rescue's error entry carries the database time at which the job
		// became runnable again. The bound is the contract's; 100 ms more allows for
		// the rescue statement itself and the timers' scheduling.
		if late := j.Errors[0].At.Sub(killedAt); late > bound+100*time.Millisecond {
			t.Errorf("job %d runnable again %s after the kill; the bound is %s", id, late, bound)
		}
	}
}

// progressText is a job's progress as a text parameter: NULL when none.
func progressText(p json.RawMessage) *string {
	if p == nil {
		return nil
	}
	s := string(p)
	return &s
}
