package weirpgx_test

import (
	"testing"

	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirdriver/weirdrivertest"
	"github.com/weirq/weir/weirdriver/weirpgx"
	"github.com/weirq/weir/weirmigrate"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// setup returns a driver on a fresh, migrated schema.
func setup(t *testing.T) weirdriver.Driver {
	t.Helper()
	d, err := weirpgx.New(dbtest.Pool(t, nil), &weirpgx.Config{Schema: dbtest.Schema(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := weirmigrate.New(d).Up(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestConformance(t *testing.T) {
	t.Parallel()
	weirdrivertest.Run(t, setup)
}

func TestNewRejectsBadSchema(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t, nil)
	for _, schema := range []string{"Upper", "1abc", "semi;colon", "with space", "a-b", string(make([]byte, 64)),
		"information_schema", "pg_catalog", "pg_toast", "pg_temp", "pg_temp_3", "pg_toast_temp_3", "pg_mine"} {
		if _, err := weirpgx.New(pool, &weirpgx.Config{Schema: schema}); err == nil {
			t.Errorf("schema %q accepted", schema)
		}
	}
	if _, err := weirpgx.New(nil, nil); err == nil {
		t.Error("nil pool accepted")
	}
	for _, schema := range []string{"public", "weir", "_pg", "pgx", "pg", "information", "information_schema2"} {
		if err := weirpgx.ValidateSchema(schema); err != nil {
			t.Errorf("schema %q refused: %v", schema, err)
		}
	}
}
