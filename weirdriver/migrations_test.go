package weirdriver_test

import (
	"strings"
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
