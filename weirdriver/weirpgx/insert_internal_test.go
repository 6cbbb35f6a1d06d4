package weirpgx

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

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
	// Notifications arrive in the order of the commits that sent them: the
	// marker, sent after the inserts returned, comes after theirs.
	if _, err := d.pool.Exec(t.Context(), "SELECT pg_notify($1, 'marker')", d.InsertChannel()); err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		n, err := l.WaitForNotification(t.Context())
		if err != nil {
			t.Fatalf("wait for notification: %v (got %v so far)", err, got)
		}
		if n.Payload == "marker" {
			break
		}
		got = append(got, n.Payload)
	}
	if want := []string{"beside-one", "beside-batch"}; !slices.Equal(got, want) {
		t.Errorf("notified %v, want %v", got, want)
	}
}
