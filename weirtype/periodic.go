package weirtype

import "time"

// PeriodicRow is a periodic job's schedule as the store records it. Its JSON
// form is the one `weir periodic --json` and the dashboard's API print.
type PeriodicRow struct {
	// Name identifies the schedule among every client of the schema.
	Name string `json:"name"`
	// Spec is the cron expression or descriptor, read in TimeZone.
	Spec     string `json:"schedule"`
	TimeZone string `json:"time_zone"`
	// NextRunAt is the next slot to fire.
	NextRunAt time.Time `json:"next_run_at"`
	// LastRunAt is the latest slot fired, and LastJobID the job it inserted
	// (nil when the slot's constructor gave no job).
	LastRunAt *time.Time `json:"last_run_at"`
	LastJobID *int64     `json:"last_job_id"`
	// DeclaredBy is the client that last registered the schedule, at
	// DeclaredAt: the leader that fires it, unless it is orphaned.
	DeclaredBy string    `json:"declared_by"`
	DeclaredAt time.Time `json:"declared_at"`
	// PausedAt is set while an operator paused the schedule.
	PausedAt *time.Time `json:"paused_at"`
	// OrphanedAt is set while the leader does not declare the schedule: it does
	// not fire, and stays until an operator deletes it.
	OrphanedAt *time.Time `json:"orphaned_at"`
	CreatedAt  time.Time  `json:"created_at"`
}
