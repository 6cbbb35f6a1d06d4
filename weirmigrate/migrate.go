// Package weirmigrate applies and reverts weir's versioned schema migrations. The
// migrations are embedded in each driver, so a binary always carries the schema it
// needs. Concurrent migrators wait for each other, and each call runs in one
// transaction: it applies everything it planned or nothing. The algorithm is
// this package's; a driver gives it the transaction, the lock and one statement
// per step (weirdriver.MigrationTx).
package weirmigrate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/weirq/weir/weirdriver"
)

// Migrator migrates one driver's schema.
type Migrator struct {
	driver weirdriver.Driver
}

// New returns a migrator for driver's schema.
func New(driver weirdriver.Driver) *Migrator {
	return &Migrator{driver: driver}
}

// Migration is a migration that a call applied or reverted.
type Migration struct {
	Version int
	Name    string
}

func (m Migration) String() string { return fmt.Sprintf("%03d_%s", m.Version, m.Name) }

// UpOpts limits Up. The zero value applies every pending migration.
type UpOpts struct {
	// TargetVersion stops after this version; 0 means the latest.
	TargetVersion int
}

// DownOpts limits Down. The zero value reverts the latest migration only.
type DownOpts struct {
	// Steps is how many migrations to revert; 0 means 1. Ignored when All or
	// TargetVersion is set.
	Steps int
	// TargetVersion reverts every migration above this version (0 with All: none left).
	TargetVersion int
	// All reverts every applied migration, dropping weir's tables.
	All bool
	// Force reverts migrations that drop what users wrote (jobs, periodic
	// schedules, queue settings) even while there is some, which is lost.
	// Without it Down refuses with a *DropsDataError.
	Force bool
}

// DropsDataError is Down's error when the migrations it would revert drop
// tables that hold rows users wrote: jobs (with their outputs), periodic
// schedules, queue settings. Nothing was reverted; DownOpts.Force drops them.
type DropsDataError struct {
	// Drops lists each table that would be dropped with rows in it, in the
	// order the migrations would be reverted.
	Drops []DroppedRows
	// Driver and Schema name the database, as weirdriver.Driver does.
	Driver, Schema string
}

// DroppedRows is a table whose rows reverting Migration would drop.
type DroppedRows struct {
	Migration Migration
	Table     string
	Rows      int64
}

func (e *DropsDataError) Error() string {
	return fmt.Sprintf("%s, in %s schema %q; nothing was reverted (force the revert to drop them)",
		e.Lost(), e.Driver, e.Schema)
}

// Lost says what the revert would drop, migration by migration, as
// "reverting 001_baseline would drop 3 jobs, 1 periodic schedule and the
// settings of 2 queues".
func (e *DropsDataError) Lost() string {
	var parts []string
	for i := 0; i < len(e.Drops); {
		mig := e.Drops[i].Migration
		var what []string
		for ; i < len(e.Drops) && e.Drops[i].Migration == mig; i++ {
			what = append(what, rowsOf(e.Drops[i].Table, e.Drops[i].Rows))
		}
		parts = append(parts, fmt.Sprintf("reverting %s would drop %s", mig, andList(what)))
	}
	return strings.Join(parts, ", and ")
}

// rowsOf names n rows of table as what they are to a user.
func rowsOf(table string, n int64) string {
	one := n == 1
	switch table {
	case "weir_job":
		return fmt.Sprintf("%d %s (with their outputs)", n, pick(one, "job", "jobs"))
	case "weir_periodic":
		return fmt.Sprintf("%d periodic %s", n, pick(one, "schedule", "schedules"))
	case "weir_queue":
		return fmt.Sprintf("the settings (pauses and limits) of %d %s", n, pick(one, "queue", "queues"))
	}
	return fmt.Sprintf("%d %s of %s", n, pick(one, "row", "rows"), table)
}

func pick(one bool, singular, plural string) string {
	if one {
		return singular
	}
	return plural
}

// andList joins items as "a", "a and b" or "a, b and c".
func andList(items []string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " and " + items[len(items)-1]
}

// OpError is the error of Up, Down or Status: Op is the method ("up", "down",
// "status") and Err says what stood in the way (the options, the database,
// its migration table, or a *DropsDataError). errors.Is and errors.As see
// through to Err; a command can show Err under its own words.
type OpError struct {
	Op  string
	Err error
}

func (e *OpError) Error() string { return "weirmigrate: " + e.Op + ": " + e.Err.Error() }

func (e *OpError) Unwrap() error { return e.Err }

// ErrIncompatible is wrapped by Check when the database has migrations this weir
// does not know and one of them is not marked compatible: a newer weir applied
// it, and this one may not run against the schema.
var ErrIncompatible = errors.New("schema is newer than this weir")

// Up applies pending migrations in order and returns those it applied. A
// database that also has migrations this weir does not know, all of them marked
// compatible, has nothing pending. A database that a weir before 0.1.0 migrated
// by the whole chain that the baseline replaces has the baseline's schema: Up
// records the baseline as applied, without running it, and returns it first.
func (m *Migrator) Up(ctx context.Context, opts *UpOpts) ([]Migration, error) {
	if opts == nil {
		opts = &UpOpts{}
	}
	known := m.driver.Migrations()
	target := len(known)
	if opts.TargetVersion != 0 {
		if opts.TargetVersion < 0 || opts.TargetVersion > len(known) {
			return nil, &OpError{Op: "up", Err: fmt.Errorf("target version %d is out of range 1..%d", opts.TargetVersion, len(known))}
		}
		target = opts.TargetVersion
	}
	done, err := m.migrate(ctx, up, func(_ weirdriver.MigrationTx, applied []weirdriver.AppliedMigration) ([]weirdriver.Migration, error) {
		newer, err := splitApplied(applied, known)
		if err != nil {
			return nil, err
		}
		if len(newer) > 0 {
			if bad := incompatible(newer); len(bad) > 0 {
				return nil, fmt.Errorf("database has %s, which this weir does not know (it knows %s) and which %s not marked compatible: upgrade weir",
					plural("migration", bad), knownRange(known), isAre(bad))
			}
			return nil, nil
		}
		return known[len(applied):max(target, len(applied))], nil
	})
	if err != nil {
		return nil, &OpError{Op: "up", Err: err}
	}
	return names(done), nil
}

// Down reverts applied migrations, newest first, and returns those it reverted.
// It refuses, with a *DropsDataError, to revert migrations that drop tables
// holding what users wrote (jobs, periodic schedules, queue settings: each
// migration's DropsData) while any of them has rows, unless opts.Force is set;
// and it refuses a
// database with migrations this weir does not know, since it cannot revert them.
func (m *Migrator) Down(ctx context.Context, opts *DownOpts) ([]Migration, error) {
	if opts == nil {
		opts = &DownOpts{}
	}
	if opts.Steps < 0 {
		return nil, &OpError{Op: "down", Err: fmt.Errorf("steps must not be negative, got %d", opts.Steps)}
	}
	known := m.driver.Migrations()
	if opts.TargetVersion < 0 || opts.TargetVersion > len(known) {
		return nil, &OpError{Op: "down", Err: fmt.Errorf("target version %d is out of range 0..%d", opts.TargetVersion, len(known))}
	}
	done, err := m.migrate(ctx, down, func(tx weirdriver.MigrationTx, applied []weirdriver.AppliedMigration) ([]weirdriver.Migration, error) {
		newer, err := splitApplied(applied, known)
		if err != nil {
			return nil, err
		}
		if len(newer) > 0 {
			return nil, fmt.Errorf("database has %s, which this weir does not know (it knows %s) and cannot revert: upgrade weir to the one that applied it",
				plural("migration", newer), knownRange(known))
		}
		keep := len(applied) - max(opts.Steps, 1)
		if opts.All || opts.TargetVersion > 0 {
			keep = opts.TargetVersion
		}
		keep = max(0, min(keep, len(applied)))
		todo := slices.Clone(known[keep:len(applied)])
		slices.Reverse(todo)
		if opts.Force {
			return todo, nil
		}
		drops, err := countDropped(ctx, tx, todo)
		if err != nil {
			return nil, err
		}
		if len(drops) > 0 {
			return nil, &DropsDataError{Drops: drops, Driver: m.driver.Name(), Schema: m.driver.Schema()}
		}
		return todo, nil
	})
	if err != nil {
		return nil, &OpError{Op: "down", Err: err}
	}
	return names(done), nil
}

// countDropped counts, under the migration lock, the rows of each table that
// the migrations of todo, reverted in order, drop (their DropsData), and
// returns the tables that have some. A table is counted once, for the first
// migration that drops it.
func countDropped(ctx context.Context, tx weirdriver.MigrationTx, todo []weirdriver.Migration) ([]DroppedRows, error) {
	var drops []DroppedRows
	counted := map[string]bool{}
	for _, mig := range todo {
		for _, table := range mig.DropsData {
			if counted[table] {
				continue
			}
			counted[table] = true
			n, err := tx.CountRows(ctx, table)
			if err != nil {
				return nil, fmt.Errorf("count the rows of %s: %w", table, err)
			}
			if n > 0 {
				drops = append(drops, DroppedRows{Migration: nameOf(mig), Table: table, Rows: n})
			}
		}
	}
	return drops, nil
}

// direction is the way a migration runs.
type direction string

const (
	up   direction = "up"
	down direction = "down"
)

// migrate runs one call in one transaction of the driver's, under its migration
// lock: it reads the applied migrations, asks plan for the migrations to run,
// and runs and records each in dir; it commits only when all of them ran, and
// with none to run it creates nothing. plan may count rows through tx.
func (m *Migrator) migrate(ctx context.Context, dir direction, plan func(tx weirdriver.MigrationTx, applied []weirdriver.AppliedMigration) ([]weirdriver.Migration, error)) ([]weirdriver.Migration, error) {
	tx, err := m.driver.MigrationBegin(ctx)
	if err != nil {
		return nil, fmt.Errorf("begin migration: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	applied, err := tx.Applied(ctx)
	if err != nil {
		return nil, err
	}
	prerelease, err := m.prerelease(applied)
	if err != nil {
		return nil, err
	}
	var adopted []weirdriver.Migration
	if prerelease {
		if dir == down {
			return nil, fmt.Errorf("%s schema %q was migrated by a weir before 0.1.0: run `weir migrate up`, which records it at the baseline, before reverting",
				m.driver.Name(), m.driver.Schema())
		}
		baseline := m.driver.Migrations()[0]
		adopted = []weirdriver.Migration{baseline}
		applied = []weirdriver.AppliedMigration{{Version: baseline.Version, Name: baseline.Name}}
	}
	todo, err := plan(tx, applied)
	if err != nil {
		return nil, err
	}
	if len(todo) == 0 && !prerelease {
		return nil, nil // the deferred rollback ends the transaction
	}
	if err := tx.Prepare(ctx); err != nil {
		return nil, fmt.Errorf("prepare migration: %w", err)
	}
	if prerelease {
		if err := adoptBaseline(ctx, tx, len(m.prereleaseChain()), adopted[0]); err != nil {
			return nil, fmt.Errorf("record %s at the baseline: %w", m.driver.Name(), err)
		}
	}
	for _, mig := range todo {
		body := mig.Up
		if dir == down {
			body = mig.Down
		}
		if err := tx.Exec(ctx, body); err != nil {
			return nil, fmt.Errorf("migrate %s %s: %w", dir, nameOf(mig), err)
		}
		if err := record(ctx, tx, dir, mig); err != nil {
			return nil, fmt.Errorf("record migration %s: %w", nameOf(mig), err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("commit migration: %w", err)
	}
	return append(adopted, todo...), nil
}

// prereleaseChain returns the names of the driver's pre-release migrations,
// which its baseline replaces (weirdriver.PrereleaseChain); none when it has
// no such chain.
func (m *Migrator) prereleaseChain() []string {
	if pc, ok := m.driver.(weirdriver.PrereleaseChain); ok {
		return pc.PrereleaseMigrations()
	}
	return nil
}

// prerelease reports whether applied is the driver's whole pre-release chain,
// which leaves the schema its baseline makes. A database migrated by part of
// the chain, or by migrations that start as the chain does and then differ,
// is an error that says what to do: this weir can neither revert nor finish
// that chain.
func (m *Migrator) prerelease(applied []weirdriver.AppliedMigration) (bool, error) {
	chain := m.prereleaseChain()
	known := m.driver.Migrations()
	if len(chain) == 0 || len(applied) == 0 || applied[0].Name != chain[0] ||
		len(known) > 0 && known[0].Name == chain[0] {
		return false, nil
	}
	for i, a := range applied {
		if i >= len(chain) || a.Version != i+1 || a.Name != chain[i] {
			return false, fmt.Errorf("%s schema %q has migration %s where a weir before 0.1.0 had %s: the migration table is inconsistent",
				m.driver.Name(), m.driver.Schema(), Migration{Version: a.Version, Name: a.Name}, chainName(chain, i))
		}
	}
	if len(applied) < len(chain) {
		last := applied[len(applied)-1]
		return false, fmt.Errorf("%w: %s schema %q was migrated by a weir before 0.1.0 up to %s, not to the last migration of that weir, %s: migrate it there with the weir that applied it, then run this weir's `weir migrate up`",
			ErrNotMigrated, m.driver.Name(), m.driver.Schema(), Migration{Version: last.Version, Name: last.Name}, chainName(chain, len(chain)-1))
	}
	return true, nil
}

// chainName names the pre-release migration at index i of chain.
func chainName(chain []string, i int) string {
	if i >= len(chain) {
		return "nothing"
	}
	return Migration{Version: i + 1, Name: chain[i]}.String()
}

// adoptBaseline replaces the records of the n pre-release migrations by one of
// baseline, applied and not compatible: code that does not know the baseline
// cannot run on its schema.
func adoptBaseline(ctx context.Context, tx weirdriver.MigrationTx, n int, baseline weirdriver.Migration) error {
	for v := n; v >= 1; v-- {
		if err := tx.Unrecord(ctx, v); err != nil {
			return err
		}
	}
	return tx.RecordCompatible(ctx, baseline.Version, baseline.Name, false)
}

// record records that mig was applied, or deletes its record when it was
// reverted. A migration table made by a weir before 0.1.0 may lack the
// compatible column, so the record names the column only when the table has
// it.
func record(ctx context.Context, tx weirdriver.MigrationTx, dir direction, mig weirdriver.Migration) error {
	if dir == down {
		return tx.Unrecord(ctx, mig.Version)
	}
	hasCompatible, err := tx.HasCompatibleColumn(ctx)
	if err != nil {
		return err
	}
	if hasCompatible {
		return tx.RecordCompatible(ctx, mig.Version, mig.Name, mig.Compatible)
	}
	return tx.Record(ctx, mig.Version, mig.Name)
}

// Status is one migration and whether it is applied.
type Status struct {
	Migration
	Applied   bool
	AppliedAt time.Time
	// Unknown is set for a migration the database has but this weir does not
	// know: a newer weir applied it. Such a migration is always applied.
	Unknown bool
	// Compatible says whether code that does not know the migration may run
	// against the schema: the mark of the migration's up file, or for an
	// unknown migration the mark recorded when it was applied.
	Compatible bool
	// Prerelease is set on the baseline of a database that a weir before
	// 0.1.0 migrated by the whole chain the baseline replaces: its schema is
	// the baseline's, and Up records the baseline as applied without running
	// it.
	Prerelease bool
}

// Status lists every migration the driver knows and whether it is applied,
// followed by the migrations the database has that this weir does not know.
func (m *Migrator) Status(ctx context.Context) ([]Status, error) {
	applied, err := m.driver.MigrationsApplied(ctx)
	if err != nil {
		return nil, &OpError{Op: "status", Err: err}
	}
	known := m.driver.Migrations()
	prerelease, err := m.prerelease(applied)
	if err != nil {
		return nil, fmt.Errorf("weirmigrate: status: %w", err)
	}
	if prerelease {
		applied = nil
	}
	newer, err := splitApplied(applied, known)
	if err != nil {
		return nil, &OpError{Op: "status", Err: err}
	}
	out := make([]Status, 0, len(known)+len(newer))
	for i, k := range known {
		s := Status{Migration: Migration{Version: k.Version, Name: k.Name}, Compatible: k.Compatible}
		if i < len(applied) {
			s.Applied, s.AppliedAt = true, applied[i].AppliedAt
		}
		s.Prerelease = prerelease && i == 0
		out = append(out, s)
	}
	for _, a := range newer {
		out = append(out, Status{
			Migration: Migration{Version: a.Version, Name: a.Name},
			Applied:   true, AppliedAt: a.AppliedAt, Unknown: true, Compatible: a.Compatible,
		})
	}
	return out, nil
}

// ErrNotMigrated is wrapped by Check when migrations are missing.
var ErrNotMigrated = errors.New("schema is not migrated")

// Check returns nil when this weir may run against the schema: every migration
// the driver knows is applied, and any newer migration the database has is
// marked compatible. Otherwise it returns an error wrapping ErrNotMigrated and
// naming each missing migration, or wrapping ErrIncompatible and naming each
// newer migration that is not marked compatible.
func (m *Migrator) Check(ctx context.Context) error {
	status, err := m.Status(ctx)
	if err != nil {
		return err
	}
	var missing, bad []string
	for _, s := range status {
		switch {
		case s.Prerelease:
			return fmt.Errorf("%w: %s schema %q was migrated by a weir before 0.1.0 (run `weir migrate up`, which records it at %s)",
				ErrNotMigrated, m.driver.Name(), m.driver.Schema(), s.Migration)
		case !s.Applied:
			missing = append(missing, s.String())
		case s.Unknown && !s.Compatible:
			bad = append(bad, s.String())
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s schema %q lacks migration %s (run `weir migrate up`)",
			ErrNotMigrated, m.driver.Name(), m.driver.Schema(), strings.Join(missing, ", "))
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s schema %q has migration %s, which this weir does not know (it knows %s) and which %s not marked compatible (upgrade weir)",
			ErrIncompatible, m.driver.Name(), m.driver.Schema(), strings.Join(bad, ", "), knownRange(m.driver.Migrations()), isAre(bad))
	}
	return nil
}

// splitApplied checks that the applied migrations start with the known ones, in
// order and by name, and returns the applied migrations this weir does not
// know: those after the last it knows, applied by a newer weir.
func splitApplied(applied []weirdriver.AppliedMigration, known []weirdriver.Migration) ([]weirdriver.AppliedMigration, error) {
	for i, a := range applied {
		if i >= len(known) {
			return applied[i:], nil
		}
		if a.Version != known[i].Version {
			return nil, fmt.Errorf("database has migration %d where %d was expected: the migration table is inconsistent", a.Version, known[i].Version)
		}
		if a.Name != known[i].Name {
			return nil, fmt.Errorf("database has migration %d named %q where this weir has %q: the migration table is inconsistent", a.Version, a.Name, known[i].Name)
		}
	}
	return nil, nil
}

// incompatible returns the migrations of ms that are not marked compatible.
func incompatible(ms []weirdriver.AppliedMigration) []weirdriver.AppliedMigration {
	var out []weirdriver.AppliedMigration
	for _, a := range ms {
		if !a.Compatible {
			out = append(out, a)
		}
	}
	return out
}

// plural names applied migrations: "migration 002_x" or "migrations 002_x, 003_y".
func plural(noun string, ms []weirdriver.AppliedMigration) string {
	list := make([]string, len(ms))
	for i, a := range ms {
		list[i] = Migration{Version: a.Version, Name: a.Name}.String()
	}
	if len(ms) > 1 {
		noun += "s"
	}
	return noun + " " + strings.Join(list, ", ")
}

// isAre is the verb that agrees with a list of len(s) items.
func isAre[T any](s []T) string {
	if len(s) > 1 {
		return "are"
	}
	return "is"
}

// knownRange says which versions this weir knows, such as "001..003".
func knownRange(known []weirdriver.Migration) string {
	if len(known) == 0 {
		return "none"
	}
	return fmt.Sprintf("%03d..%03d", known[0].Version, known[len(known)-1].Version)
}

func names(ms []weirdriver.Migration) []Migration {
	out := make([]Migration, len(ms))
	for i, m := range ms {
		out[i] = nameOf(m)
	}
	return out
}

func nameOf(m weirdriver.Migration) Migration { return Migration{Version: m.Version, Name: m.Name} }
