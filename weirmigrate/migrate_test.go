package weirmigrate_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirdriver/weirpgx"
	"github.com/weirq/weir/weirmigrate"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// testDriver is weirpgx's driver with two migrations of the tests' own after
// weir's, so that the migrator's handling of several versions (targets, steps,
// compatible marks) is tested whatever number of migrations weir has:
// weirTestNote (compatible: it only adds a table) and weirTestNoteBody (not).
type testDriver struct {
	*weirpgx.Driver
}

var weirTestNote = weirdriver.Migration{
	Name: "test_note", Compatible: true,
	Up:   "-- weir:compatible\nCREATE TABLE weir_test_note (id bigint PRIMARY KEY);\n",
	Down: "DROP TABLE weir_test_note;\n",
}

var weirTestNoteBody = weirdriver.Migration{
	Name: "test_note_body",
	Up:   "ALTER TABLE weir_test_note ADD COLUMN body text;\n",
	Down: "ALTER TABLE weir_test_note DROP COLUMN body;\n",
}

// Migrations implements weirdriver.Driver: weir's, then the tests' two.
func (d testDriver) Migrations() []weirdriver.Migration {
	ms := d.Driver.Migrations()
	for _, extra := range []weirdriver.Migration{weirTestNote, weirTestNoteBody} {
		extra.Version = len(ms) + 1
		ms = append(ms, extra)
	}
	return ms
}

// newDriver returns a testDriver with a pool of its own on schema, which need
// not exist.
func newDriver(t *testing.T, schema string) testDriver {
	t.Helper()
	d, err := weirpgx.New(dbtest.Pool(t, nil), &weirpgx.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	return testDriver{d}
}

// missingSchema returns the name of a schema that does not exist yet and is
// dropped, if it was made, when the test ends.
func missingSchema(t *testing.T) string {
	t.Helper()
	name := dbtest.Schema(t) + "_new"
	t.Cleanup(func() {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, dbtest.URL())
		if err != nil {
			t.Errorf("dropping schema %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("dropping schema %s: %v", name, err)
		}
	})
	return name
}

// want returns the migrations a call that runs ms reports.
func want(ms []weirdriver.Migration) []weirmigrate.Migration {
	out := make([]weirmigrate.Migration, len(ms))
	for i, m := range ms {
		out[i] = weirmigrate.Migration{Version: m.Version, Name: m.Name}
	}
	return out
}

// reversed returns ms newest first.
func reversed(ms []weirmigrate.Migration) []weirmigrate.Migration {
	out := make([]weirmigrate.Migration, len(ms))
	for i, m := range ms {
		out[len(ms)-1-i] = m
	}
	return out
}

func sameMigrations(t *testing.T, what string, got, want []weirmigrate.Migration) {
	t.Helper()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
}

// regclass reports whether schema.name exists as a table, sequence or index.
func regclass(t *testing.T, pool *pgxpool.Pool, schema, name string) bool {
	t.Helper()
	var exists bool
	if err := pool.QueryRow(t.Context(), "SELECT to_regclass($1) IS NOT NULL",
		pgx.Identifier{schema, name}.Sanitize()).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	return exists
}

func schemaExists(t *testing.T, pool *pgxpool.Pool, schema string) bool {
	t.Helper()
	var exists bool
	if err := pool.QueryRow(t.Context(), "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)",
		schema).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	return exists
}

// recorded returns the versions in schema.weir_migration, or nil when the table
// does not exist.
func recorded(t *testing.T, pool *pgxpool.Pool, schema string) []int {
	t.Helper()
	if !regclass(t, pool, schema, "weir_migration") {
		return nil
	}
	rows, err := pool.Query(t.Context(), "SELECT version FROM "+
		pgx.Identifier{schema, "weir_migration"}.Sanitize()+" ORDER BY version")
	if err != nil {
		t.Fatal(err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
	}
	return versions
}

func versions(ms []weirdriver.Migration) []int {
	out := make([]int, len(ms))
	for i, m := range ms {
		out[i] = m.Version
	}
	return out
}

// snapshot describes the schema's migration state: what Status says plus what
// the database holds, so that two snapshots differ when anything changed.
func snapshot(t *testing.T, d testDriver) string {
	t.Helper()
	status, err := weirmigrate.New(d).Status(t.Context())
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	var b strings.Builder
	for _, s := range status {
		fmt.Fprintf(&b, "%s applied=%v at=%v; ", s, s.Applied, s.AppliedAt)
	}
	fmt.Fprintf(&b, "recorded=%v job=%v", recorded(t, d.Pool(), d.Schema()), regclass(t, d.Pool(), d.Schema(), "weir_job"))
	return b.String()
}

func insertJob(t *testing.T, d weirdriver.Driver) error {
	t.Helper()
	res, err := d.Executor().JobInsert(t.Context(), []*weirdriver.JobInsertParams{{
		Kind: "email", Queue: "default", Args: json.RawMessage(`{"to":"a@example.com"}`), Priority: 2, MaxAttempts: 3,
	}})
	if err != nil {
		return err
	}
	if len(res) != 1 || res[0].Job == nil || res[0].Job.ID == 0 {
		t.Fatalf("insert returned %+v", res)
	}
	return nil
}

func TestUpAppliesEverythingOnce(t *testing.T) {
	t.Parallel()
	schema := missingSchema(t)
	d := newDriver(t, schema)
	known := d.Migrations()
	if len(known) == 0 {
		t.Fatal("driver knows no migrations")
	}
	if schemaExists(t, d.Pool(), schema) {
		t.Fatalf("schema %s exists before Up", schema)
	}
	m := weirmigrate.New(d)

	done, err := m.Up(t.Context(), nil)
	if err != nil {
		t.Fatalf("up: %v", err)
	}
	sameMigrations(t, "first up", done, want(known))
	if !schemaExists(t, d.Pool(), schema) {
		t.Fatalf("Up did not create schema %s", schema)
	}
	if got := recorded(t, d.Pool(), schema); !slices.Equal(got, versions(known)) {
		t.Fatalf("weir_migration holds %v, want %v", got, versions(known))
	}
	if !regclass(t, d.Pool(), schema, "weir_job") {
		t.Fatal("weir_job does not exist after Up")
	}

	done, err = m.Up(t.Context(), &weirmigrate.UpOpts{})
	if err != nil {
		t.Fatalf("second up: %v", err)
	}
	sameMigrations(t, "second up", done, nil)
	if got := recorded(t, d.Pool(), schema); !slices.Equal(got, versions(known)) {
		t.Fatalf("weir_migration holds %v after second Up, want %v", got, versions(known))
	}
	if err := insertJob(t, d); err != nil {
		t.Fatalf("insert after Up: %v", err)
	}
}

func TestUpTargetVersion(t *testing.T) {
	t.Parallel()
	d := newDriver(t, dbtest.Schema(t))
	known := d.Migrations()
	m := weirmigrate.New(d)
	done, err := m.Up(t.Context(), &weirmigrate.UpOpts{TargetVersion: 1})
	if err != nil {
		t.Fatalf("up to 1: %v", err)
	}
	sameMigrations(t, "up to 1", done, want(known[:1]))
	done, err = m.Up(t.Context(), &weirmigrate.UpOpts{TargetVersion: len(known)})
	if err != nil {
		t.Fatalf("up to %d: %v", len(known), err)
	}
	sameMigrations(t, "up to latest", done, want(known[1:]))
	// A target below what is applied reverts nothing.
	done, err = m.Up(t.Context(), &weirmigrate.UpOpts{TargetVersion: 1})
	if err != nil {
		t.Fatalf("up to 1 again: %v", err)
	}
	sameMigrations(t, "up to 1 again", done, nil)
}

func TestUpDownAllUp(t *testing.T) {
	t.Parallel()
	schema := dbtest.Schema(t)
	d := newDriver(t, schema)
	known := d.Migrations()
	m := weirmigrate.New(d)

	if _, err := m.Up(t.Context(), nil); err != nil {
		t.Fatalf("up: %v", err)
	}
	if err := insertJob(t, d); err != nil {
		t.Fatalf("insert after Up: %v", err)
	}

	// Down with no options reverts exactly the latest migration.
	done, err := m.Down(t.Context(), nil)
	if err != nil {
		t.Fatalf("down: %v", err)
	}
	sameMigrations(t, "down", done, want(known[len(known)-1:]))
	if got := recorded(t, d.Pool(), schema); !slices.Equal(got, versions(known[:len(known)-1])) {
		t.Fatalf("weir_migration holds %v after Down, want %v", got, versions(known[:len(known)-1]))
	}

	if _, err := m.Up(t.Context(), nil); err != nil {
		t.Fatalf("up after down: %v", err)
	}
	// The job inserted above is dropped with its table only when forced.
	done, err = m.Down(t.Context(), &weirmigrate.DownOpts{All: true, Force: true})
	if err != nil {
		t.Fatalf("down all: %v", err)
	}
	sameMigrations(t, "down all", done, reversed(want(known)))
	if regclass(t, d.Pool(), schema, "weir_job") {
		t.Fatal("weir_job exists after Down All")
	}
	if got := recorded(t, d.Pool(), schema); len(got) != 0 {
		t.Fatalf("weir_migration holds %v after Down All", got)
	}
	if err := insertJob(t, d); !errors.Is(err, weirdriver.ErrSchemaMissing) {
		t.Fatalf("insert after Down All: got %v, want ErrSchemaMissing", err)
	}

	// Down with nothing applied reverts nothing and succeeds.
	done, err = m.Down(t.Context(), &weirmigrate.DownOpts{All: true})
	if err != nil {
		t.Fatalf("down all on an empty schema: %v", err)
	}
	sameMigrations(t, "down all on an empty schema", done, nil)

	done, err = m.Up(t.Context(), nil)
	if err != nil {
		t.Fatalf("up again: %v", err)
	}
	sameMigrations(t, "up again", done, want(known))
	if err := insertJob(t, d); err != nil {
		t.Fatalf("insert after Up again: %v", err)
	}
	if err := m.Check(t.Context()); err != nil {
		t.Fatalf("check after up again: %v", err)
	}
}

func TestDownTargetAndSteps(t *testing.T) {
	t.Parallel()
	schema := dbtest.Schema(t)
	d := newDriver(t, schema)
	m := weirmigrate.New(d)
	if _, err := m.Up(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	// TargetVersion at the latest keeps everything.
	done, err := m.Down(t.Context(), &weirmigrate.DownOpts{TargetVersion: len(d.Migrations())})
	if err != nil {
		t.Fatal(err)
	}
	sameMigrations(t, "down to latest", done, nil)
	done, err = m.Down(t.Context(), &weirmigrate.DownOpts{Steps: 100})
	if err != nil {
		t.Fatal(err)
	}
	sameMigrations(t, "down 100 steps", done, reversed(want(d.Migrations())))
}

func TestStatusAndCheck(t *testing.T) {
	t.Parallel()
	d := newDriver(t, dbtest.Schema(t))
	known := d.Migrations()
	m := weirmigrate.New(d)

	status, err := m.Status(t.Context())
	if err != nil {
		t.Fatalf("status before up: %v", err)
	}
	if len(status) != len(known) {
		t.Fatalf("status lists %d migrations, want %d", len(status), len(known))
	}
	for i, s := range status {
		if s.Version != known[i].Version || s.Name != known[i].Name || s.Applied || !s.AppliedAt.IsZero() {
			t.Errorf("status[%d] before up = %+v, want pending %d_%s", i, s, known[i].Version, known[i].Name)
		}
	}
	if got := status[0].String(); got != "001_baseline" {
		t.Errorf("first migration is %q, want 001_baseline", got)
	}

	err = m.Check(t.Context())
	if !errors.Is(err, weirmigrate.ErrNotMigrated) {
		t.Fatalf("check before up: got %v, want ErrNotMigrated", err)
	}
	for _, s := range []string{"001_baseline", "weir migrate up"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("check error %q does not mention %q", err, s)
		}
	}

	if _, err := m.Up(t.Context(), nil); err != nil {
		t.Fatalf("up: %v", err)
	}
	status, err = m.Status(t.Context())
	if err != nil {
		t.Fatalf("status after up: %v", err)
	}
	for i, s := range status {
		if s.Version != known[i].Version || s.Name != known[i].Name || !s.Applied || s.AppliedAt.IsZero() {
			t.Errorf("status[%d] after up = %+v, want applied %d_%s", i, s, known[i].Version, known[i].Name)
		}
	}
	if err := m.Check(t.Context()); err != nil {
		t.Fatalf("check after up: %v", err)
	}
}

func TestStatusOfMissingSchema(t *testing.T) {
	t.Parallel()
	schema := missingSchema(t)
	d := newDriver(t, schema)
	m := weirmigrate.New(d)
	status, err := m.Status(t.Context())
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	for _, s := range status {
		if s.Applied {
			t.Errorf("%s applied in a missing schema", s)
		}
	}
	if err := m.Check(t.Context()); !errors.Is(err, weirmigrate.ErrNotMigrated) {
		t.Fatalf("check: got %v, want ErrNotMigrated", err)
	}
	if schemaExists(t, d.Pool(), schema) {
		t.Fatal("Status or Check created the schema")
	}
}

func TestConcurrentUp(t *testing.T) {
	t.Parallel()
	for i := range 5 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			// Odd runs race on a schema that does not exist yet.
			schema := dbtest.Schema(t)
			if i%2 == 1 {
				schema = missingSchema(t)
			}
			drivers := []testDriver{newDriver(t, schema), newDriver(t, schema)}
			known := drivers[0].Migrations()

			type result struct {
				done []weirmigrate.Migration
				err  error
			}
			start := make(chan struct{})
			results := make(chan result, len(drivers))
			ctx := t.Context()
			for _, d := range drivers {
				go func() {
					<-start
					done, err := weirmigrate.New(d).Up(ctx, nil)
					results <- result{done, err}
				}()
			}
			close(start)

			var all []weirmigrate.Migration
			for range drivers {
				r := <-results
				if r.err != nil {
					t.Errorf("up: %v", r.err)
				}
				all = append(all, r.done...)
			}
			if t.Failed() {
				return
			}
			// One migrator applied everything, the other nothing; in some order.
			sameMigrations(t, "migrations applied by both", all, want(known))
			if got := recorded(t, drivers[0].Pool(), schema); !slices.Equal(got, versions(known)) {
				t.Fatalf("weir_migration holds %v, want %v", got, versions(known))
			}
			if err := insertJob(t, drivers[1]); err != nil {
				t.Fatalf("insert: %v", err)
			}
		})
	}
}

// TestConcurrentUpRepeatableRead races two migrators whose sessions default to
// REPEATABLE READ. Were the migration transaction to take that default, the
// statement waiting for the advisory lock would take the snapshot, and the
// migrator that waited would not see what the other committed and would apply
// 001_baseline again.
func TestConcurrentUpRepeatableRead(t *testing.T) {
	t.Parallel()
	schema := dbtest.Schema(t)
	var drivers []testDriver
	for range 2 {
		pool := dbtest.Pool(t, func(c *pgxpool.Config) {
			c.ConnConfig.RuntimeParams["default_transaction_isolation"] = "repeatable read"
		})
		d, err := weirpgx.New(pool, &weirpgx.Config{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		drivers = append(drivers, testDriver{d})
	}
	start := make(chan struct{})
	errs := make(chan error, len(drivers))
	for _, d := range drivers {
		go func() {
			<-start
			_, err := weirmigrate.New(d).Up(t.Context(), nil)
			errs <- err
		}()
	}
	close(start)
	for range drivers {
		if err := <-errs; err != nil {
			t.Errorf("up: %v", err)
		}
	}
}

func TestBadOptionsChangeNothing(t *testing.T) {
	t.Parallel()
	d := newDriver(t, dbtest.Schema(t))
	n := len(d.Migrations())
	m := weirmigrate.New(d)

	before := snapshot(t, d)
	for _, target := range []int{-1, n + 1} {
		if done, err := m.Up(t.Context(), &weirmigrate.UpOpts{TargetVersion: target}); err == nil {
			t.Errorf("up to %d: applied %v, want an error", target, done)
		}
	}
	if after := snapshot(t, d); after != before {
		t.Fatalf("bad Up changed the schema:\nbefore %s\nafter  %s", before, after)
	}
	if regclass(t, d.Pool(), d.Schema(), "weir_migration") {
		t.Fatal("bad Up created weir_migration")
	}

	if _, err := m.Up(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	before = snapshot(t, d)
	bad := []*weirmigrate.DownOpts{
		{Steps: -1},
		{Steps: -1, All: true},
		{TargetVersion: -1},
		{TargetVersion: n + 1},
		{TargetVersion: -1, All: true},
	}
	for _, opts := range bad {
		done, err := m.Down(t.Context(), opts)
		if e, ok := errors.AsType[*weirmigrate.OpError](err); !ok || e.Op != "down" || err.Error() != "weirmigrate: down: "+e.Err.Error() {
			t.Errorf("down %+v: reverted %v, %v; want an *OpError of down", *opts, done, err)
		}
	}
	for _, target := range []int{-1, n + 1} {
		done, err := m.Up(t.Context(), &weirmigrate.UpOpts{TargetVersion: target})
		if e, ok := errors.AsType[*weirmigrate.OpError](err); !ok || e.Op != "up" ||
			e.Err.Error() != fmt.Sprintf("target version %d is out of range 1..%d", target, n) {
			t.Errorf("up to %d after up: applied %v, %v; want an *OpError of up naming the range", target, done, err)
		}
	}
	if after := snapshot(t, d); after != before {
		t.Fatalf("bad options changed the schema:\nbefore %s\nafter  %s", before, after)
	}
}

func TestUnknownVersionInDatabase(t *testing.T) {
	t.Parallel()
	schema := dbtest.Schema(t)
	d := newDriver(t, schema)
	m := weirmigrate.New(d)
	if _, err := m.Up(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Pool().Exec(t.Context(), "INSERT INTO "+pgx.Identifier{schema, "weir_migration"}.Sanitize()+
		" (version, name) VALUES (999, 'from_the_future')"); err != nil {
		t.Fatal(err)
	}
	wantRecorded := append(versions(d.Migrations()), 999)

	check := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: no error on a database with migration 999", what)
			return
		}
		if !strings.Contains(err.Error(), "upgrade weir") || !strings.Contains(err.Error(), "999_from_the_future") {
			t.Errorf("%s: error %q does not say to upgrade weir past 999_from_the_future", what, err)
		}
	}
	_, err := m.Up(t.Context(), nil)
	check("up", err)
	_, err = m.Down(t.Context(), nil)
	check("down", err)
	_, err = m.Down(t.Context(), &weirmigrate.DownOpts{All: true, Force: true})
	check("down all", err)
	err = m.Check(t.Context())
	check("check", err)
	if !errors.Is(err, weirmigrate.ErrIncompatible) {
		t.Errorf("check: %v, want ErrIncompatible", err)
	}
	// Status lists the unknown migration after the known ones.
	status, err := m.Status(t.Context())
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	last := status[len(status)-1]
	if len(status) != len(d.Migrations())+1 || last.String() != "999_from_the_future" || !last.Unknown || !last.Applied || last.Compatible {
		t.Fatalf("status ends with %+v, want 999_from_the_future unknown, applied, not compatible", last)
	}

	if got := recorded(t, d.Pool(), schema); !slices.Equal(got, wantRecorded) {
		t.Fatalf("weir_migration holds %v, want %v", got, wantRecorded)
	}
	if !regclass(t, d.Pool(), schema, "weir_job") {
		t.Fatal("weir_job is gone")
	}
}

// TestCompatibleNewerVersion checks that a migration this weir does not know,
// recorded as compatible, lets Check pass and Up find nothing to do, while Down
// still refuses, since it cannot revert it.
func TestCompatibleNewerVersion(t *testing.T) {
	t.Parallel()
	schema := dbtest.Schema(t)
	d := newDriver(t, schema)
	m := weirmigrate.New(d)
	if _, err := m.Up(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	next := len(d.Migrations()) + 1
	if _, err := d.Pool().Exec(t.Context(), "INSERT INTO "+pgx.Identifier{schema, "weir_migration"}.Sanitize()+
		" (version, name, compatible) VALUES ($1, 'add_column', true)", next); err != nil {
		t.Fatal(err)
	}
	if err := m.Check(t.Context()); err != nil {
		t.Fatalf("check: %v", err)
	}
	done, err := m.Up(t.Context(), nil)
	if err != nil || len(done) != 0 {
		t.Fatalf("up: applied %v, %v; want nothing to do", done, err)
	}
	status, err := m.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if last := status[len(status)-1]; last.Version != next || !last.Unknown || !last.Compatible {
		t.Fatalf("status ends with %+v", last)
	}
	before := snapshot(t, d)
	if _, err := m.Down(t.Context(), nil); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%03d_add_column", next)) {
		t.Fatalf("down: %v, want a refusal naming %03d_add_column", err, next)
	}
	if after := snapshot(t, d); after != before {
		t.Fatalf("refused Down changed the schema:\nbefore %s\nafter  %s", before, after)
	}
}

// TestDownRefusesToDropUserData checks that every way of reverting the
// baseline, which drops weir's tables, is refused while any table that holds
// what users wrote has rows (jobs alone, periodic schedules alone, queue
// settings alone, all of them), with an error saying what would be dropped,
// and changes nothing; Force drops them.
func TestDownRefusesToDropUserData(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		write func(t *testing.T, d weirdriver.Driver)
		drops []string // table:rows
		says  []string
	}{
		{"jobs", writeJobs, []string{"weir_job:3"}, []string{"3 jobs (with their outputs)"}},
		{"schedules", writeSchedule, []string{"weir_periodic:1"}, []string{"1 periodic schedule"}},
		{"queue settings", writeQueueSettings, []string{"weir_queue:2"}, []string{"the settings (pauses and limits) of 2 queues"}},
		{"all", func(t *testing.T, d weirdriver.Driver) {
			writeJobs(t, d)
			writeSchedule(t, d)
			writeQueueSettings(t, d)
		}, []string{"weir_job:3", "weir_periodic:1", "weir_queue:2"}, []string{"3 jobs (with their outputs), 1 periodic schedule and the settings (pauses and limits) of 2 queues"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			schema := dbtest.Schema(t)
			d := newDriver(t, schema)
			m := weirmigrate.New(d)
			if _, err := m.Up(t.Context(), nil); err != nil {
				t.Fatal(err)
			}
			c.write(t, d)
			n := len(d.Migrations())
			before := snapshot(t, d)
			for _, opts := range []*weirmigrate.DownOpts{{All: true}, {Steps: n}, {Steps: n + 5}, {TargetVersion: 0, All: true}} {
				done, err := m.Down(t.Context(), opts)
				dropErr, ok := errors.AsType[*weirmigrate.DropsDataError](err)
				if !ok {
					t.Fatalf("down %+v: reverted %v, error %v; want a DropsDataError", *opts, done, err)
				}
				var drops []string
				for _, dr := range dropErr.Drops {
					if dr.Migration.String() != "001_baseline" {
						t.Errorf("down %+v: %+v is not the baseline's", *opts, dr)
					}
					drops = append(drops, fmt.Sprintf("%s:%d", dr.Table, dr.Rows))
				}
				if !slices.Equal(drops, c.drops) || dropErr.Schema != schema {
					t.Errorf("down %+v: drops %q in %s, want %q", *opts, drops, dropErr.Schema, c.drops)
				}
				for _, s := range append([]string{"reverting 001_baseline would drop ", schema, "nothing was reverted"}, c.says...) {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not say %q", err, s)
					}
				}
			}
			if after := snapshot(t, d); after != before {
				t.Fatalf("refused Down changed the schema:\nbefore %s\nafter  %s", before, after)
			}
			for _, want := range c.drops {
				table, rows, _ := strings.Cut(want, ":")
				var got string
				if err := d.Pool().QueryRow(t.Context(), "SELECT count(*)::text FROM "+pgx.Identifier{schema, table}.Sanitize()).Scan(&got); err != nil || got != rows {
					t.Fatalf("%s after the refusals: %s rows, %v; want %s", table, got, err, rows)
				}
			}
			// Reverting migrations that keep weir's tables needs no force.
			done, err := m.Down(t.Context(), &weirmigrate.DownOpts{TargetVersion: 1})
			if err != nil {
				t.Fatal(err)
			}
			sameMigrations(t, "down to 1", done, reversed(want(d.Migrations()[1:])))
			done, err = m.Down(t.Context(), &weirmigrate.DownOpts{All: true, Force: true})
			if err != nil {
				t.Fatal(err)
			}
			sameMigrations(t, "forced down", done, want(d.Migrations()[:1]))
			if regclass(t, d.Pool(), schema, "weir_job") {
				t.Fatal("weir_job exists after a forced Down All")
			}
		})
	}
}

func writeJobs(t *testing.T, d weirdriver.Driver) {
	t.Helper()
	for range 3 {
		if err := insertJob(t, d); err != nil {
			t.Fatal(err)
		}
	}
}

func writeSchedule(t *testing.T, d weirdriver.Driver) {
	t.Helper()
	if err := d.Executor().PeriodicRegister(t.Context(), "leader", []*weirdriver.PeriodicRegisterParams{
		{Name: "nightly", Spec: "@daily", TimeZone: "UTC", NextRunAt: time.Now().Add(time.Hour).Round(time.Microsecond)},
	}); err != nil {
		t.Fatal(err)
	}
}

func writeQueueSettings(t *testing.T, d weirdriver.Driver) {
	t.Helper()
	if err := d.Executor().QueuePause(t.Context(), "mail"); err != nil {
		t.Fatal(err)
	}
	if err := d.Executor().QueueSetGlobalLimit(t.Context(), "reports", 5); err != nil {
		t.Fatal(err)
	}
}

// TestDownOfEmptyJobTableNeedsNoForce: an empty job table loses nothing.
func TestDownOfEmptyJobTableNeedsNoForce(t *testing.T) {
	t.Parallel()
	d := newDriver(t, dbtest.Schema(t))
	m := weirmigrate.New(d)
	if _, err := m.Up(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	done, err := m.Down(t.Context(), &weirmigrate.DownOpts{All: true})
	if err != nil {
		t.Fatal(err)
	}
	sameMigrations(t, "down all", done, reversed(want(d.Migrations())))
}

// TestCompatibleMarksRecorded checks that each migration records its own
// compatible mark: weir's baseline is not compatible (code that does not know
// it cannot run on its schema), the tests' note is, its body is not.
func TestCompatibleMarksRecorded(t *testing.T) {
	t.Parallel()
	d := newDriver(t, dbtest.Schema(t))
	if _, err := weirmigrate.New(d).Up(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	applied, err := d.MigrationsApplied(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	known := d.Migrations()
	if len(applied) != len(known) {
		t.Fatalf("applied %v, want %d migrations", applied, len(known))
	}
	for i, a := range applied {
		if a.Compatible != known[i].Compatible {
			t.Errorf("migration %d recorded compatible=%v, want %v", a.Version, a.Compatible, known[i].Compatible)
		}
	}
	if known[0].Compatible || !known[len(known)-2].Compatible || known[len(known)-1].Compatible {
		t.Errorf("marks of the baseline and the tests' migrations are not false, true, false: %+v", known)
	}
}

func TestFailingUpChangesNothing(t *testing.T) {
	t.Parallel()
	schema := dbtest.Schema(t)
	d := newDriver(t, schema)
	// A table in the way makes 001_baseline fail after its first statement
	// (CREATE SEQUENCE) succeeded.
	if _, err := d.Pool().Exec(t.Context(), "CREATE TABLE "+pgx.Identifier{schema, "weir_job"}.Sanitize()+" (x int)"); err != nil {
		t.Fatal(err)
	}
	done, err := weirmigrate.New(d).Up(t.Context(), nil)
	if err == nil {
		t.Fatalf("up applied %v, want an error", done)
	}
	if !strings.Contains(err.Error(), "001_baseline") {
		t.Errorf("error %q does not name 001_baseline", err)
	}
	if got := recorded(t, d.Pool(), schema); len(got) != 0 {
		t.Errorf("weir_migration holds %v after a failed Up", got)
	}
	if regclass(t, d.Pool(), schema, "weir_migration") {
		t.Error("weir_migration exists after a failed Up")
	}
	if regclass(t, d.Pool(), schema, "weir_job_id_seq") {
		t.Error("weir_job_id_seq exists after a failed Up")
	}
	var cols int
	if err := d.Pool().QueryRow(t.Context(), "SELECT count(*) FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'weir_job'",
		schema).Scan(&cols); err != nil {
		t.Fatal(err)
	}
	if cols != 1 {
		t.Errorf("the hand-made weir_job has %d columns, want 1", cols)
	}
}

func TestFailingDownChangesNothing(t *testing.T) {
	t.Parallel()
	schema := dbtest.Schema(t)
	d := newDriver(t, schema)
	m := weirmigrate.New(d)
	if _, err := m.Up(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	// A view on weir_job makes DROP TABLE weir_job fail.
	if _, err := d.Pool().Exec(t.Context(), "CREATE VIEW "+pgx.Identifier{schema, "blocker"}.Sanitize()+
		" AS SELECT id FROM "+pgx.Identifier{schema, "weir_job"}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, d)
	// Down All reverts the newer migrations, then fails on the one that drops weir_job.
	first := d.Migrations()[0]
	done, err := m.Down(t.Context(), &weirmigrate.DownOpts{All: true})
	if err == nil {
		t.Fatalf("down reverted %v, want an error", done)
	}
	if name := fmt.Sprintf("%03d_%s", first.Version, first.Name); !strings.Contains(err.Error(), name) {
		t.Errorf("error %q does not name %s", err, name)
	}
	if after := snapshot(t, d); after != before {
		t.Fatalf("failed Down changed the schema:\nbefore %s\nafter  %s", before, after)
	}
	if err := insertJob(t, d); err != nil {
		t.Fatalf("insert after a failed Down: %v", err)
	}
}

func TestCanceledContext(t *testing.T) {
	t.Parallel()
	d := newDriver(t, dbtest.Schema(t))
	before := snapshot(t, d)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := weirmigrate.New(d).Up(ctx, nil); err == nil {
		t.Fatal("up with a canceled context succeeded")
	}
	if after := snapshot(t, d); after != before {
		t.Fatalf("canceled Up changed the schema:\nbefore %s\nafter  %s", before, after)
	}
}

// markPrerelease makes schema's migration table hold the first n migrations of
// the driver's pre-release chain, as a weir before 0.1.0 left it, over the
// baseline's schema, which that whole chain produced.
func markPrerelease(t *testing.T, d testDriver, n int) {
	t.Helper()
	if _, err := weirmigrate.New(d).Up(t.Context(), &weirmigrate.UpOpts{TargetVersion: 1}); err != nil {
		t.Fatal(err)
	}
	table := pgx.Identifier{d.Schema(), "weir_migration"}.Sanitize()
	if _, err := d.Pool().Exec(t.Context(), "DELETE FROM "+table); err != nil {
		t.Fatal(err)
	}
	for i, name := range d.PrereleaseMigrations()[:n] {
		if _, err := d.Pool().Exec(t.Context(), "INSERT INTO "+table+" (version, name) VALUES ($1, $2)", i+1, name); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPrereleaseChainRecordedAtBaseline checks what a database migrated by the
// whole pre-release chain gets: Check and Status say to run Up, Down refuses,
// and Up records the baseline without running it (the jobs stay) and applies
// what follows.
func TestPrereleaseChainRecordedAtBaseline(t *testing.T) {
	t.Parallel()
	schema := dbtest.Schema(t)
	d := newDriver(t, schema)
	chain := d.PrereleaseMigrations()
	markPrerelease(t, d, len(chain))
	if err := insertJob(t, d); err != nil {
		t.Fatal(err)
	}
	m := weirmigrate.New(d)

	err := m.Check(t.Context())
	if !errors.Is(err, weirmigrate.ErrNotMigrated) || !strings.Contains(err.Error(), "before 0.1.0") ||
		!strings.Contains(err.Error(), "weir migrate up") {
		t.Fatalf("check: got %v, want ErrNotMigrated saying to run `weir migrate up`", err)
	}
	status, err := m.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !status[0].Prerelease || status[0].Applied || status[1].Prerelease {
		t.Fatalf("status = %+v, want the baseline marked pre-release and pending", status)
	}
	if _, err := m.Down(t.Context(), &weirmigrate.DownOpts{All: true, Force: true}); err == nil ||
		!strings.Contains(err.Error(), "before 0.1.0") {
		t.Fatalf("down: got %v, want a refusal naming the pre-release chain", err)
	}
	if got := recorded(t, d.Pool(), schema); len(got) != len(chain) {
		t.Fatalf("weir_migration holds %v after a refused Down", got)
	}

	done, err := m.Up(t.Context(), nil)
	if err != nil {
		t.Fatalf("up: %v", err)
	}
	sameMigrations(t, "up", done, want(d.Migrations()))
	if got := recorded(t, d.Pool(), schema); !slices.Equal(got, versions(d.Migrations())) {
		t.Fatalf("weir_migration holds %v, want %v", got, versions(d.Migrations()))
	}
	if err := m.Check(t.Context()); err != nil {
		t.Fatalf("check after up: %v", err)
	}
	var jobs int
	if err := d.Pool().QueryRow(t.Context(), "SELECT count(*) FROM "+pgx.Identifier{schema, "weir_job"}.Sanitize()).Scan(&jobs); err != nil || jobs != 1 {
		t.Fatalf("jobs after up: %d, %v; want the 1 inserted before", jobs, err)
	}
}

// TestPartialPrereleaseChainRefused checks that a database migrated by only
// part of the pre-release chain, or by a chain that differs from it, is
// refused with what to do, and left as it was.
func TestPartialPrereleaseChainRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		n    int
		bad  string // a name that replaces the last one
		want []string
	}{
		{"Partial", 15, "", []string{"015_queue_shares", "019_key_holder_want", "before 0.1.0"}},
		{"Differs", 3, "something_else", []string{"003_something_else", "inconsistent"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			schema := dbtest.Schema(t)
			d := newDriver(t, schema)
			markPrerelease(t, d, tc.n)
			table := pgx.Identifier{schema, "weir_migration"}.Sanitize()
			if tc.bad != "" {
				if _, err := d.Pool().Exec(t.Context(), "UPDATE "+table+" SET name = $1 WHERE version = $2", tc.bad, tc.n); err != nil {
					t.Fatal(err)
				}
			}
			m := weirmigrate.New(d)
			_, upErr := m.Up(t.Context(), nil)
			_, downErr := m.Down(t.Context(), &weirmigrate.DownOpts{All: true, Force: true})
			_, statusErr := m.Status(t.Context())
			for what, err := range map[string]error{"up": upErr, "down": downErr, "status": statusErr, "check": m.Check(t.Context())} {
				if err == nil {
					t.Errorf("%s: no error", what)
					continue
				}
				for _, s := range tc.want {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("%s: error %q does not mention %q", what, err, s)
					}
				}
			}
			if got := recorded(t, d.Pool(), schema); len(got) != tc.n {
				t.Errorf("weir_migration holds %v, want the %d rows left as they were", got, tc.n)
			}
			if !regclass(t, d.Pool(), schema, "weir_job") {
				t.Error("weir_job is gone")
			}
		})
	}
}
