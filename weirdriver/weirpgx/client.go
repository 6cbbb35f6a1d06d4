package weirpgx

import (
	"context"
	"fmt"
	"time"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

// The client registry's statements (weir_client): informational rows that
// each running client writes for itself.

// clientRegisterSQL writes client $1's row: host $2, pid $3, version $4,
// queues $5 (JSON text), started_at $6 or now(), heartbeat_at now().
const clientRegisterSQL = `
INSERT INTO {client} AS c (id, host, pid, version, queues, started_at, heartbeat_at)
VALUES ($1, $2, $3, $4, $5::jsonb, coalesce($6::timestamptz, now()), now())
ON CONFLICT (id) DO UPDATE SET
	host = EXCLUDED.host,
	pid = EXCLUDED.pid,
	version = EXCLUDED.version,
	queues = EXCLUDED.queues,
	started_at = EXCLUDED.started_at,
	heartbeat_at = EXCLUDED.heartbeat_at
RETURNING started_at`

// clientListSQL lists the clients with the running jobs each holds: one count
// of the running jobs, grouped by attempted_by, which reads the partial index
// weir_job_running_idx (state = 'running') and those rows, no others.
const clientListSQL = `
WITH held AS (
	SELECT attempted_by, count(*) AS n FROM {job}
	WHERE state = 'running'
	GROUP BY attempted_by
)
SELECT c.id, c.host, c.pid, c.version, c.queues::text, c.started_at, c.heartbeat_at, coalesce(h.n, 0)
FROM {client} AS c LEFT JOIN held AS h ON h.attempted_by = c.id
ORDER BY c.id`

// clientPruneSQL deletes up to $2 rows whose heartbeat is older than $1 µs,
// oldest first; a row that a refresh holds locked is alive, and skipped.
const clientPruneSQL = `
DELETE FROM {client} WHERE id = ANY(ARRAY(
	SELECT id FROM {client}
	WHERE heartbeat_at < now() - $1::bigint * interval '1 microsecond'
	ORDER BY heartbeat_at
	LIMIT $2
	FOR UPDATE SKIP LOCKED))`

type clientQueries struct {
	clientRegister, clientDelete, clientList, clientPrune string
}

func newClientQueries(fill func(string) string) clientQueries {
	return clientQueries{
		clientRegister: fill(clientRegisterSQL),
		clientDelete:   fill(`DELETE FROM {client} WHERE id = $1`),
		clientList:     fill(clientListSQL),
		clientPrune:    fill(clientPruneSQL),
	}
}

func (e *executor) ClientRegister(ctx context.Context, p *weirdriver.ClientRegisterParams) (_ time.Time, err error) {
	defer func() { err = schemaErr(err) }()
	if err := weirdriver.CheckClientRegister(p); err != nil {
		return time.Time{}, fmt.Errorf("register client: %w", err)
	}
	queues := weirdriver.ClientQueuesJSON(p.Queues)
	var startedAt *time.Time
	if !p.StartedAt.IsZero() {
		startedAt = &p.StartedAt
	}
	var started time.Time
	err = e.db.QueryRow(ctx, e.q.clientRegister, p.ID, p.Host, p.PID, p.Version, queues, startedAt).Scan(&started)
	if err != nil {
		return time.Time{}, fmt.Errorf("register client %s: %w", p.ID, err)
	}
	return started, nil
}

func (e *executor) ClientDelete(ctx context.Context, id string) (err error) {
	defer func() { err = schemaErr(err) }()
	if err := weirdriver.CheckClientID(id); err != nil {
		return fmt.Errorf("delete client: %w", err)
	}
	if _, err := e.db.Exec(ctx, e.q.clientDelete, id); err != nil {
		return fmt.Errorf("delete client %s: %w", id, err)
	}
	return nil
}

func (e *executor) ClientList(ctx context.Context) (_ []*weirtype.ClientRow, err error) {
	defer func() { err = schemaErr(err) }()
	r, err := e.db.Query(ctx, e.q.clientList)
	if err != nil {
		return nil, fmt.Errorf("list clients: %w", err)
	}
	defer r.Close()
	var out []*weirtype.ClientRow
	for r.Next() {
		var (
			c      weirtype.ClientRow
			queues string
		)
		if err := r.Scan(&c.ID, &c.Host, &c.PID, &c.Version, &queues, &c.StartedAt, &c.HeartbeatAt, &c.HeldLeases); err != nil {
			return nil, fmt.Errorf("list clients: %w", err)
		}
		if c.Queues, err = weirdriver.ParseClientQueues(queues); err != nil {
			return nil, fmt.Errorf("list clients: client %s: %w", c.ID, err)
		}
		out = append(out, &c)
	}
	if err := r.Err(); err != nil {
		return nil, fmt.Errorf("list clients: %w", err)
	}
	return out, nil
}

func (e *executor) ClientPrune(ctx context.Context, p *weirdriver.ClientPruneParams) (_ int, err error) {
	defer func() { err = schemaErr(err) }()
	if err := weirdriver.CheckClientPrune(p); err != nil {
		return 0, fmt.Errorf("prune clients: %w", err)
	}
	tag, err := e.db.Exec(ctx, e.q.clientPrune, p.StaleAfter.Microseconds(), p.Limit)
	if err != nil {
		return 0, fmt.Errorf("prune clients: %w", err)
	}
	return int(tag.RowsAffected()), nil
}
