package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/weirq/weir"
	"github.com/weirq/weir/weirtype"
)

var jobsCommand = &command{
	name:    "jobs",
	summary: "list, show, update, retry, cancel or delete jobs",
	usage:   jobsUsage,
	run:     runJobs,
}

const jobsSynopsis = `Usage:

    weir jobs list   [--state STATE,...] [--queue NAME,...] [--kind KIND,...]
                     [--tag TAG,...] [--limit N] [--after ID] [--json]
    weir jobs show   ID [--json]
    weir jobs update ID [--metadata JSON] [--tags TAG,... | --clear-tags]
    weir jobs retry  ID...
    weir jobs cancel ID...
    weir jobs delete ID...

Each action also takes --database-url URL and --schema NAME.

list prints a page of jobs by ascending id, filtered by state, queue and kind
(each a comma-separated list: any of them) and by tag (a comma-separated list:
all of them), as a table or, with --json, as a JSON array.
When more jobs follow, the table ends with the --after that shows them.
show prints every field of one job, its errors included.
retry makes jobs that are not running available now; a job that used all its
attempts gets one more.
cancel cancels jobs at once, or asks a running job's worker to stop it.
delete deletes jobs that are not running.
update replaces the metadata (a JSON object; @FILE reads it from FILE, - from
the standard input) or the tags of a job that is not running.

retry, cancel and delete act on each id in order and print a line per job. A
job they cannot change gets a line "weir: job ID: <reason>" on stderr, and the
command exits 1 after trying every id.
`

var jobsGroup = &actionGroup{
	name: "jobs", actions: []string{"list", "show", "update", "retry", "cancel", "delete"}, synopsis: jobsSynopsis,
	flags:     func(action string) *flag.FlagSet { fs, _ := jobsFlags(action); return fs },
	sameFlags: []string{"retry", "cancel", "delete"},
}

func jobsUsage(w io.Writer) { jobsGroup.usage(w) }

// jobsOpts are the flags of weir jobs' actions.
type jobsOpts struct {
	db     dbFlags
	states string
	queues string
	kinds  string
	tags   string
	limit  int
	after  int64
	json   bool
	// update
	metadata  string
	setTags   string
	clearTags bool
}

func jobsFlags(action string) (*flag.FlagSet, *jobsOpts) {
	o := &jobsOpts{}
	fs := newFlagSet("weir jobs " + action)
	o.db.register(fs)
	switch action {
	case "list":
		fs.StringVar(&o.states, "state", "", "list jobs in these `STATES` only, such as available,retryable")
		fs.StringVar(&o.queues, "queue", "", "list jobs of these `QUEUES` only, comma-separated")
		fs.StringVar(&o.kinds, "kind", "", "list jobs of these `KINDS` only, comma-separated")
		fs.StringVar(&o.tags, "tag", "", "list jobs that carry all of these `TAGS`, comma-separated")
		fs.IntVar(&o.limit, "limit", weir.DefaultListLimit, fmt.Sprintf("list at most `N` jobs, up to %d", weir.MaxListLimit))
		fs.Int64Var(&o.after, "after", 0, "list jobs after the one with this `ID` (the cursor of the previous page)")
		fs.BoolVar(&o.json, "json", false, "print a JSON array of jobs")
	case "show":
		fs.BoolVar(&o.json, "json", false, "print the job as a JSON object")
	case "update":
		fs.StringVar(&o.metadata, "metadata", "", "replace the job's metadata with this `JSON` object; @FILE reads it from FILE, - from standard input")
		fs.StringVar(&o.setTags, "tags", "", "replace the job's tags with these `TAGS`, comma-separated")
		fs.BoolVar(&o.clearTags, "clear-tags", false, "remove every tag of the job")
	}
	return fs, o
}

func runJobs(ctx context.Context, e *env, args []string) error {
	action, err := jobsGroup.action(e, args)
	if err != nil {
		return err
	}
	fs, o := jobsFlags(action)
	positional, err := parseArgs(e, fs, args[1:], jobsUsage)
	if err != nil {
		return err
	}
	if err := o.db.resolve(e, fs); err != nil {
		return err
	}

	var (
		params *weir.JobListParams
		ids    []int64
	)
	switch action {
	case "list":
		if len(positional) > 0 {
			return usagef("%s: unexpected argument %q (run `%s -h`)", cmdName(fs), positional[0], fs.Name())
		}
		if params, err = o.listParams(fs); err != nil {
			return err
		}
	case "show", "update":
		if len(positional) != 1 {
			return usagef("%s: want one job id, got %d arguments (run `%s -h`)", cmdName(fs), len(positional), fs.Name())
		}
		fallthrough
	default:
		if len(positional) == 0 {
			return usagef("%s: missing job id (run `%s -h`)", cmdName(fs), fs.Name())
		}
		// Every id is checked before any job is touched.
		for _, arg := range positional {
			id, err := strconv.ParseInt(arg, 10, 64)
			if errors.Is(err, strconv.ErrRange) && !strings.HasPrefix(arg, "-") {
				return usagef("%s: job id %s is out of range: ids go up to %d", cmdName(fs), arg, int64(math.MaxInt64))
			}
			if err != nil || id < 1 {
				return usagef("%s: job id %q is not a positive integer", cmdName(fs), arg)
			}
			ids = append(ids, id)
		}
	}

	var update *weir.JobUpdateParams
	if action == "update" {
		if update, err = o.updateParams(e, fs); err != nil {
			return err
		}
	}

	client, closeDB, err := openClient(ctx, &o.db)
	if err != nil {
		return err
	}
	defer closeDB()
	switch action {
	case "update":
		return jobsUpdate(ctx, e, fs, o, client, ids[0], update)
	case "list":
		return jobsList(ctx, e, fs, o, client, params)
	case "show":
		return jobsShow(ctx, e, fs, o, client, ids[0])
	default:
		return jobsChange(ctx, e, fs, o, client, action, ids)
	}
}

// updateParams checks update's flags and returns the change they ask for.
func (o *jobsOpts) updateParams(e *env, fs *flag.FlagSet) (*weir.JobUpdateParams, error) {
	name := cmdName(fs)
	p := &weir.JobUpdateParams{}
	if isSet(fs, "metadata") {
		meta, err := readJSONInput(e, fs, "metadata", o.metadata)
		if err != nil {
			return nil, err
		}
		p.Metadata = json.RawMessage(meta)
	}
	switch {
	case isSet(fs, "tags") && o.clearTags:
		return nil, usagef("%s: --tags and --clear-tags both given; give one", name)
	case o.clearTags:
		p.Tags = []string{}
	case isSet(fs, "tags"):
		tags, err := splitList(fs, "tags", o.setTags)
		if err != nil {
			return nil, err
		}
		p.Tags = tags
	}
	if p.Metadata == nil && p.Tags == nil {
		return nil, usagef("%s: nothing to change: give --metadata, --tags or --clear-tags", name)
	}
	return p, nil
}

// jobsUpdate replaces the metadata or tags of one job and prints what it did.
func jobsUpdate(ctx context.Context, e *env, fs *flag.FlagSet, o *jobsOpts, client *weir.Client, id int64, p *weir.JobUpdateParams) error {
	if _, err := client.JobUpdate(ctx, id, p); err != nil {
		if reason, ok := jobReason("update", err); ok {
			fmt.Fprintf(e.stderr, "weir: job %d: %s\n", id, termSafe(reason))
			return errAlreadyReported
		}
		return o.db.clientErr(fs, err)
	}
	var what []string
	if p.Metadata != nil {
		what = append(what, "metadata")
	}
	if p.Tags != nil {
		what = append(what, "tags")
	}
	_, err := fmt.Fprintf(e.stdout, "job %d: %s replaced\n", id, strings.Join(what, " and "))
	return err
}

// listParams checks list's flags and returns the listing they ask for.
func (o *jobsOpts) listParams(fs *flag.FlagSet) (*weir.JobListParams, error) {
	name := cmdName(fs)
	p := &weir.JobListParams{Limit: o.limit, Cursor: o.after}
	states, err := splitList(fs, "state", o.states)
	if err != nil {
		return nil, err
	}
	for _, s := range states {
		if !weir.JobState(s).Valid() {
			return nil, usagef("%s: --state %q is not a job state: want one of %s", name, s, stateNames())
		}
		p.States = append(p.States, weir.JobState(s))
	}
	if p.Queues, err = splitList(fs, "queue", o.queues); err != nil {
		return nil, err
	}
	if p.Kinds, err = splitList(fs, "kind", o.kinds); err != nil {
		return nil, err
	}
	if p.Tags, err = splitList(fs, "tag", o.tags); err != nil {
		return nil, err
	}
	if o.limit < 1 || o.limit > weir.MaxListLimit {
		return nil, usagef("%s: --limit %d is out of range 1..%d", name, o.limit, weir.MaxListLimit)
	}
	if o.after < 0 {
		return nil, usagef("%s: --after %d is negative", name, o.after)
	}
	return p, nil
}

func stateNames() string {
	var names []string
	for _, s := range weirtype.JobStates() {
		names = append(names, string(s))
	}
	return strings.Join(names, ", ")
}

func jobsList(ctx context.Context, e *env, fs *flag.FlagSet, o *jobsOpts, client *weir.Client, params *weir.JobListParams) error {
	res, err := client.JobList(ctx, params)
	if err != nil {
		return o.db.clientErr(fs, err)
	}
	if o.json {
		out := make([]*jobJSON, len(res.Jobs))
		for i, job := range res.Jobs {
			out[i] = newJobJSON(job)
		}
		return writeJSON(e.stdout, out)
	}
	if len(res.Jobs) == 0 {
		_, err := fmt.Fprintln(e.stdout, "no jobs")
		return err
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKIND\tQUEUE\tSTATE\tATTEMPT/MAX\tPRIORITY\tSCHEDULED\tCREATED")
	for _, j := range res.Jobs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d/%d\t%d\t%s\t%s\n", j.ID, termSafe(j.Kind), termSafe(j.Queue), termSafe(string(j.State)),
			j.Attempt, j.MaxAttempts, j.Priority, formatTime(j.ScheduledAt), formatTime(j.CreatedAt))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if res.Next != 0 {
		_, err := fmt.Fprintf(e.stdout, "more jobs follow: add --after %d for the next page\n", res.Next)
		return err
	}
	return nil
}

func jobsShow(ctx context.Context, e *env, fs *flag.FlagSet, o *jobsOpts, client *weir.Client, id int64) error {
	job, err := client.JobGet(ctx, id)
	if errors.Is(err, weir.ErrNotFound) {
		return fmt.Errorf("job %d not found", id)
	}
	if err != nil {
		return o.db.clientErr(fs, err)
	}
	if o.json {
		return writeJSON(e.stdout, newJobJSON(job))
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 8, 1, ' ', 0)
	// Every value goes through termSafe: args, errors and the rest are
	// written by whoever inserts or works the job.
	field := func(name, value string) { fmt.Fprintf(tw, "%s:\t%s\n", name, termSafe(value)) }
	field("id", strconv.FormatInt(job.ID, 10))
	field("kind", job.Kind)
	field("queue", job.Queue)
	field("state", string(job.State))
	field("priority", strconv.Itoa(job.Priority))
	field("attempt", strconv.Itoa(job.Attempt))
	field("max_attempts", strconv.Itoa(job.MaxAttempts))
	field("args", string(job.Args))
	field("metadata", orDash(string(job.Metadata)))
	field("output", orDash(string(job.Output)))
	field("progress", orDash(string(job.Progress)))
	field("tags", orDash(strings.Join(job.Tags, ",")))
	field("scheduled_at", fullTime(job.ScheduledAt))
	field("created_at", fullTime(job.CreatedAt))
	field("attempted_at", fullTimePtr(job.AttemptedAt))
	field("attempted_by", orDash(job.AttemptedBy))
	field("finalized_at", fullTimePtr(job.FinalizedAt))
	field("lease_token", strconv.FormatInt(job.LeaseToken, 10))
	field("lease_expires_at", fullTimePtr(job.LeaseExpiresAt))
	field("cancel_requested_at", fullTimePtr(job.CancelRequestedAt))
	field("release_count", strconv.Itoa(job.ReleaseCount))
	field("unique_key", orDash(hex.EncodeToString(job.UniqueKey)))
	var states []string
	for _, s := range job.UniqueStates {
		states = append(states, string(s))
	}
	field("unique_states", orDash(strings.Join(states, ",")))
	field("errors", strconv.Itoa(len(job.Errors)))
	if err := tw.Flush(); err != nil {
		return err
	}
	// Errors come last and unaligned: their text and traces run over many lines.
	for _, ae := range job.Errors {
		fmt.Fprintf(e.stdout, "  attempt %d at %s:\n", ae.Attempt, fullTime(ae.At))
		writeIndented(e.stdout, "    ", ae.Error)
		if ae.Trace != "" {
			fmt.Fprintln(e.stdout, "    trace:")
			writeIndented(e.stdout, "      ", ae.Trace)
		}
	}
	return nil
}

// writeIndented prints text line by line after indent, escaped by
// termSafeBlock.
func writeIndented(w io.Writer, indent, text string) {
	for _, line := range termSafeBlock(strings.TrimRight(text, "\n")) {
		fmt.Fprintf(w, "%s%s\n", indent, line)
	}
}

// jobsChange retries, cancels or deletes each job in turn. A job that cannot be
// changed is reported and the others are still tried; an error that is not
// about the job (the database is gone, the schema is not migrated) stops the
// command, since every other id would fail the same way.
func jobsChange(ctx context.Context, e *env, fs *flag.FlagSet, o *jobsOpts, client *weir.Client, action string, ids []int64) error {
	op := map[string]func(context.Context, int64) (*weir.JobRow, error){
		"retry":  client.JobRetry,
		"cancel": client.JobCancel,
		"delete": client.JobDelete,
	}[action]
	failed := 0
	for _, id := range ids {
		job, err := op(ctx, id)
		if err == nil {
			fmt.Fprintf(e.stdout, "job %d: %s\n", id, changed(action, job))
			continue
		}
		reason, ok := jobReason(action, err)
		if !ok {
			if errors.Is(err, weir.ErrNotMigrated) || ctx.Err() != nil {
				return o.db.clientErr(fs, err)
			}
			return fmt.Errorf("job %d: %w", id, o.db.clientErr(fs, err))
		}
		fmt.Fprintf(e.stderr, "weir: job %d: %s\n", id, termSafe(reason))
		failed++
	}
	if failed > 0 {
		return errAlreadyReported
	}
	return nil
}

// changed says what an operator action did to job.
func changed(action string, job *weir.JobRow) string {
	switch action {
	case "retry":
		return "retried"
	case "cancel":
		if job.State == weir.JobStateRunning {
			return "cancel requested (running)"
		}
		return "cancelled"
	default:
		return "deleted"
	}
}

// jobReason says why an operator action could not change a job, when the job
// itself is the reason.
func jobReason(action string, err error) (string, bool) {
	switch {
	case errors.Is(err, weir.ErrNotFound):
		return "not found", true
	case errors.Is(err, weir.ErrJobRunning):
		switch action {
		case "delete":
			return "running: cancel it first", true
		case "update":
			return "running: it can be updated once it ends", true
		}
		return "running: it can be retried once it ends", true
	case errors.Is(err, weir.ErrJobFinal):
		if final, ok := errors.AsType[*weir.JobFinalError](err); ok {
			return fmt.Sprintf("already final (%s)", final.State), true
		}
		return "already final", true
	case errors.Is(err, weir.ErrUniqueConflict):
		return "another job with the same unique key is live", true
	}
	return "", false
}

// jobJSON is a job as weir prints it for scripts. The field names are stable.
type jobJSON struct {
	ID                int64               `json:"id"`
	State             weir.JobState       `json:"state"`
	Queue             string              `json:"queue"`
	Kind              string              `json:"kind"`
	Args              json.RawMessage     `json:"args"`
	Priority          int                 `json:"priority"`
	Attempt           int                 `json:"attempt"`
	MaxAttempts       int                 `json:"max_attempts"`
	ScheduledAt       time.Time           `json:"scheduled_at"`
	CreatedAt         time.Time           `json:"created_at"`
	AttemptedAt       *time.Time          `json:"attempted_at"`
	AttemptedBy       *string             `json:"attempted_by"`
	FinalizedAt       *time.Time          `json:"finalized_at"`
	LeaseToken        int64               `json:"lease_token"`
	LeaseExpiresAt    *time.Time          `json:"lease_expires_at"`
	CancelRequestedAt *time.Time          `json:"cancel_requested_at"`
	ReleaseCount      int                 `json:"release_count"`
	Tags              []string            `json:"tags"`
	Metadata          json.RawMessage     `json:"metadata"`
	UniqueKey         *string             `json:"unique_key"`
	UniqueStates      []weir.JobState     `json:"unique_states"`
	Errors            []weir.AttemptError `json:"errors"`
	// Output and Progress are null when the job has none.
	Output   json.RawMessage `json:"output"`
	Progress json.RawMessage `json:"progress"`
}

func newJobJSON(j *weir.JobRow) *jobJSON {
	out := &jobJSON{
		ID: j.ID, State: j.State, Queue: j.Queue, Kind: j.Kind, Args: j.Args,
		Priority: j.Priority, Attempt: j.Attempt, MaxAttempts: j.MaxAttempts,
		ScheduledAt: j.ScheduledAt.UTC(), CreatedAt: j.CreatedAt.UTC(),
		AttemptedAt: utcPtr(j.AttemptedAt), FinalizedAt: utcPtr(j.FinalizedAt),
		LeaseToken: j.LeaseToken, LeaseExpiresAt: utcPtr(j.LeaseExpiresAt),
		CancelRequestedAt: utcPtr(j.CancelRequestedAt), ReleaseCount: j.ReleaseCount,
		Tags: j.Tags, Metadata: j.Metadata, UniqueStates: j.UniqueStates, Errors: j.Errors,
		Output: j.Output, Progress: j.Progress,
	}
	// Lists are never null, so that scripts can iterate them without a check;
	// the unique fields are null exactly when the job is not unique.
	if out.Tags == nil {
		out.Tags = []string{}
	}
	if out.Errors == nil {
		out.Errors = []weir.AttemptError{}
	}
	for i := range out.Errors {
		out.Errors[i].At = out.Errors[i].At.UTC()
	}
	if len(out.Args) == 0 {
		out.Args = json.RawMessage("{}")
	}
	if len(out.Metadata) == 0 {
		out.Metadata = json.RawMessage("{}")
	}
	if j.AttemptedBy != "" {
		out.AttemptedBy = &j.AttemptedBy
	}
	if j.UniqueKey != nil {
		key := hex.EncodeToString(j.UniqueKey)
		out.UniqueKey = &key
		if out.UniqueStates == nil {
			out.UniqueStates = []weir.JobState{}
		}
	} else {
		out.UniqueStates = nil
	}
	return out
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// formatTime prints a time in UTC to the second, as tables show it.
func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// fullTime prints a time in UTC to the microsecond, as show does.
func fullTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func fullTimePtr(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return fullTime(*t)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
