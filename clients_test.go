package weir_test

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weirq/weir"
)

// listClients lists the registry, failing the test on error.
func listClients(t testing.TB, c *weir.Client) []*weir.ClientRow {
	t.Helper()
	rows, err := c.ClientList(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestClientRegistry checks, on both stores, that a started client is listed
// from its Start to its Stop with its host, pid, version and queues, the jobs
// it runs and whether it leads, and that it refreshes its heartbeat while it
// runs; a client that only inserts is not listed.
func TestClientRegistry(t *testing.T) {
	t.Parallel()
	for _, d := range bothStores(t) {
		t.Run(d.Name(), func(t *testing.T) {
			t.Parallel()
			g := newGate()
			cfg := fastConfig(probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
				g.started <- job.ID
				<-g.ch
				return nil
			}), map[string]weir.QueueConfig{weir.DefaultQueue: {MaxWorkers: 10}, "mail": {MaxWorkers: 2}})
			worker, err := weir.NewClient(d, cfg)
			if err != nil {
				t.Fatal(err)
			}
			weir.SetClientRefreshInterval(worker, 20*time.Millisecond)
			inserter, err := weir.NewClient(d, nil)
			if err != nil {
				t.Fatal(err)
			}
			if rows := listClients(t, inserter); len(rows) != 0 {
				t.Fatalf("before any Start the registry lists %v", rows)
			}
			if err := worker.Start(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			defer g.open()

			// Listed as soon as Start returns.
			rows := listClients(t, inserter)
			host, _ := os.Hostname()
			wantQueues := []weir.ClientQueue{{Name: weir.DefaultQueue, MaxWorkers: 10}, {Name: "mail", MaxWorkers: 2}}
			if len(rows) != 1 || rows[0].ID != worker.ID() || rows[0].Host != host || rows[0].PID != os.Getpid() ||
				rows[0].Version == "" || !slices.Equal(rows[0].Queues, wantQueues) || rows[0].HeldLeases != 0 {
				t.Fatalf("after Start the registry lists %+v, want the worker (%s on %s, pid %d, queues %v)",
					rows, worker.ID(), host, os.Getpid(), wantQueues)
			}
			started, first := rows[0].StartedAt, rows[0].HeartbeatAt

			// The jobs it runs, and its leadership.
			for range 2 {
				if _, err := inserter.Insert(testCtx(t), probeArgs{}, nil); err != nil {
					t.Fatal(err)
				}
			}
			g.expectStarted(t)
			g.expectStarted(t)
			waitFor(t, 10*time.Second, "the leadership and a refreshed heartbeat", func() bool {
				rows = listClients(t, inserter)
				return len(rows) == 1 && rows[0].Leader && rows[0].HeartbeatAt.After(first)
			})
			if rows[0].HeldLeases != 2 || !rows[0].StartedAt.Equal(started) {
				t.Fatalf("while running 2 jobs: %+v, want 2 held leases and started_at %v kept", rows[0], started)
			}
			g.open()
			if err := worker.Stop(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			if rows := listClients(t, inserter); len(rows) != 0 {
				t.Fatalf("after Stop the registry lists %+v", rows[0])
			}
		})
	}
}

// TestClientRegistryFailuresIgnored checks that registry writes that fail
// change nothing else: jobs run, leases are renewed (a job held across the
// failures completes on its first attempt), Stop succeeds, and each kind of
// failed write is logged once, not at every refresh. Once the table is back,
// the row is written again with its first started_at.
func TestClientRegistryFailuresIgnored(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	logs := &jsonLogs{}
	g := newGate()
	cfg := fastConfig(probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
		g.started <- job.ID
		<-g.ch
		return nil
	}), nil)
	cfg.Logger = logs.logger()
	c, err := weir.NewClient(b.driver, cfg)
	if err != nil {
		t.Fatal(err)
	}
	weir.SetClientRefreshInterval(c, 20*time.Millisecond)
	if err := c.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	defer g.open()
	started := listClients(t, b.client)[0].StartedAt

	rename := func(from, to string) {
		t.Helper()
		if _, err := b.pool.Exec(testCtx(t), "ALTER TABLE "+pgx.Identifier{b.schema, from}.Sanitize()+" RENAME TO "+to); err != nil {
			t.Fatal(err)
		}
	}
	held := b.insertProbe(t, "held", nil)
	g.expectStarted(t)
	rename("weir_client", "weir_client_away")
	// Ten writes after the rename: nine failed at least. Meanwhile the held
	// job's lease (1 s, renewed every 100 ms) is renewed.
	writes := weir.ClientRegistryWrites(c)
	waitFor(t, 10*time.Second, "ten registry writes", func() bool { return weir.ClientRegistryWrites(c) >= writes+10 })
	another := b.insertProbe(t, "another", nil)
	g.expectStarted(t)
	g.open()
	waitFor(t, 10*time.Second, "both jobs completed", func() bool {
		return b.job(t, held).State == weir.JobStateCompleted && b.job(t, another).State == weir.JobStateCompleted
	})
	if j := b.job(t, held); j.Attempt != 1 {
		t.Fatalf("the held job took %d attempts, want 1: %+v", j.Attempt, j)
	}
	if n := len(logs.records(t, "weir: client registry: refresh failed")); n != 1 {
		t.Fatalf("%d lines for failed refreshes, want 1; the log:\n%s", n, logs.raw())
	}

	// The table comes back: so does the row, with its first started_at.
	rename("weir_client_away", "weir_client")
	waitFor(t, 10*time.Second, "the row written again", func() bool { return len(listClients(t, b.client)) == 1 })
	if got := listClients(t, b.client)[0].StartedAt; !got.Equal(started) {
		t.Fatalf("the row came back with started_at %v, want %v", got, started)
	}

	// A removal that fails does not fail Stop; it is logged once.
	rename("weir_client", "weir_client_away")
	if err := c.Stop(testCtx(t)); err != nil {
		t.Fatalf("Stop with the registry gone: %v", err)
	}
	if n := len(logs.records(t, "weir: client registry: remove failed")); n != 1 {
		t.Fatalf("%d lines for the failed removal, want 1; the log:\n%s", n, logs.raw())
	}
}
