package weirdriver_test

import (
	"testing"
	"testing/fstest"

	"github.com/weirq/weir/weirdriver"
)

// TestLoadMigrationsMarks checks that the marks count in a file's header only:
// a mark after the first statement, say in a function body, is not one.
func TestLoadMigrationsMarks(t *testing.T) {
	t.Parallel()
	fsys := fstest.MapFS{
		"m/001_a.up.sql":   {Data: []byte("-- Makes a.\n\n-- weir:compatible\nCREATE TABLE a (x int);\n")},
		"m/001_a.down.sql": {Data: []byte("-- weir:drops-jobs\nDROP TABLE a;\n")},
		"m/002_b.up.sql":   {Data: []byte("CREATE TABLE b (x int);\n-- weir:compatible\n")},
		"m/002_b.down.sql": {Data: []byte("DROP TABLE b;\n-- weir:drops-jobs\n")},
		"m/003_c.up.sql":   {Data: []byte("--  weir:compatible  \nSELECT 1;\n")},
		"m/003_c.down.sql": {Data: []byte("-- weir:compatible\nSELECT 1;\n")},
	}
	ms, err := weirdriver.LoadMigrations(fsys, "m")
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ compatible, dropsJobs bool }{{true, true}, {false, false}, {false, false}}
	for i, m := range ms {
		if m.Compatible != want[i].compatible || m.DropsJobs != want[i].dropsJobs {
			t.Errorf("%03d_%s: compatible=%v drops-jobs=%v, want %v %v", m.Version, m.Name,
				m.Compatible, m.DropsJobs, want[i].compatible, want[i].dropsJobs)
		}
	}
}
