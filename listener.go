package weir

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/weirq/weir/weirdriver"
)

// listen wakes producers on insert notifications and cancels handlers on cancel
// requests. It reconnects by itself, and wakes every producer after a reconnect,
// since notifications may have been missed meanwhile.
func (e *engine) listen(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		l, err := e.driver.Listen(ctx, e.driver.InsertChannel(), e.driver.ControlChannel())
		if err != nil {
			if ctx.Err() == nil {
				e.logger.Warn("weir: listen; producers poll meanwhile", "error", err, "retry_in", backoff)
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
		for _, p := range e.producers {
			p.poke()
		}
		for {
			n, err := l.WaitForNotification(ctx)
			if err != nil {
				break
			}
			e.notify(n)
		}
		// On a reconnect, close politely; at shutdown, at once (a closed context
		// makes Close drop the connection without waiting on the network), so that
		// an unreachable database cannot hold Stop past its deadline.
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		if ctx.Err() != nil {
			cancel()
		}
		_ = l.Close(closeCtx)
		cancel()
	}
}

// notify acts on a notification. Any role that can connect may send one, on any
// channel, so a notification is only a hint to ask the database: an insert
// notification wakes its queue's producer, whose claim reads the queue (and which
// throttles wake-ups that find nothing); a cancel names a running job whose
// cancel_requested_at the heartbeat then reads, with an early renewal, before it
// cancels anything. Each costs O(1) here and coalesces with the ones before it.
func (e *engine) notify(n *weirdriver.Notification) {
	switch n.Channel {
	case e.driver.InsertChannel():
		if p := e.producers[n.Payload]; p != nil {
			p.hint()
		}
	case e.driver.ControlChannel():
		if strings.HasPrefix(n.Payload, "pause ") {
			return // every claim checks whether its queue is paused
		}
		idText, ok := strings.CutPrefix(n.Payload, "cancel ")
		id, err := strconv.ParseInt(idText, 10, 64)
		if !ok || err != nil {
			e.limited.log(slog.LevelWarn, "weir: unknown control message", "", "payload", truncate(n.Payload))
			return
		}
		if e.leases.isRunning(id) {
			e.renewSoon()
		}
	}
}
