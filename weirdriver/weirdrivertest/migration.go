package weirdrivertest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/weirq/weir/weirdriver"
)

func testMigrationsApplied(t *testing.T, d weirdriver.Driver) {
	applied, err := d.MigrationsApplied(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	known := d.Migrations()
	if len(applied) != len(known) {
		t.Fatalf("applied %d migrations, driver knows %d", len(applied), len(known))
	}
	for i := range known {
		// On a fresh schema every marked migration came after the column that
		// records the mark (the column's own migration is the first marked).
		if applied[i].Version != known[i].Version || applied[i].Name != known[i].Name ||
			applied[i].Compatible != known[i].Compatible {
			t.Fatalf("applied[%d] = %+v, known %03d_%s compatible=%v", i, applied[i], known[i].Version, known[i].Name, known[i].Compatible)
		}
	}
}

// testMigrationTx checks what weirmigrate relies on a MigrationTx for: its lock
// makes a second migration wait, it counts a table's rows (none for a table
// that does not exist), what it writes stays inside it until it commits, a
// rollback leaves nothing behind, and a commit keeps everything.
func testMigrationTx(t *testing.T, d weirdriver.Driver) {
	before := appliedKeys(t, d)
	for range 2 {
		insertOne(t, d, params("k", "q", `{}`))
	}

	tx := migrationBegin(t, d)
	wait, cancel := context.WithTimeout(ctx(t), 100*time.Millisecond)
	if second, err := d.MigrationBegin(wait); err == nil {
		second.Rollback(ctx(t)) //nolint:errcheck // the test fails anyway
		t.Fatal("a second migration began while the first held the lock")
	}
	cancel()
	if got := keys(t, mustApplied(t, tx)); !slices.Equal(got, before) {
		t.Fatalf("applied inside the migration: %v, want %v", got, before)
	}
	for table, want := range map[string]int64{"weir_job": 2, "weir_periodic": 0, "weir_absent": 0} {
		if n, err := tx.CountRows(ctx(t), table); err != nil || n != want {
			t.Fatalf("count rows of %s: %d, %v; want %d", table, n, err, want)
		}
	}
	if err := tx.Prepare(ctx(t)); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	if has, err := tx.HasCompatibleColumn(ctx(t)); err != nil || !has {
		t.Fatalf("compatible column on a migrated schema: %v, %v", has, err)
	}
	if err := tx.Exec(ctx(t), "CREATE TABLE weir_conformance_probe (x integer)"); err != nil {
		t.Fatalf("exec: %v", err)
	}
	if err := tx.Record(ctx(t), 9998, "plain"); err != nil {
		t.Fatalf("record: %v", err)
	}
	if err := tx.RecordCompatible(ctx(t), 9999, "marked", true); err != nil {
		t.Fatalf("record compatible: %v", err)
	}
	want := append(slices.Clone(before), "9998_plain compatible=false", "9999_marked compatible=true")
	if got := keys(t, mustApplied(t, tx)); !slices.Equal(got, want) {
		t.Fatalf("applied after the records: %v, want %v", got, want)
	}
	if got := appliedKeys(t, d); !slices.Equal(got, before) {
		t.Fatalf("applied outside the migration before it ended: %v, want %v", got, before)
	}
	if err := tx.Rollback(ctx(t)); err != nil {
		t.Fatalf("rollback: %v", err)
	}
	if got := appliedKeys(t, d); !slices.Equal(got, before) {
		t.Fatalf("applied after a rollback: %v, want %v", got, before)
	}

	// The probe table is gone, or creating it again would fail; this time the
	// migration commits.
	tx = migrationBegin(t, d)
	if err := tx.Prepare(ctx(t)); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	if err := tx.Exec(ctx(t), "CREATE TABLE weir_conformance_probe (x integer)"); err != nil {
		t.Fatalf("exec after a rollback: %v", err)
	}
	if err := tx.RecordCompatible(ctx(t), 9999, "marked", true); err != nil {
		t.Fatalf("record compatible: %v", err)
	}
	if err := tx.Commit(ctx(t)); err != nil {
		t.Fatalf("commit: %v", err)
	}
	if err := tx.Rollback(ctx(t)); err != nil {
		t.Fatalf("rollback after commit: %v", err)
	}
	if got, want := appliedKeys(t, d), append(slices.Clone(before), "9999_marked compatible=true"); !slices.Equal(got, want) {
		t.Fatalf("applied after a commit: %v, want %v", got, want)
	}

	tx = migrationBegin(t, d)
	if err := tx.Prepare(ctx(t)); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	if err := tx.Exec(ctx(t), "DROP TABLE weir_conformance_probe"); err != nil {
		t.Fatalf("exec: %v", err)
	}
	if err := tx.Unrecord(ctx(t), 9999); err != nil {
		t.Fatalf("unrecord: %v", err)
	}
	if err := tx.Commit(ctx(t)); err != nil {
		t.Fatalf("commit: %v", err)
	}
	if got := appliedKeys(t, d); !slices.Equal(got, before) {
		t.Fatalf("applied after the unrecord: %v, want %v", got, before)
	}
}

// migrationBegin begins a migration that ends, at the latest, when the test
// does: a test that fails leaves none open to hold the lock and its connection.
func migrationBegin(t *testing.T, d weirdriver.Driver) weirdriver.MigrationTx {
	t.Helper()
	tx, err := d.MigrationBegin(ctx(t))
	if err != nil {
		t.Fatalf("begin migration: %v", err)
	}
	t.Cleanup(func() { tx.Rollback(context.Background()) }) //nolint:errcheck // a no-op once it ended
	return tx
}

func mustApplied(t *testing.T, tx weirdriver.MigrationTx) []weirdriver.AppliedMigration {
	t.Helper()
	applied, err := tx.Applied(ctx(t))
	if err != nil {
		t.Fatalf("applied: %v", err)
	}
	return applied
}

// appliedKeys is keys of what MigrationsApplied returns.
func appliedKeys(t *testing.T, d weirdriver.Driver) []string {
	t.Helper()
	applied, err := d.MigrationsApplied(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	return keys(t, applied)
}

// keys names each applied migration with its mark, failing on one without an
// applied time.
func keys(t *testing.T, applied []weirdriver.AppliedMigration) []string {
	t.Helper()
	out := make([]string, len(applied))
	for i, a := range applied {
		if a.AppliedAt.IsZero() {
			t.Fatalf("migration %d has no applied time", a.Version)
		}
		out[i] = fmt.Sprintf("%03d_%s compatible=%v", a.Version, a.Name, a.Compatible)
	}
	return out
}
