package weirpgx

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/weirq/weir/weirdriver"
)

// maxChannelLen is the longest channel name PostgreSQL takes (NAMEDATALEN - 1).
const maxChannelLen = 63

var errListenerClosed = errors.New("weirpgx: listener is closed")

// InsertChannel implements weirdriver.Driver: "<schema>.weir_insert".
func (d *Driver) InsertChannel() string { return d.q.insertChannel }

// ControlChannel implements weirdriver.Driver: "<schema>.weir_control".
func (d *Driver) ControlChannel() string { return d.q.controlChannel }

// Listen implements weirdriver.Driver. It acquires a connection from the pool and
// hijacks it, so that the listener owns the connection until Close closes it:
// a connection that holds LISTENs never goes back to the pool, the pool's Close
// does not wait for listeners, and the pool may open another connection in its
// place (up to its MaxConns).
func (d *Driver) Listen(ctx context.Context, channels ...string) (weirdriver.Listener, error) {
	if len(channels) == 0 {
		return nil, errors.New("listen: no channels")
	}
	stmts := make([]string, len(channels))
	for i, ch := range channels {
		if ch == "" || len(ch) > maxChannelLen {
			return nil, fmt.Errorf("listen: channel %q must be 1 to %d bytes", ch, maxChannelLen)
		}
		// Channel names hold a dot, and LISTEN takes an identifier.
		stmts[i] = "LISTEN " + pgx.Identifier{ch}.Sanitize()
	}
	pc, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("listen: acquire connection: %w", err)
	}
	conn := pc.Hijack()
	// Without arguments pgx sends this as one simple-protocol round trip.
	if _, err := conn.Exec(ctx, strings.Join(stmts, "; ")); err != nil {
		conn.Close(context.WithoutCancel(ctx)) //nolint:errcheck // the LISTEN error is the one to report
		return nil, fmt.Errorf("listen on %s: %w", strings.Join(channels, ", "), err)
	}
	return &listener{conn: conn}, nil
}

// listener waits for notifications on a hijacked connection. mu serializes the
// wait and Close, since a pgx.Conn is not safe for concurrent use.
type listener struct {
	mu   sync.Mutex
	conn *pgx.Conn // nil once closed
}

func (l *listener) WaitForNotification(ctx context.Context) (*weirdriver.Notification, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn == nil {
		return nil, errListenerClosed
	}
	// When ctx ends, pgx sets a deadline on the socket and clears it afterwards; a
	// timeout does not close the connection, so the listener can wait again.
	n, err := l.conn.WaitForNotification(ctx)
	if err != nil {
		return nil, fmt.Errorf("wait for notification: %w", err)
	}
	return &weirdriver.Notification{Channel: n.Channel, Payload: n.Payload}, nil
}

func (l *listener) Close(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn == nil {
		return nil
	}
	conn := l.conn
	l.conn = nil
	// Closing the session drops its LISTENs on the server.
	if err := conn.Close(ctx); err != nil {
		return fmt.Errorf("close listener: %w", err)
	}
	return nil
}
