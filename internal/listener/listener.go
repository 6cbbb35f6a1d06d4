// Package listener holds the connection on which a client listens for insert
// notifications and control messages. A notification is only a hint (any role
// may send one): the listener only tells the client, which asks the database.
package listener

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/weirq/weir/internal/clock"
	"github.com/weirq/weir/weirdriver"
)

// Config is what a listener works with. A notification is only a hint (any role
// may send one), so the callbacks may only ask the database sooner.
type Config struct {
	Driver weirdriver.Driver
	Logger *slog.Logger
	// Connected is called after each (re)connect: notifications may have been
	// missed meanwhile.
	Connected func()
	// Insert is called for an insert notification naming queue.
	Insert func(queue string)
	// Cancel is called for a control message asking to cancel job id.
	Cancel func(id int64)
	// Unknown is called for any other control message.
	Unknown func(payload string)
	// Clock times the waits between attempts to listen. Default: clock.Real.
	Clock clock.Clock
}

// Listener holds one connection that listens for insert notifications and
// control messages, and reconnects by itself.
type Listener struct {
	cfg Config
}

// New returns a listener; Run runs it.
func New(cfg Config) *Listener {
	cfg.Clock = clock.Or(cfg.Clock)
	return &Listener{cfg: cfg}
}

// Run listens until ctx ends.
func (l *Listener) Run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		conn, err := l.cfg.Driver.Listen(ctx, l.cfg.Driver.InsertChannel(), l.cfg.Driver.ControlChannel())
		if err != nil {
			if ctx.Err() == nil {
				l.cfg.Logger.Warn("weir: listen; producers poll meanwhile", "error", err, "retry_in", backoff)
			}
			t := l.cfg.Clock.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C():
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		l.cfg.Connected()
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
func (l *Listener) notify(n *weirdriver.Notification) {
	switch n.Channel {
	case l.cfg.Driver.InsertChannel():
		l.cfg.Insert(n.Payload)
	case l.cfg.Driver.ControlChannel():
		if strings.HasPrefix(n.Payload, "pause ") {
			return // every claim checks whether its queue is paused
		}
		idText, ok := strings.CutPrefix(n.Payload, "cancel ")
		id, err := strconv.ParseInt(idText, 10, 64)
		if !ok || err != nil {
			l.cfg.Unknown(n.Payload)
			return
		}
		l.cfg.Cancel(id)
	}
}
