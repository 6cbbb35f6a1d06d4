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
// flush. An insert on the pool that is not alone in flight therefore commits
// without notifying and then calls notify, which sends one notification per
// queue for every insert that asked while the previous notification was in
// flight (group commit, for notifications), from a transaction that writes
// nothing durable and so commits without waiting for a flush.
//
// The queues gather in a batch, and the first caller to ask in a batch owns it:
// it waits for its turn (the notification in flight, if any, to be sent) and
// sends the batch. The callers that join a batch already owned return at once:
// the batch, sent after they asked and so after their commits, carries their
// queues, and its owner is a caller still in its own insert, so no goroutine
// outlives any insert. An owner whose context ends stops waiting at once and
// leaves its batch unowned: the caller sending when it ends sends that batch
// too, and otherwise the next caller to ask owns it.
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
// owned is set while a caller is to send it: a batch is sent once, by its
// owner, which takes it out of gathering first.
type notifyBatch struct {
	queues []string
	owned  bool
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

// notify wakes the workers of queues: it returns once a notification carrying
// them was sent, or at once when another caller owns the batch that will carry
// them, or when ctx ends. The caller that sends a batch sends it under its own
// context (and the notifier's timeout). A notification that fails or is given
// up is not retried and is not the insert's error, since the insert has
// committed and workers also poll (weir's Config.FetchPollInterval): it is
// counted and logged.
func (n *notifier) notify(ctx context.Context, queues []string) {
	if len(queues) == 0 {
		return
	}
	n.mu.Lock()
	if n.gather == nil {
		n.gather = &notifyBatch{}
	}
	b := n.gather
	for _, q := range queues {
		if !slices.Contains(b.queues, q) {
			b.queues = append(b.queues, q)
		}
	}
	if b.owned {
		n.mu.Unlock()
		return // its owner sends it, after this caller's commit
	}
	b.owned = true
	n.mu.Unlock()
	select {
	case <-ctx.Done():
		n.mu.Lock()
		b.owned = false // the caller sending now, or the next to ask, sends it
		n.mu.Unlock()
		return
	case n.turn <- struct{}{}:
	}
	defer func() { <-n.turn }()
	for {
		n.mu.Lock()
		n.gather = nil // b: only its owner takes a batch out of gathering
		n.mu.Unlock()
		n.send(ctx, b)
		// A batch left unowned by a caller whose context ended while this one
		// was sending would wait for the next caller: send it now.
		n.mu.Lock()
		b = n.gather
		if b == nil || b.owned || ctx.Err() != nil {
			n.mu.Unlock()
			return
		}
		b.owned = true
		n.mu.Unlock()
	}
}

// send runs b's notification statement under ctx, cut after the notifier's
// timeout.
func (n *notifier) send(ctx context.Context, b *notifyBatch) {
	sendCtx, cancel := context.WithTimeout(ctx, n.timeout)
	_, err := n.pool.Exec(sendCtx, n.sql, n.channel, b.queues)
	cancel()
	if err != nil {
		failed := n.failed.Add(1)
		n.logger.Warn("weirpgx: insert notification not sent; workers find the jobs by polling",
			"queues", b.queues, "error", err, "failed_so_far", failed)
	}
}
