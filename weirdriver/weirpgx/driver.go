// Package weirpgx is weir's PostgreSQL driver, built on pgx v5 and its pool.
package weirpgx

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirq/weir/weirdriver"
)

// DefaultSchema is the schema weir's tables live in when Config.Schema is empty.
const DefaultSchema = "public"

// Config configures a Driver. The zero value is ready to use.
type Config struct {
	// Schema holds weir's tables. Default: "public". It must be a lower-case SQL
	// identifier: a letter or underscore, then letters, digits or underscores, at
	// most 50 characters (so that its notification channel names fit in 63).
	Schema string
	// Logger receives the driver's warnings (an insert notification that could
	// not be sent). Default: slog.Default().
	Logger *slog.Logger
}

// Driver keeps jobs in PostgreSQL.
type Driver struct {
	pool     *pgxpool.Pool
	schema   string
	q        *queries
	notifier *notifier
}

// schemaPattern keeps names short enough that the notification channels
// "<schema>.weir_insert" and "<schema>.weir_control" fit PostgreSQL's 63 bytes.
var schemaPattern = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,49}$`)

// New returns a driver on pool. The caller keeps ownership of the pool.
func New(pool *pgxpool.Pool, config *Config) (*Driver, error) {
	if pool == nil {
		return nil, errors.New("weirpgx: pool is nil")
	}
	schema, logger := DefaultSchema, slog.Default()
	if config != nil && config.Schema != "" {
		schema = config.Schema
	}
	if config != nil && config.Logger != nil {
		logger = config.Logger
	}
	if err := ValidateSchema(schema); err != nil {
		return nil, err
	}
	q := newQueries(schema)
	return &Driver{pool: pool, schema: schema, q: q, notifier: newNotifier(pool, q, logger)}, nil
}

// ValidateSchema reports whether name can be weir's schema: a lower-case SQL
// identifier that is not one of PostgreSQL's own schemas (information_schema,
// and pg_catalog, pg_toast, pg_temp_N and every other name PostgreSQL
// reserves with the pg_ prefix).
func ValidateSchema(name string) error {
	if !schemaPattern.MatchString(name) {
		return fmt.Errorf("weirpgx: schema %q is not a lower-case SQL identifier (a letter or _, then letters, digits or _, at most 50 characters)", name)
	}
	if name == "information_schema" || strings.HasPrefix(name, "pg_") {
		return fmt.Errorf("weirpgx: schema %q is one of PostgreSQL's system schemas (information_schema, or a name starting with pg_)", name)
	}
	return nil
}

// Name implements weirdriver.Driver.
func (d *Driver) Name() string { return "postgres" }

// Schema implements weirdriver.Driver.
func (d *Driver) Schema() string { return d.schema }

// Pool is the pool the driver runs on.
func (d *Driver) Pool() *pgxpool.Pool { return d.pool }

// Executor implements weirdriver.Driver.
func (d *Driver) Executor() weirdriver.Executor {
	return &executor{db: d.pool, q: d.q, notifier: d.notifier}
}

// UnwrapTx implements weirdriver.Driver. It takes a pgx.Tx, or a *sql.Tx opened on
// PostgreSQL (through pgx's stdlib adapter or any other PostgreSQL driver). Inside a
// *sql.Tx the jobs are inserted with the one-statement path (no COPY).
func (d *Driver) UnwrapTx(tx any) (weirdriver.Inserter, error) {
	switch tx := tx.(type) {
	case pgx.Tx:
		if tx == nil {
			return nil, errors.New("weirpgx: transaction is nil")
		}
		return &executor{db: tx, q: d.q}, nil
	case *sql.Tx:
		if tx == nil {
			return nil, errors.New("weirpgx: transaction is nil")
		}
		return &sqlExecutor{tx: tx, q: d.q}, nil
	default:
		return nil, fmt.Errorf("weirpgx: transaction of type %T is not supported (use pgx.Tx or *sql.Tx)", tx)
	}
}

//go:embed migrations/*.sql
var migrationFS embed.FS

var migrations = mustLoadMigrations(migrationFS)

// Migrations implements weirdriver.Driver.
func (d *Driver) Migrations() []weirdriver.Migration {
	return append([]weirdriver.Migration(nil), migrations...)
}

// mustLoadMigrations reads the embedded migrations; a bad file is a build mistake.
func mustLoadMigrations(fsys fs.FS) []weirdriver.Migration {
	ms, err := weirdriver.LoadMigrations(fsys, "migrations")
	if err != nil {
		panic("weirpgx: " + err.Error())
	}
	return ms
}

// Migrate implements weirdriver.Driver. All migrations of one call run in one
// transaction that holds an advisory lock keyed by the schema.
func (d *Driver) Migrate(ctx context.Context, direction weirdriver.Direction, plan func(state *weirdriver.MigrationState) ([]weirdriver.Migration, error)) ([]weirdriver.Migration, error) {
	// Read committed whatever the session's default: the statements after the lock
	// must see what a migrator that held it before us committed.
	tx, err := d.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return nil, fmt.Errorf("begin migration: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit

	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended('weir_migrate:' || $1, 0))", d.schema); err != nil {
		return nil, fmt.Errorf("take migration lock: %w", err)
	}
	applied, err := d.readApplied(ctx, tx)
	if err != nil {
		return nil, err
	}
	todo, err := plan(&weirdriver.MigrationState{
		Applied:   applied,
		CountJobs: func() (int64, error) { return d.countJobs(ctx, tx) },
	})
	if err != nil {
		return nil, err
	}
	if len(todo) == 0 {
		return nil, nil // nothing to do, and nothing created: the deferred rollback ends it
	}
	ident := pgx.Identifier{d.schema}.Sanitize()
	if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+ident); err != nil {
		return nil, fmt.Errorf("create schema %s: %w", d.schema, err)
	}
	if _, err := tx.Exec(ctx, "SET LOCAL search_path TO "+ident); err != nil {
		return nil, fmt.Errorf("set search_path: %w", err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS weir_migration (
		version integer PRIMARY KEY,
		name text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return nil, fmt.Errorf("create migration table: %w", err)
	}
	for _, m := range todo {
		body := m.Up
		if direction == weirdriver.DirectionDown {
			body = m.Down
		}
		if _, err := tx.Exec(ctx, body, pgx.QueryExecModeSimpleProtocol); err != nil {
			return nil, fmt.Errorf("migrate %s %03d_%s: %w", direction, m.Version, m.Name, err)
		}
		if err := d.record(ctx, tx, direction, m); err != nil {
			return nil, fmt.Errorf("record migration %03d_%s: %w", m.Version, m.Name, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("commit migration: %w", err)
	}
	return todo, nil
}

// record records that m was applied, or deletes its record when it was reverted.
// The compatible column exists once the migration that adds it ran (it may be m
// itself, or not yet applied), so the insert names it only then.
func (d *Driver) record(ctx context.Context, tx pgx.Tx, direction weirdriver.Direction, m weirdriver.Migration) error {
	if direction == weirdriver.DirectionDown {
		_, err := tx.Exec(ctx, "DELETE FROM weir_migration WHERE version = $1", m.Version)
		return err
	}
	_, hasCompatible, err := d.migrationTable(ctx, tx)
	if err != nil {
		return err
	}
	if hasCompatible {
		_, err = tx.Exec(ctx, "INSERT INTO weir_migration (version, name, compatible) VALUES ($1, $2, $3)",
			m.Version, m.Name, m.Compatible)
	} else {
		_, err = tx.Exec(ctx, "INSERT INTO weir_migration (version, name) VALUES ($1, $2)", m.Version, m.Name)
	}
	return err
}

// migrationTable reports whether weir_migration exists and whether it has the
// compatible column, which weir versions before the migration that added it
// lack.
func (d *Driver) migrationTable(ctx context.Context, db pgxDB) (exists, hasCompatible bool, err error) {
	err = db.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL, EXISTS (SELECT 1 FROM pg_attribute
		WHERE attrelid = to_regclass($1) AND attname = 'compatible' AND NOT attisdropped)`,
		pgx.Identifier{d.schema, "weir_migration"}.Sanitize()).Scan(&exists, &hasCompatible)
	if err != nil {
		return false, false, fmt.Errorf("read applied migrations: %w", err)
	}
	return exists, hasCompatible, nil
}

// readApplied reads the applied migrations through db, a pool or the migration's
// transaction.
func (d *Driver) readApplied(ctx context.Context, db pgxDB) ([]weirdriver.AppliedMigration, error) {
	exists, hasCompatible, err := d.migrationTable(ctx, db)
	if err != nil || !exists {
		return nil, err
	}
	compatible := "false"
	if hasCompatible {
		compatible = "compatible"
	}
	rows, err := db.Query(ctx, "SELECT version, name, applied_at, "+compatible+" FROM "+
		pgx.Identifier{d.schema, "weir_migration"}.Sanitize()+" ORDER BY version")
	if err != nil {
		return nil, fmt.Errorf("read applied migrations: %w", err)
	}
	applied, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (weirdriver.AppliedMigration, error) {
		var m weirdriver.AppliedMigration
		err := row.Scan(&m.Version, &m.Name, &m.AppliedAt, &m.Compatible)
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("read applied migrations: %w", err)
	}
	return applied, nil
}

// NotificationsFailed counts the insert notifications the driver could not send
// (each is also logged). Workers still find those jobs by polling.
func (d *Driver) NotificationsFailed() int64 { return d.notifier.failed.Load() }

// countJobs locks weir_job in the mode DROP TABLE takes, so that no job arrives
// between the count and the drop, and counts its rows.
func (d *Driver) countJobs(ctx context.Context, tx pgx.Tx) (int64, error) {
	table := pgx.Identifier{d.schema, "weir_job"}.Sanitize()
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists); err != nil {
		return 0, fmt.Errorf("count jobs: %w", err)
	}
	if !exists {
		return 0, nil
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE "+table+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		return 0, fmt.Errorf("lock %s: %w", table, err)
	}
	var n int64
	if err := tx.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		return 0, fmt.Errorf("count jobs: %w", err)
	}
	return n, nil
}

// MigrationsApplied implements weirdriver.Driver.
func (d *Driver) MigrationsApplied(ctx context.Context) ([]weirdriver.AppliedMigration, error) {
	return d.readApplied(ctx, d.pool)
}
