package weirdriver

import (
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Header marks that a migration file may carry among the comment lines it starts
// with.
const (
	// MarkCompatible in an up file sets Migration.Compatible.
	MarkCompatible = "-- weir:compatible"
	// MarkDropsData in a down file, followed by the names of tables separated
	// by spaces, sets Migration.DropsData: reverting the migration drops the
	// rows of those tables, which hold what users wrote.
	MarkDropsData = "-- weir:drops-data"
	// MarkInstall, followed by a space and a file's path in the migrations'
	// file system, on a line of its own anywhere in a file, stands for that
	// file's text: a SQL function's body lives in one source file, which the
	// migrations that create or change the function install.
	MarkInstall = "-- weir:install"
)

// LoadMigrations reads a driver's migrations from dir in fsys: pairs of files named
// NNN_name.up.sql and NNN_name.down.sql, numbered 1, 2, 3... without gaps. The
// marks are read from each file's header, the comment lines it starts with;
// each MarkInstall line is replaced by the text of the file it names.
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
		upSQL, err := expandInstalls(fsys, name, string(up))
		if err != nil {
			return nil, err
		}
		downSQL, err := expandInstalls(fsys, dir+"/"+base+".down.sql", string(down))
		if err != nil {
			return nil, err
		}
		drops, err := dropsData(string(down))
		if err != nil {
			return nil, fmt.Errorf("migration file %q: %w", dir+"/"+base+".down.sql", err)
		}
		out = append(out, Migration{
			Version: version, Name: label, Up: upSQL, Down: downSQL,
			Compatible: hasMark(string(up), MarkCompatible),
			DropsData:  drops,
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migration versions must run 1, 2, 3...; found %d at position %d", m.Version, i+1)
		}
	}
	return out, nil
}

// header returns the lines of sql's header, trimmed: the comment and blank
// lines before its first statement. A mark further down, say in a function
// body, does not count.
func header(sql string) []string {
	var lines []string
	for line := range strings.Lines(sql) {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "--") {
			break
		}
		lines = append(lines, line)
	}
	return lines
}

// hasMark reports whether mark is a line of sql's header.
func hasMark(sql, mark string) bool {
	return slices.Contains(header(sql), mark)
}

// tableName is what a MarkDropsData line may name: an unquoted SQL name.
var tableName = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// dropsData returns the tables that the MarkDropsData lines of sql's header
// name, in order and once each; an error when such a line names none, or
// something that is not a table's name.
func dropsData(sql string) ([]string, error) {
	var tables []string
	for _, line := range header(sql) {
		rest, ok := strings.CutPrefix(line, MarkDropsData)
		if !ok || rest != "" && rest[0] != ' ' {
			continue
		}
		names := strings.Fields(rest)
		if len(names) == 0 {
			return nil, fmt.Errorf("%q names no table", line)
		}
		for _, name := range names {
			if !tableName.MatchString(name) {
				return nil, fmt.Errorf("%q names %q, which is not a table's name", line, name)
			}
			if !slices.Contains(tables, name) {
				tables = append(tables, name)
			}
		}
	}
	return tables, nil
}

// expandInstalls replaces each MarkInstall line of sql, the text of the file
// named name, by the text of the file it names in fsys.
func expandInstalls(fsys fs.FS, name, sql string) (string, error) {
	if !strings.Contains(sql, MarkInstall) {
		return sql, nil
	}
	var b strings.Builder
	for line := range strings.Lines(sql) {
		path, ok := strings.CutPrefix(strings.TrimSpace(line), MarkInstall+" ")
		if !ok {
			b.WriteString(line)
			continue
		}
		path = strings.TrimSpace(path)
		text, err := fs.ReadFile(fsys, path)
		if err != nil {
			return "", fmt.Errorf("migration file %q installs %q: %w", name, path, err)
		}
		b.Write(text)
		if !strings.HasSuffix(string(text), "\n") {
			b.WriteByte('\n')
		}
	}
	return b.String(), nil
}
