package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/weirq/weir"
)

var enqueueCommand = &command{
	name:    "enqueue",
	summary: "insert jobs",
	usage:   enqueueUsage,
	run:     runEnqueue,
}

// maxEnqueueCount is the most copies one enqueue inserts: one transaction, and
// a bound on what a typo can do.
const maxEnqueueCount = 100_000

func enqueueUsage(w io.Writer) {
	fmt.Fprint(w, `Usage:

    weir enqueue --kind KIND [--args JSON] [--queue NAME] [--priority N]
                 [--run-at TIME | --in DURATION] [--max-attempts N]
                 [--tags TAG,...] [--count N] [--unique-by-args]
                 [--unique-args-key KEY]... [--unique-by-queue]
                 [--unique-period DURATION] [--unique-states STATE,...]
                 [--unique-on-conflict skip|replace|debounce]
                 [--database-url URL] [--schema NAME]

enqueue inserts a job, or --count copies of it in one transaction, and prints
the new jobs' ids, one per line. Options left out take the client's defaults:
queue "default", priority 2, max attempts 25, due now.

With a --unique-* flag the job is unique: when a job with the same unique key
exists, its id is printed in place of a new one and a line on stderr says it
was a duplicate, or that it was replaced (--unique-on-conflict).

Flags:

`)
	fs, _ := enqueueFlags()
	printDefaults(w, fs)
}

// enqueueOpts are the flags of weir enqueue.
type enqueueOpts struct {
	db          dbFlags
	kind        string
	args        string
	queue       string
	priority    int
	runAt       string
	in          time.Duration
	maxAttempts int
	tags        string
	count       int

	uniqueByArgs     bool
	uniqueArgsKeys   stringList
	uniqueByQueue    bool
	uniquePeriod     time.Duration
	uniqueStates     string
	uniqueOnConflict string
}

// stringList is a flag that may be given several times, each value kept as
// written (JSON keys may hold commas and spaces).
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(s string) error {
	*l = append(*l, s)
	return nil
}

func enqueueFlags() (*flag.FlagSet, *enqueueOpts) {
	o := &enqueueOpts{}
	fs := newFlagSet("weir enqueue")
	o.db.register(fs)
	fs.StringVar(&o.kind, "kind", "", "the job's `KIND` (required)")
	fs.StringVar(&o.args, "args", "{}", "the job's arguments, a `JSON` object; @FILE reads it from FILE, - from standard input")
	fs.StringVar(&o.queue, "queue", "", "the `NAME` of the queue that runs the job (default \""+weir.DefaultQueue+"\")")
	fs.IntVar(&o.priority, "priority", 0, "priority `N`, from 1 (first) to 4 (last) (default 2)")
	fs.StringVar(&o.runAt, "run-at", "", "when the job becomes due, an RFC 3339 `TIME` such as 2030-01-02T15:04:05Z")
	fs.Var((*durationValue)(&o.in), "in", "make the job due after `DURATION`, such as 90s or 2h")
	fs.IntVar(&o.maxAttempts, "max-attempts", 0, "give the job `N` attempts before it is discarded (default 25)")
	fs.StringVar(&o.tags, "tags", "", "comma-separated `TAGS` for operators")
	fs.IntVar(&o.count, "count", 1, "insert `N` copies of the job, at most 100000")
	fs.BoolVar(&o.uniqueByArgs, "unique-by-args", false, "make the job unique by its args")
	fs.Var(&o.uniqueArgsKeys, "unique-args-key", "make the job unique by this top-level `KEY` of its args (repeat for more keys; implies --unique-by-args)")
	fs.BoolVar(&o.uniqueByQueue, "unique-by-queue", false, "make the job unique by its queue")
	fs.Var((*durationValue)(&o.uniquePeriod), "unique-period", "make the job unique among jobs scheduled in the same `DURATION`-long period, such as 1h")
	fs.StringVar(&o.uniqueStates, "unique-states", "", "comma-separated `STATES` among which the job is unique (default all but cancelled and discarded)")
	fs.StringVar(&o.uniqueOnConflict, "unique-on-conflict", "", "what to do when a pending job holds the key: `MODE` skip, replace or debounce (default skip)")
	return fs, o
}

func runEnqueue(ctx context.Context, e *env, args []string) error {
	fs, o := enqueueFlags()
	if err := parseFlags(e, fs, args, enqueueUsage); err != nil {
		return err
	}
	if err := o.db.resolve(e, fs); err != nil {
		return err
	}
	var err error
	if o.args, err = readJSONInput(e, fs, "args", o.args); err != nil {
		return err
	}
	jobArgs, opts, err := o.job(fs, time.Now())
	if err != nil {
		return err
	}

	client, closeDB, err := openClient(ctx, &o.db)
	if err != nil {
		return err
	}
	defer closeDB()
	var results []*weir.InsertResult
	if o.count == 1 {
		res, err := client.Insert(ctx, jobArgs, opts)
		if err != nil {
			return o.db.clientErr(fs, err)
		}
		results = append(results, res)
	} else {
		params := make([]weir.InsertManyParams, o.count)
		for i := range params {
			params[i] = weir.InsertManyParams{Args: jobArgs, InsertOpts: opts}
		}
		if results, err = client.InsertMany(ctx, params); err != nil {
			return o.db.clientErr(fs, err)
		}
	}
	var out bytes.Buffer
	for _, r := range results {
		fmt.Fprintln(&out, r.Job.ID)
		switch {
		case r.Replaced:
			fmt.Fprintf(e.stderr, "weir: enqueue: job %d held the unique key and was replaced\n", r.Job.ID)
		case r.Duplicate:
			fmt.Fprintf(e.stderr, "weir: enqueue: job %d holds the unique key (%s); nothing inserted\n", r.Job.ID, r.Job.State)
		}
	}
	_, err = e.stdout.Write(out.Bytes())
	return err
}

// job checks the flags that the client cannot check (or would read otherwise)
// and returns the job to insert. now places --in.
func (o *enqueueOpts) job(fs *flag.FlagSet, now time.Time) (weir.RawArgs, *weir.InsertOpts, error) {
	name := cmdName(fs)
	if o.kind == "" {
		return weir.RawArgs{}, nil, usagef("%s: --kind is required", name)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, []byte(o.args)); err != nil {
		return weir.RawArgs{}, nil, usagef("%s: --args is not valid JSON: %v", name, err)
	}
	if compact.Len() == 0 || compact.Bytes()[0] != '{' {
		return weir.RawArgs{}, nil, usagef("%s: --args must be a JSON object, got %s", name, jsonKind(compact.Bytes()))
	}
	if isSet(fs, "priority") && o.priority == 0 {
		return weir.RawArgs{}, nil, usagef("%s: --priority 0 is out of range 1..4", name)
	}
	if isSet(fs, "max-attempts") && o.maxAttempts == 0 {
		return weir.RawArgs{}, nil, usagef("%s: --max-attempts 0 is out of range 1..%d", name, weir.MaxMaxAttempts)
	}
	if o.count < 1 || o.count > maxEnqueueCount {
		return weir.RawArgs{}, nil, usagef("%s: --count %d is out of range 1..%d", name, o.count, maxEnqueueCount)
	}
	opts := &weir.InsertOpts{Queue: o.queue, Priority: o.priority, MaxAttempts: o.maxAttempts}
	switch {
	case isSet(fs, "run-at") && isSet(fs, "in"):
		return weir.RawArgs{}, nil, usagef("%s: give --run-at or --in, not both", name)
	case isSet(fs, "run-at"):
		at, err := time.Parse(time.RFC3339, o.runAt)
		if err != nil {
			return weir.RawArgs{}, nil, usagef("%s: --run-at %q is not an RFC 3339 time such as 2030-01-02T15:04:05Z", name, o.runAt)
		}
		opts.ScheduledAt = at
	case isSet(fs, "in"):
		if o.in < 0 {
			return weir.RawArgs{}, nil, usagef("%s: --in %s is negative", name, o.in)
		}
		opts.ScheduledAt = now.Add(o.in)
	}
	if o.tags != "" {
		tags, err := splitList(fs, "tags", o.tags)
		if err != nil {
			return weir.RawArgs{}, nil, err
		}
		opts.Tags = tags
	}
	if isSet(fs, "unique-period") && o.uniquePeriod == 0 {
		// Zero is the client's "not by period"; a flag given means a period.
		return weir.RawArgs{}, nil, usagef("%s: --unique-period 0s is under one second", name)
	}
	opts.Unique = weir.UniqueOpts{
		ByArgs: o.uniqueByArgs, ByArgsKeys: o.uniqueArgsKeys, ByQueue: o.uniqueByQueue,
		ByPeriod: o.uniquePeriod, OnConflict: weir.UniqueConflict(o.uniqueOnConflict),
	}
	if isSet(fs, "unique-states") {
		states, err := splitList(fs, "unique-states", o.uniqueStates)
		if err != nil {
			return weir.RawArgs{}, nil, err
		}
		for _, st := range states {
			opts.Unique.ByState = append(opts.Unique.ByState, weir.JobState(st))
		}
	}
	return weir.RawArgs{KindName: o.kind, JSON: compact.Bytes()}, opts, nil
}

// maxArgsInput bounds what --args @FILE and --args - read: the client's
// default limit on a job's args, with room for white space that
// compaction removes.
const maxArgsInput = 4 * weir.DefaultMaxArgsBytes

// readJSONInput returns the value of a flag that takes a JSON object (--args,
// --metadata): @FILE stands for FILE's content and - for the standard
// input's, for objects longer than a command line holds. A JSON object never
// starts with @ or is -, so neither form is ambiguous.
func readJSONInput(e *env, fs *flag.FlagSet, flagName, value string) (string, error) {
	name := cmdName(fs)
	var (
		r    io.Reader
		from string
	)
	switch {
	case value == "-":
		r, from = e.stdin, "the standard input"
	case strings.HasPrefix(value, "@"):
		path := value[1:]
		if path == "" {
			return "", usagef("%s: --%s @ needs a file name, as in --%s @%s.json", name, flagName, flagName, flagName)
		}
		f, err := os.Open(path)
		if err != nil {
			return "", usagef("%s: --%s: %v", name, flagName, err)
		}
		defer f.Close()
		r, from = f, path
	default:
		return value, nil
	}
	b, err := io.ReadAll(io.LimitReader(r, maxArgsInput+1))
	if err != nil {
		return "", usagef("%s: --%s: read %s: %v", name, flagName, termSafe(from), err)
	}
	if len(b) > maxArgsInput {
		return "", usagef("%s: --%s: %s holds more than %d bytes", name, flagName, termSafe(from), maxArgsInput)
	}
	return string(b), nil
}

// durationValue is --in: a time.Duration whose errors say what a duration
// looks like, and that a bare number needs a unit.
type durationValue time.Duration

func (d *durationValue) String() string { return time.Duration(*d).String() }

func (d *durationValue) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err == nil {
		*d = durationValue(v)
		return nil
	}
	if _, numErr := strconv.ParseFloat(s, 64); numErr == nil && s != "0" {
		return fmt.Errorf("a duration needs a unit: %ss, %sm or %sh", s, s, s)
	}
	return errors.New("not a duration such as 90s, 15m or 2h30m")
}

// jsonKind names the type of a valid JSON value for messages.
func jsonKind(v []byte) string {
	switch {
	case len(v) == 0:
		return "nothing"
	case v[0] == '[':
		return "an array"
	case v[0] == '"':
		return "a string"
	case v[0] == 't', v[0] == 'f':
		return "a boolean"
	case v[0] == 'n':
		return "null"
	default:
		return "a number"
	}
}
