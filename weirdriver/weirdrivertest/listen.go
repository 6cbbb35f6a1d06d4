package weirdrivertest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/weirq/weir/weirdriver"
)

// notificationsBefore sends marker on the insert channel and returns the payloads
// that l receives on that channel before it. Notifications arrive in commit order,
// so everything committed before the marker is in the result, without a timeout.
func notificationsBefore(t *testing.T, d weirdriver.Driver, l weirdriver.Listener, marker string) []string {
	t.Helper()
	if err := d.Executor().NotifyInsert(ctx(t), []string{marker}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		n, err := l.WaitForNotification(ctx(t))
		if err != nil {
			t.Fatalf("wait for notification: %v (got %v so far)", err, got)
		}
		if n.Channel != d.InsertChannel() {
			continue
		}
		if n.Payload == marker {
			return got
		}
		got = append(got, n.Payload)
	}
}

func listen(t *testing.T, d weirdriver.Driver, channels ...string) weirdriver.Listener {
	t.Helper()
	l, err := d.Listen(ctx(t), channels...)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Close(context.Background()); err != nil {
			t.Errorf("close listener: %v", err)
		}
	})
	return l
}

func testListen(t *testing.T, d weirdriver.Driver) {
	if _, err := d.Listen(ctx(t)); err == nil {
		t.Fatal("listen without channels succeeded")
	}
	if d.InsertChannel() == "" || d.ControlChannel() == "" || d.InsertChannel() == d.ControlChannel() {
		t.Fatalf("channels %q and %q", d.InsertChannel(), d.ControlChannel())
	}
	l := listen(t, d, d.InsertChannel(), d.ControlChannel())

	// A wait that times out leaves the listener usable.
	short, cancel := context.WithTimeout(ctx(t), 20*time.Millisecond)
	defer cancel()
	if n, err := l.WaitForNotification(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait with nothing sent: %+v, %v; want a deadline error", n, err)
	}

	// A notification sent in a transaction arrives at its commit, not before;
	// one sent outside a transaction arrives meanwhile.
	tx, err := d.Executor().Begin(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // a no-op after Commit
	if err := tx.NotifyInsert(ctx(t), []string{"in-tx"}); err != nil {
		t.Fatal(err)
	}
	if err := d.Executor().NotifyInsert(ctx(t), []string{"outside"}); err != nil {
		t.Fatal(err)
	}
	expect := func(want string) {
		t.Helper()
		n, err := l.WaitForNotification(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if n.Channel != d.InsertChannel() || n.Payload != want {
			t.Fatalf("got %+v, want %q on %s", n, want, d.InsertChannel())
		}
	}
	expect("outside")
	if err := tx.Commit(ctx(t)); err != nil {
		t.Fatal(err)
	}
	expect("in-tx")

	// Cancelling a running job tells its client on the control channel.
	job := claimOne(t, d, "l", 3, time.Minute)
	if _, err := d.Executor().JobCancel(ctx(t), job.ID); err != nil {
		t.Fatal(err)
	}
	for {
		n, err := l.WaitForNotification(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if n.Channel == d.ControlChannel() {
			if want := fmt.Sprintf("cancel %d", job.ID); n.Payload != want {
				t.Fatalf("control payload %q, want %q", n.Payload, want)
			}
			break
		}
	}

	if err := l.Close(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(ctx(t)); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if _, err := l.WaitForNotification(ctx(t)); err == nil {
		t.Fatal("wait after close succeeded")
	}
}
