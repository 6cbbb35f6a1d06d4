package weirpgx

import (
	"context"
	"encoding/json"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirmigrate"
)

// TestInsertNotifiesBesideAnother: an insert on the pool while another insert
// of the driver is in flight commits without notifying and hands its queues
// to the notifier (JobInsert): each queue with a job made available is still
// notified after the commit, and a scheduled job's is not, for a lone job (its
// own statement) and a batch. The insert alone in flight notifies from its
// statement; the conformance suite's InsertNotifies covers that.
func TestInsertNotifiesBesideAnother(t *testing.T) {
	t.Parallel()
	d, err := New(dbtest.Pool(t, nil), &Config{Schema: dbtest.Schema(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := weirmigrate.New(d).Up(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	l, err := d.Listen(t.Context(), d.InsertChannel())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(t.Context())
	e := d.Executor().(*executor)
	if !e.notifier.begin() {
		t.Fatal("another insert was in flight before the test's")
	}
	defer e.notifier.end() // an insert held in flight for the whole test

	job := func(queue string, at time.Time) *weirdriver.JobInsertParams {
		return &weirdriver.JobInsertParams{Kind: "k", Queue: queue, Args: json.RawMessage(`{}`),
			Priority: 2, MaxAttempts: 3, ScheduledAt: at}
	}
	later := time.Now().Add(time.Hour)
	for _, batch := range [][]*weirdriver.JobInsertParams{
		{job("beside-one", time.Time{})},
		{job("beside-later", later)},
		{job("beside-batch", time.Time{}), job("beside-batch", time.Time{}), job("beside-batch-later", later)},
	} {
		if _, err := e.JobInsert(t.Context(), batch); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := notifiedBefore(t, d, l, "marker"), []string{"beside-one", "beside-batch"}; !slices.Equal(got, want) {
		t.Errorf("notified %v, want %v", got, want)
	}
}

// TestNotifierJoinersDoNotWait: a caller that asks while another caller owns
// the batch gathering (waits to send it) returns at once, and its queue goes
// out with that batch; a batch whose owner's context ended while another
// caller was sending is sent by that caller, with no further insert. Here a
// send is held at the pool until released.
func TestNotifierJoinersDoNotWait(t *testing.T) {
	t.Parallel()
	var armed atomic.Bool
	entered, release := make(chan struct{}, 1), make(chan struct{})
	pool := dbtest.Pool(t, func(c *pgxpool.Config) {
		c.PrepareConn = func(ctx context.Context, _ *pgx.Conn) (bool, error) {
			if !armed.CompareAndSwap(true, false) {
				return true, nil
			}
			entered <- struct{}{}
			select {
			case <-release:
				return true, nil
			case <-ctx.Done():
				return false, ctx.Err()
			}
		}
	})
	d, err := New(pool, &Config{Schema: dbtest.Schema(t)})
	if err != nil {
		t.Fatal(err)
	}
	l, err := d.Listen(t.Context(), d.InsertChannel())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(t.Context())
	exec := d.Executor()
	n := exec.(*executor).notifier
	// owned waits until a caller owns the batch gathering: the one started last.
	owned := func() {
		for {
			n.mu.Lock()
			ok := n.gather != nil && n.gather.owned
			n.mu.Unlock()
			if ok {
				return
			}
			runtime.Gosched()
		}
	}
	notifyAsync := func(ctx context.Context, q string) <-chan error {
		done := make(chan error, 1)
		go func() { done <- exec.NotifyInsert(ctx, []string{q}) }()
		return done
	}

	// A sends, held; B owns the next batch and waits; C joins it and returns.
	armed.Store(true)
	doneA := notifyAsync(t.Context(), "a")
	<-entered
	ctxB, cancelB := context.WithCancel(t.Context())
	defer cancelB()
	doneB := notifyAsync(ctxB, "b")
	owned()
	if err := exec.NotifyInsert(t.Context(), []string{"c"}); err != nil { // would hang until A's release if C waited
		t.Fatal(err)
	}
	select {
	case <-doneB:
		t.Fatal("B returned while A's send was held: it did not wait to send its batch")
	default:
	}
	close(release)
	for _, done := range []<-chan error{doneA, doneB} {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if got, want := notifiedBefore(t, d, l, "marker-1"), []string{"a", "b", "c"}; !slices.Equal(got, want) {
		t.Errorf("notified %v, want %v", got, want)
	}

	// A sends, held; B owns the next batch and gives up: A sends it after its own.
	release = make(chan struct{})
	armed.Store(true)
	doneA = notifyAsync(t.Context(), "x")
	<-entered
	ctxB, cancelB = context.WithCancel(t.Context())
	doneB = notifyAsync(ctxB, "y")
	owned()
	if err := exec.NotifyInsert(t.Context(), []string{"z"}); err != nil { // joins B's batch
		t.Fatal(err)
	}
	cancelB()
	if err := <-doneB; err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-doneA; err != nil {
		t.Fatal(err)
	}
	if got, want := notifiedBefore(t, d, l, "marker-2"), []string{"x", "y", "z"}; !slices.Equal(got, want) {
		t.Errorf("notified %v, want %v", got, want)
	}
	if got := d.NotificationsFailed(); got != 0 {
		t.Errorf("NotificationsFailed = %d, want 0", got)
	}
}

// notifiedBefore returns the insert notifications l receives before marker,
// which it sends now: notifications arrive in the order of the commits that
// sent them, so the marker comes after every notification already sent.
func notifiedBefore(t *testing.T, d *Driver, l weirdriver.Listener, marker string) []string {
	t.Helper()
	if _, err := d.pool.Exec(t.Context(), "SELECT pg_notify($1, $2)", d.InsertChannel(), marker); err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		n, err := l.WaitForNotification(t.Context())
		if err != nil {
			t.Fatalf("wait for notification: %v (got %v so far)", err, got)
		}
		if n.Payload == marker {
			return got
		}
		got = append(got, n.Payload)
	}
}
