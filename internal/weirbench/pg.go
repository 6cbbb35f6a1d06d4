package weirbench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// serverSettings are the PostgreSQL settings the report prints.
var serverSettings = []string{
	"server_version", "shared_buffers", "synchronous_commit", "fsync",
	"full_page_writes", "max_wal_size", "autovacuum",
}

// schemaMark is the comment by which Run knows a schema as its own.
const schemaMark = "weirbench: scratch schema of the benchmark; its job tables are truncated at every run"

// openPool opens a pool of at most maxConns connections whose backends carry the
// application name app, so that waitGone can tell when they have exited.
func openPool(ctx context.Context, url, app string, maxConns int) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database URL: %w", err)
	}
	cfg.MaxConns = int32(maxConns)
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect: %w", err)
	}
	return pool, nil
}

// waitGone waits until no backend named app is left. A backend flushes its table
// statistics when it exits, so after this pg_stat_user_tables counts all its work.
func waitGone(ctx context.Context, admin *pgxpool.Pool, app string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		var n int
		err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&n)
		if err != nil {
			return fmt.Errorf("wait for %s's connections to close: %w", app, err)
		}
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s's connections to close: %w", app, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// claimSchema makes sure schema is the benchmark's: it creates it with the mark,
// marks an existing one that holds no tables, and refuses one that holds tables
// without the mark.
func claimSchema(ctx context.Context, admin *pgxpool.Pool, schema string) error {
	ident := pgx.Identifier{schema}.Sanitize()
	var (
		comment *string
		tables  int
	)
	err := admin.QueryRow(ctx, `SELECT obj_description(n.oid, 'pg_namespace'),
		(SELECT count(*) FROM pg_class c WHERE c.relnamespace = n.oid)
		FROM pg_namespace n WHERE n.nspname = $1`, schema).Scan(&comment, &tables)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		if _, err := admin.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+ident); err != nil {
			return fmt.Errorf("create schema %s: %w", schema, err)
		}
	case err != nil:
		return fmt.Errorf("look up schema %s: %w", schema, err)
	case comment != nil && *comment == schemaMark:
		return nil
	case tables > 0:
		return fmt.Errorf("schema %q holds tables and was not made by the benchmark, which truncates its job table: "+
			"name a schema of its own (or, if it is a benchmark's own from before the benchmark marked its schemas, drop it)", schema)
	}
	if _, err := admin.Exec(ctx, "COMMENT ON SCHEMA "+ident+" IS '"+schemaMark+"'"); err != nil {
		return fmt.Errorf("mark schema %s: %w", schema, err)
	}
	return nil
}

func readSettings(ctx context.Context, admin *pgxpool.Pool) (map[string]string, error) {
	out := map[string]string{}
	for _, name := range serverSettings {
		var v string
		if err := admin.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v); err != nil {
			return nil, fmt.Errorf("read setting %s: %w", name, err)
		}
		out[name] = v
	}
	return out, nil
}

// reset empties table and vacuums it.
func reset(ctx context.Context, admin *pgxpool.Pool, table string) error {
	for _, sql := range []string{"TRUNCATE " + table, "VACUUM ANALYZE " + table} {
		if _, err := admin.Exec(ctx, sql); err != nil {
			return fmt.Errorf("reset %s: %w", table, err)
		}
	}
	return nil
}

// execSQL runs each statement.
func execSQL(ctx context.Context, admin *pgxpool.Pool, sqls ...string) error {
	for _, sql := range sqls {
		if _, err := admin.Exec(ctx, sql); err != nil {
			return fmt.Errorf("%s: %w", sql, err)
		}
	}
	return nil
}

// walPosition is the current WAL position in bytes. It counts the WAL of the
// whole server: other sessions' writes land in it too.
func walPosition(ctx context.Context, admin *pgxpool.Pool) (int64, error) {
	var pos int64
	err := admin.QueryRow(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint").Scan(&pos)
	if err != nil {
		return 0, fmt.Errorf("read WAL position: %w", err)
	}
	return pos, nil
}

// tableStats are a table's counters from pg_stat_user_tables.
type tableStats struct {
	dead        int64 // dead tuples now
	updates     int64 // row updates ever, HOT or not
	hotUpdates  int64 // of which HOT
	autovacuums int64
}

func readTableStats(ctx context.Context, admin *pgxpool.Pool, table string) (tableStats, error) {
	var s tableStats
	// Our own backend's pending counters; the function is PostgreSQL 15's.
	if _, err := admin.Exec(ctx, "SELECT pg_stat_force_next_flush()"); err != nil && !isUndefinedFunction(err) {
		return s, fmt.Errorf("flush statistics: %w", err)
	}
	err := admin.QueryRow(ctx, `SELECT n_dead_tup, n_tup_upd, n_tup_hot_upd, autovacuum_count
		FROM pg_stat_user_tables WHERE relid = $1::regclass`, table).
		Scan(&s.dead, &s.updates, &s.hotUpdates, &s.autovacuums)
	if err != nil {
		return s, fmt.Errorf("read statistics of %s: %w", table, err)
	}
	return s, nil
}

func isUndefinedFunction(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42883"
}

// tableSizes returns the sizes in bytes of table's heap (with its TOAST, free
// space and visibility maps) and of its indexes.
func tableSizes(ctx context.Context, admin *pgxpool.Pool, table string) (heap, indexes int64, err error) {
	err = admin.QueryRow(ctx, "SELECT pg_table_size($1::regclass), pg_indexes_size($1::regclass)", table).Scan(&heap, &indexes)
	if err != nil {
		return 0, 0, fmt.Errorf("read size of %s: %w", table, err)
	}
	return heap, indexes, nil
}

func countRows(ctx context.Context, admin *pgxpool.Pool, table, where string) (int64, error) {
	var n int64
	err := admin.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE "+where).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count jobs in %s: %w", table, err)
	}
	return n, nil
}

// schemaSizes returns the sizes in bytes of the heaps (with TOAST, free space
// and visibility maps) and of the indexes of every table in schema, and their
// dead tuples, after flushing this session's statistics.
func schemaSizes(ctx context.Context, admin *pgxpool.Pool, schema string) (heap, indexes, dead int64, err error) {
	if _, err := admin.Exec(ctx, "SELECT pg_stat_force_next_flush()"); err != nil && !isUndefinedFunction(err) {
		return 0, 0, 0, fmt.Errorf("flush statistics: %w", err)
	}
	err = admin.QueryRow(ctx, `SELECT coalesce(sum(pg_table_size(c.oid)), 0)::bigint,
		coalesce(sum(pg_indexes_size(c.oid)), 0)::bigint,
		coalesce(sum(pg_stat_get_dead_tuples(c.oid)), 0)::bigint
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind = 'r'`, schema).Scan(&heap, &indexes, &dead)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("read sizes of schema %s: %w", schema, err)
	}
	return heap, indexes, dead, nil
}

// DropScratchSchema drops schema with everything in it if it carries the
// benchmark's mark, so that a run starts from a schema migrated afresh (a
// weir of an older revision refuses a schema a newer one migrated). A schema
// that does not exist is left so; one without the mark is refused if it holds
// tables, and left alone if empty (Run claims it). It connects to url.
func DropScratchSchema(ctx context.Context, url, schema string) error {
	if len(schema) > maxIdentifier {
		return fmt.Errorf("schema %q is longer than PostgreSQL's %d bytes", schema, maxIdentifier)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.Background())
	var (
		comment *string
		tables  int
	)
	err = conn.QueryRow(ctx, `SELECT obj_description(n.oid, 'pg_namespace'),
		(SELECT count(*) FROM pg_class c WHERE c.relnamespace = n.oid)
		FROM pg_namespace n WHERE n.nspname = $1`, schema).Scan(&comment, &tables)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("look up schema %s: %w", schema, err)
	case comment == nil || *comment != schemaMark:
		if tables == 0 {
			return nil
		}
		return fmt.Errorf("schema %q holds tables and was not made by the benchmark: not dropped; name a schema of its own", schema)
	}
	if _, err := conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		return fmt.Errorf("drop schema %s: %w", schema, err)
	}
	return nil
}

// readyModeFigures reports, for a schema with weir's ready list mode (weir on
// PostgreSQL, docs/design/storage.md), whether the list was on at the end of
// the run name and how many times its mode was written since the schema was
// made (by the maintenance leader, or by the reset between runs); nothing for
// other systems.
func readyModeFigures(ctx context.Context, admin *pgxpool.Pool, schema, name string) ([]result, error) {
	var v *int64
	seq := pgx.Identifier{schema, "weir_ready_mode"}.Sanitize()
	if err := admin.QueryRow(ctx, `SELECT CASE WHEN to_regclass($1) IS NOT NULL
		THEN pg_sequence_last_value(to_regclass($1)) END`, seq).Scan(&v); err != nil {
		return nil, fmt.Errorf("read the ready list's mode: %w", err)
	}
	if v == nil {
		return nil, nil
	}
	on := 0.0
	if *v%4 == 2 {
		on = 1
	}
	return []result{
		{fig(name+" ready list on at end", "", "1 = on", "", ""), on},
		{fig(name+" ready list mode changes so far", "", "count", "", ""), float64(*v / 4)},
	}, nil
}
