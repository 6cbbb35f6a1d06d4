package weirpgx

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/weirq/weir/weirdriver"
)

// The statements of KeyShare, in one transaction after queueShareLockSQL.
const (
	// keyShareExpireSQL deletes queue $1's buckets and holders whose lease
	// ran out.
	keyShareExpireSQL = `WITH b AS (DELETE FROM {key_share} s WHERE s.queue = $1 AND s.expires_at < now())
DELETE FROM {key_holder} h WHERE h.queue = $1 AND h.expires_at < now()`
	// keyShareSettingsSQL reads queue $1's limit per key, NULL when its keys
	// cannot be held (no limit per key, or a rate limit), and its key field.
	keyShareSettingsSQL = `SELECT CASE WHEN p.key_rate IS NULL AND p.rate_limit IS NULL THEN p.key_limit END,
	coalesce(p.key_source || '.' || array_to_string(p.key_path, '.'), '')
FROM {queue} p WHERE p.name = $1`
	// keyShareDropAllSQL deletes every bucket and holder of queue $1.
	keyShareDropAllSQL = `WITH b AS (DELETE FROM {key_share} s WHERE s.queue = $1)
DELETE FROM {key_holder} h WHERE h.queue = $1`
	// keyShareGiveUpSQL deletes client $2's buckets of queue $1 and its row
	// as a holder.
	keyShareGiveUpSQL = `WITH b AS (DELETE FROM {key_share} s WHERE s.queue = $1 AND s.holder = $2)
DELETE FROM {key_holder} h WHERE h.queue = $1 AND h.holder = $2`
	// keyShareRenewSQL deletes the buckets $3 that client $2 releases of
	// queue $1, leases its row as a holder wanting $5 (0: not said) and its
	// other buckets for $4 µs, and returns those buckets and the other
	// holders with what each wants (0: not said).
	keyShareRenewSQL = `WITH released AS (
	DELETE FROM {key_share} s WHERE s.queue = $1 AND s.holder = $2 AND s.bucket = ANY($3::integer[])
), holder AS (
	INSERT INTO {key_holder} AS h (queue, holder, expires_at, want)
	VALUES ($1, $2, now() + $4::bigint * interval '1 microsecond', nullif($5::integer, 0))
	ON CONFLICT (queue, holder) DO UPDATE SET expires_at = excluded.expires_at, want = excluded.want
), renewed AS (
	UPDATE {key_share} s SET expires_at = now() + $4::bigint * interval '1 microsecond'
	WHERE s.queue = $1 AND s.holder = $2 AND NOT s.bucket = ANY($3::integer[])
	RETURNING s.bucket
), others AS (
	SELECT h.holder, coalesce(h.want, 0) AS want FROM {key_holder} h WHERE h.queue = $1 AND h.holder <> $2
)
SELECT array(SELECT renewed.bucket FROM renewed ORDER BY 1),
	array(SELECT others.holder FROM others ORDER BY others.holder), array(SELECT others.want FROM others ORDER BY others.holder)`
	// keyShareTakeSQL gives client $2 up to $3 of queue $1's free buckets,
	// leased for $4 µs, the lowest first: those no client holds and of whose
	// keys no job runs, whoever claimed it. It returns them.
	keyShareTakeSQL = `WITH busy AS (
	SELECT DISTINCT {key_bucket}({job_key}(p.key_source, p.key_path, j.args, j.metadata)) AS b
	FROM {job} j, {queue} p WHERE p.name = $1 AND j.queue = $1 AND j.state = 'running'
)
INSERT INTO {key_share} (queue, bucket, holder, expires_at)
SELECT $1, g.b, $2, now() + $4::bigint * interval '1 microsecond' FROM generate_series(0, 63) AS g(b)
WHERE NOT EXISTS (SELECT 1 FROM {key_share} s WHERE s.queue = $1 AND s.bucket = g.b)
	AND NOT EXISTS (SELECT 1 FROM busy WHERE busy.b = g.b)
ORDER BY g.b LIMIT $3
RETURNING bucket`
)

// keyShareQueries are KeyShare's statements with the schema filled in.
type keyShareQueries struct {
	expire, settings, dropAll, giveUp, renew, take string
}

func newKeyShareQueries(fill func(string) string) keyShareQueries {
	return keyShareQueries{
		expire: fill(keyShareExpireSQL), settings: fill(keyShareSettingsSQL), dropAll: fill(keyShareDropAllSQL),
		giveUp: fill(keyShareGiveUpSQL), renew: fill(keyShareRenewSQL), take: fill(keyShareTakeSQL),
	}
}

// KeyShare takes the queue's claim lock, deletes the buckets and holders
// whose lease ran out, and renews, takes or gives up the client's buckets
// (weirdriver.Executor).
func (e *executor) KeyShare(ctx context.Context, p *weirdriver.KeyShareParams) (_ weirdriver.KeyShare, err error) {
	defer func() { err = schemaErr(err) }()
	if err := weirdriver.CheckKeyShare(p); err != nil {
		return weirdriver.KeyShare{}, fmt.Errorf("keys of queue %q: %w", p.Queue, err)
	}
	q := &e.q.keyShare
	lease := p.Lease.Microseconds()
	var share weirdriver.KeyShare
	err = pgx.BeginFunc(ctx, e.db, func(tx pgx.Tx) error {
		share = weirdriver.KeyShare{}
		b := &pgx.Batch{}
		b.Queue(e.q.shareLock, e.q.schema, p.Queue)
		b.Queue(q.expire, p.Queue)
		b.Queue(q.settings, p.Queue)
		res := tx.SendBatch(ctx, b)
		for range 2 {
			if _, err := res.Exec(); err != nil {
				res.Close()
				return err
			}
		}
		var limit *int32
		if err := res.QueryRow().Scan(&limit, &share.Key); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			res.Close()
			return err
		}
		if err := res.Close(); err != nil {
			return err
		}
		switch {
		case limit == nil:
			// Its keys cannot be held: nobody holds them.
			share.Key = ""
			_, err := tx.Exec(ctx, q.dropAll, p.Queue)
			return err
		case p.GiveUp:
			share.Limit = int(*limit)
			_, err := tx.Exec(ctx, q.giveUp, p.Queue, p.ClientID)
			return err
		}
		share.Limit = int(*limit)
		release := make([]int32, len(p.Release))
		for i, b := range p.Release {
			release[i] = int32(b)
		}
		var (
			held       []int32
			others     []string
			otherWants []int32
		)
		if err := tx.QueryRow(ctx, q.renew, p.Queue, p.ClientID, release, lease, p.Want).Scan(&held, &others, &otherWants); err != nil {
			return err
		}
		if len(otherWants) != len(others) {
			return fmt.Errorf("%d holders came back with %d wants", len(others), len(otherWants))
		}
		wants := make([]weirdriver.ShareOf, 0, len(others)+1)
		for i, o := range others {
			wants = append(wants, weirdriver.ShareOf{ClientID: o, Want: int(otherWants[i])})
		}
		wants = append(wants, weirdriver.ShareOf{ClientID: p.ClientID, Want: p.Want})
		share.Target = weirdriver.KeyPart(wants, p.ClientID)
		if more := share.Target - len(held); more > 0 {
			rows, err := tx.Query(ctx, q.take, p.Queue, p.ClientID, more, lease)
			if err != nil {
				return err
			}
			taken, err := pgx.CollectRows(rows, pgx.RowTo[int32])
			if err != nil {
				return err
			}
			held = append(held, taken...)
		}
		for _, b := range held {
			share.Held = append(share.Held, int(b))
		}
		slices.Sort(share.Held)
		return nil
	})
	if err != nil {
		return weirdriver.KeyShare{}, fmt.Errorf("keys of queue %q: %w", p.Queue, err)
	}
	return share, nil
}
