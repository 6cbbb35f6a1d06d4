package weirpgx

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/weirq/weir/weirdriver"
)

// The migration's statements ({schema} is the driver's schema, {migration} its
// migration table, qualified). weirmigrate decides when each runs.

// migrationLockSQL waits for and takes the migration lock of schema $1: an
// advisory lock keyed by the schema, held until the transaction ends.
const migrationLockSQL = `SELECT pg_advisory_xact_lock(hashtextextended('weir_migrate:' || $1, 0))`

// migrationTableSQL reports whether the migration table, whose qualified name is
// $1, exists and whether it has the compatible column.
const migrationTableSQL = `SELECT to_regclass($1) IS NOT NULL, EXISTS (SELECT 1 FROM pg_attribute
		WHERE attrelid = to_regclass($1) AND attname = 'compatible' AND NOT attisdropped)`

// appliedSQL returns version, name, applied_at and compatible of every applied
// migration in version order.
const appliedSQL = `SELECT version, name, applied_at, compatible FROM {migration} ORDER BY version`

// appliedBeforeCompatibleSQL is appliedSQL for a migration table without the
// compatible column, which reads false.
const appliedBeforeCompatibleSQL = `SELECT version, name, applied_at, false FROM {migration} ORDER BY version`

// createSchemaSQL creates the schema when it does not exist.
const createSchemaSQL = `CREATE SCHEMA IF NOT EXISTS {schema}`

// setSearchPathSQL makes unqualified names resolve in the schema until the
// transaction ends, for the migration bodies and the statements below.
const setSearchPathSQL = `SET LOCAL search_path TO {schema}`

// createMigrationTableSQL creates the migration table when it does not exist.
// compatible records the "-- weir:compatible" mark of each migration's up
// file, which a weir that does not know the migration reads.
const createMigrationTableSQL = `CREATE TABLE IF NOT EXISTS weir_migration (
		version integer PRIMARY KEY,
		name text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now(),
		compatible boolean NOT NULL DEFAULT false)`

// recordSQL records migration $1 named $2 as applied now.
const recordSQL = `INSERT INTO weir_migration (version, name) VALUES ($1, $2)`

// recordCompatibleSQL is recordSQL with $3, the migration's compatible mark.
const recordCompatibleSQL = `INSERT INTO weir_migration (version, name, compatible) VALUES ($1, $2, $3)`

// unrecordSQL deletes the record of migration $1.
const unrecordSQL = `DELETE FROM weir_migration WHERE version = $1`

// tableExistsSQL reports whether the table whose qualified name is $1 exists.
const tableExistsSQL = `SELECT to_regclass($1) IS NOT NULL`

// lockTableSQL locks the table %s (qualified) in the mode DROP TABLE takes, so
// that no row arrives until the transaction ends.
const lockTableSQL = `LOCK TABLE %s IN ACCESS EXCLUSIVE MODE`

// countRowsSQL returns how many rows the table %s (qualified) holds.
const countRowsSQL = `SELECT count(*) FROM %s`

// migrationQueries are the migration's statements, with the schema filled in.
type migrationQueries struct {
	migrationLock           string
	migrationTable          string
	applied                 string
	appliedBeforeCompatible string
	createSchema            string
	setSearchPath           string
	createMigrationTable    string
	record                  string
	recordCompatible        string
	unrecord                string
	tableExists             string
}

// newMigrationQueries fills the migration's statements with fill (filler).
func newMigrationQueries(fill func(string) string) migrationQueries {
	return migrationQueries{
		migrationLock:           fill(migrationLockSQL),
		migrationTable:          fill(migrationTableSQL),
		applied:                 fill(appliedSQL),
		appliedBeforeCompatible: fill(appliedBeforeCompatibleSQL),
		createSchema:            fill(createSchemaSQL),
		setSearchPath:           fill(setSearchPathSQL),
		createMigrationTable:    fill(createMigrationTableSQL),
		record:                  fill(recordSQL),
		recordCompatible:        fill(recordCompatibleSQL),
		unrecord:                fill(unrecordSQL),
		tableExists:             fill(tableExistsSQL),
	}
}

// MigrationBegin implements weirdriver.Driver. The transaction runs in read
// committed whatever the session's default, so that the statements after the
// lock see what a migrator that held it before committed; the lock is an
// advisory lock keyed by the schema.
func (d *Driver) MigrationBegin(ctx context.Context) (_ weirdriver.MigrationTx, err error) {
	defer func() { err = preparedErr(err) }()
	tx, err := d.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, d.q.migrationLock, d.schema); err != nil {
		tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // the lock's error is the one to report
		return nil, fmt.Errorf("take migration lock: %w", err)
	}
	return &migrationTx{tx: tx, q: d.q}, nil
}

// MigrationsApplied implements weirdriver.Driver.
func (d *Driver) MigrationsApplied(ctx context.Context) ([]weirdriver.AppliedMigration, error) {
	applied, err := readApplied(ctx, d.pool, d.q)
	return applied, preparedErr(err)
}

// migrationTx implements weirdriver.MigrationTx on a transaction that holds the
// migration lock.
type migrationTx struct {
	tx pgx.Tx
	q  *queries
}

func (m *migrationTx) Applied(ctx context.Context) ([]weirdriver.AppliedMigration, error) {
	applied, err := readApplied(ctx, m.tx, m.q)
	return applied, preparedErr(err)
}

func (m *migrationTx) CountRows(ctx context.Context, table string) (int64, error) {
	qualified := pgx.Identifier{m.q.schema, table}.Sanitize()
	var exists bool
	if err := m.tx.QueryRow(ctx, m.q.tableExists, qualified).Scan(&exists); err != nil || !exists {
		return 0, err
	}
	if _, err := m.tx.Exec(ctx, fmt.Sprintf(lockTableSQL, qualified)); err != nil {
		return 0, fmt.Errorf("lock %s: %w", qualified, err)
	}
	var n int64
	if err := m.tx.QueryRow(ctx, fmt.Sprintf(countRowsSQL, qualified)).Scan(&n); err != nil {
		return 0, fmt.Errorf("count %s: %w", qualified, err)
	}
	return n, nil
}

func (m *migrationTx) Prepare(ctx context.Context) error {
	if _, err := m.tx.Exec(ctx, m.q.createSchema); err != nil {
		return fmt.Errorf("create schema %s: %w", m.q.schema, err)
	}
	if _, err := m.tx.Exec(ctx, m.q.setSearchPath); err != nil {
		return fmt.Errorf("set search_path: %w", err)
	}
	if _, err := m.tx.Exec(ctx, m.q.createMigrationTable); err != nil {
		return fmt.Errorf("create migration table: %w", err)
	}
	return nil
}

// Exec runs body with the simple protocol, which takes several statements.
func (m *migrationTx) Exec(ctx context.Context, body string) error {
	_, err := m.tx.Exec(ctx, body, pgx.QueryExecModeSimpleProtocol)
	return err
}

func (m *migrationTx) HasCompatibleColumn(ctx context.Context) (bool, error) {
	_, hasCompatible, err := migrationTable(ctx, m.tx, m.q)
	return hasCompatible, err
}

func (m *migrationTx) Record(ctx context.Context, version int, name string) error {
	_, err := m.tx.Exec(ctx, m.q.record, version, name)
	return err
}

func (m *migrationTx) RecordCompatible(ctx context.Context, version int, name string, compatible bool) error {
	_, err := m.tx.Exec(ctx, m.q.recordCompatible, version, name, compatible)
	return err
}

func (m *migrationTx) Unrecord(ctx context.Context, version int) error {
	_, err := m.tx.Exec(ctx, m.q.unrecord, version)
	return err
}

func (m *migrationTx) Commit(ctx context.Context) error { return m.tx.Commit(ctx) }

func (m *migrationTx) Rollback(ctx context.Context) error {
	if err := m.tx.Rollback(ctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		return err
	}
	return nil
}

// migrationTable reports whether the migration table exists and whether it has
// the compatible column, which a table made by a weir before 0.1.0 may lack.
func migrationTable(ctx context.Context, db pgxDB, q *queries) (exists, hasCompatible bool, err error) {
	err = db.QueryRow(ctx, q.migrationTable, q.migration).Scan(&exists, &hasCompatible)
	return exists, hasCompatible, err
}

// readApplied reads the applied migrations through db, the pool or the
// migration's transaction.
func readApplied(ctx context.Context, db pgxDB, q *queries) ([]weirdriver.AppliedMigration, error) {
	exists, hasCompatible, err := migrationTable(ctx, db, q)
	if err != nil {
		return nil, fmt.Errorf("read applied migrations: %w", err)
	}
	if !exists {
		return nil, nil
	}
	query := q.appliedBeforeCompatible
	if hasCompatible {
		query = q.applied
	}
	rows, err := db.Query(ctx, query)
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
