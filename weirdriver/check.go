package weirdriver

import (
	"fmt"
	"time"
)

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
