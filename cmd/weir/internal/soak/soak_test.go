package soak

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weirq/weir/internal/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// TestSoakKeepsUnmarkedSchema: a schema the soak did not make is never
// dropped, even when it holds a table named as the soak's own, or nothing.
// (It calls prepareSoakSchema rather than weir soak, which would go on to run
// workers were the schema taken.)
func TestSoakKeepsUnmarkedSchema(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t, nil)
	ctx := t.Context()

	schema := dbtest.Schema(t)
	soakRun := pgx.Identifier{schema, "soak_run"}.Sanitize()
	if _, err := pool.Exec(ctx, "CREATE TABLE "+soakRun+" (customer text); INSERT INTO "+soakRun+" VALUES ('ada')"); err != nil {
		t.Fatal(err)
	}
	err := prepareSoakSchema(ctx, pool, schema, `{}`)
	if want := "schema " + schema + " holds tables that weir soak did not make (soak_run)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v, want an error saying %q", err, want)
	}
	var customer string
	if err := pool.QueryRow(ctx, "SELECT customer FROM "+soakRun).Scan(&customer); err != nil || customer != "ada" {
		t.Fatalf("the user's table is gone or changed: %q, %v", customer, err)
	}

	empty := dbtest.Schema(t)
	err = prepareSoakSchema(ctx, pool, empty, `{}`)
	if want := "schema " + empty + " exists and weir soak did not make it"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v, want an error saying %q", err, want)
	}
	var tables int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname = $1", empty).Scan(&tables); err != nil || tables != 0 {
		t.Fatalf("the empty schema got %d tables, %v", tables, err)
	}
}

// TestSoakSchemaMark: the soak marks the schema it creates, and a later run
// drops and recreates a marked schema.
func TestSoakSchemaMark(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t, nil)
	ctx := t.Context()
	schema := dbtest.SchemaName(t)
	var first, second time.Time
	for _, at := range []*time.Time{&first, &second} {
		if err := prepareSoakSchema(ctx, pool, schema, `{}`); err != nil {
			t.Fatal(err)
		}
		var runs int
		if err := pool.QueryRow(ctx, "SELECT count(*), max(started_at) FROM "+pgx.Identifier{schema, "soak_run"}.Sanitize()).Scan(&runs, at); err != nil || runs != 1 {
			t.Fatalf("soak_run: %d rows, %v", runs, err)
		}
		var comment string
		if err := pool.QueryRow(ctx, "SELECT obj_description(oid, 'pg_namespace') FROM pg_namespace WHERE nspname = $1", schema).Scan(&comment); err != nil || comment != soakSchemaMark {
			t.Fatalf("schema comment %q, %v", comment, err)
		}
	}
	if !second.After(first) {
		t.Errorf("the second run kept the first one's soak_run")
	}
}

// TestReadTableStats: the report's last line reads the job table of the run's
// schema: its rows, and the dead tuples its updates left.
func TestReadTableStats(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t, nil)
	ctx := t.Context()
	schema := dbtest.SchemaName(t)
	if err := prepareSoakSchema(ctx, pool, schema, `{}`); err != nil {
		t.Fatal(err)
	}
	job := pgx.Identifier{schema, "weir_job"}.Sanitize()
	if _, err := pool.Exec(ctx, "INSERT INTO "+job+" (kind, args, queue, max_attempts) SELECT 'k', '{}', 'q', 5 FROM generate_series(1, 50)"); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "UPDATE "+job+" SET priority = 2 WHERE id % 5 = 0"); err != nil {
		t.Fatal(err)
	}
	s := &soakRun{cfg: &Config{WorkerSettings: WorkerSettings{Schema: schema}}, pool: pool}
	var got *tableStats
	// The statistics views lag the table: wait for the counts to arrive.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		if got, err = s.readTableStats(ctx); err != nil {
			t.Fatal(err)
		}
		if got.Live == 50 && got.Dead == 10 || time.Now().After(deadline) {
			break
		}
		if _, err := pool.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got.Live != 50 || got.Dead != 10 || got.HeapBytes == 0 || got.IndexBytes == 0 {
		t.Fatalf("got %+v, want 50 live and 10 dead tuples in a table and indexes of some size", got)
	}
	if line := got.String(); !strings.Contains(line, "50 live, 10 dead tuples") {
		t.Errorf("report line %q", line)
	}

	s.cfg.Schema = dbtest.SchemaName(t) // no such schema
	if _, err := s.readTableStats(ctx); err == nil || !strings.Contains(err.Error(), "weir_job") {
		t.Errorf("a missing table: got %v, want an error naming it", err)
	}
}
