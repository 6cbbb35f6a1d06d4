package weirtype

import "time"

// LeaderRow is the unexpired term of a leadership (maintenance's): who holds
// it, since when, and until when unless renewed, by the database's clock.
type LeaderRow struct {
	// ID is the leading client's instance id (weir.Config.ID).
	ID string
	// ElectedAt is when the term began; renewals by the same leader keep it.
	ElectedAt time.Time
	// ExpiresAt is when the term ends unless the leader renews it first.
	ExpiresAt time.Time
}
