package weirpgx

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
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
// wait for it or lead the next one. A caller whose context ends stops waiting at
// once; its queues go out with the next notification.
type notifier struct {
	pool         *pgxpool.Pool
	sql, channel string
	timeout      time.Duration // of one notification statement, at most
	logger       *slog.Logger
	failed       atomic.Int64 // notifications that could not be sent
	inserts      atomic.Int64 // inserts on the pool in flight (begin, end)

	// turn is held (a value in it) by the caller sending a batch.
	turn   chan struct{}
	mu     sync.Mutex
	gather *notifyBatch // the batch the next send takes; nil when empty
}

// notifyBatch is the queues of one notification statement, in the order first
// asked for, so that notifications keep the order of the commits that asked.
// sent is closed once the statement has run, whether or not it succeeded.
type notifyBatch struct {
	queues []string
	sent   chan struct{}
}

func newNotifier(pool *pgxpool.Pool, q *queries, logger *slog.Logger) *notifier {
	return &notifier{
		pool: pool, sql: q.notifyAsync, channel: q.insertChannel, timeout: 5 * time.Second,
		logger: logger, turn: make(chan struct{}, 1),
	}
}

// begin counts an insert on the pool in flight, and reports whether it is the
// only one: it then notifies from its own statement, whose commit no other
// insert of this driver waits behind, and does not call notify. end uncounts it.
func (n *notifier) begin() bool { return n.inserts.Add(1) == 1 }

func (n *notifier) end() { n.inserts.Add(-1) }

// notify wakes the workers of queues, and returns once the notification that
// carries them was sent, or when ctx ends. The caller that sends a batch sends it
// under its own context (and the notifier's timeout). A notification that fails
// or is given up is not retried and is not the insert's error, since the insert
// has committed and workers also poll (weir's Config.FetchPollInterval): it is
// counted and logged.
func (n *notifier) notify(ctx context.Context, queues []string) {
	if len(queues) == 0 {
		return
	}
	n.mu.Lock()
	if n.gather == nil {
		n.gather = &notifyBatch{sent: make(chan struct{})}
	}
	b := n.gather
	for _, q := range queues {
		if !slices.Contains(b.queues, q) {
			b.queues = append(b.queues, q)
		}
	}
	n.mu.Unlock()
	select {
	case <-b.sent:
		return
	case <-ctx.Done():
		// b's queues stay gathered: the next send carries them.
		return
	case n.turn <- struct{}{}:
	}
	defer func() { <-n.turn }()
	n.mu.Lock()
	select {
	case <-b.sent: // sent by the caller whose turn ended as this one's began
		n.mu.Unlock()
		return
	default:
	}
	// Nobody is sending, and b is still gathering: this caller sends it.
	n.gather = nil
	n.mu.Unlock()
	sendCtx, cancel := context.WithTimeout(ctx, n.timeout)
	_, err := n.pool.Exec(sendCtx, n.sql, n.channel, b.queues)
	cancel()
	close(b.sent)
	if err != nil {
		failed := n.failed.Add(1)
		n.logger.Warn("weirpgx: insert notification not sent; workers find the jobs by polling",
			"queues", b.queues, "error", err, "failed_so_far", failed)
	}
}
