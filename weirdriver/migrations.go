package weirdriver

import (
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
)

// LoadMigrations reads a driver's migrations from dir in fsys: pairs of files named
// NNN_name.up.sql and NNN_name.down.sql, numbered 1, 2, 3... without gaps.
func LoadMigrations(fsys fs.FS, dir string) ([]Migration, error) {
	names, err := fs.Glob(fsys, dir+"/*.up.sql")
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, name := range names {
		base := strings.TrimSuffix(strings.TrimPrefix(name, dir+"/"), ".up.sql")
		num, label, ok := strings.Cut(base, "_")
		version, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("migration file %q is not named NNN_name.up.sql", name)
		}
		up, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		down, err := fs.ReadFile(fsys, dir+"/"+base+".down.sql")
		if err != nil {
			return nil, fmt.Errorf("migration %q has no down file", base)
		}
		out = append(out, Migration{Version: version, Name: label, Up: string(up), Down: string(down)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migration versions must run 1, 2, 3...; found %d at position %d", m.Version, i+1)
		}
	}
	return out, nil
}
