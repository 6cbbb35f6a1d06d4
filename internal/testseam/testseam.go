// Package testseam lets package weirtest run parts of package weir that are
// not its public API. Package weir sets what it holds when it is initialised.
package testseam

import (
	"context"

	"github.com/weirq/weir/weirtype"
)

// Attempt is what one attempt run by WorkJob came to.
type Attempt struct {
	// Event is the weir.EventKind of the outcome written.
	Event string
	// Err is what the handler returned.
	Err error
	// Job is the job after its outcome was written.
	Job *weirtype.JobRow
}

// WorkJob runs one attempt of job id with the workers and settings of client,
// a *weir.Client that need not be started, in tx (nil: on the client's own
// connections), and writes its outcome there.
var WorkJob func(ctx context.Context, client any, tx any, id int64) (*Attempt, error)

// CheckTx reports why client could not run a job in tx, or nil when it can.
var CheckTx func(client any, tx any) error
