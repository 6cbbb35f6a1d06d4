package weirbench

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weirq/weir/internal/dbtest"
)

// TestPgbenchRate: pgbench's rate of a statement is read from its report, and
// a statement that fails gives an error that carries pgbench's own words and
// not the database's URL. Without pgbench it is skipped, or fails with
// WEIR_REQUIRE_PG_BINARIES=1, which so also holds the benchmark tests to
// checking W4's ceiling.
func TestPgbenchRate(t *testing.T) {
	t.Parallel()
	path, err := PgbenchPath()
	if err != nil {
		dbtest.NoPGBinaries(t, err)
	}
	schema := dbtest.Schema(t)
	table := pgx.Identifier{schema, "t"}.Sanitize()
	pool := dbtest.Pool(t, nil)
	if _, err := pool.Exec(t.Context(), "CREATE TABLE "+table+" (n integer NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	tps, err := pgbenchRate(t.Context(), path, dbtest.URL(), "INSERT INTO "+table+" (n) VALUES (1)", 2, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var rows float64
	if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM "+table).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	// pgbench's figure leaves out connection time, so it may exceed the rows
	// a second of the whole run, but not by much.
	if tps <= 0 || rows == 0 || tps > 3*rows {
		t.Errorf("pgbench reported %.0f tps for %.0f rows inserted in 1 s", tps, rows)
	}

	_, err = pgbenchRate(t.Context(), path, dbtest.URL(), "INSERT INTO "+table+" (n) VALUES (NULL)", 1, time.Second)
	if err == nil || !strings.Contains(err.Error(), "pgbench") || !strings.Contains(err.Error(), "null value") {
		t.Errorf("a failing statement gave %v, want pgbench's error about the null value", err)
	}
	if err != nil && strings.Contains(err.Error(), dbtest.URL()) {
		t.Errorf("the error names the database's URL: %v", err)
	}
}
