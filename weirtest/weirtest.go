// Package weirtest helps an application's tests check the jobs its code
// inserted, on PostgreSQL or SQLite, committed or inside the test's own
// transaction, without running workers:
//
//	job := weirtest.RequireInserted(ctx, t, driver.Executor(), SendWelcome{}, nil)
//	if job.Args.To != "ada@example.com" { ... }
//
//	tx, _ := pool.Begin(ctx) // the code under test inserts in tx
//	weirtest.RequireInserted(ctx, t, weirtest.Tx(t, driver, tx), SendWelcome{},
//		&weirtest.RequireInsertedOpts{Queue: "mail"})
//
// A helper that finds what it does not expect fails the test with what it
// found instead. docs/testing-jobs.md shows an application test before and
// after.
package weirtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirq/weir"
	"github.com/weirq/weir/weirdriver"
)

// Reader is where a helper looks for jobs: a driver's Executor (what is
// committed), or the Reader of an open transaction (Tx), which sees the
// transaction's own inserts too.
type Reader interface {
	JobList(ctx context.Context, params *weirdriver.JobListParams) ([]*weir.JobRow, error)
}

// Tx returns the Reader of tx, an open transaction on driver's database: a
// pgx.Tx or *sql.Tx with weirpgx, a *sql.Tx with weirsqlite. It fails tb if
// the driver does not take tx.
func Tx(tb testing.TB, driver weirdriver.Driver, tx any) Reader {
	tb.Helper()
	r, err := driver.UnwrapTx(tx)
	if err != nil {
		tb.Fatalf("weirtest: %v", err)
	}
	return r
}

// RequireInsertedOpts are what a job must also have to match: a zero field
// matches anything.
type RequireInsertedOpts struct {
	Queue       string
	Priority    int
	MaxAttempts int
	State       weir.JobState
	// ScheduledAfter and ScheduledBefore bound the job's scheduled time,
	// inclusive; a zero time is no bound.
	ScheduledAfter, ScheduledBefore time.Time
	// Tags must all be among the job's tags.
	Tags []string
	// Metadata is a JSON object whose every key the job's metadata must hold,
	// with an equal value (other keys of the job's are let be).
	Metadata json.RawMessage
}

// ExpectedJob is one job RequireManyInserted expects: its args' kind, and
// options it must also have (nil: any).
type ExpectedJob struct {
	Args weir.JobArgs
	Opts *RequireInsertedOpts
}

// pageSize is how many jobs one listing reads.
const pageSize = 500

// list returns every job of the given kinds that r sees, in id order.
func list(ctx context.Context, tb testing.TB, r Reader, kinds []string) []*weir.JobRow {
	tb.Helper()
	var all []*weir.JobRow
	var after int64
	for {
		page, err := r.JobList(ctx, &weirdriver.JobListParams{Kinds: kinds, AfterID: after, Limit: pageSize})
		if err != nil {
			tb.Fatalf("weirtest: listing jobs: %v", err)
		}
		all = append(all, page...)
		if len(page) < pageSize {
			return all
		}
		after = page[len(page)-1].ID
	}
}

// RequireInserted checks that exactly one job of expected's kind, matching
// opts, was inserted (as r sees it), and returns it with its args decoded. It
// does not compare the args: the job returned is there for that. It fails tb
// when there is none, when there are several (RequireManyInserted checks
// those), or when the one there does not match opts, saying what it found.
func RequireInserted[T weir.JobArgs](ctx context.Context, tb testing.TB, r Reader, expected T, opts *RequireInsertedOpts) *weir.Job[T] {
	tb.Helper()
	kind := expected.Kind()
	jobs := list(ctx, tb, r, []string{kind})
	switch len(jobs) {
	case 0:
		tb.Fatalf("weirtest: no job of kind %q was inserted; %s", kind, others(ctx, tb, r))
	case 1:
	default:
		tb.Fatalf("weirtest: %d jobs of kind %q were inserted (ids %s), want exactly one; RequireManyInserted checks several",
			len(jobs), kind, ids(jobs))
	}
	if diffs := mismatches(jobs[0], opts); len(diffs) > 0 {
		tb.Fatalf("weirtest: the job of kind %q (id %d) does not match: %s", kind, jobs[0].ID, strings.Join(diffs, "; "))
	}
	var args T
	if err := json.Unmarshal(jobs[0].Args, &args); err != nil {
		tb.Fatalf("weirtest: the job of kind %q (id %d): its args %s do not decode into %T: %v", kind, jobs[0].ID, jobs[0].Args, args, err)
	}
	return &weir.Job[T]{JobRow: jobs[0], Args: args}
}

// RequireNotInserted checks that no job of expected's kind matching opts (nil:
// any job of the kind) was inserted, as r sees it; it fails tb naming those
// that were.
func RequireNotInserted[T weir.JobArgs](ctx context.Context, tb testing.TB, r Reader, expected T, opts *RequireInsertedOpts) {
	tb.Helper()
	kind := expected.Kind()
	var found []*weir.JobRow
	for _, j := range list(ctx, tb, r, []string{kind}) {
		if len(mismatches(j, opts)) == 0 {
			found = append(found, j)
		}
	}
	if len(found) > 0 {
		what := "of kind"
		if opts != nil {
			what = "matching the options, of kind"
		}
		tb.Fatalf("weirtest: %d job(s) %s %q were inserted (ids %s), want none", len(found), what, kind, ids(found))
	}
}

// RequireManyInserted checks that the jobs of the expected kinds that r sees
// are, in insertion (id) order, exactly one per expected job, of its kind and
// matching its options, and returns them. Jobs of other kinds are not looked
// at.
func RequireManyInserted(ctx context.Context, tb testing.TB, r Reader, expected []ExpectedJob) []*weir.JobRow {
	tb.Helper()
	var kinds, want []string
	for i, e := range expected {
		if e.Args == nil {
			tb.Fatalf("weirtest: expected job %d has no Args", i)
		}
		want = append(want, e.Args.Kind())
		if !slices.Contains(kinds, e.Args.Kind()) {
			kinds = append(kinds, e.Args.Kind())
		}
	}
	jobs := list(ctx, tb, r, kinds)
	got := make([]string, len(jobs))
	for i, j := range jobs {
		got[i] = j.Kind
	}
	if !slices.Equal(got, want) {
		tb.Fatalf("weirtest: jobs inserted of kinds %q: got %q (ids %s), want %q", kinds, got, ids(jobs), want)
	}
	for i, e := range expected {
		if diffs := mismatches(jobs[i], e.Opts); len(diffs) > 0 {
			tb.Fatalf("weirtest: job %d (kind %q, id %d) does not match: %s", i, want[i], jobs[i].ID, strings.Join(diffs, "; "))
		}
	}
	return jobs
}

// mismatches says how j differs from what opts ask for.
func mismatches(j *weir.JobRow, opts *RequireInsertedOpts) []string {
	if opts == nil {
		return nil
	}
	var diffs []string
	differ := func(format string, args ...any) { diffs = append(diffs, fmt.Sprintf(format, args...)) }
	if opts.Queue != "" && j.Queue != opts.Queue {
		differ("queue %q, want %q", j.Queue, opts.Queue)
	}
	if opts.Priority != 0 && j.Priority != opts.Priority {
		differ("priority %d, want %d", j.Priority, opts.Priority)
	}
	if opts.MaxAttempts != 0 && j.MaxAttempts != opts.MaxAttempts {
		differ("max attempts %d, want %d", j.MaxAttempts, opts.MaxAttempts)
	}
	if opts.State != "" && j.State != opts.State {
		differ("state %s, want %s", j.State, opts.State)
	}
	if !opts.ScheduledAfter.IsZero() && j.ScheduledAt.Before(opts.ScheduledAfter) {
		differ("scheduled at %s, before %s", j.ScheduledAt.Format(time.RFC3339Nano), opts.ScheduledAfter.Format(time.RFC3339Nano))
	}
	if !opts.ScheduledBefore.IsZero() && j.ScheduledAt.After(opts.ScheduledBefore) {
		differ("scheduled at %s, after %s", j.ScheduledAt.Format(time.RFC3339Nano), opts.ScheduledBefore.Format(time.RFC3339Nano))
	}
	for _, tag := range opts.Tags {
		if !slices.Contains(j.Tags, tag) {
			differ("tags %q, want %q among them", j.Tags, tag)
		}
	}
	if len(bytes.TrimSpace(opts.Metadata)) > 0 {
		if d := metadataMismatch(j.Metadata, opts.Metadata); d != "" {
			differ("%s", d)
		}
	}
	return diffs
}

// metadataMismatch says which of want's keys got lacks or holds with another
// value ("" if none).
func metadataMismatch(got, want json.RawMessage) string {
	var w, g map[string]any
	if err := json.Unmarshal(want, &w); err != nil {
		return fmt.Sprintf("the expected metadata %s is not a JSON object: %v", want, err)
	}
	if len(bytes.TrimSpace(got)) > 0 {
		if err := json.Unmarshal(got, &g); err != nil {
			return fmt.Sprintf("metadata %s is not a JSON object", got)
		}
	}
	var diffs []string
	for _, k := range slices.Sorted(maps.Keys(w)) {
		gv, ok := g[k]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("metadata has no key %q", k))
		case !reflect.DeepEqual(gv, w[k]):
			gj, _ := json.Marshal(gv)
			wj, _ := json.Marshal(w[k])
			diffs = append(diffs, fmt.Sprintf("metadata %q is %s, want %s", k, gj, wj))
		}
	}
	return strings.Join(diffs, "; ")
}

// others describes the jobs of other kinds, for a failure's message.
func others(ctx context.Context, tb testing.TB, r Reader) string {
	tb.Helper()
	jobs := list(ctx, tb, r, nil)
	if len(jobs) == 0 {
		return "no job of any kind was inserted"
	}
	counts := map[string]int{}
	for _, j := range jobs {
		counts[j.Kind]++
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%d of kind %q", counts[k], k))
	}
	return "jobs found: " + strings.Join(parts, ", ")
}

// ids lists the jobs' ids.
func ids(jobs []*weir.JobRow) string {
	s := make([]string, len(jobs))
	for i, j := range jobs {
		s[i] = fmt.Sprint(j.ID)
	}
	return strings.Join(s, ", ")
}
