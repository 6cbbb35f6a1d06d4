// Package weirmigrate applies and reverts weir's versioned schema migrations. The
// migrations are embedded in each driver, so a binary always carries the schema it
// needs. Concurrent migrators wait for each other, and each call runs in one
// transaction: it applies everything it planned or nothing.
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
}

// Up applies pending migrations in order and returns those it applied.
func (m *Migrator) Up(ctx context.Context, opts *UpOpts) ([]Migration, error) {
	if opts == nil {
		opts = &UpOpts{}
	}
	known := m.driver.Migrations()
	target := len(known)
	if opts.TargetVersion != 0 {
		if opts.TargetVersion < 0 || opts.TargetVersion > len(known) {
			return nil, fmt.Errorf("weirmigrate: target version %d is out of range 1..%d", opts.TargetVersion, len(known))
		}
		target = opts.TargetVersion
	}
	done, err := m.driver.Migrate(ctx, weirdriver.DirectionUp, func(applied []int) ([]weirdriver.Migration, error) {
		if err := checkApplied(applied, known); err != nil {
			return nil, err
		}
		return known[len(applied):max(target, len(applied))], nil
	})
	if err != nil {
		return nil, fmt.Errorf("weirmigrate: up: %w", err)
	}
	return names(done), nil
}

// Down reverts applied migrations, newest first, and returns those it reverted.
func (m *Migrator) Down(ctx context.Context, opts *DownOpts) ([]Migration, error) {
	if opts == nil {
		opts = &DownOpts{}
	}
	if opts.Steps < 0 {
		return nil, fmt.Errorf("weirmigrate: steps must not be negative, got %d", opts.Steps)
	}
	known := m.driver.Migrations()
	if opts.TargetVersion < 0 || opts.TargetVersion > len(known) {
		return nil, fmt.Errorf("weirmigrate: target version %d is out of range 0..%d", opts.TargetVersion, len(known))
	}
	done, err := m.driver.Migrate(ctx, weirdriver.DirectionDown, func(applied []int) ([]weirdriver.Migration, error) {
		if err := checkApplied(applied, known); err != nil {
			return nil, err
		}
		keep := len(applied) - max(opts.Steps, 1)
		if opts.All || opts.TargetVersion > 0 {
			keep = opts.TargetVersion
		}
		keep = max(0, min(keep, len(applied)))
		todo := slices.Clone(known[keep:len(applied)])
		slices.Reverse(todo)
		return todo, nil
	})
	if err != nil {
		return nil, fmt.Errorf("weirmigrate: down: %w", err)
	}
	return names(done), nil
}

// Status is one known migration and whether it is applied.
type Status struct {
	Migration
	Applied   bool
	AppliedAt time.Time
}

// Status lists every migration the driver knows and whether it is applied.
func (m *Migrator) Status(ctx context.Context) ([]Status, error) {
	applied, err := m.driver.MigrationsApplied(ctx)
	if err != nil {
		return nil, fmt.Errorf("weirmigrate: status: %w", err)
	}
	known := m.driver.Migrations()
	versions := make([]int, len(applied))
	for i, a := range applied {
		versions[i] = a.Version
	}
	if err := checkApplied(versions, known); err != nil {
		return nil, fmt.Errorf("weirmigrate: status: %w", err)
	}
	for i, a := range applied {
		if a.Name != known[i].Name {
			return nil, fmt.Errorf("weirmigrate: status: database has migration %d named %q where this weir has %q: the migration table is inconsistent", a.Version, a.Name, known[i].Name)
		}
	}
	out := make([]Status, len(known))
	for i, k := range known {
		out[i] = Status{Migration: Migration{Version: k.Version, Name: k.Name}}
		if i < len(applied) {
			out[i].Applied, out[i].AppliedAt = true, applied[i].AppliedAt
		}
	}
	return out, nil
}

// ErrNotMigrated is wrapped by Check when migrations are missing.
var ErrNotMigrated = errors.New("schema is not migrated")

// Check returns an error wrapping ErrNotMigrated and naming each missing migration
// unless every migration the driver knows is applied.
func (m *Migrator) Check(ctx context.Context) error {
	status, err := m.Status(ctx)
	if err != nil {
		return err
	}
	var missing []string
	for _, s := range status {
		if !s.Applied {
			missing = append(missing, s.String())
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s schema %q lacks migration %s (run `weir migrate up`)",
			ErrNotMigrated, m.driver.Name(), m.driver.Schema(), strings.Join(missing, ", "))
	}
	return nil
}

// checkApplied refuses a database whose applied migrations are not a prefix of the
// known ones, such as one migrated by a newer weir.
func checkApplied(applied []int, known []weirdriver.Migration) error {
	for i, v := range applied {
		if i >= len(known) {
			return fmt.Errorf("database has migration %d, which this weir does not know (it knows 1..%d): upgrade weir", v, len(known))
		}
		if v != known[i].Version {
			return fmt.Errorf("database has migration %d where %d was expected: the migration table is inconsistent", v, known[i].Version)
		}
	}
	return nil
}

func names(ms []weirdriver.Migration) []Migration {
	out := make([]Migration, len(ms))
	for i, m := range ms {
		out[i] = Migration{Version: m.Version, Name: m.Name}
	}
	return out
}
