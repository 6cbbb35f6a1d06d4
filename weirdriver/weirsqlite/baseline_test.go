package weirsqlite_test

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirmigrate"
)

// spaces matches a run of white space, and the space inside parentheses and
// before commas, which SQLite keeps as written in sqlite_schema.sql.
var (
	spaces      = regexp.MustCompile(`\s+`)
	innerSpaces = regexp.MustCompile(`\( | \)| ,`)
)

// catalog describes db's objects, one line each, sorted: each table, index and
// trigger with its SQL (its spacing made one space), and each table's columns
// in order with their types, NOT NULL, defaults and keys.
func catalog(t *testing.T, db *sql.DB) []string {
	t.Helper()
	ctx := testCtx(t)
	rows, err := db.QueryContext(ctx, `SELECT type, name, tbl_name, coalesce(sql, '') FROM sqlite_schema
		WHERE name NOT LIKE 'sqlite_%' ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	var lines, tables []string
	for rows.Next() {
		var typ, name, table, text string
		if err := rows.Scan(&typ, &name, &table, &text); err != nil {
			t.Fatal(err)
		}
		text = innerSpaces.ReplaceAllStringFunc(spaces.ReplaceAllString(text, " "), strings.TrimSpace)
		lines = append(lines, fmt.Sprintf("%s %s on %s: %s", typ, name, table, text))
		if typ == "table" {
			tables = append(tables, name)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, table := range tables {
		cols, err := db.QueryContext(ctx, `SELECT cid, name, type, "notnull", coalesce(dflt_value, 'NULL'), pk
			FROM pragma_table_xinfo(?)`, table)
		if err != nil {
			t.Fatal(err)
		}
		for cols.Next() {
			var cid, notNull, pk int
			var name, typ, dflt string
			if err := cols.Scan(&cid, &name, &typ, &notNull, &dflt, &pk); err != nil {
				t.Fatal(err)
			}
			lines = append(lines, fmt.Sprintf("column %s.%d %s %s notnull=%d default=%s pk=%d", table, cid, name, typ, notNull, dflt, pk))
		}
		if err := cols.Err(); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(lines)
	return lines
}

// prereleaseCatalog is the catalog of a database migrated by the pre-release
// chain (weirsqlite.Driver.PrereleaseMigrations) to its last migration.
const prereleaseCatalog = "testdata/prerelease_catalog.txt"

// TestBaselineCatalog checks that the baseline migration makes exactly the
// schema that the pre-release chain made. The chain's catalog is kept in
// testdata; with WEIR_PRERELEASE_SQLITE_MIGRATIONS naming a folder that holds
// the chain's files (those of weirdriver/weirsqlite/migrations in any commit
// before the baseline), the test migrates a database by them, compares, and
// writes the catalog anew.
func TestBaselineCatalog(t *testing.T) {
	t.Parallel()
	d := open(t, filepath.Join(t.TempDir(), "weir.db"))
	if _, err := weirmigrate.New(d).Up(testCtx(t), nil); err != nil {
		t.Fatal(err)
	}
	got := catalog(t, d.DB())

	var want []string
	if dir := os.Getenv("WEIR_PRERELEASE_SQLITE_MIGRATIONS"); dir != "" {
		old := open(t, filepath.Join(t.TempDir(), "old.db"))
		migrateByChain(t, old.DB(), dir, d.PrereleaseMigrations())
		want = catalog(t, old.DB())
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
	if len(want) < 50 {
		t.Fatalf("the pre-release catalog has %d lines; it should describe every object", len(want))
	}
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

// migrateByChain applies the pre-release chain's up files, in dir, to db as the
// pre-release migrator did, after creating the migration table without the
// compatible column, which one of them adds.
func migrateByChain(t *testing.T, db *sql.DB, dir string, chain []string) {
	t.Helper()
	ctx := testCtx(t)
	if _, err := db.ExecContext(ctx, `CREATE TABLE weir_migration (version INTEGER PRIMARY KEY,
		name TEXT NOT NULL, applied_at INTEGER NOT NULL) STRICT`); err != nil {
		t.Fatal(err)
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
			t.Fatalf("%s: migration %d is %s, want %s", dir, m.Version, m.Name, chain[i])
		}
		if _, err := db.ExecContext(ctx, m.Up); err != nil {
			t.Fatalf("migration %d_%s: %v", m.Version, m.Name, err)
		}
	}
}
