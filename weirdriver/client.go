package weirdriver

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/weirq/weir/weirtype"
)

// The client registry (weir_client): each running client's row, which it
// writes itself. It is informational; nothing that claims, renews or
// finalizes jobs reads it.

// Limits of a registry row; the schema's CHECK constraints hold the same.
const (
	MaxClientIDBytes      = 128
	MaxClientHostBytes    = 255
	MaxClientVersionBytes = 128
	MaxClientQueues       = 1000
	maxQueueNameBytes     = 128
)

// ClientRegisterParams is a client's row in the registry.
type ClientRegisterParams struct {
	// ID is the client's instance id, the one it writes to attempted_by: 1 to
	// 128 bytes.
	ID string
	// Host is the host name (at most 255 bytes), PID the process id, Version
	// weir's version (at most 128 bytes; may be empty).
	Host    string
	PID     int
	Version string
	// Queues are the queues the client works: at most 1,000, each named (1 to
	// 128 bytes) once, with MaxWorkers at least 1.
	Queues []weirtype.ClientQueue
	// StartedAt is the started_at an earlier ClientRegister of this client
	// returned, so that a refresh keeps it even when the row was deleted
	// meanwhile; zero means now (database clock): a first registration.
	StartedAt time.Time
}

// ClientPruneParams says which registry rows to delete: those whose last
// heartbeat is older than StaleAfter by the database clock.
type ClientPruneParams struct {
	// StaleAfter is at least one microsecond.
	StaleAfter time.Duration
	// Limit is the most rows to delete in one statement; at least 1.
	Limit int
}

// ClientQueuesJSON is a registry row's queues as the drivers store them: a
// JSON array of {"name", "max_workers"}, [] for none.
func ClientQueuesJSON(queues []weirtype.ClientQueue) string {
	if queues == nil {
		queues = []weirtype.ClientQueue{}
	}
	b, _ := json.Marshal(queues) // strings and ints: it cannot fail
	return string(b)
}

// ParseClientQueues reads a registry row's queues as ClientQueuesJSON wrote
// them.
func ParseClientQueues(s string) ([]weirtype.ClientQueue, error) {
	var queues []weirtype.ClientQueue
	if err := json.Unmarshal([]byte(s), &queues); err != nil {
		return nil, fmt.Errorf("queues: %w", err)
	}
	return queues, nil
}
