package weirsqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

// The client registry's statements (weir_client), as weirpgx's. A refresh is
// one short write under the file's write lock.

var (
	// ?1 id, ?2 host, ?3 pid, ?4 version, ?5 queues (JSON text), ?6 started
	// at (µs), ?7 now.
	clientRegister = `INSERT INTO weir_client (id, host, pid, version, queues, started_at, heartbeat_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
ON CONFLICT (id) DO UPDATE SET
	host = excluded.host,
	pid = excluded.pid,
	version = excluded.version,
	queues = excluded.queues,
	started_at = excluded.started_at,
	heartbeat_at = excluded.heartbeat_at`
	clientDelete = `DELETE FROM weir_client WHERE id = ?1`
	// The running jobs come from the partial index weir_job_running_idx.
	clientList = `WITH held AS (
	SELECT attempted_by, count(*) AS n FROM weir_job
	WHERE state = 'running'
	GROUP BY attempted_by
)
SELECT c.id, c.host, c.pid, c.version, c.queues, c.started_at, c.heartbeat_at, coalesce(h.n, 0)
FROM weir_client AS c LEFT JOIN held AS h ON h.attempted_by = c.id
ORDER BY c.id`
	// ?1 the cutoff (µs), ?2 limit.
	clientPrune = `DELETE FROM weir_client WHERE id IN (
	SELECT id FROM weir_client WHERE heartbeat_at < ?1 ORDER BY heartbeat_at LIMIT ?2)`
)

func (e *executor) ClientRegister(ctx context.Context, p *weirdriver.ClientRegisterParams) (_ time.Time, err error) {
	defer func() { err = schemaErr(err) }()
	if err := weirdriver.CheckClientRegister(p); err != nil {
		return time.Time{}, fmt.Errorf("register client: %w", err)
	}
	queues := weirdriver.ClientQueuesJSON(p.Queues)
	var started int64
	err = e.write(ctx, func(w *write) error {
		started = w.now
		if !p.StartedAt.IsZero() {
			started = p.StartedAt.UnixMicro()
		}
		_, err := w.q.ExecContext(ctx, clientRegister, p.ID, p.Host, p.PID, p.Version, queues, started, w.now)
		return err
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("register client %s: %w", p.ID, err)
	}
	return fromMicros(started), nil
}

func (e *executor) ClientDelete(ctx context.Context, id string) (err error) {
	defer func() { err = schemaErr(err) }()
	if err := weirdriver.CheckClientID(id); err != nil {
		return fmt.Errorf("delete client: %w", err)
	}
	err = e.write(ctx, func(w *write) error {
		_, err := w.q.ExecContext(ctx, clientDelete, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("delete client %s: %w", id, err)
	}
	return nil
}

func (e *executor) ClientList(ctx context.Context) (_ []*weirtype.ClientRow, err error) {
	defer func() { err = schemaErr(err) }()
	rows, err := e.reader().QueryContext(ctx, clientList)
	if err != nil {
		return nil, fmt.Errorf("list clients: %w", err)
	}
	defer rows.Close()
	var out []*weirtype.ClientRow
	for rows.Next() {
		var (
			c                  weirtype.ClientRow
			queues             string
			started, heartbeat int64
		)
		if err := rows.Scan(&c.ID, &c.Host, &c.PID, &c.Version, &queues, &started, &heartbeat, &c.HeldLeases); err != nil {
			return nil, fmt.Errorf("list clients: %w", err)
		}
		if c.Queues, err = weirdriver.ParseClientQueues(queues); err != nil {
			return nil, fmt.Errorf("list clients: client %s: %w", c.ID, err)
		}
		c.StartedAt, c.HeartbeatAt = fromMicros(started), fromMicros(heartbeat)
		out = append(out, &c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list clients: %w", err)
	}
	return out, nil
}

func (e *executor) ClientPrune(ctx context.Context, p *weirdriver.ClientPruneParams) (_ int, err error) {
	defer func() { err = schemaErr(err) }()
	if err := weirdriver.CheckClientPrune(p); err != nil {
		return 0, fmt.Errorf("prune clients: %w", err)
	}
	var n int64
	err = e.write(ctx, func(w *write) error {
		res, err := w.q.ExecContext(ctx, clientPrune, w.now-p.StaleAfter.Microseconds(), p.Limit)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("prune clients: %w", err)
	}
	return int(n), nil
}
