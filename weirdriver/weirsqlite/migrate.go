package weirsqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/weirq/weir/weirdriver"
)

// The migration's statements. weirmigrate decides when each runs.

// migrationTableSQL reports whether the migration table exists and whether it
// has the compatible column.
const migrationTableSQL = `SELECT
		EXISTS (SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'weir_migration'),
		EXISTS (SELECT 1 FROM pragma_table_info('weir_migration') WHERE name = 'compatible')`

// appliedSQL returns version, name, applied_at and compatible of every applied
// migration in version order.
const appliedSQL = `SELECT version, name, applied_at, compatible FROM weir_migration ORDER BY version`

// appliedBeforeCompatibleSQL is appliedSQL for a migration table without the
// compatible column, which reads 0.
const appliedBeforeCompatibleSQL = `SELECT version, name, applied_at, 0 FROM weir_migration ORDER BY version`

// createMigrationTableSQL creates the migration table when it does not exist.
// compatible records the "-- weir:compatible" mark of each migration's up
// file, which a weir that does not know the migration reads.
const createMigrationTableSQL = `CREATE TABLE IF NOT EXISTS weir_migration (
		version INTEGER PRIMARY KEY,
		name TEXT NOT NULL,
		applied_at INTEGER NOT NULL,
		compatible INTEGER NOT NULL DEFAULT 0) STRICT`

// recordSQL records migration ?1 named ?2 as applied at ?3.
const recordSQL = `INSERT INTO weir_migration (version, name, applied_at) VALUES (?1, ?2, ?3)`

// recordCompatibleSQL is recordSQL with ?4, the migration's compatible mark.
const recordCompatibleSQL = `INSERT INTO weir_migration (version, name, applied_at, compatible) VALUES (?1, ?2, ?3, ?4)`

// unrecordSQL deletes the record of migration ?1.
const unrecordSQL = `DELETE FROM weir_migration WHERE version = ?1`

// tableExistsSQL reports whether the table ?1 exists.
const tableExistsSQL = `SELECT EXISTS (SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?1)`

// countRowsSQL returns how many rows the table %s (quoted) holds.
const countRowsSQL = `SELECT count(*) FROM %s`

// MigrationBegin implements weirdriver.Driver. The migration is a BEGIN
// IMMEDIATE transaction on the write connection: migrators in this process
// queue for the connection, and those of other processes for the file's write
// lock, which the transaction holds from its start.
func (d *Driver) MigrationBegin(ctx context.Context) (weirdriver.MigrationTx, error) {
	if err := d.takeTurn(ctx); err != nil {
		return nil, err
	}
	tx, err := d.writer.BeginTx(ctx, nil)
	if err != nil {
		d.endTurn()
		return nil, err
	}
	return &migrationTx{d: d, tx: tx, now: nowMicros()}, nil
}

// MigrationsApplied implements weirdriver.Driver.
func (d *Driver) MigrationsApplied(ctx context.Context) ([]weirdriver.AppliedMigration, error) {
	return readApplied(ctx, d.reader)
}

// migrationTx implements weirdriver.MigrationTx on the driver's write turn and
// a transaction that holds the file's write lock.
type migrationTx struct {
	d     *Driver
	tx    *sql.Tx
	now   int64 // the records' applied_at: when the transaction took the lock
	ended bool
}

func (m *migrationTx) Applied(ctx context.Context) ([]weirdriver.AppliedMigration, error) {
	return readApplied(ctx, m.tx)
}

// CountRows needs no lock of its own: the transaction holds the file's write
// lock since BEGIN IMMEDIATE, so no row arrives between the count and a drop.
func (m *migrationTx) CountRows(ctx context.Context, table string) (int64, error) {
	var exists bool
	if err := m.tx.QueryRowContext(ctx, tableExistsSQL, table).Scan(&exists); err != nil || !exists {
		return 0, err
	}
	var n int64
	quoted := `"` + strings.ReplaceAll(table, `"`, `""`) + `"`
	if err := m.tx.QueryRowContext(ctx, fmt.Sprintf(countRowsSQL, quoted)).Scan(&n); err != nil {
		return 0, fmt.Errorf("count %s: %w", table, err)
	}
	return n, nil
}

// Prepare creates the migration table; weir's tables live in the main database.
func (m *migrationTx) Prepare(ctx context.Context) error {
	_, err := m.tx.ExecContext(ctx, createMigrationTableSQL)
	return err
}

func (m *migrationTx) Exec(ctx context.Context, body string) error {
	_, err := m.tx.ExecContext(ctx, body)
	return err
}

func (m *migrationTx) HasCompatibleColumn(ctx context.Context) (bool, error) {
	_, hasCompatible, err := migrationTable(ctx, m.tx)
	return hasCompatible, err
}

func (m *migrationTx) Record(ctx context.Context, version int, name string) error {
	_, err := m.tx.ExecContext(ctx, recordSQL, version, name, m.now)
	return err
}

func (m *migrationTx) RecordCompatible(ctx context.Context, version int, name string, compatible bool) error {
	_, err := m.tx.ExecContext(ctx, recordCompatibleSQL, version, name, m.now, compatible)
	return err
}

func (m *migrationTx) Unrecord(ctx context.Context, version int) error {
	_, err := m.tx.ExecContext(ctx, unrecordSQL, version)
	return err
}

// Commit commits and ends the driver's write turn.
func (m *migrationTx) Commit(context.Context) error {
	if m.ended {
		return sql.ErrTxDone
	}
	m.ended = true
	defer m.d.endTurn()
	return m.tx.Commit()
}

func (m *migrationTx) Rollback(context.Context) error {
	if m.ended {
		return nil
	}
	m.ended = true
	defer m.d.endTurn()
	if err := m.tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
		return err
	}
	return nil
}

// migrationTable reports whether the migration table exists and whether it has
// the compatible column, which a table made by a weir before 0.1.0 may lack.
func migrationTable(ctx context.Context, db queryer) (exists, hasCompatible bool, err error) {
	err = db.QueryRowContext(ctx, migrationTableSQL).Scan(&exists, &hasCompatible)
	return exists, hasCompatible, err
}

// readApplied reads the applied migrations through db, the read pool or the
// migration's transaction.
func readApplied(ctx context.Context, db queryer) ([]weirdriver.AppliedMigration, error) {
	exists, hasCompatible, err := migrationTable(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("read applied migrations: %w", err)
	}
	if !exists {
		return nil, nil
	}
	query := appliedBeforeCompatibleSQL
	if hasCompatible {
		query = appliedSQL
	}
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("read applied migrations: %w", err)
	}
	defer rows.Close()
	var applied []weirdriver.AppliedMigration
	for rows.Next() {
		var (
			m  weirdriver.AppliedMigration
			at int64
		)
		if err := rows.Scan(&m.Version, &m.Name, &at, &m.Compatible); err != nil {
			return nil, fmt.Errorf("read applied migrations: %w", err)
		}
		m.AppliedAt = fromMicros(at)
		applied = append(applied, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read applied migrations: %w", err)
	}
	return applied, nil
}
