package weirpgx_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirdriver/weirpgx"
	"github.com/weirq/weir/weirmigrate"
	"github.com/weirq/weir/weirtype"
)

// TestLimitedClaimsRace: twelve claimers of a limited queue, held back
// together and let go at once, lease no more than the queue's global limit,
// nor more than any key's limit, between them. The test holds them back by
// locking the table of queue settings, which each claim reads first, until
// all twelve wait on it; released together, they meet at the claim's own
// lock, which is what keeps them apart: without it they lease up to three
// jobs each. The driver suite's GlobalLimitConcurrent and KeyLimitConcurrent
// race claimers too, but started claims seldom overlap.
func TestLimitedClaimsRace(t *testing.T) {
	t.Parallel()
	const claimers, perClaim = 12, 3
	for _, c := range []struct {
		name  string
		limit func(weirdriver.Executor) error
		args  func(i int) string
		check func(t *testing.T, jobs []*weirtype.JobRow)
	}{
		{
			name:  "global",
			limit: func(e weirdriver.Executor) error { return e.QueueSetGlobalLimit(t.Context(), "race", 5) },
			args:  func(int) string { return `{}` },
			check: func(t *testing.T, jobs []*weirtype.JobRow) {
				if len(jobs) != 5 {
					t.Errorf("%d claimers leased %d jobs under a global limit of 5", claimers, len(jobs))
				}
			},
		},
		{
			name: "key",
			limit: func(e weirdriver.Executor) error {
				return e.QueueSetKeyLimit(t.Context(), "race", weirdriver.KeyLimitParams{Key: "args.c", Limit: 1})
			},
			args: func(i int) string { return `{"c": ` + strconv.Itoa(i%4) + `}` },
			check: func(t *testing.T, jobs []*weirtype.JobRow) {
				keys := map[string]int{}
				for _, j := range jobs {
					keys[string(j.Args)]++
				}
				if len(keys) != 4 {
					t.Errorf("%d claimers leased jobs of %d keys of 4: %v", claimers, len(keys), keys)
				}
				for k, n := range keys {
					if n != 1 {
						t.Errorf("%d claimers leased %d jobs of key %s under a limit of 1 per key", claimers, n, k)
					}
				}
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			pool := dbtest.Pool(t, func(cfg *pgxpool.Config) { cfg.MaxConns = claimers + 2 })
			schema := dbtest.Schema(t)
			d, err := weirpgx.New(pool, &weirpgx.Config{Schema: schema})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := weirmigrate.New(d).Up(t.Context(), nil); err != nil {
				t.Fatal(err)
			}
			exec := d.Executor()
			if err := c.limit(exec); err != nil {
				t.Fatal(err)
			}
			params := make([]*weirdriver.JobInsertParams, 100)
			for i := range params {
				params[i] = &weirdriver.JobInsertParams{Kind: "k", Queue: "race", Args: json.RawMessage(c.args(i)), Priority: 2, MaxAttempts: 3}
			}
			if _, err := exec.JobInsert(t.Context(), params); err != nil {
				t.Fatal(err)
			}

			hold, err := pool.Begin(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			defer hold.Rollback(t.Context())
			if _, err := hold.Exec(t.Context(), "LOCK TABLE "+pgx.Identifier{schema, "weir_queue"}.Sanitize()+" IN ACCESS EXCLUSIVE MODE"); err != nil {
				t.Fatal(err)
			}
			var (
				mu     sync.Mutex
				leased []*weirtype.JobRow
				wg     sync.WaitGroup
				errs   = make(chan error, claimers)
			)
			for i := range claimers {
				wg.Go(func() {
					jobs, _, err := exec.JobClaim(t.Context(), &weirdriver.JobClaimParams{
						Queue: "race", Max: perClaim, ClientID: fmt.Sprintf("claimer-%d", i), LeaseDuration: time.Minute,
					})
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					leased = append(leased, jobs...)
					mu.Unlock()
				})
			}
			// Every claimer waits on the settings' lock: the database says so.
			deadline := time.Now().Add(30 * time.Second)
			for {
				var waiting int
				if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
					WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%weir_ready_claim%'`, schema).Scan(&waiting); err != nil {
					t.Fatal(err)
				}
				if waiting == claimers {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d of %d claimers wait on the lock after 30 s", waiting, claimers)
				}
				time.Sleep(5 * time.Millisecond) // the database's state, polled: no signal to wait on
			}
			if err := hold.Commit(t.Context()); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			c.check(t, leased)
		})
	}
}
