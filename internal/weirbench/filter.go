package weirbench

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// A WorkloadFilter is a System that runs only some of the workloads: a peer
// driven from another runtime has no worker process for W5, W6 and W8 to
// start, for instance. Run skips the others for it, and the report leaves its
// cells of their figures blank.
type WorkloadFilter interface {
	// Runs says whether the system runs workload, named as Options.Workloads
	// names it ("drain", "latency", ...).
	Runs(workload string) bool
}

// runs says whether sys runs workload.
func runs(sys System, workload string) bool {
	f, ok := sys.(WorkloadFilter)
	return !ok || f.Runs(workload)
}

// A CompletedDeleter is a System that deletes a job's row once the job has
// completed (graphile-worker does), where the others keep it in state
// 'completed'. The checks after W1, W2 and W3 count its completed jobs as
// those no longer in the job table.
type CompletedDeleter interface {
	DeletesCompleted() bool
}

func deletesCompleted(sys System) bool {
	d, ok := sys.(CompletedDeleter)
	return ok && d.DeletesCompleted()
}

// completedRows is the number of jobs of the inserted that the job table of sys
// shows completed: its rows in state 'completed', or, for a CompletedDeleter,
// the jobs no longer in it.
func completedRows(ctx context.Context, admin *pgxpool.Pool, sys System, inserted int64) (int64, error) {
	if !deletesCompleted(sys) {
		return countRows(ctx, admin, sys.JobTable(), "state = 'completed'")
	}
	left, err := countRows(ctx, admin, sys.JobTable(), "true")
	return inserted - left, err
}

// checkOfferedRows checks, after W2 or W3, that the job table of sys holds
// every job inserted: all of them, or, for a CompletedDeleter, all but the
// completed ones.
func checkOfferedRows(ctx context.Context, admin *pgxpool.Pool, sys System, inserted, completed int64) error {
	rows, err := countRows(ctx, admin, sys.JobTable(), "true")
	if err != nil {
		return err
	}
	if deletesCompleted(sys) {
		if rows+completed != inserted {
			return fmt.Errorf("%s: %d jobs in the table and %d completed (deleted), %d inserted", sys.Name(), rows, completed, inserted)
		}
		return nil
	}
	if rows != inserted {
		return fmt.Errorf("%s: %d jobs in the table, %d inserted", sys.Name(), rows, inserted)
	}
	return nil
}
