package weirdriver

import (
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"time"
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

// CheckRenew checks a renewal's params: as many tokens as ids, no id twice (one
// statement cannot update a row twice), and a lease of at least a microsecond.
func CheckRenew(p *JobRenewParams) error {
	switch {
	case len(p.IDs) != len(p.LeaseTokens):
		return fmt.Errorf("%d ids but %d tokens", len(p.IDs), len(p.LeaseTokens))
	case p.LeaseDuration < time.Microsecond:
		return fmt.Errorf("lease duration %v is less than 1µs", p.LeaseDuration)
	}
	seen := make(map[int64]bool, len(p.IDs))
	for _, id := range p.IDs {
		if seen[id] {
			return fmt.Errorf("job %d appears twice in one batch", id)
		}
		seen[id] = true
	}
	return nil
}

// CheckClaim checks a claim's params.
func CheckClaim(p *JobClaimParams) error {
	switch {
	case p.Queue == "":
		return fmt.Errorf("queue is empty")
	case p.Max < 1:
		return fmt.Errorf("max %d is less than 1", p.Max)
	case p.ClientID == "":
		return fmt.Errorf("client id is empty")
	case p.LeaseDuration < time.Microsecond:
		return fmt.Errorf("lease duration %v is less than 1µs", p.LeaseDuration)
	}
	return nil
}

// CheckFinalize checks a batch of outcomes: known outcomes, and no job twice (one
// statement updates a row once, so two outcomes for one job could not both be
// reported truthfully).
func CheckFinalize(params []*JobFinalizeParams) error {
	seen := make(map[int64]bool, len(params))
	for _, p := range params {
		if !p.Outcome.Valid() {
			return fmt.Errorf("job %d: unknown outcome %q", p.ID, p.Outcome)
		}
		if seen[p.ID] {
			return fmt.Errorf("job %d appears twice in one batch", p.ID)
		}
		seen[p.ID] = true
	}
	return nil
}
