// Package teststore gives a test both of weir's stores, migrated: a schema of
// its own on PostgreSQL (internal/dbtest) and a SQLite file in its temporary
// folder, for tests that check a behaviour on each.
package teststore

import (
	"path/filepath"
	"testing"

	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirdriver/weirpgx"
	"github.com/weirq/weir/weirdriver/weirsqlite"
	"github.com/weirq/weir/weirmigrate"
)

// Both returns a migrated PostgreSQL schema and a migrated SQLite file, closed
// and dropped when the test ends.
func Both(t *testing.T) []weirdriver.Driver {
	t.Helper()
	pg, err := weirpgx.New(dbtest.Pool(t, nil), &weirpgx.Config{Schema: dbtest.Schema(t)})
	if err != nil {
		t.Fatal(err)
	}
	lite, err := weirsqlite.Open(filepath.Join(t.TempDir(), "jobs.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lite.Close() })
	for _, d := range []weirdriver.Driver{pg, lite} {
		if _, err := weirmigrate.New(d).Up(t.Context(), nil); err != nil {
			t.Fatal(err)
		}
	}
	return []weirdriver.Driver{pg, lite}
}
