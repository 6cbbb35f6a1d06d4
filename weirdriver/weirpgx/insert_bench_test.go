package weirpgx

import (
	"encoding/json"
	"runtime"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirmigrate"
)

// BenchmarkInsertStatements splits a single insert's cost on the pool: a bare
// INSERT of the same row sent by pgx (no weir code, no notification), the
// statement for many jobs (JSON input) and the one for a lone job, each
// without notifying, and JobInsert as weir runs it, from 1 goroutine and from
// 8 at once. Each reports rows/s (bench/journal/2026-12-05.md, "Single
// inserts and their ceiling").
func BenchmarkInsertStatements(b *testing.B) {
	pool := dbtest.Pool(b, func(c *pgxpool.Config) { c.MaxConns = 20 }) // as weirbench's
	schema := dbtest.Schema(b)
	d, err := New(pool, &Config{Schema: schema})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := weirmigrate.New(d).Up(b.Context(), nil); err != nil {
		b.Fatal(err)
	}
	e := d.Executor().(*executor)
	params := []*weirdriver.JobInsertParams{{Kind: "noop", Queue: "default", Args: json.RawMessage(`{"seq": 0}`),
		Priority: 2, MaxAttempts: 25}}
	bare := "INSERT INTO " + pgx.Identifier{schema, "weir_job"}.Sanitize() + ` (queue, kind, args, max_attempts) VALUES ('default', 'noop', '{"seq": 0}', 25)`
	statements := []struct {
		name   string
		insert func() error
	}{
		{"bare", func() error { _, err := pool.Exec(b.Context(), bare); return err }},
		{"json", func() error {
			input, err := insertInput(params)
			if err != nil {
				return err
			}
			r, err := pool.Query(b.Context(), e.q.jobInsertQuiet, input)
			if err != nil {
				return err
			}
			defer r.Close()
			_, err = scanInsertResults(r, 1)
			return err
		}},
		{"row", func() error {
			p := params[0]
			r, err := pool.Query(b.Context(), e.q.jobInsertOneQ, p.Queue, p.Kind, []byte(p.Args), p.Priority, nil, p.MaxAttempts, nil, nil)
			if err != nil {
				return err
			}
			defer r.Close()
			_, err = scanInsertResults(r, 1)
			return err
		}},
		{"JobInsert", func() error { _, err := e.JobInsert(b.Context(), params); return err }},
	}
	for _, s := range statements {
		b.Run(s.name+"/x1", func(b *testing.B) {
			for b.Loop() {
				if err := s.insert(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rows/s")
		})
		b.Run(s.name+"/x8", func(b *testing.B) {
			b.SetParallelism(max(1, 8/runtime.GOMAXPROCS(0))) // 8 goroutines on 2 cores
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := s.insert(); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
