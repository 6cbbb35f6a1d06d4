package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// serverSettings are the PostgreSQL settings printed at the top of the report.
var serverSettings = []string{
	"server_version", "shared_buffers", "synchronous_commit", "fsync",
	"full_page_writes", "max_wal_size", "autovacuum",
}

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
	if _, err := admin.Exec(ctx, "SELECT pg_stat_force_next_flush()"); err != nil {
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

func countCompleted(ctx context.Context, admin *pgxpool.Pool, table string) (int, error) {
	var n int
	err := admin.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE state = 'completed'").Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count completed jobs in %s: %w", table, err)
	}
	return n, nil
}
