package weirpgx_test

import (
	"slices"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/weirdriver/weirpgx"
	"github.com/weirq/weir/weirmigrate"
)

// privilegesSQL describes who may do what on the tables, sequences and
// functions of schema $1, one line each, sorted: the object, the grantee
// (PUBLIC for everyone) and the privilege, with the defaults of an object
// that has no grants of its own spelled out.
const privilegesSQL = `WITH ns AS (SELECT oid FROM pg_namespace WHERE nspname = $1)
SELECT 'priv ' || c.relname || ' ' || coalesce(r.rolname, 'PUBLIC') || ' ' || a.privilege_type
	|| CASE WHEN a.is_grantable THEN ' grantable' ELSE '' END
FROM pg_class c
CROSS JOIN LATERAL aclexplode(coalesce(c.relacl, acldefault((CASE c.relkind WHEN 'S' THEN 's' ELSE 'r' END)::"char", c.relowner))) a
LEFT JOIN pg_roles r ON r.oid = a.grantee
WHERE c.relnamespace = (SELECT oid FROM ns) AND c.relkind IN ('r', 'p', 'S', 'v', 'm')
UNION ALL
SELECT 'priv ' || p.oid::regprocedure::text || ' ' || coalesce(r.rolname, 'PUBLIC') || ' ' || a.privilege_type
	|| CASE WHEN a.is_grantable THEN ' grantable' ELSE '' END
FROM pg_proc p
CROSS JOIN LATERAL aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
LEFT JOIN pg_roles r ON r.oid = a.grantee
WHERE p.pronamespace = (SELECT oid FROM ns)
ORDER BY 1`

// snapshot returns the catalog (catalogSQL) and the privileges (privilegesSQL)
// of schema.
func snapshot(t *testing.T, pool *pgxpool.Pool, schema string) []string {
	t.Helper()
	return append(catalog(t, pool, schema), schemaLines(t, pool, privilegesSQL, schema)...)
}

// TestDownRestores checks, for each version v below the latest, that reverting
// the migrations above v leaves the schema as migrating up to v made it, and
// that migrating up again makes the latest schema again: the same catalog,
// with each function's definition and settings, and the same privileges.
func TestDownRestores(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t, nil)
	d, err := weirpgx.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	for v := 1; v < len(d.Migrations()); v++ {
		t.Run(strconv.Itoa(v), func(t *testing.T) {
			t.Parallel()
			schema := dbtest.Schema(t)
			d, err := weirpgx.New(pool, &weirpgx.Config{Schema: schema})
			if err != nil {
				t.Fatal(err)
			}
			m := weirmigrate.New(d)
			if _, err := m.Up(t.Context(), &weirmigrate.UpOpts{TargetVersion: v}); err != nil {
				t.Fatal(err)
			}
			atV := snapshot(t, pool, schema)
			if _, err := m.Up(t.Context(), nil); err != nil {
				t.Fatal(err)
			}
			latest := snapshot(t, pool, schema)
			if _, err := m.Down(t.Context(), &weirmigrate.DownOpts{TargetVersion: v}); err != nil {
				t.Fatal(err)
			}
			sameLines(t, "down to "+strconv.Itoa(v), snapshot(t, pool, schema), atV)
			if _, err := m.Up(t.Context(), nil); err != nil {
				t.Fatal(err)
			}
			sameLines(t, "up again", snapshot(t, pool, schema), latest)
		})
	}
}

// sameLines reports each line that got or want holds and the other lacks.
func sameLines(t *testing.T, what string, got, want []string) {
	t.Helper()
	for _, l := range want {
		if !slices.Contains(got, l) {
			t.Errorf("%s: lacks %s", what, l)
		}
	}
	for _, l := range got {
		if !slices.Contains(want, l) {
			t.Errorf("%s: has %s", what, l)
		}
	}
}
