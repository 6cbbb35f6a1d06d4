package weirpgx_test

import (
	"slices"
	"testing"
)

// enqueueDefinerSQL returns, for schema $1, whether weir_enqueue runs with its
// owner's rights, its settings, and whether PUBLIC may execute it.
const enqueueDefinerSQL = `SELECT p.prosecdef, p.proconfig, EXISTS (SELECT 1
		FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
		WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE')
	FROM pg_proc p WHERE p.pronamespace = (SELECT oid FROM pg_namespace WHERE nspname = $1)
	AND p.proname = 'weir_enqueue'`

// triggerFunctionsSQL returns the name and settings of the function of each
// trigger of weir_job in schema $1.
const triggerFunctionsSQL = `SELECT p.proname, p.proconfig FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid
	JOIN pg_class c ON c.oid = t.tgrelid
	WHERE c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = $1) AND c.relname = 'weir_job'
	AND NOT t.tgisinternal`

// otherDefinersSQL returns the functions of schema $1 other than weir_enqueue
// that run with their owner's rights.
const otherDefinersSQL = `SELECT p.oid::regprocedure::text FROM pg_proc p
	WHERE p.pronamespace = (SELECT oid FROM pg_namespace WHERE nspname = $1) AND p.prosecdef
	AND p.proname <> 'weir_enqueue'`

// TestEnqueueDefiner checks what the latest migration leaves weir_enqueue with
// (docs/sql-enqueue.md): it runs with its owner's rights, PUBLIC may not
// execute it, and it and the functions of weir_job's triggers, which run with
// the same rights inside it, resolve names in weir's schema and then pg_temp,
// so that no temporary object of the caller's is found before weir's. No other
// function of weir's runs with its owner's rights.
func TestEnqueueDefiner(t *testing.T) {
	t.Parallel()
	_, pool, schema := readySetup(t) // a schema migrated to the latest
	var pinned []string
	if err := pool.QueryRow(t.Context(), `SELECT ARRAY['search_path=' || quote_ident($1) || ', pg_temp']`, schema).Scan(&pinned); err != nil {
		t.Fatal(err)
	}

	var (
		definer, public bool
		config          []string
	)
	if err := pool.QueryRow(t.Context(), enqueueDefinerSQL, schema).Scan(&definer, &config, &public); err != nil {
		t.Fatal(err)
	}
	if !definer || !slices.Equal(config, pinned) || public {
		t.Errorf("weir_enqueue: security definer %t, settings %q, PUBLIC may execute %t; want true, %q, false",
			definer, config, public, pinned)
	}

	rows, err := pool.Query(t.Context(), triggerFunctionsSQL, schema)
	if err != nil {
		t.Fatal(err)
	}
	triggers := 0
	for rows.Next() {
		var name string
		if err := rows.Scan(&name, &config); err != nil {
			t.Fatal(err)
		}
		triggers++
		if !slices.Equal(config, pinned) {
			t.Errorf("trigger function %s: settings %q, want %q", name, config, pinned)
		}
	}
	if err := rows.Err(); err != nil || triggers == 0 {
		t.Fatalf("%d trigger functions on weir_job: %v", triggers, err)
	}

	if others := schemaLines(t, pool, otherDefinersSQL, schema); len(others) > 0 {
		t.Errorf("functions other than weir_enqueue run with their owner's rights: %q", others)
	}
}
