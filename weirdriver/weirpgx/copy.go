package weirpgx

import (
	"time"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

// copyColumns are the columns a bulk insert always writes; tags and metadata are
// added when some job of the batch has them, and the rest take their defaults.
var copyColumns = []string{
	"id", "state", "queue", "kind", "args", "priority", "max_attempts", "scheduled_at", "created_at",
}

// bulkRow is the row a bulk insert writes for p, built in Go because COPY returns
// nothing: id and now come from the database beforehand.
func bulkRow(id int64, now time.Time, p *weirdriver.JobInsertParams) *weirtype.JobRow {
	job := &weirtype.JobRow{
		ID: id, State: weirtype.JobStateAvailable, Queue: p.Queue, Kind: p.Kind, Args: p.Args,
		Priority: p.Priority, MaxAttempts: p.MaxAttempts, ScheduledAt: now, CreatedAt: now,
		Errors: []weirtype.AttemptError{}, Tags: p.Tags, Metadata: p.Metadata,
	}
	if !p.ScheduledAt.IsZero() {
		// PostgreSQL keeps microseconds, and pgx truncates to them.
		job.ScheduledAt = p.ScheduledAt.Truncate(time.Microsecond)
		if p.ScheduledAt.After(now) {
			job.State = weirtype.JobStateScheduled
		}
	}
	if job.Tags == nil {
		job.Tags = []string{}
	}
	if job.Metadata == nil {
		job.Metadata = []byte("{}")
	}
	return job
}

// copySource feeds jobs to CopyFrom.
type copySource struct {
	jobs       []*weirtype.JobRow
	idx        int
	tags, meta bool // whether the tags and metadata columns are written
	values     []any
}

func newCopySource(jobs []*weirtype.JobRow) (*copySource, []string) {
	s := &copySource{jobs: jobs, idx: -1}
	cols := copyColumns
	for _, j := range jobs {
		s.tags = s.tags || len(j.Tags) > 0
		s.meta = s.meta || string(j.Metadata) != "{}"
	}
	if s.tags {
		cols = append(cols[:len(cols):len(cols)], "tags")
	}
	if s.meta {
		cols = append(cols[:len(cols):len(cols)], "metadata")
	}
	s.values = make([]any, 0, len(cols))
	return s, cols
}

func (s *copySource) Next() bool {
	s.idx++
	return s.idx < len(s.jobs)
}

func (s *copySource) Values() ([]any, error) {
	j := s.jobs[s.idx]
	// CopyFrom encodes the values before it asks for the next row, so one slice serves.
	s.values = append(s.values[:0], j.ID, string(j.State), j.Queue, j.Kind, []byte(j.Args),
		int16(j.Priority), int16(j.MaxAttempts), j.ScheduledAt, j.CreatedAt)
	if s.tags {
		s.values = append(s.values, j.Tags)
	}
	if s.meta {
		s.values = append(s.values, []byte(j.Metadata))
	}
	return s.values, nil
}

func (s *copySource) Err() error { return nil }
