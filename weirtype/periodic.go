package weirtype

import "time"

// PeriodicRow is a periodic job's schedule as the store records it.
type PeriodicRow struct {
	// Name identifies the schedule among every client of the schema.
	Name string
	// Spec is the cron expression or descriptor, read in TimeZone.
	Spec     string
	TimeZone string
	// NextRunAt is the next slot to fire.
	NextRunAt time.Time
	// LastRunAt is the latest slot fired, and LastJobID the job it inserted
	// (nil when the slot's constructor gave no job).
	LastRunAt *time.Time
	LastJobID *int64
	// DeclaredBy is the client that last registered the schedule, at
	// DeclaredAt: the leader that fires it, unless it is orphaned.
	DeclaredBy string
	DeclaredAt time.Time
	// PausedAt is set while an operator paused the schedule.
	PausedAt *time.Time
	// OrphanedAt is set while the leader does not declare the schedule: it does
	// not fire, and stays until an operator deletes it.
	OrphanedAt *time.Time
	CreatedAt  time.Time
}
