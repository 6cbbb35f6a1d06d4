package weirsqlite

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/weirq/weir/weirdriver"
)

// Channel names. SQLite has no LISTEN/NOTIFY: the driver publishes on these
// channels itself, in this process only, after the transactions that cause them
// commit (see docs/sqlite.md).
const (
	insertChannel  = "weir_insert"
	controlChannel = "weir_control"
)

// maxPending is how many notifications a listener keeps for a waiter that falls
// behind. Past it the listener drops them and reports itself broken, so that the
// runtime listens anew and polls, as after a lost PostgreSQL connection.
const maxPending = 10000

var (
	errListenerClosed = errors.New("weirsqlite: listener is closed")
	errListenerBehind = errors.New("weirsqlite: listener fell behind and dropped notifications; listen anew")
	errDriverClosed   = errors.New("weirsqlite: driver is closed")
)

// InsertChannel implements weirdriver.Driver: "weir_insert".
func (d *Driver) InsertChannel() string { return insertChannel }

// ControlChannel implements weirdriver.Driver: "weir_control".
func (d *Driver) ControlChannel() string { return controlChannel }

// Listen implements weirdriver.Driver. The listener receives what this Driver
// publishes: the queues of jobs that its own statements made available, and
// control messages, after their transactions commit. It holds no connection.
// Jobs inserted by other processes, or inside a caller's *sql.Tx, wake nobody;
// workers find them by polling.
func (d *Driver) Listen(ctx context.Context, channels ...string) (weirdriver.Listener, error) {
	if len(channels) == 0 {
		return nil, errors.New("listen: no channels")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	l := &listener{broker: d.broker, channels: make(map[string]bool, len(channels)), wake: make(chan struct{}, 1)}
	for _, ch := range channels {
		if ch == "" {
			return nil, errors.New("listen: empty channel name")
		}
		l.channels[ch] = true
	}
	if !d.broker.add(l) {
		return nil, fmt.Errorf("listen: %w", errDriverClosed)
	}
	return l, nil
}

// broker hands published notifications to the driver's listeners.
type broker struct {
	mu     sync.Mutex
	subs   map[*listener]struct{}
	closed bool
}

func newBroker() *broker { return &broker{subs: map[*listener]struct{}{}} }

func (b *broker) add(l *listener) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.subs[l] = struct{}{}
	return true
}

func (b *broker) remove(l *listener) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.subs, l)
}

// publish delivers notes, in order, to every listener of their channels. It never
// blocks on a listener.
func (b *broker) publish(notes []weirdriver.Notification) {
	if len(notes) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for l := range b.subs {
		l.deliver(notes)
	}
}

// close closes every listener; later Listens fail.
func (b *broker) close() {
	b.mu.Lock()
	subs := b.subs
	b.subs, b.closed = nil, true
	b.mu.Unlock()
	for l := range subs {
		l.shut()
	}
}

// listener queues the notifications of its channels until they are waited for.
type listener struct {
	broker   *broker
	channels map[string]bool // read-only after Listen

	mu      sync.Mutex
	pending []weirdriver.Notification
	behind  bool          // pending overflowed: the listener is broken
	closed  bool          // set with wake closed
	wake    chan struct{} // capacity 1: a notification may be pending
}

func (l *listener) deliver(notes []weirdriver.Notification) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.behind {
		return
	}
	added := false
	for _, n := range notes {
		if !l.channels[n.Channel] {
			continue
		}
		if len(l.pending) >= maxPending {
			l.pending, l.behind = nil, true
			break
		}
		l.pending = append(l.pending, n)
		added = true
	}
	if added || l.behind {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
}

func (l *listener) WaitForNotification(ctx context.Context) (*weirdriver.Notification, error) {
	for {
		l.mu.Lock()
		switch {
		case l.closed:
			l.mu.Unlock()
			return nil, errListenerClosed
		case len(l.pending) > 0:
			n := l.pending[0]
			l.pending[0] = weirdriver.Notification{}
			l.pending = l.pending[1:]
			if len(l.pending) == 0 {
				l.pending = nil // let the backing array go
			}
			l.mu.Unlock()
			return &n, nil
		case l.behind:
			l.mu.Unlock()
			return nil, errListenerBehind
		}
		l.mu.Unlock()
		select {
		case <-l.wake: // a delivery, or Close
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for notification: %w", ctx.Err())
		}
	}
}

// Close stops the listener; a wait in progress returns at once with an error. It
// is safe to call twice.
func (l *listener) Close(context.Context) error {
	l.shut()
	l.broker.remove(l)
	return nil
}

func (l *listener) shut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.closed, l.pending = true, nil
	close(l.wake)
}
