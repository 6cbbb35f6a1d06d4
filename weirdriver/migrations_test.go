package weirdriver_test

import (
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirdriver/weirpgx"
	"github.com/weirq/weir/weirdriver/weirsqlite"
)

// TestLoadMigrationsMarks checks that the marks count in a file's header only:
// a mark after the first statement, say in a function body, is not one; and
// that drops-data names its tables, once each, over one line or several.
func TestLoadMigrationsMarks(t *testing.T) {
	t.Parallel()
	fsys := fstest.MapFS{
		"m/001_a.up.sql":   {Data: []byte("-- Makes a.\n\n-- weir:compatible\nCREATE TABLE a (x int);\n")},
		"m/001_a.down.sql": {Data: []byte("-- weir:drops-data a  weir_x\n-- weir:drops-data a b\nDROP TABLE a;\n")},
		"m/002_b.up.sql":   {Data: []byte("CREATE TABLE b (x int);\n-- weir:compatible\n")},
		"m/002_b.down.sql": {Data: []byte("DROP TABLE b;\n-- weir:drops-data b\n")},
		"m/003_c.up.sql":   {Data: []byte("--  weir:compatible  \nSELECT 1;\n")},
		"m/003_c.down.sql": {Data: []byte("-- weir:compatible\n-- weir:drops-datab\nSELECT 1;\n")},
	}
	ms, err := weirdriver.LoadMigrations(fsys, "m")
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		compatible bool
		drops      []string
	}{{true, []string{"a", "weir_x", "b"}}, {false, nil}, {false, nil}}
	for i, m := range ms {
		if m.Compatible != want[i].compatible || !slices.Equal(m.DropsData, want[i].drops) {
			t.Errorf("%03d_%s: compatible=%v drops-data=%q, want %v %q", m.Version, m.Name,
				m.Compatible, m.DropsData, want[i].compatible, want[i].drops)
		}
	}
}

// TestLoadMigrationsBadDropsData: a drops-data mark that names no table, or
// something that is not a table's name, is an error naming the file.
func TestLoadMigrationsBadDropsData(t *testing.T) {
	t.Parallel()
	for _, mark := range []string{"-- weir:drops-data", "-- weir:drops-data   ", `-- weir:drops-data weir_job "x"`, "-- weir:drops-data weir.job", "-- weir:drops-data Weir"} {
		fsys := fstest.MapFS{
			"m/001_a.up.sql":   {Data: []byte("CREATE TABLE a (x int);\n")},
			"m/001_a.down.sql": {Data: []byte(mark + "\nDROP TABLE a;\n")},
		}
		_, err := weirdriver.LoadMigrations(fsys, "m")
		if err == nil || !strings.Contains(err.Error(), "001_a.down.sql") {
			t.Errorf("%q: %v, want an error naming the file", mark, err)
		}
	}
}

// TestBaselinesDeclareUserData: reverting either driver's baseline drops the
// tables that hold what users wrote, and its down file says so.
func TestBaselinesDeclareUserData(t *testing.T) {
	t.Parallel()
	for _, d := range []weirdriver.Driver{&weirpgx.Driver{}, &weirsqlite.Driver{}} {
		if got := d.Migrations()[0].DropsData; !slices.Equal(got, []string{"weir_job", "weir_periodic", "weir_queue"}) {
			t.Errorf("%T's baseline drops the data of %q", d, got)
		}
	}
}

// TestLoadMigrationsInstall checks that an install line, anywhere in a file,
// stands for the named file's text, and that a missing file is an error naming
// the line's file and path.
func TestLoadMigrationsInstall(t *testing.T) {
	t.Parallel()
	fsys := fstest.MapFS{
		"f/fn.sql":         {Data: []byte("CREATE FUNCTION fn() RETURNS int LANGUAGE sql AS 'SELECT 1';")},
		"m/001_a.up.sql":   {Data: []byte("-- weir:compatible\nCREATE TABLE a (x int);\n  -- weir:install f/fn.sql  \nSELECT 2;\n")},
		"m/001_a.down.sql": {Data: []byte("DROP TABLE a;\n")},
	}
	ms, err := weirdriver.LoadMigrations(fsys, "m")
	if err != nil {
		t.Fatal(err)
	}
	want := "-- weir:compatible\nCREATE TABLE a (x int);\nCREATE FUNCTION fn() RETURNS int LANGUAGE sql AS 'SELECT 1';\nSELECT 2;\n"
	if ms[0].Up != want || !ms[0].Compatible {
		t.Fatalf("up is %q (compatible %v), want %q", ms[0].Up, ms[0].Compatible, want)
	}
	fsys["m/001_a.down.sql"] = &fstest.MapFile{Data: []byte("-- weir:install f/gone.sql\n")}
	_, err = weirdriver.LoadMigrations(fsys, "m")
	if err == nil || !strings.Contains(err.Error(), "001_a.down.sql") || !strings.Contains(err.Error(), "f/gone.sql") {
		t.Fatalf("a missing install: got %v, want an error naming the file and the path", err)
	}
}
