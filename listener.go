package weir

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/weirq/weir/weirdriver"
)

// listenerDeps is what the listener works with. A notification is only a hint
// (any role may send one), so the callbacks only ask the database sooner.
type listenerDeps struct {
	driver weirdriver.Driver
	logger *slog.Logger
	// connected is called after each (re)connect: notifications may have been
	// missed meanwhile.
	connected func()
	// insert is called for an insert notification naming queue.
	insert func(queue string)
	// cancel is called for a control message asking to cancel job id.
	cancel func(id int64)
	// unknown is called for any other control message.
	unknown func(payload string)
}

// listener holds one connection that listens for insert notifications and
// control messages, and reconnects by itself.
type listener struct {
	listenerDeps
}

func newListener(deps listenerDeps) *listener {
	return &listener{listenerDeps: deps}
}

// run listens until ctx ends.
func (l *listener) run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		conn, err := l.driver.Listen(ctx, l.driver.InsertChannel(), l.driver.ControlChannel())
		if err != nil {
			if ctx.Err() == nil {
				l.logger.Warn("weir: listen; producers poll meanwhile", "error", err, "retry_in", backoff)
			}
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		l.connected()
		for {
			n, err := conn.WaitForNotification(ctx)
			if err != nil {
				break
			}
			l.notify(n)
		}
		// On a reconnect, close politely; at shutdown, at once (a closed context
		// makes Close drop the connection without waiting on the network), so that
		// an unreachable database cannot hold Stop past its deadline.
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		if ctx.Err() != nil {
			cancel()
		}
		_ = conn.Close(closeCtx)
		cancel()
	}
}

// notify acts on a notification. Any role that can connect may send one, on any
// channel, so a notification is only a hint to ask the database: an insert
// notification wakes its queue's producer, whose claim reads the queue (and which
// throttles wake-ups that find nothing); a cancel names a running job whose
// cancel_requested_at the heartbeat then reads, with an early renewal, before it
// cancels anything. Each costs O(1) here and coalesces with the ones before it.
func (l *listener) notify(n *weirdriver.Notification) {
	switch n.Channel {
	case l.driver.InsertChannel():
		l.insert(n.Payload)
	case l.driver.ControlChannel():
		if strings.HasPrefix(n.Payload, "pause ") {
			return // every claim checks whether its queue is paused
		}
		idText, ok := strings.CutPrefix(n.Payload, "cancel ")
		id, err := strconv.ParseInt(idText, 10, 64)
		if !ok || err != nil {
			l.unknown(n.Payload)
			return
		}
		l.cancel(id)
	}
}
