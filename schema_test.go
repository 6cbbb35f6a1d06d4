package weir_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/weirq/weir"
	"github.com/weirq/weir/weirdriver/weirpgx"
	"github.com/weirq/weir/weirmigrate"
)

// TestOperatorCallsOnUnmigratedSchema checks that every operator call on a
// schema whose tables exist but whose migration is not recorded (as a schema
// migrated by a weir before 0.1.0, or made by hand, is) fails with
// ErrNotMigrated naming what is missing, and changes nothing.
func TestOperatorCallsOnUnmigratedSchema(t *testing.T) {
	t.Parallel()
	known := (&weirpgx.Driver{}).Migrations()
	const target = 1
	b := setup(t, &setupOpts{noMigrate: true})
	ctx := testCtx(t)
	if _, err := weirmigrate.New(b.driver).Up(ctx, &weirmigrate.UpOpts{TargetVersion: target}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, "DELETE FROM "+pgx.Identifier{b.schema, "weir_migration"}.Sanitize()+
		" WHERE version >= $1", target); err != nil {
		t.Fatal(err)
	}
	var id int64
	if err := b.pool.QueryRow(ctx, "INSERT INTO "+pgx.Identifier{b.schema, "weir_job"}.Sanitize()+
		" (queue, kind, args, max_attempts) VALUES ('default', 'k', '{}', 3) RETURNING id").Scan(&id); err != nil {
		t.Fatal(err)
	}
	before := b.count(t, "state = 'available'")
	missing := fmt.Sprintf("%03d_%s", known[target-1].Version, known[target-1].Name)
	calls := map[string]func() error{
		"JobGet":  func() error { _, err := b.client.JobGet(ctx, id); return err },
		"JobList": func() error { _, err := b.client.JobList(ctx, nil); return err },
		"JobList of a state": func() error {
			_, err := b.client.JobList(ctx, &weir.JobListParams{States: []weir.JobState{weir.JobStateAvailable}})
			return err
		},
		"JobCancel":          func() error { _, err := b.client.JobCancel(ctx, id); return err },
		"JobRetry":           func() error { _, err := b.client.JobRetry(ctx, id); return err },
		"JobDelete":          func() error { _, err := b.client.JobDelete(ctx, id); return err },
		"QueueList":          func() error { _, err := b.client.QueueList(ctx); return err },
		"QueueListEstimated": func() error { _, err := b.client.QueueListEstimated(ctx); return err },
		"QueuePause":         func() error { return b.client.QueuePause(ctx, "default") },
		"QueueResume":        func() error { return b.client.QueueResume(ctx, "default") },
		"ClientList":         func() error { _, err := b.client.ClientList(ctx); return err },
	}
	for name, call := range calls {
		err := call()
		if !errors.Is(err, weir.ErrNotMigrated) || !strings.Contains(err.Error(), missing) ||
			!strings.Contains(err.Error(), "weir migrate up") {
			t.Errorf("%s on a schema without migration %d: %v, want ErrNotMigrated naming %s", name, target, err, missing)
		}
	}
	if after := b.count(t, "state = 'available'"); after != before {
		t.Fatalf("available jobs: %d before the calls, %d after", before, after)
	}
}

// TestStartOnNewerSchema checks that a client starts, and operator calls run,
// against a schema one migration ahead of it when that migration is marked
// compatible, and that both refuse, naming it, when it is not.
func TestStartOnNewerSchema(t *testing.T) {
	t.Parallel()
	for _, compatible := range []bool{true, false} {
		t.Run(fmt.Sprint("compatible=", compatible), func(t *testing.T) {
			t.Parallel()
			workers := probeWorkers(func(context.Context, *weir.Job[probeArgs]) error { return nil })
			b := setup(t, &setupOpts{config: fastConfig(workers, nil)})
			ctx := testCtx(t)
			next := len(b.driver.Migrations()) + 1
			if _, err := b.pool.Exec(ctx, "INSERT INTO "+pgx.Identifier{b.schema, "weir_migration"}.Sanitize()+
				" (version, name, compatible) VALUES ($1, 'add_column', $2)", next, compatible); err != nil {
				t.Fatal(err)
			}
			name := fmt.Sprintf("%03d_add_column", next)
			_, listErr := b.client.JobList(ctx, nil)
			startErr := b.client.Start(ctx)
			if compatible {
				if startErr != nil {
					t.Fatalf("start on a schema with compatible %s: %v", name, startErr)
				}
				if err := b.client.Stop(ctx); err != nil {
					t.Fatal(err)
				}
				if listErr != nil {
					t.Fatalf("list on a schema with compatible %s: %v", name, listErr)
				}
				return
			}
			for what, err := range map[string]error{"start": startErr, "list": listErr} {
				if !errors.Is(err, weir.ErrSchemaIncompatible) || !strings.Contains(err.Error(), name) ||
					!strings.Contains(err.Error(), "not marked compatible") {
					t.Errorf("%s on a schema with %s not marked compatible: %v, want ErrSchemaIncompatible naming it", what, name, err)
				}
			}
		})
	}
}
