package weirbench

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/weirdriver/weirpgx"
	"github.com/weirq/weir/weirmigrate"
)

// TestResetTurnsReadyListOff: the reset between runs turns weir's ready list
// off, so that a run after one that turned it on (W6's limits per key, W7's
// snapshot) starts as on a new schema; a list already off is left alone.
func TestResetTurnsReadyListOff(t *testing.T) {
	ctx := t.Context()
	pool := dbtest.Pool(t, nil)
	schema := dbtest.Schema(t)
	d, err := weirpgx.New(pool, &weirpgx.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := weirmigrate.New(d).Up(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := d.ReadyListOn(ctx); err != nil {
		t.Fatal(err)
	}
	seq := pgx.Identifier{schema, "weir_ready_mode"}.Sanitize()
	value := func() int64 {
		t.Helper()
		var v int64
		if err := pool.QueryRow(ctx, "SELECT last_value FROM "+seq).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	sys := Weir(WeirConfig{Schema: schema}).(*weirSystem)
	if err := execSQL(ctx, pool, sys.ResetSQL()...); err != nil {
		t.Fatal(err)
	}
	off := value()
	if off%4 != 0 {
		t.Fatalf("the list's mode value %d after the reset, want off", off)
	}
	if err := execSQL(ctx, pool, sys.ResetSQL()...); err != nil {
		t.Fatal(err)
	}
	if v := value(); v != off {
		t.Fatalf("a second reset moved the value from %d to %d", off, v)
	}
}
