package weirsqlite

import (
	"context"

	"github.com/weirq/weir/weirdriver"
)

// QueueListEstimated counts exactly, as QueueList does: an embedded store
// holds what one machine runs, and SQLite has no sampling to make a large
// table's count cheaper.
func (e *executor) QueueListEstimated(ctx context.Context) ([]*weirdriver.QueueStats, error) {
	return e.QueueList(ctx)
}
