package dbtest_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/weirq/weir/internal/dbtest"
)

// schemaExists reports whether schema name exists.
func schemaExists(t *testing.T, pool *pgxpool.Pool, name string) bool {
	t.Helper()
	var ok bool
	err := pool.QueryRow(t.Context(),
		"SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", name).Scan(&ok)
	if err != nil {
		t.Fatalf("checking schema %s: %v", name, err)
	}
	return ok
}

func TestSchemaNamesAreDistinct(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 5 {
		name := dbtest.Schema(t)
		if seen[name] {
			t.Fatalf("Schema returned %q twice", name)
		}
		seen[name] = true
	}
}

func TestSchemaIsDroppedAfterCleanup(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t, nil)
	var name string
	// Not parallel, so t.Run returns after the subtest's cleanups ran.
	t.Run("use", func(t *testing.T) {
		name = dbtest.Schema(t)
		if !schemaExists(t, pool, name) {
			t.Fatalf("schema %s does not exist", name)
		}
		// A table makes the drop need CASCADE.
		if _, err := pool.Exec(t.Context(), "CREATE TABLE "+name+".x (id int)"); err != nil {
			t.Fatalf("creating table: %v", err)
		}
	})
	if name == "" {
		t.Fatal("subtest did not create a schema")
	}
	if schemaExists(t, pool, name) {
		t.Errorf("schema %s still exists after cleanup", name)
	}
}

func TestSchemaName(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t, nil)
	var name string
	t.Run("use", func(t *testing.T) {
		name = dbtest.SchemaName(t)
		if schemaExists(t, pool, name) {
			t.Fatalf("schema %s exists", name)
		}
		if _, err := pool.Exec(t.Context(), "CREATE SCHEMA "+name+"; CREATE TABLE "+name+".x (id int)"); err != nil {
			t.Fatalf("creating schema: %v", err)
		}
	})
	if schemaExists(t, pool, name) {
		t.Errorf("schema %s still exists after cleanup", name)
	}
}

func TestPool(t *testing.T) {
	t.Parallel()
	schema := dbtest.Schema(t)
	pool := dbtest.Pool(t, func(c *pgxpool.Config) {
		c.MaxConns = 2
		c.ConnConfig.RuntimeParams["search_path"] = schema
	})
	if got := pool.Config().MaxConns; got != 2 {
		t.Errorf("MaxConns = %d, want 2 (tweak not applied)", got)
	}
	ctx := t.Context()
	if _, err := pool.Exec(ctx, "CREATE TABLE items (name text)"); err != nil {
		t.Fatalf("creating table: %v", err)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO items VALUES ('a'), ('b')"); err != nil {
		t.Fatalf("inserting: %v", err)
	}
	var n int
	var current string
	if err := pool.QueryRow(ctx, "SELECT count(*), current_schema() FROM items").Scan(&n, &current); err != nil {
		t.Fatalf("querying: %v", err)
	}
	if n != 2 || current != schema {
		t.Errorf("got count %d in schema %s, want 2 in %s", n, current, schema)
	}
}

func TestPoolWithoutTweak(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t, nil)
	var one int
	if err := pool.QueryRow(t.Context(), "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1 = %d, %v", one, err)
	}
}
