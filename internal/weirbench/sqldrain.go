package weirbench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// W1's raw SQL ceiling: after each system's drain, as many jobs drained from
// a job table of the benchmark's own by a loop of two statements and no queue
// library, on the same server in the same round. It says how close a system's
// drain comes to what a claim-and-complete loop over plain SQL gets here.

// DefaultCeilingSchema is the schema of the ceiling's table when
// Options.CeilingSchema is empty.
const DefaultCeilingSchema = "weirbench_sql"

// sqlDrainConns is the number of connections (one goroutine each) that claim
// and complete the ceiling's jobs: the count that gave the most on the
// project's 2-core machine, whose two cores the server's backends and this
// loop share. Sweeps of 50,000 and 100,000 jobs in batches of 1,000, the
// counts interleaved, on a machine that other work kept busy: 1 connection
// 36k jobs/s; 2 25–61k, median 35k; 3 32–62k, median 38k; 4 31–58k, median
// 43k; 6 44–48k; 8 50k. From 2 up both cores are busy; with more than one
// connection per core, one claims while another waits for its commit, which
// 4 does best, by a little.
const sqlDrainConns = 4

// sqlDrainBatch is the most jobs each claim takes: 1,000, as many as weir's
// client claims at most in W1 (MaxWorkers and Prefetch 1,000), so that the
// ceiling works in batches no bigger than the drain it is held against.
// Bigger batches drain faster (in the same sweeps, 4 connections: 500 a claim
// 47k jobs/s, 1,000 43k, 2,000 58–64k; 3 connections, 5,000 69–92k), since
// each claim and completion costs a round trip, a plan and a commit whatever
// its size.
const sqlDrainBatch = 1000

// sqlDrainDDL makes the ceiling's job table: what a job queue keeps of a job,
// with a partial index of the available jobs in the order they are claimed.
// %[1]s is the table, %[2]s its index's name.
const sqlDrainDDL = `CREATE TABLE %[1]s (
	id           bigserial   PRIMARY KEY,
	queue        text        NOT NULL DEFAULT 'default',
	kind         text        NOT NULL,
	args         jsonb       NOT NULL DEFAULT '{}',
	state        text        NOT NULL DEFAULT 'available',
	priority     smallint    NOT NULL DEFAULT 1,
	scheduled_at timestamptz NOT NULL DEFAULT now(),
	attempt      smallint    NOT NULL DEFAULT 0,
	attempted_at timestamptz,
	finalized_at timestamptz,
	created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX %[2]s ON %[1]s (queue, priority, scheduled_at, id) WHERE state = 'available'`

// sqlDrainClaim claims up to $1 available jobs of the default queue in claim
// order, skipping those another connection is claiming.
const sqlDrainClaim = `UPDATE %s SET state = 'running', attempt = attempt + 1, attempted_at = now()
	WHERE id IN (SELECT id FROM %[1]s WHERE state = 'available' AND queue = 'default'
		ORDER BY priority, scheduled_at, id LIMIT $1 FOR UPDATE SKIP LOCKED)
	RETURNING id`

// sqlDrainComplete completes the jobs $1.
const sqlDrainComplete = `UPDATE %s SET state = 'completed', finalized_at = now() WHERE id = ANY($1)`

// sqlDrainStatements are the claim and the completion on table.
func sqlDrainStatements(table string) (claim, complete string) {
	return fmt.Sprintf(sqlDrainClaim, table), fmt.Sprintf(sqlDrainComplete, table)
}

// sqlDrainTable is the ceiling's job table in schema.
func sqlDrainTable(schema string) pgx.Identifier { return pgx.Identifier{schema, "jobs"} }

// setupSQLDrain claims schema and makes the ceiling's table in it afresh, so
// that it always has the definition above.
func setupSQLDrain(ctx context.Context, b *bench, schema string) error {
	if err := claimSchema(ctx, b.admin, schema); err != nil {
		return err
	}
	table := sqlDrainTable(schema).Sanitize()
	index := pgx.Identifier{"jobs_available"}.Sanitize()
	return execSQL(ctx, b.admin, "DROP TABLE IF EXISTS "+table, fmt.Sprintf(sqlDrainDDL, table, index))
}

// ceilingSchema is the schema of W1's ceiling.
func (o *Options) ceilingSchema() string {
	if o.CeilingSchema == "" {
		return DefaultCeilingSchema
	}
	return o.CeilingSchema
}

// sqlDrain drains n jobs from the ceiling's table and returns the jobs/s:
// the table is truncated and vacuumed, n jobs inserted by COPY, the table
// vacuumed and a checkpoint taken, as W1 prepares a system's drain; then
// sqlDrainConns connections each claim a batch and complete it, over and over,
// until none is left. It times from their start to the last completion and
// checks that every job was completed once.
func (b *bench) sqlDrain(ctx context.Context, n int) (float64, error) {
	return b.sqlDrainWith(ctx, n, sqlDrainConns, sqlDrainBatch)
}

// sqlDrainWith is sqlDrain with conns connections claiming batch jobs at a time.
func (b *bench) sqlDrainWith(ctx context.Context, n, conns, batch int) (float64, error) {
	schema := b.o.ceilingSchema()
	ident := sqlDrainTable(schema)
	table := ident.Sanitize()
	if err := reset(ctx, b.admin, table); err != nil {
		return 0, err
	}
	b.status("raw SQL ceiling: inserting %s jobs", group(int64(n)))
	_, err := b.admin.CopyFrom(ctx, ident, []string{"kind", "args"}, pgx.CopyFromSlice(n, func(i int) ([]any, error) {
		return []any{"noop", `{"seq": ` + strconv.Itoa(i) + `}`}, nil
	}))
	if err != nil {
		return 0, fmt.Errorf("raw SQL ceiling: insert jobs: %w", err)
	}
	b.status("raw SQL ceiling: VACUUM ANALYZE, CHECKPOINT")
	if err := execSQL(ctx, b.admin, "VACUUM ANALYZE "+table, "CHECKPOINT"); err != nil {
		return 0, err
	}

	const app = "weirbench_sql"
	pool, err := openPool(ctx, b.o.DatabaseURL, app, conns)
	if err != nil {
		return 0, err
	}
	elapsed, err := func() (time.Duration, error) {
		defer pool.Close()
		ctx, cancel := context.WithTimeout(ctx, b.o.Timeout)
		defer cancel()
		claim, complete := sqlDrainStatements(table)
		var done atomic.Int64
		errs := make([]error, conns)
		var wg sync.WaitGroup
		start := time.Now()
		for i := range conns {
			wg.Go(func() {
				for {
					rows, _ := pool.Query(ctx, claim, batch)
					ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
					if err != nil {
						errs[i] = fmt.Errorf("claim: %w", err)
						return
					}
					// Nothing left to claim: what remains is claimed by the
					// others, which complete it.
					if len(ids) == 0 {
						return
					}
					if _, err := pool.Exec(ctx, complete, ids); err != nil {
						errs[i] = fmt.Errorf("complete: %w", err)
						return
					}
					b.status("raw SQL ceiling: %s of %s jobs completed", group(done.Add(int64(len(ids)))), group(int64(n)))
				}
			})
		}
		wg.Wait()
		return time.Since(start), errors.Join(errs...)
	}()
	if err = errors.Join(err, waitGone(ctx, b.admin, app)); err != nil {
		return 0, fmt.Errorf("raw SQL ceiling: %w", err)
	}
	var completed, claimedOnce int64
	err = b.admin.QueryRow(ctx, "SELECT count(*) FILTER (WHERE state = 'completed' AND finalized_at IS NOT NULL), count(*) FILTER (WHERE attempt = 1) FROM "+table).
		Scan(&completed, &claimedOnce)
	if err != nil {
		return 0, fmt.Errorf("raw SQL ceiling: count jobs: %w", err)
	}
	if completed != int64(n) || claimedOnce != int64(n) {
		return 0, fmt.Errorf("raw SQL ceiling: %d of %d jobs completed, %d claimed once", completed, n, claimedOnce)
	}
	return float64(n) / elapsed.Seconds(), nil
}
