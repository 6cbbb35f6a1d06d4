package weirtype

import "time"

// ClientRow is a running client as the client registry (weir_client) records
// it. The registry is informational: each client writes its own row, and
// nothing that delivers jobs reads it. Its JSON form is the one `weir clients
// list --json` and the dashboard's API print.
type ClientRow struct {
	// ID is the client's instance id (weir.Config.ID), the one it writes to
	// the attempted_by of the jobs it runs.
	ID      string `json:"id"`
	Host    string `json:"host"`
	PID     int    `json:"pid"`
	Version string `json:"version"`
	// Queues are the queues the client works, by name.
	Queues []ClientQueue `json:"queues"`
	// StartedAt is when the client first registered; HeartbeatAt when it last
	// refreshed its row (both by the database clock).
	StartedAt   time.Time `json:"started_at"`
	HeartbeatAt time.Time `json:"heartbeat_at"`
	// HeldLeases counts the running jobs whose latest attempt is the client's.
	HeldLeases int64 `json:"held_leases"`
	// Leader is set when the client holds the maintenance leadership. Drivers
	// leave it false; weir.Client.ClientList sets it.
	Leader bool `json:"leader"`
}

// ClientQueue is a queue a client works, with its worker limit.
type ClientQueue struct {
	Name       string `json:"name"`
	MaxWorkers int    `json:"max_workers"`
}
