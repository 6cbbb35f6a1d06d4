package weirdriver

import "time"

// PeriodicRegisterParams is one schedule a leader declares.
type PeriodicRegisterParams struct {
	Name, Spec, TimeZone string
	// NextRunAt is the schedule's next slot when it is new, or when its spec or
	// time zone changed; a registered schedule keeps its own otherwise.
	NextRunAt time.Time
}

// PeriodicAdvanceParams moves a schedule past the slots a fire inserted.
type PeriodicAdvanceParams struct {
	Name string
	// From is the next_run_at the fire read; the advance applies only if it is
	// still the row's.
	From time.Time
	// NextRunAt is the next slot to fire; LastRunAt the latest slot fired and
	// LastJobID its job, if any.
	NextRunAt time.Time
	LastRunAt time.Time
	LastJobID *int64
}
