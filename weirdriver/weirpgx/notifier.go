package weirpgx

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// notifier wakes workers after inserts that committed on their own (outside a
// caller's transaction), coalescing the notifications of concurrent inserts.
//
// PostgreSQL serializes the commits of notifying transactions: a transaction
// that notifies holds a database-wide lock from just before its commit until the
// commit is flushed, so concurrent inserts that each notify cannot share a WAL
// flush. An insert on the pool therefore leaves notifying to the notifier, which
// sends one notification per queue for all inserts that committed while its
// previous one was in flight, from a transaction that writes nothing durable and
// so commits without waiting for a flush. The wake-up comes one round trip after
// the insert's commit. A notification that fails is not retried: workers also
// poll (weir's Config.FetchPollInterval).
type notifier struct {
	pool         *pgxpool.Pool
	sql, channel string
	timeout      time.Duration // of one notification statement

	mu sync.Mutex
	// pending are the queues to notify, in the order first asked for, so that
	// notifications keep the order of the commits that asked for them.
	pending []string
	sending bool // a goroutine is sending; it takes pending until empty
}

func newNotifier(pool *pgxpool.Pool, q *queries) *notifier {
	return &notifier{
		pool: pool, sql: q.notifyAsync, channel: q.insertChannel,
		timeout: 5 * time.Second,
	}
}

// notify asks for a notification of each queue, soon. It never blocks on the
// database.
func (n *notifier) notify(queues []string) {
	if len(queues) == 0 {
		return
	}
	n.mu.Lock()
	for _, q := range queues {
		if !slices.Contains(n.pending, q) {
			n.pending = append(n.pending, q)
		}
	}
	if n.sending {
		n.mu.Unlock()
		return
	}
	n.sending = true
	n.mu.Unlock()
	go n.send()
}

// send notifies the pending queues until none are left, then ends.
func (n *notifier) send() {
	for {
		n.mu.Lock()
		if len(n.pending) == 0 {
			n.sending = false
			n.mu.Unlock()
			return
		}
		queues := n.pending
		n.pending = nil
		n.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), n.timeout)
		_, _ = n.pool.Exec(ctx, n.sql, n.channel, queues) // best effort: workers poll too
		cancel()
	}
}
