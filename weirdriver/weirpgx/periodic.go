package weirpgx

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

// The periodic jobs' statements (docs/periodic.md).

const periodicColumns = `name, spec, time_zone, next_run_at, last_run_at, last_job_id,
	declared_by, declared_at, paused_at, orphaned_at, created_at`

// periodicRegisterSQL upserts the leader's ($1) schedules, given as parallel
// arrays $2..$5 (name, spec, time zone, next run), and marks every other
// schedule orphaned. A schedule keeps its next run unless its spec or time
// zone changed.
const periodicRegisterSQL = `
WITH input AS (
	SELECT * FROM unnest($2::text[], $3::text[], $4::text[], $5::timestamptz[])
		AS i(name, spec, time_zone, next_run_at)
),
upserted AS (
	INSERT INTO {periodic} AS p (name, spec, time_zone, next_run_at, declared_by, declared_at)
	SELECT name, spec, time_zone, next_run_at, $1, now() FROM input
	ON CONFLICT (name) DO UPDATE SET
		spec = EXCLUDED.spec,
		time_zone = EXCLUDED.time_zone,
		next_run_at = CASE WHEN p.spec <> EXCLUDED.spec OR p.time_zone <> EXCLUDED.time_zone
			THEN EXCLUDED.next_run_at ELSE p.next_run_at END,
		declared_by = EXCLUDED.declared_by,
		declared_at = now(),
		orphaned_at = NULL
	RETURNING name
)
UPDATE {periodic} SET orphaned_at = now()
WHERE orphaned_at IS NULL AND name <> ALL($2::text[])`

type periodicQueries struct {
	periodicRegister, periodicList, periodicLock, periodicAdvance  string
	periodicPause, periodicTrigger, periodicDelete, periodicExists string
}

func newPeriodicQueries(fill func(string) string) periodicQueries {
	return periodicQueries{
		periodicRegister: fill(periodicRegisterSQL),
		periodicList:     fill(`SELECT ` + periodicColumns + ` FROM {periodic} ORDER BY name`),
		periodicLock:     fill(`SELECT ` + periodicColumns + `, now() FROM {periodic} WHERE name = $1 FOR UPDATE`),
		periodicAdvance: fill(`UPDATE {periodic} SET next_run_at = $3, last_run_at = $4, last_job_id = $5
WHERE name = $1 AND next_run_at = $2`),
		periodicPause: fill(`UPDATE {periodic}
SET paused_at = CASE WHEN $2 THEN coalesce(paused_at, now()) END
WHERE name = $1 RETURNING ` + periodicColumns),
		periodicTrigger: fill(`UPDATE {periodic} SET next_run_at = least(next_run_at, now())
WHERE name = $1 RETURNING ` + periodicColumns),
		periodicDelete: fill(`DELETE FROM {periodic} WHERE name = $1 AND orphaned_at IS NOT NULL
RETURNING ` + periodicColumns),
		periodicExists: fill(`SELECT true FROM {periodic} WHERE name = $1`),
	}
}

func scanPeriodic(r pgx.Row, extra ...any) (*weirtype.PeriodicRow, error) {
	var p weirtype.PeriodicRow
	dest := append([]any{&p.Name, &p.Spec, &p.TimeZone, &p.NextRunAt, &p.LastRunAt, &p.LastJobID,
		&p.DeclaredBy, &p.DeclaredAt, &p.PausedAt, &p.OrphanedAt, &p.CreatedAt}, extra...)
	if err := r.Scan(dest...); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, weirdriver.ErrNotFound
		}
		return nil, err
	}
	return &p, nil
}

func (e *executor) PeriodicRegister(ctx context.Context, declaredBy string, params []*weirdriver.PeriodicRegisterParams) (err error) {
	defer func() { err = schemaErr(err) }()
	n := len(params)
	names, specs, zones, next := make([]string, n), make([]string, n), make([]string, n), make([]time.Time, n)
	for i, p := range params {
		names[i], specs[i], zones[i], next[i] = p.Name, p.Spec, p.TimeZone, p.NextRunAt
	}
	if _, err := e.db.Exec(ctx, e.q.periodicRegister, declaredBy, names, specs, zones, next); err != nil {
		return fmt.Errorf("register periodic jobs: %w", err)
	}
	return nil
}

func (e *executor) PeriodicList(ctx context.Context) (_ []*weirtype.PeriodicRow, err error) {
	defer func() { err = schemaErr(err) }()
	r, err := e.db.Query(ctx, e.q.periodicList)
	if err != nil {
		return nil, fmt.Errorf("list periodic jobs: %w", err)
	}
	defer r.Close()
	var out []*weirtype.PeriodicRow
	for r.Next() {
		p, err := scanPeriodic(r)
		if err != nil {
			return nil, fmt.Errorf("list periodic jobs: %w", err)
		}
		out = append(out, p)
	}
	if err := r.Err(); err != nil {
		return nil, fmt.Errorf("list periodic jobs: %w", err)
	}
	return out, nil
}

func (e *executor) PeriodicLock(ctx context.Context, name string) (_ *weirtype.PeriodicRow, _ time.Time, err error) {
	defer func() { err = schemaErr(err) }()
	var now time.Time
	p, err := scanPeriodic(e.db.QueryRow(ctx, e.q.periodicLock, name), &now)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("lock periodic job %s: %w", name, err)
	}
	return p, now, nil
}

func (e *executor) PeriodicAdvance(ctx context.Context, p *weirdriver.PeriodicAdvanceParams) (_ bool, err error) {
	defer func() { err = schemaErr(err) }()
	tag, err := e.db.Exec(ctx, e.q.periodicAdvance, p.Name, p.From, p.NextRunAt, p.LastRunAt, p.LastJobID)
	if err != nil {
		return false, fmt.Errorf("advance periodic job %s: %w", p.Name, err)
	}
	return tag.RowsAffected() == 1, nil
}

func (e *executor) PeriodicPause(ctx context.Context, name string, paused bool) (_ *weirtype.PeriodicRow, err error) {
	defer func() { err = schemaErr(err) }()
	p, err := scanPeriodic(e.db.QueryRow(ctx, e.q.periodicPause, name, paused))
	if err != nil {
		return nil, fmt.Errorf("pause periodic job %s: %w", name, err)
	}
	return p, nil
}

func (e *executor) PeriodicTrigger(ctx context.Context, name string) (_ *weirtype.PeriodicRow, err error) {
	defer func() { err = schemaErr(err) }()
	p, err := scanPeriodic(e.db.QueryRow(ctx, e.q.periodicTrigger, name))
	if err != nil {
		return nil, fmt.Errorf("trigger periodic job %s: %w", name, err)
	}
	return p, nil
}

func (e *executor) PeriodicDelete(ctx context.Context, name string) (_ *weirtype.PeriodicRow, err error) {
	defer func() { err = schemaErr(err) }()
	p, err := scanPeriodic(e.db.QueryRow(ctx, e.q.periodicDelete, name))
	if errors.Is(err, weirdriver.ErrNotFound) {
		var exists bool
		switch qerr := e.db.QueryRow(ctx, e.q.periodicExists, name).Scan(&exists); {
		case qerr == nil:
			err = weirdriver.ErrPeriodicDeclared
		case !errors.Is(qerr, pgx.ErrNoRows):
			err = qerr
		}
	}
	if err != nil {
		return nil, fmt.Errorf("delete periodic job %s: %w", name, err)
	}
	return p, nil
}
