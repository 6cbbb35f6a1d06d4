package weir_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/weirq/weir"
	"github.com/weirq/weir/internal/dbtest"
)

// outsider connects as a new login role with no privileges on b's schema, made
// for the test and dropped at its end: any such role may NOTIFY any channel.
func (b *bundle) outsider(t *testing.T) *pgx.Conn {
	t.Helper()
	var suffix [6]byte
	_, _ = rand.Read(suffix[:])
	role := "weir_outsider_" + hex.EncodeToString(suffix[:])
	if _, err := b.pool.Exec(testCtx(t), "CREATE ROLE "+role+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := b.pool.Exec(ctx, "DROP ROLE "+role); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	cfg, err := pgx.ParseConfig(dbtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.User, cfg.Password = role, ""
	conn, err := pgx.ConnectConfig(testCtx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) }) // runs before the drop
	// The role cannot even read weir's tables.
	var pgErr *pgconn.PgError
	if _, err := conn.Exec(testCtx(t), "SELECT count(*) FROM "+b.schema+".weir_job"); !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		t.Fatalf("the outsider read the schema: %v, want SQLSTATE 42501", err)
	}
	return conn
}

// notifyMany sends n notifications, each in its own transaction (PostgreSQL
// folds equal notifications of one transaction into one).
func notifyMany(t *testing.T, conn *pgx.Conn, channel, payload string, n int) {
	t.Helper()
	for range n {
		if _, err := conn.Exec(testCtx(t), "SELECT pg_notify($1, $2)", channel, payload); err != nil {
			t.Fatal(err)
		}
	}
}

// TestForgedCancelIgnored is the attack of a role that cannot read weir's schema
// and NOTIFYs "cancel <id>" for a running job, many times: the handler must go on
// (the database holds no cancel request for it), and the flood may cost only a
// bounded number of renewals. An operator's cancel of another job, with a
// heartbeat too slow to matter, still reaches its handler through the same
// notification path; it also shows that the forged notifications, sent before
// it, were all handled.
func TestForgedCancelIgnored(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	started := make(chan int64, 2)
	causes := map[string]chan error{"victim": make(chan error, 1), "cancelled": make(chan error, 1)}
	cfg := fastConfig(probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
		started <- job.ID
		<-ctx.Done()
		causes[job.Args.Name] <- context.Cause(ctx)
		return ctx.Err()
	}), map[string]weir.QueueConfig{weir.DefaultQueue: {MaxWorkers: 2}})
	// Only notifications can make a handler see a cancel within the test.
	cfg.HeartbeatInterval, cfg.LeaseDuration, cfg.JobTimeout = 10*time.Minute, 30*time.Minute, -1
	c := b.start(t, cfg)
	victim := b.insertProbe(t, "victim", nil)
	target := b.insertProbe(t, "cancelled", nil)
	for range 2 {
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			t.Fatal("handlers did not start")
		}
	}

	conn := b.outsider(t)
	const forged = 500
	begin := time.Now()
	renewalsBefore := c.Stats().Renewals
	notifyMany(t, conn, b.driver.ControlChannel(), "cancel "+itoa(victim), forged)
	if _, err := b.client.JobCancel(testCtx(t), target); err != nil {
		t.Fatal(err)
	}
	select {
	case cause := <-causes["cancelled"]:
		if !errors.Is(cause, weir.ErrJobCancelRequested) {
			t.Fatalf("the operator's cancel: cause %v", cause)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the operator's cancel did not reach the handler")
	}
	elapsed := time.Since(begin)
	select {
	case cause := <-causes["victim"]:
		t.Fatalf("a forged notification cancelled the handler: cause %v", cause)
	default:
	}
	if j := b.job(t, victim); j.State != weir.JobStateRunning || j.Attempt != 1 {
		t.Fatalf("victim is %s at attempt %d, want running at attempt 1", j.State, j.Attempt)
	}
	// Early renewals start at least 100 ms apart (docs/runtime.md); the one that
	// found the operator's cancel counts too.
	renewals := c.Stats().Renewals - renewalsBefore
	if bound := int64(elapsed/(100*time.Millisecond)) + 2; renewals > bound {
		t.Fatalf("%d forged cancels in %s caused %d renewals, more than %d", forged, elapsed, renewals, bound)
	}
	waitFor(t, 10*time.Second, "the target cancelled", func() bool { return b.job(t, target).State == weir.JobStateCancelled })
	t.Logf("%d forged cancels in %s: %d renewals", forged, elapsed, renewals)
	if err := c.StopAndCancel(testCtx(t)); err != nil { // the victim's handler waits for its context
		t.Fatal(err)
	}
}

// TestInsertNotificationFloodBounded floods a queue's insert channel from a role
// that cannot read weir's schema: a claim after one that found nothing waits
// 10 ms (docs/runtime.md), so the flood costs at most one claim per 10 ms, where
// each notification used to cost one. A job inserted after the flood, by another
// client, is still claimed through its notification.
func TestInsertNotificationFloodBounded(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ran := make(chan int64, 1)
	cfg := fastConfig(probeWorkers(func(_ context.Context, job *weir.Job[probeArgs]) error {
		ran <- job.ID
		return nil
	}), nil)
	cfg.FetchPollInterval = time.Hour // only notifications wake the producer
	c := b.start(t, cfg)

	conn := b.outsider(t)
	const flood = 2000
	begin := time.Now()
	claimsBefore := c.Stats().Claims
	notifyMany(t, conn, b.driver.InsertChannel(), weir.DefaultQueue, flood)
	id := b.insertProbe(t, "after the flood", nil) // b.client is not started: it wakes c by notification only
	select {
	case got := <-ran:
		if got != id {
			t.Fatalf("ran job %d, want %d", got, id)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the job inserted after the flood did not run")
	}
	elapsed := time.Since(begin)
	// The job's own claim and the one its freed slot asks for come on top.
	claims := c.Stats().Claims - claimsBefore
	if bound := int64(elapsed/(10*time.Millisecond)) + 3; claims > bound {
		t.Fatalf("%d insert notifications in %s caused %d claims, more than %d", flood, elapsed, claims, bound)
	}
	t.Logf("%d notifications in %s: %d claims", flood, elapsed, claims)
}
