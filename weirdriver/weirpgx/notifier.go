package weirpgx

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// notifier wakes workers after inserts that committed on their own (outside a
// caller's transaction), sharing one notification among concurrent inserts.
//
// PostgreSQL serializes the commits of notifying transactions: a transaction
// that notifies holds a database-wide lock from just before its commit until the
// commit is flushed, so concurrent inserts that each notify cannot share a WAL
// flush. An insert on the pool therefore commits without notifying and then
// calls notify, which sends one notification per queue for every insert that
// asked while the previous notification was in flight (group commit, for
// notifications), from a transaction that writes nothing durable and so commits
// without waiting for a flush. notify returns once the notification that carries
// its queues was sent, so no goroutine outlives the insert: the first caller to
// find no notification in flight sends the batch gathered so far, the others
// wait for it or lead the next one.
type notifier struct {
	pool         *pgxpool.Pool
	sql, channel string
	timeout      time.Duration // of one notification statement

	mu      sync.Mutex
	turn    *sync.Cond   // signalled when a send ends
	sending bool         // a caller is sending a batch
	gather  *notifyBatch // the batch the next send takes; nil when empty
}

// notifyBatch is the queues of one notification statement, in the order first
// asked for, so that notifications keep the order of the commits that asked.
type notifyBatch struct {
	queues []string
	sent   bool
}

func newNotifier(pool *pgxpool.Pool, q *queries) *notifier {
	n := &notifier{pool: pool, sql: q.notifyAsync, channel: q.insertChannel, timeout: 5 * time.Second}
	n.turn = sync.NewCond(&n.mu)
	return n
}

// notify wakes the workers of queues, and returns once that notification was
// sent. A notification that fails is not retried: workers also poll (weir's
// Config.FetchPollInterval), so its error is not the insert's.
func (n *notifier) notify(queues []string) {
	if len(queues) == 0 {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.gather == nil {
		n.gather = &notifyBatch{}
	}
	b := n.gather
	for _, q := range queues {
		if !slices.Contains(b.queues, q) {
			b.queues = append(b.queues, q)
		}
	}
	for n.sending && !b.sent {
		n.turn.Wait()
	}
	if b.sent {
		return
	}
	// Nobody is sending, and b is still gathering: this caller sends it.
	n.sending, n.gather = true, nil
	n.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), n.timeout)
	_, _ = n.pool.Exec(ctx, n.sql, n.channel, b.queues)
	cancel()
	n.mu.Lock()
	n.sending, b.sent = false, true
	n.turn.Broadcast()
}
