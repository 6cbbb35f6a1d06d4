package weirsqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

// The periodic jobs' statements (docs/periodic.md). A fire's transaction holds
// the file's write lock, which keeps other fires out as PostgreSQL's row lock
// does.

const periodicColumns = `name, spec, time_zone, next_run_at, last_run_at, last_job_id,
	declared_by, declared_at, paused_at, orphaned_at, created_at`

var (
	// ?1 name, ?2 spec, ?3 time zone, ?4 next run (µs), ?5 leader, ?6 now.
	periodicUpsert = `INSERT INTO weir_periodic (name, spec, time_zone, next_run_at, declared_by, declared_at, created_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)
ON CONFLICT (name) DO UPDATE SET
	next_run_at = CASE WHEN spec <> excluded.spec OR time_zone <> excluded.time_zone
		THEN excluded.next_run_at ELSE next_run_at END,
	spec = excluded.spec,
	time_zone = excluded.time_zone,
	declared_by = excluded.declared_by,
	declared_at = excluded.declared_at,
	orphaned_at = NULL`
	// ?1 the declared names as a JSON array, ?2 now.
	periodicOrphan = `UPDATE weir_periodic SET orphaned_at = ?2
WHERE orphaned_at IS NULL AND name NOT IN (SELECT value FROM json_each(?1))`
	periodicList    = `SELECT ` + periodicColumns + ` FROM weir_periodic ORDER BY name`
	periodicGet     = `SELECT ` + periodicColumns + ` FROM weir_periodic WHERE name = ?1`
	periodicAdvance = `UPDATE weir_periodic SET next_run_at = ?3, last_run_at = ?4, last_job_id = ?5
WHERE name = ?1 AND next_run_at = ?2`
	periodicPause = `UPDATE weir_periodic
SET paused_at = CASE WHEN ?2 THEN coalesce(paused_at, ?3) END
WHERE name = ?1 RETURNING ` + periodicColumns
	periodicTrigger = `UPDATE weir_periodic SET next_run_at = min(next_run_at, ?2)
WHERE name = ?1 RETURNING ` + periodicColumns
	periodicDelete = `DELETE FROM weir_periodic WHERE name = ?1 AND orphaned_at IS NOT NULL
RETURNING ` + periodicColumns
)

type scanner interface{ Scan(dest ...any) error }

func scanPeriodic(r scanner) (*weirtype.PeriodicRow, error) {
	var (
		p                               weirtype.PeriodicRow
		next, declared, created         int64
		last, lastJob, paused, orphaned sql.NullInt64
	)
	if err := r.Scan(&p.Name, &p.Spec, &p.TimeZone, &next, &last, &lastJob,
		&p.DeclaredBy, &declared, &paused, &orphaned, &created); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, weirdriver.ErrNotFound
		}
		return nil, err
	}
	p.NextRunAt, p.DeclaredAt, p.CreatedAt = fromMicros(next), fromMicros(declared), fromMicros(created)
	p.LastRunAt, p.PausedAt, p.OrphanedAt = timePtr(last), timePtr(paused), timePtr(orphaned)
	if lastJob.Valid {
		p.LastJobID = &lastJob.Int64
	}
	return &p, nil
}

func (e *executor) PeriodicRegister(ctx context.Context, declaredBy string, params []*weirdriver.PeriodicRegisterParams) (err error) {
	defer func() { err = schemaErr(err) }()
	names := make([]string, len(params))
	for i, p := range params {
		names[i] = p.Name
	}
	namesJSON, err := json.Marshal(names)
	if err != nil {
		return fmt.Errorf("register periodic jobs: %w", err)
	}
	err = e.write(ctx, func(w *write) error {
		for _, p := range params {
			if _, err := w.q.ExecContext(ctx, periodicUpsert, p.Name, p.Spec, p.TimeZone, p.NextRunAt.UnixMicro(), declaredBy, w.now); err != nil {
				return err
			}
		}
		_, err := w.q.ExecContext(ctx, periodicOrphan, string(namesJSON), w.now)
		return err
	})
	if err != nil {
		return fmt.Errorf("register periodic jobs: %w", err)
	}
	return nil
}

func (e *executor) PeriodicList(ctx context.Context) (_ []*weirtype.PeriodicRow, err error) {
	defer func() { err = schemaErr(err) }()
	rows, err := e.reader().QueryContext(ctx, periodicList)
	if err != nil {
		return nil, fmt.Errorf("list periodic jobs: %w", err)
	}
	defer rows.Close()
	var out []*weirtype.PeriodicRow
	for rows.Next() {
		p, err := scanPeriodic(rows)
		if err != nil {
			return nil, fmt.Errorf("list periodic jobs: %w", err)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list periodic jobs: %w", err)
	}
	return out, nil
}

func (e *executor) PeriodicLock(ctx context.Context, name string) (_ *weirtype.PeriodicRow, _ time.Time, err error) {
	defer func() { err = schemaErr(err) }()
	p, err := scanPeriodic(e.reader().QueryRowContext(ctx, periodicGet, name))
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("lock periodic job %s: %w", name, err)
	}
	return p, fromMicros(nowMicros()), nil
}

func (e *executor) PeriodicAdvance(ctx context.Context, p *weirdriver.PeriodicAdvanceParams) (_ bool, err error) {
	defer func() { err = schemaErr(err) }()
	var applied bool
	err = e.write(ctx, func(w *write) error {
		var lastJob sql.NullInt64
		if p.LastJobID != nil {
			lastJob = sql.NullInt64{Int64: *p.LastJobID, Valid: true}
		}
		res, err := w.q.ExecContext(ctx, periodicAdvance, p.Name, p.From.UnixMicro(), p.NextRunAt.UnixMicro(), p.LastRunAt.UnixMicro(), lastJob)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		applied = n == 1
		return err
	})
	if err != nil {
		return false, fmt.Errorf("advance periodic job %s: %w", p.Name, err)
	}
	return applied, nil
}

// periodicChange runs stmt, which returns the changed schedule, in a write.
func (e *executor) periodicChange(ctx context.Context, what, name, stmt string, args func(now int64) []any) (p *weirtype.PeriodicRow, err error) {
	defer func() { err = schemaErr(err) }()
	err = e.write(ctx, func(w *write) error {
		var err error
		p, err = scanPeriodic(w.q.QueryRowContext(ctx, stmt, args(w.now)...))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s periodic job %s: %w", what, name, err)
	}
	return p, nil
}

func (e *executor) PeriodicPause(ctx context.Context, name string, paused bool) (*weirtype.PeriodicRow, error) {
	return e.periodicChange(ctx, "pause", name, periodicPause, func(now int64) []any { return []any{name, paused, now} })
}

func (e *executor) PeriodicTrigger(ctx context.Context, name string) (*weirtype.PeriodicRow, error) {
	return e.periodicChange(ctx, "trigger", name, periodicTrigger, func(now int64) []any { return []any{name, now} })
}

func (e *executor) PeriodicDelete(ctx context.Context, name string) (*weirtype.PeriodicRow, error) {
	p, err := e.periodicChange(ctx, "delete", name, periodicDelete, func(int64) []any { return []any{name} })
	if errors.Is(err, weirdriver.ErrNotFound) {
		if _, getErr := scanPeriodic(e.reader().QueryRowContext(ctx, periodicGet, name)); getErr == nil {
			return nil, fmt.Errorf("delete periodic job %s: %w", name, weirdriver.ErrPeriodicDeclared)
		}
	}
	return p, err
}
