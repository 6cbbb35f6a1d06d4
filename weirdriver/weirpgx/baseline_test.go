package weirpgx_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirdriver/weirpgx"
	"github.com/weirq/weir/weirmigrate"
)

// catalogSQL describes the objects of schema $1, one line each, sorted:
// tables and sequences with their options, columns in order with types,
// defaults and NOT NULL, constraints, indexes, triggers, and functions. A
// function is its definition's MD5 with the schema's name replaced and its
// comments and spacing removed, so that a comment can be reworded without
// changing the schema. Names are written with the schema's replaced by S.
const catalogSQL = `WITH ns AS (SELECT oid FROM pg_namespace WHERE nspname = $1)
SELECT 'rel ' || c.relname || ' ' || c.relkind::text || ' ' || coalesce(array_to_string(c.reloptions, ','), '')
	|| ' ' || coalesce(pg_get_expr(c.relpartbound, c.oid), '') || ' ' || coalesce(pg_get_partkeydef(c.oid), '')
FROM pg_class c WHERE c.relnamespace = (SELECT oid FROM ns) AND c.relkind IN ('r', 'p', 'S', 'v', 'm')
UNION ALL
SELECT 'col ' || c.relname || '.' || a.attnum || ' ' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
	|| CASE WHEN a.attnotnull THEN ' not null' ELSE '' END || coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '')
FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE c.relnamespace = (SELECT oid FROM ns) AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT 'con ' || c.relname || ' ' || k.conname || ' ' || pg_get_constraintdef(k.oid)
FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid WHERE c.relnamespace = (SELECT oid FROM ns)
UNION ALL
SELECT 'idx ' || i.relname || ' ' || pg_get_indexdef(i.oid)
FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid WHERE i.relnamespace = (SELECT oid FROM ns)
UNION ALL
SELECT 'trg ' || t.tgname || ' ' || pg_get_triggerdef(t.oid)
FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid WHERE c.relnamespace = (SELECT oid FROM ns) AND NOT t.tgisinternal
UNION ALL
SELECT 'fn ' || p.oid::regprocedure::text || ' ' || md5(regexp_replace(regexp_replace(
	replace(pg_get_functiondef(p.oid), $1, 'S'), '--[^\n]*', '', 'g'), '\s+', ' ', 'g'))
FROM pg_proc p WHERE p.pronamespace = (SELECT oid FROM ns)
ORDER BY 1`

// catalog returns catalogSQL's lines for schema.
func catalog(t *testing.T, pool *pgxpool.Pool, schema string) []string {
	t.Helper()
	return schemaLines(t, pool, catalogSQL, schema)
}

// schemaLines returns the lines that query returns for schema ($1), with the
// schema's name, qualifying another name, replaced by S.
func schemaLines(t *testing.T, pool *pgxpool.Pool, query, schema string) []string {
	t.Helper()
	rows, err := pool.Query(t.Context(), query, schema)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range lines {
		lines[i] = strings.ReplaceAll(l, pgx.Identifier{schema}.Sanitize()+".", "S.")
		lines[i] = strings.ReplaceAll(lines[i], schema+".", "S.")
	}
	return lines
}

// prereleaseCatalog is the catalog of a schema migrated by the pre-release
// chain (weirpgx.Driver.PrereleaseMigrations) to its last migration.
const prereleaseCatalog = "testdata/prerelease_catalog.txt"

// TestBaselineCatalog checks that the baseline migration makes exactly the
// schema that the pre-release chain made: the same tables, columns,
// constraints, indexes, triggers and functions. The chain's catalog is kept
// in testdata; with WEIR_PRERELEASE_MIGRATIONS naming a folder that holds the
// chain's files (those of weirdriver/weirpgx/migrations in any commit before
// the baseline), the test migrates a schema by them, compares, and writes the
// catalog anew.
//
// One exception: a function whose file an up file of migration 2 or later
// installs has its newest body in the baseline too (the binary holds no
// other), so its definition is not compared, only its name and argument types
// (laterInstalled). Every other line is compared whole.
func TestBaselineCatalog(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t, nil)
	schema := dbtest.Schema(t)
	d, err := weirpgx.New(pool, &weirpgx.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := weirmigrate.New(d).Up(t.Context(), &weirmigrate.UpOpts{TargetVersion: 1}); err != nil {
		t.Fatal(err)
	}
	got := catalog(t, pool, schema)

	var want []string
	if dir := os.Getenv("WEIR_PRERELEASE_MIGRATIONS"); dir != "" {
		old := dbtest.Schema(t)
		migrateByChain(t, pool, old, dir, d.PrereleaseMigrations())
		want = catalog(t, pool, old)
		if err := os.WriteFile(prereleaseCatalog, []byte(strings.Join(want, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	} else {
		data, err := os.ReadFile(prereleaseCatalog)
		if err != nil {
			t.Fatal(err)
		}
		want = strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	}
	if len(want) < 100 {
		t.Fatalf("the pre-release catalog has %d lines; it should describe every object", len(want))
	}
	later := laterInstalled(t)
	got, want = withoutDefinitions(got, later), withoutDefinitions(want, later)
	for _, l := range want {
		if !slices.Contains(got, l) {
			t.Errorf("the baseline lacks: %s", l)
		}
	}
	for _, l := range got {
		if !slices.Contains(want, l) {
			t.Errorf("the baseline has what the pre-release chain did not: %s", l)
		}
	}
}

// installLine matches a migration's line that installs a function's file, and
// the file's path.
var installLine = regexp.MustCompile(`(?m)^\s*` + weirdriver.MarkInstall + ` (\S+)`)

// laterInstalled returns the names of the functions whose files the up files
// of migrations 2 and later install.
func laterInstalled(t *testing.T) map[string]bool {
	t.Helper()
	ups, err := filepath.Glob("migrations/*.up.sql")
	if err != nil || len(ups) == 0 {
		t.Fatalf("no up files: %v", err)
	}
	names := map[string]bool{}
	for _, up := range ups {
		prefix, _, _ := strings.Cut(filepath.Base(up), "_")
		version, err := strconv.Atoi(prefix)
		if err != nil {
			t.Fatalf("%s: no version: %v", up, err)
		}
		if version < 2 {
			continue
		}
		data, err := os.ReadFile(up)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range installLine.FindAllStringSubmatch(string(data), -1) {
			names[strings.TrimSuffix(filepath.Base(m[1]), ".sql")] = true
		}
	}
	return names
}

// withoutDefinitions returns lines with the definition's hash cut from the
// line of each function named in names ("fn S.NAME(ARGS) HASH").
func withoutDefinitions(lines []string, names map[string]bool) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = l
		sig, ok := strings.CutPrefix(l, "fn S.")
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(sig, "(")
		if names[name] {
			out[i] = l[:strings.LastIndexByte(l, ' ')]
		}
	}
	return out
}

// migrateByChain applies the pre-release chain's up files, in dir, to schema,
// as the pre-release migrator did: in one transaction, with search_path set to
// the schema, after creating the migration table without the compatible
// column, which one of them adds.
func migrateByChain(t *testing.T, pool *pgxpool.Pool, schema, dir string, chain []string) {
	t.Helper()
	ctx := t.Context()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	for _, stmt := range []string{
		"SET LOCAL search_path TO " + pgx.Identifier{schema}.Sanitize(),
		`CREATE TABLE weir_migration (version integer PRIMARY KEY, name text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now())`,
	} {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	ms, err := weirdriver.LoadMigrations(os.DirFS(filepath.Dir(dir)), filepath.Base(dir))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != len(chain) {
		t.Fatalf("%s holds %d migrations; the pre-release chain has %d", dir, len(ms), len(chain))
	}
	for i, m := range ms {
		if m.Name != chain[i] {
			t.Fatalf("%s: migration %d is %s, want %s", filepath.Clean(dir), m.Version, m.Name, chain[i])
		}
		if _, err := tx.Exec(ctx, m.Up, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatalf("migration %d_%s: %v", m.Version, m.Name, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// createFunction matches the name of a function a SQL text creates.
var createFunction = regexp.MustCompile(`(?i)CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+(\w+)`)

// TestFunctionsInOneFile checks that each SQL function's body lives in one
// file of the repository, functions/NAME.sql, which creates it and no other
// function, and that a migration installs each such file.
func TestFunctionsInOneFile(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("functions/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("no function files: %v", err)
	}
	installed := map[string]bool{}
	ups, err := filepath.Glob("migrations/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, up := range ups {
		data, err := os.ReadFile(up)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range installLine.FindAllStringSubmatch(string(data), -1) {
			installed[m[1]] = true
		}
		if m := createFunction.FindStringSubmatch(string(data)); m != nil {
			t.Errorf("%s creates function %s: its body belongs in functions/%s.sql", up, m[1], m[1])
		}
	}
	owner := map[string]string{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(filepath.Base(f), ".sql")
		for _, m := range createFunction.FindAllStringSubmatch(string(data), -1) {
			if m[1] != name {
				t.Errorf("%s creates function %s, not only %s", f, m[1], name)
			}
		}
		owner[name] = f
		if !installed["functions/"+filepath.Base(f)] {
			t.Errorf("no migration installs %s", f)
		}
	}
	// No other SQL file of the repository creates these functions.
	err = filepath.WalkDir("../..", func(path string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() || filepath.Ext(path) != ".sql" {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range createFunction.FindAllStringSubmatch(string(data), -1) {
			if f, ok := owner[m[1]]; ok && filepath.Clean(path) != filepath.Clean(filepath.Join("../../weirdriver/weirpgx", f)) {
				t.Errorf("%s creates %s, whose body lives in %s", path, m[1], f)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
