package weirpgx

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/weirq/weir/weirdriver"
)

// The statements of QueueShare, in one transaction.
const (
	// queueShareLockSQL takes the lock under which queue $2's limited claims
	// take turns (weir_ready_claim), named after schema $1 and the queue.
	queueShareLockSQL = `SELECT pg_advisory_xact_lock(hashtextextended($1::text || '.' || $2::text, 0))`
	// queueShareExpireSQL deletes queue $1's shares whose lease ran out.
	queueShareExpireSQL = `DELETE FROM {share} s WHERE s.queue = $1 AND s.expires_at < now()`
	// queueShareReadSQL reads queue $1's global limit (NULL: none), the running
	// jobs of the clients other than $2 that hold no share, and the other
	// clients' shares: holders, wants and slots, in holder order.
	queueShareReadSQL = `SELECT (SELECT p.global_limit FROM {queue} p WHERE p.name = $1),
	(SELECT count(*) FROM {job} j WHERE j.queue = $1 AND j.state = 'running' AND j.attempted_by IS DISTINCT FROM $2
		AND NOT EXISTS (SELECT 1 FROM {share} s WHERE s.queue = $1 AND s.holder = j.attempted_by)),
	array(SELECT s.holder FROM {share} s WHERE s.queue = $1 AND s.holder <> $2 ORDER BY s.holder),
	array(SELECT s.want FROM {share} s WHERE s.queue = $1 AND s.holder <> $2 ORDER BY s.holder),
	array(SELECT s.slots FROM {share} s WHERE s.queue = $1 AND s.holder <> $2 ORDER BY s.holder)`
	// queueShareWriteSQL writes client $2's share of queue $1: want $3, slots
	// $4, leased for $5 µs.
	queueShareWriteSQL = `INSERT INTO {share} AS s (queue, holder, want, slots, expires_at)
VALUES ($1, $2, $3, $4, now() + $5::bigint * interval '1 microsecond')
ON CONFLICT (queue, holder) DO UPDATE SET want = excluded.want, slots = excluded.slots, expires_at = excluded.expires_at`
	// queueShareDropSQL deletes client $2's share of queue $1.
	queueShareDropSQL = `DELETE FROM {share} s WHERE s.queue = $1 AND s.holder = $2`
)

// QueueShare takes the queue's claim lock, deletes the shares whose lease ran
// out, reads the limit, the others' shares and the running jobs of clients
// without one, and writes the client's share (weirdriver.Executor).
func (e *executor) QueueShare(ctx context.Context, p *weirdriver.QueueShareParams) (_ weirdriver.QueueShare, err error) {
	defer func() { err = schemaErr(err) }()
	if err := weirdriver.CheckQueueShare(p); err != nil {
		return weirdriver.QueueShare{}, fmt.Errorf("share of queue %q: %w", p.Queue, err)
	}
	var share weirdriver.QueueShare
	err = pgx.BeginFunc(ctx, e.db, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		b.Queue(e.q.shareLock, e.q.schema, p.Queue)
		b.Queue(e.q.shareExpire, p.Queue)
		b.Queue(e.q.shareRead, p.Queue, p.ClientID)
		res := tx.SendBatch(ctx, b)
		if _, err := res.Exec(); err != nil {
			res.Close()
			return err
		}
		if _, err := res.Exec(); err != nil {
			res.Close()
			return err
		}
		var (
			limit   *int32
			legacy  int64
			holders []string
			wants   []int32
			slots   []int32
		)
		if err := res.QueryRow().Scan(&limit, &legacy, &holders, &wants, &slots); err != nil {
			res.Close()
			return err
		}
		if err := res.Close(); err != nil {
			return err
		}
		if len(wants) != len(holders) || len(slots) != len(holders) {
			return fmt.Errorf("the shares read back as %d holders, %d wants and %d slots", len(holders), len(wants), len(slots))
		}
		share = weirdriver.QueueShare{}
		if limit == nil || p.Want == 0 {
			if limit != nil {
				share.Limit = int(*limit)
			}
			_, err := tx.Exec(ctx, e.q.shareDrop, p.Queue, p.ClientID)
			return err
		}
		others := make([]weirdriver.ShareOf, len(holders))
		for i := range holders {
			others[i] = weirdriver.ShareOf{ClientID: holders[i], Want: int(wants[i]), Slots: int(slots[i])}
		}
		share = weirdriver.DivideShare(int(*limit), int(legacy), others, p)
		_, err := tx.Exec(ctx, e.q.shareWrite, p.Queue, p.ClientID, p.Want, share.Slots, p.Lease.Microseconds())
		return err
	})
	if err != nil {
		return weirdriver.QueueShare{}, fmt.Errorf("share of queue %q: %w", p.Queue, err)
	}
	return share, nil
}
