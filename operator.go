package weir

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirmigrate"
	"github.com/weirq/weir/weirtype"
)

// Listing limits.
const (
	DefaultListLimit = 100
	MaxListLimit     = 10_000
	// MaxSearchLength bounds JobListParams.Search, in characters.
	MaxSearchLength = 100
)

// JobListParams filters and pages JobList. The zero value lists the first 100 jobs
// by ascending id.
type JobListParams struct {
	States []JobState
	Queues []string
	Kinds  []string
	// Tags keeps the jobs that carry every one of them.
	Tags []string
	// CreatedAfter and CreatedBefore bound created_at: after is inclusive, before
	// exclusive; zero means no bound.
	CreatedAfter  time.Time
	CreatedBefore time.Time
	// Search keeps the jobs whose kind or args hold it: a literal substring
	// (no wildcards), matched without regard to case, of at most
	// MaxSearchLength characters and no control characters. The args are
	// matched as the database keeps their JSON text (PostgreSQL: jsonb's, with
	// a space after each colon and comma; SQLite: as inserted), keys included.
	// No index serves it: the database reads each job the other filters
	// leave, until the page is full.
	Search string
	// Cursor continues a listing: pass the Next of the previous page.
	Cursor int64
	// Descending lists newest first.
	Descending bool
	// Limit is the page size: default 100, at most 10,000.
	Limit int
	// Window, when positive, bounds what the page reads: only jobs whose id
	// lies within Window ids of where the page starts (past the cursor, or
	// from the first job in the listing's order). A page whose filters match
	// few jobs, and that no index serves, then reads at most Window jobs
	// instead of the whole table, and may come back with fewer jobs than
	// Limit, even none, while more match further on: JobListResult.SearchedTo
	// says so, and Next continues from there. 0: no bound.
	Window int64
}

// JobListResult is one page of jobs.
type JobListResult struct {
	Jobs []*JobRow
	// Next is the cursor of the next page, or 0 when this page is the last.
	Next int64
	// SearchedTo is set when JobListParams.Window ended the page before it
	// was full and jobs lie beyond it: the last id the page read up to
	// (descending: down to); Next then continues past it.
	SearchedTo int64
}

// JobGet returns a job by id, or an error wrapping ErrNotFound.
func (c *Client) JobGet(ctx context.Context, id int64) (*JobRow, error) {
	var job *JobRow
	err := c.operate(ctx, func() (err error) {
		job, err = c.driver.Executor().JobGet(ctx, id)
		return err
	})
	if err != nil {
		return nil, opErr(err)
	}
	return job, nil
}

// JobList lists jobs matching params, a page at a time, by id.
func (c *Client) JobList(ctx context.Context, params *JobListParams) (*JobListResult, error) {
	if params == nil {
		params = &JobListParams{}
	}
	p := &weirdriver.JobListParams{
		States: params.States, Queues: params.Queues, Kinds: params.Kinds, Tags: params.Tags,
		CreatedAfter: params.CreatedAfter, CreatedBefore: params.CreatedBefore, Search: params.Search,
		AfterID: params.Cursor, Descending: params.Descending, Limit: params.Limit,
	}
	switch {
	case p.Limit == 0:
		p.Limit = DefaultListLimit
	case p.Limit < 0 || p.Limit > MaxListLimit:
		return nil, invalidf("JobListParams.Limit", "list limit %d is out of range 1..%d", p.Limit, MaxListLimit)
	}
	if p.AfterID < 0 {
		return nil, invalidf("JobListParams.Cursor", "list cursor %d is negative", p.AfterID)
	}
	if params.Window < 0 {
		return nil, invalidf("JobListParams.Window", "list window %d is negative", params.Window)
	}
	for _, s := range p.States {
		if !s.Valid() {
			return nil, invalidf("JobListParams.States", "%q is not a job state", s)
		}
	}
	for _, q := range p.Queues {
		if err := validateName("JobListParams.Queues", "queue", q); err != nil {
			return nil, err
		}
	}
	for _, k := range p.Kinds {
		if err := validateName("JobListParams.Kinds", "kind", k); err != nil {
			return nil, err
		}
	}
	if err := checkTags("JobListParams.Tags", p.Tags); err != nil {
		return nil, err
	}
	if err := checkSearch(p.Search); err != nil {
		return nil, err
	}
	for _, bound := range []struct {
		field, what string
		at          time.Time
	}{
		{"JobListParams.CreatedAfter", "created-after", p.CreatedAfter},
		{"JobListParams.CreatedBefore", "created-before", p.CreatedBefore},
	} {
		if !bound.at.IsZero() {
			if err := checkTime(bound.field, bound.what, bound.at); err != nil {
				return nil, err
			}
		}
	}
	if !p.CreatedAfter.IsZero() && !p.CreatedBefore.IsZero() && !p.CreatedAfter.Before(p.CreatedBefore) {
		return nil, invalidf("JobListParams.CreatedAfter", "created-after %s is not before created-before %s",
			p.CreatedAfter.Format(time.RFC3339Nano), p.CreatedBefore.Format(time.RFC3339Nano))
	}

	want := p.Limit
	p.Limit++ // one more tells whether another page follows
	res := &JobListResult{}
	err := c.operate(ctx, func() (err error) {
		exec := c.driver.Executor()
		if params.Window > 0 {
			if empty, err := windowList(ctx, exec, p, params.Window); err != nil || empty {
				return err
			}
		}
		if res.Jobs, err = exec.JobList(ctx, p); err != nil {
			return err
		}
		if len(res.Jobs) > want {
			res.Jobs = res.Jobs[:want]
			res.Next = res.Jobs[want-1].ID
			return nil
		}
		if p.StopID > 0 {
			// The window ended the page: is there anything past it?
			beyond, err := exec.JobList(ctx, &weirdriver.JobListParams{AfterID: p.StopID, Descending: p.Descending, Limit: 1})
			if err != nil {
				return err
			}
			if len(beyond) > 0 {
				res.Next, res.SearchedTo = p.StopID, p.StopID
			}
		}
		return nil
	})
	if err != nil {
		return nil, opErr(err)
	}
	return res, nil
}

// windowList sets p.StopID for a window of window ids from where p starts:
// past its cursor, or from the first job in its order (read through the
// primary key). It reports a table with no job past the cursor at all.
func windowList(ctx context.Context, exec weirdriver.Executor, p *weirdriver.JobListParams, window int64) (empty bool, err error) {
	start := p.AfterID
	if start == 0 {
		first, err := exec.JobList(ctx, &weirdriver.JobListParams{Descending: p.Descending, Limit: 1})
		if err != nil || len(first) == 0 {
			return err == nil, err
		}
		// The cursor just past the first job, so that the page includes it.
		if p.Descending {
			start = first[0].ID + 1
		} else {
			start = first[0].ID - 1
		}
		p.AfterID = start
	}
	if p.Descending {
		p.StopID = max(start-window, 1)
		if start <= 1 {
			return true, nil
		}
	} else {
		p.StopID = start + min(window, math.MaxInt64-start)
	}
	return false, nil
}

// checkSearch checks JobListParams.Search.
func checkSearch(search string) error {
	const field = "JobListParams.Search"
	if !utf8.ValidString(search) {
		return invalidf(field, "search text is not valid UTF-8")
	}
	if n := utf8.RuneCountInString(search); n > MaxSearchLength {
		return invalidf(field, "search text of %d characters is longer than %d", n, MaxSearchLength)
	}
	if i := strings.IndexFunc(search, unicode.IsControl); i >= 0 {
		return invalidf(field, "search text holds a control character (%U at byte %d); JSON text holds none", []rune(search[i:])[0], i)
	}
	return nil
}

// JobCancel cancels a job. A job that is not running is cancelled at once; a running
// job's handler is asked to stop, and the job ends cancelled whatever it returns.
// Cancelling a final job returns an error wrapping ErrJobFinal.
func (c *Client) JobCancel(ctx context.Context, id int64) (*JobRow, error) {
	job, err := c.changeJob(ctx, id, weirdriver.Executor.JobCancel)
	if err == nil && job.State == JobStateRunning {
		// The cancel notification reaches every listening client, this one
		// too; a poll-only client (Config.PollOnly) hears none, so a handler
		// of this client learns of its cancel here, at once.
		if e := c.engine(); e != nil {
			e.cancelNotified(id)
		}
	}
	return job, err
}

// JobRetry makes a job that is not running available now. A final job gets one more
// attempt if it had used them all. Retrying a running job returns an error wrapping
// ErrJobRunning.
func (c *Client) JobRetry(ctx context.Context, id int64) (*JobRow, error) {
	return c.changeJob(ctx, id, weirdriver.Executor.JobRetry)
}

// JobDelete deletes a job that is not running and returns it.
func (c *Client) JobDelete(ctx context.Context, id int64) (*JobRow, error) {
	return c.changeJob(ctx, id, weirdriver.Executor.JobDelete)
}

// JobUpdateParams changes a job that is not running; a nil field leaves what
// it names as it is.
type JobUpdateParams struct {
	// Metadata replaces the job's metadata: a JSON object, checked as at
	// insert.
	Metadata json.RawMessage
	// Tags replaces the job's tags; an empty, non-nil slice removes them all.
	Tags []string
}

// JobUpdate replaces the metadata or tags of a job that is not running (its
// worker holds a running one) and returns the job afterwards. Replacing, not
// merging: to change one key, read the job, change its metadata, and write it
// back.
func (c *Client) JobUpdate(ctx context.Context, id int64, params *JobUpdateParams) (*JobRow, error) {
	if params == nil || params.Metadata == nil && params.Tags == nil {
		return nil, invalidf("JobUpdateParams", "nothing to change: set Metadata or Tags")
	}
	upd := &weirdriver.JobUpdateParams{Tags: params.Tags}
	if params.Metadata != nil {
		meta, err := c.checkMetadata("JobUpdateParams.Metadata", params.Metadata, &jsonChecker{})
		if err != nil {
			return nil, err
		}
		upd.Metadata = meta
	}
	if err := checkTags("JobUpdateParams.Tags", params.Tags); err != nil {
		return nil, err
	}
	return c.changeJob(ctx, id, func(e weirdriver.Executor, ctx context.Context, id int64) (*JobRow, error) {
		return e.JobUpdate(ctx, id, upd)
	})
}

func (c *Client) changeJob(ctx context.Context, id int64, op func(weirdriver.Executor, context.Context, int64) (*JobRow, error)) (*JobRow, error) {
	if id <= 0 {
		return nil, invalidf("id", "job id %d is not positive", id)
	}
	var job *JobRow
	err := c.operate(ctx, func() (err error) {
		job, err = op(c.driver.Executor(), ctx, id)
		return err
	})
	if err != nil {
		return nil, opErr(err)
	}
	return job, nil
}

// QueueStats counts a queue's jobs by state.
type QueueStats = weirtype.QueueStats

// QueueList lists the queues that have jobs, with their counts by state.
func (c *Client) QueueList(ctx context.Context) ([]*QueueStats, error) {
	return c.queueList(ctx, weirdriver.Executor.QueueList)
}

// QueueListEstimated lists what QueueList does, for a page that polls it on
// a large table: the counts of the states that are not final are exact,
// read from their partial indexes; those of the final states (completed,
// cancelled, discarded) may be estimates, marked in QueueStats.Estimated,
// where an exact count would read the whole table (PostgreSQL: from a sample
// of the table's pages; SQLite counts exactly). A queue whose only jobs are a
// few final ones may be missing. Scripts that need exact figures use
// QueueList.
func (c *Client) QueueListEstimated(ctx context.Context) ([]*QueueStats, error) {
	return c.queueList(ctx, weirdriver.Executor.QueueListEstimated)
}

func (c *Client) queueList(ctx context.Context, op func(weirdriver.Executor, context.Context) ([]*QueueStats, error)) ([]*QueueStats, error) {
	var queues []*QueueStats
	err := c.operate(ctx, func() (err error) {
		queues, err = op(c.driver.Executor(), ctx)
		return err
	})
	if err != nil {
		return nil, opErr(err)
	}
	return queues, nil
}

// QueuePause pauses a queue on every client: none claims from it until it is
// resumed, and running jobs finish. Pausing a paused queue changes nothing.
func (c *Client) QueuePause(ctx context.Context, name string) error {
	return c.queueOp(ctx, name, weirdriver.Executor.QueuePause)
}

// QueueResume resumes a paused queue and wakes its workers on every client.
func (c *Client) QueueResume(ctx context.Context, name string) error {
	if err := c.queueOp(ctx, name, weirdriver.Executor.QueueResume); err != nil {
		return err
	}
	// As for JobCancel: this client's own workers wake without the notification.
	if e := c.engine(); e != nil {
		if p := e.producer(name); p != nil {
			p.poke()
		}
	}
	return nil
}

// QueueSetGlobalLimit sets the most jobs of queue name that may run at once
// across every client on the database, 1 to 1,000,000, or removes the limit
// (0). It takes effect at the next claim of every client; a limit lower than
// the jobs running stops none of them, and claims wait until fewer run
// (docs/flow-control.md). A client started later whose QueueConfig declares
// a GlobalLimit for the queue stores its own.
func (c *Client) QueueSetGlobalLimit(ctx context.Context, name string, limit int) error {
	if limit < 0 || limit > weirdriver.MaxGlobalLimit {
		return invalidf("limit", "global limit %d is outside its range 0..%d (0 for none)", limit, weirdriver.MaxGlobalLimit)
	}
	err := c.queueOp(ctx, name, func(e weirdriver.Executor, ctx context.Context, name string) error {
		return e.QueueSetGlobalLimit(ctx, name, limit)
	})
	if err != nil {
		return err
	}
	if e := c.engine(); e != nil { // as QueueResume: this client's workers wake at once
		if p := e.producer(name); p != nil {
			p.poke()
		}
	}
	return nil
}

// QueueSetRateLimit sets the most jobs of queue name started per period
// across every client on the database, spread evenly (see RateLimit), or
// removes the limit (the zero RateLimit). It takes effect at the next claim
// of every client; the limiter keeps its state, so that setting the same
// limit again grants no burst (docs/flow-control.md). A
// client started later whose QueueConfig declares a RateLimit for the queue
// stores its own.
func (c *Client) QueueSetRateLimit(ctx context.Context, name string, limit RateLimit) error {
	if limit != (RateLimit{}) {
		if err := checkRateLimit("limit", name, limit); err != nil {
			return err
		}
	}
	err := c.queueOp(ctx, name, func(e weirdriver.Executor, ctx context.Context, name string) error {
		return e.QueueSetRateLimit(ctx, name, limit.Limit, limit.Period)
	})
	if err != nil {
		return err
	}
	if e := c.engine(); e != nil {
		if p := e.producer(name); p != nil {
			p.poke()
		}
	}
	return nil
}

// QueueKeyLimit returns the limits per key of the queue q lists, the zero
// KeyLimit when it has none.
func QueueKeyLimit(q *QueueStats) KeyLimit {
	if q.Key == "" {
		return KeyLimit{}
	}
	k := KeyLimit{Key: q.Key, Limit: q.KeyLimit}
	if q.KeyRate > 0 {
		k.Rate = RateLimit{Limit: q.KeyRate, Period: q.KeyRatePeriod}
	}
	return k
}

// QueueSetKeyLimit sets the most jobs of queue name with the same key that
// may run at once across every client on the database (see KeyLimit), or
// removes the limit (the zero KeyLimit). It takes effect at the next claim of
// every client; jobs running beyond a lower limit finish. A client started
// later whose QueueConfig declares a KeyLimit for the queue stores its own.
func (c *Client) QueueSetKeyLimit(ctx context.Context, name string, limit KeyLimit) error {
	if limit != (KeyLimit{}) {
		if err := checkKeyLimit("limit", name, limit); err != nil {
			return err
		}
	}
	err := c.queueOp(ctx, name, func(e weirdriver.Executor, ctx context.Context, name string) error {
		return e.QueueSetKeyLimit(ctx, name, limit.params())
	})
	if err != nil {
		return err
	}
	if e := c.engine(); e != nil {
		if p := e.producer(name); p != nil {
			p.poke()
		}
	}
	return nil
}

func (c *Client) queueOp(ctx context.Context, name string, op func(weirdriver.Executor, context.Context, string) error) error {
	if err := validateName("name", "queue", name); err != nil {
		return err
	}
	err := c.operate(ctx, func() error { return op(c.driver.Executor(), ctx, name) })
	if err != nil {
		return opErr(err)
	}
	return nil
}

// operate runs an operator call once the schema passed weirmigrate's Check. A
// call cannot rely on failing when the schema is behind: a schema migrated part
// way may hold every table the call reads (the job table comes first), and the
// call would answer, say, an empty list instead of naming what is missing.
// Operator calls are few, so the cost of reading the migration table each time
// is small; a schema reverted under the call is still caught by withSchemaCheck.
func (c *Client) operate(ctx context.Context, fn func() error) error {
	if err := weirmigrate.New(c.driver).Check(ctx); err != nil {
		return err
	}
	return c.withSchemaCheck(ctx, fn)
}
