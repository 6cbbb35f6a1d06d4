package soak

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// tableStats is the size of the job table at the end of a run, and what its
// updates left behind.
type tableStats struct {
	HeapBytes, IndexBytes int64
	Live, Dead            int64
	Autovacuums           int64
}

// String is the report's line: sizes in MiB, then the tuples.
func (t *tableStats) String() string {
	const mib = 1 << 20
	return fmt.Sprintf("%.1f MiB heap, %.1f MiB indexes; %d live, %d dead tuples; %d autovacuums",
		float64(t.HeapBytes)/mib, float64(t.IndexBytes)/mib, t.Live, t.Dead, t.Autovacuums)
}

// readTableStats reads the job table's sizes and tuple counts. The counts come
// from the statistics views, which lag the table by up to a stats interval: they
// are a measure, not a check.
func (s *soakRun) readTableStats(ctx context.Context) (*tableStats, error) {
	job := pgx.Identifier{s.cfg.Schema, "weir_job"}.Sanitize()
	var t tableStats
	err := s.pool.QueryRow(ctx, `SELECT pg_relation_size($1::regclass), pg_indexes_size($1::regclass),
	coalesce(n_live_tup, 0), coalesce(n_dead_tup, 0), coalesce(autovacuum_count, 0)
FROM pg_stat_user_tables WHERE relid = $1::regclass`, job).
		Scan(&t.HeapBytes, &t.IndexBytes, &t.Live, &t.Dead, &t.Autovacuums)
	if err != nil {
		return nil, fmt.Errorf("read the size of %s: %w", job, err)
	}
	return &t, nil
}
