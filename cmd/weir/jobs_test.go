package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/weirq/weir"
	"github.com/weirq/weir/internal/dbtest"
)

// tableRows returns a table's header and rows as fields.
func tableRows(t *testing.T, out string) (header string, rows [][]string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	header = strings.Join(strings.Fields(lines[0]), " ")
	for _, line := range lines[1:] {
		rows = append(rows, strings.Fields(line))
	}
	return header, rows
}

func TestJobsList(t *testing.T) {
	t.Parallel()
	f := newFixture(t)

	r := f.weir(t, "jobs", "list")
	wantOK(t, r)
	header, rows := tableRows(t, r.stdout)
	if header != "ID KIND QUEUE STATE ATTEMPT/MAX PRIORITY SCHEDULED CREATED" {
		t.Fatalf("header %q", header)
	}
	if len(rows) != 7 {
		t.Fatalf("want 7 jobs:\n%s", r.stdout)
	}
	var all []string // every id, in order
	for _, row := range rows {
		if len(row) != 8 {
			t.Fatalf("row %q does not have 8 columns", row)
		}
		all = append(all, row[0])
	}
	if want := []string{fmt.Sprint(f.running), "fix.running", "busy", "running", "1/25", "2"}; !slices.Equal(rows[2][:6], want) {
		t.Errorf("running job's row %q, want it to start with %q", rows[2], want)
	}

	// Filters take comma lists and combine.
	r = f.weir(t, "jobs", "list", "--state", "running,retryable")
	wantOK(t, r)
	if _, rows := tableRows(t, r.stdout); len(rows) != 2 || rows[0][0] != fmt.Sprint(f.running) || rows[1][0] != fmt.Sprint(f.failed) {
		t.Errorf("--state running,retryable:\n%s", r.stdout)
	}
	r = f.weir(t, "jobs", "list", "--queue", "later,busy", "--kind", "fix.scheduled")
	wantOK(t, r)
	if _, rows := tableRows(t, r.stdout); len(rows) != 1 || rows[0][0] != fmt.Sprint(f.scheduled) {
		t.Errorf("--queue later,busy --kind fix.scheduled:\n%s", r.stdout)
	}
	r = f.weir(t, "jobs", "list", "--tag", "no-such-tag")
	wantOK(t, r)
	if r.stdout != "no jobs\n" {
		t.Errorf("--tag no-such-tag printed %q", r.stdout)
	}
	r = f.weir(t, "jobs", "list", "--tag", "bad tag")
	if r.code == 0 || !strings.Contains(r.stderr, `tag "bad tag" has characters outside`) {
		t.Errorf("--tag 'bad tag': exit %d, stderr %q", r.code, r.stderr)
	}
	r = f.weir(t, "jobs", "list", "--queue", "nothing-here")
	wantOK(t, r)
	if r.stdout != "no jobs\n" {
		t.Errorf("empty listing printed %q", r.stdout)
	}
	r = f.weir(t, "jobs", "list", "--queue", "nothing-here", "--json")
	wantOK(t, r)
	if r.stdout != "[]\n" {
		t.Errorf("empty JSON listing printed %q", r.stdout)
	}

	// Paging: the hint names the cursor, and following it visits every job once.
	var seen []string
	after := "0"
	for page := 0; ; page++ {
		if page > 4 {
			t.Fatalf("paging does not end: %q", seen)
		}
		r = f.weir(t, "jobs", "list", "--limit", "3", "--after", after)
		wantOK(t, r)
		lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
		last := lines[len(lines)-1]
		cursor, more := strings.CutPrefix(last, "more jobs follow: add --after ")
		if more {
			cursor = strings.TrimSuffix(cursor, " for the next page")
			lines = lines[:len(lines)-1]
		}
		_, rows := tableRows(t, strings.Join(lines, "\n"))
		for _, row := range rows {
			seen = append(seen, row[0])
		}
		if !more {
			break
		}
		if cursor != rows[len(rows)-1][0] {
			t.Fatalf("hint names cursor %s after a page ending with %s", cursor, rows[len(rows)-1][0])
		}
		after = cursor
	}
	if !slices.Equal(seen, all) {
		t.Errorf("paging saw %q, want %q", seen, all)
	}

	// JSON: one object per job, with the fields of show.
	r = f.weir(t, "jobs", "list", "--json", "--state", "retryable")
	wantOK(t, r)
	var jobs []shownJob
	decodeJSON(t, r.stdout, &jobs)
	if len(jobs) != 1 || jobs[0].ID != f.failed || jobs[0].State != "retryable" || len(jobs[0].Errors) != 1 {
		t.Fatalf("--json --state retryable: %+v", jobs)
	}
	r = f.weir(t, "jobs", "list", "--json", "--limit", "2", "--after", fmt.Sprint(f.available))
	wantOK(t, r)
	jobs = nil
	decodeJSON(t, r.stdout, &jobs)
	if len(jobs) != 2 || jobs[0].ID != f.scheduled || jobs[1].ID != f.running {
		t.Fatalf("--json --limit 2 --after %d: %+v", f.available, jobs)
	}
}

func TestJobsShow(t *testing.T) {
	t.Parallel()
	f := newFixture(t)

	// The JSON object has exactly these fields, in snake_case.
	r := f.weir(t, "jobs", "show", fmt.Sprint(f.failed), "--json")
	wantOK(t, r)
	var fields map[string]json.RawMessage
	decodeJSON(t, r.stdout, &fields)
	want := []string{"args", "attempt", "attempted_at", "attempted_by", "cancel_requested_at", "created_at",
		"errors", "finalized_at", "id", "kind", "lease_expires_at", "lease_token", "max_attempts", "metadata",
		"output", "priority", "progress", "queue", "release_count", "scheduled_at", "state", "tags", "unique_key", "unique_states"}
	var got []string
	for k := range fields {
		got = append(got, k)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("show --json fields:\n got %q\nwant %q", got, want)
	}

	job := showJob(t, f.weir, f.failed)
	if job.State != "retryable" || job.Attempt != 1 || job.AttemptedAt == nil || job.AttemptedBy == nil ||
		*job.AttemptedBy != "fixture" || job.LeaseToken <= 0 || job.LeaseExpiresAt != nil ||
		!slices.Equal(job.Tags, []string{"t1", "t2"}) || string(job.Metadata) != "{}" || job.UniqueKey != nil {
		t.Fatalf("failed job: %+v", job)
	}
	var attempt struct {
		Attempt int    `json:"attempt"`
		At      string `json:"at"`
		Error   string `json:"error"`
		Trace   string `json:"trace"`
	}
	decodeJSON(t, string(job.Errors[0]), &attempt)
	if attempt.Attempt != 1 || attempt.At == "" || attempt.Error != "boom\nsecond line" || attempt.Trace != "main.work()\n\twork.go:12" {
		t.Fatalf("error: %+v", attempt)
	}

	// The human form: key: value lines, then the errors indented.
	r = f.weir(t, "jobs", "show", fmt.Sprint(f.failed))
	wantOK(t, r)
	for _, line := range []string{
		fmt.Sprintf("id: %d", f.failed), "kind: fix.failed", "queue: flaky", "state: retryable",
		"attempt: 1", "max_attempts: 25", "args: {}", "tags: t1,t2", "attempted_by: fixture",
		fmt.Sprintf("lease_token: %d", job.LeaseToken), "lease_expires_at: -", "unique_key: -", "errors: 1", "output: -", "progress: -",
	} {
		if !slices.Contains(normalizedLines(r.stdout), line) {
			t.Errorf("show does not print %q:\n%s", line, r.stdout)
		}
	}
	for _, s := range []string{"\n  attempt 1 at ", "\n    boom\n    second line\n", "\n    trace:\n      main.work()\n      \twork.go:12\n"} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("show does not print %q:\n%s", s, r.stdout)
		}
	}

	// Flags may come before or after the id.
	r = runWeir(t, f.env, "jobs", "show", "--schema", f.schema, "--json", fmt.Sprint(f.running))
	wantOK(t, r)
	var running shownJob
	decodeJSON(t, r.stdout, &running)
	if running.State != "running" || running.LeaseExpiresAt == nil || len(running.Errors) != 0 || running.Errors == nil {
		t.Fatalf("running job: %+v", running)
	}

	// A unique job shows its key and states.
	uniq := showJob(t, f.weir, f.uniqueCancelled)
	if uniq.UniqueKey == nil || len(*uniq.UniqueKey) != 64 || !slices.Contains(uniq.UniqueStates, "available") || uniq.FinalizedAt == nil {
		t.Fatalf("unique cancelled job: %+v", uniq)
	}
}

// normalizedLines returns out's lines with runs of spaces folded.
func normalizedLines(out string) []string {
	var lines []string
	for line := range strings.SplitSeq(out, "\n") {
		lines = append(lines, strings.Join(strings.Fields(line), " "))
	}
	return lines
}

func TestJobsCancelRetryDelete(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := func(n int64) string { return fmt.Sprint(n) }

	// Cancel: at once, or as a request for a running job.
	r := f.weir(t, "jobs", "cancel", id(f.available), id(f.running))
	wantOK(t, r)
	if want := fmt.Sprintf("job %d: cancelled\njob %d: cancel requested (running)\n", f.available, f.running); r.stdout != want {
		t.Fatalf("cancel printed %q, want %q", r.stdout, want)
	}
	if job := showJob(t, f.weir, f.available); job.State != "cancelled" || job.FinalizedAt == nil {
		t.Fatalf("cancelled job: %+v", job)
	}
	if job := showJob(t, f.weir, f.running); job.State != "running" || job.CancelRequestedAt == nil {
		t.Fatalf("running job after cancel: %+v", job)
	}

	// Retry: a cancelled job becomes available.
	r = f.weir(t, "jobs", "retry", id(f.available))
	wantOK(t, r)
	if want := fmt.Sprintf("job %d: retried\n", f.available); r.stdout != want {
		t.Fatalf("retry printed %q, want %q", r.stdout, want)
	}
	if job := showJob(t, f.weir, f.available); job.State != "available" || job.FinalizedAt != nil {
		t.Fatalf("retried job: %+v", job)
	}

	// Delete.
	r = f.weir(t, "jobs", "delete", id(f.scheduled))
	wantOK(t, r)
	if want := fmt.Sprintf("job %d: deleted\n", f.scheduled); r.stdout != want {
		t.Fatalf("delete printed %q, want %q", r.stdout, want)
	}
	wantFailure(t, f.weir(t, "jobs", "show", id(f.scheduled)), exitFailure, fmt.Sprintf("weir: job %d not found\n", f.scheduled))

	// Failures in a list: every id is tried, each failure is one line on stderr,
	// and the command exits 1.
	r = f.weir(t, "jobs", "cancel", id(f.failed), "999999", id(f.cancelled), id(f.available))
	if r.code != exitFailure {
		t.Fatalf("want exit 1: %v", r)
	}
	if want := fmt.Sprintf("job %d: cancelled\njob %d: cancelled\n", f.failed, f.available); r.stdout != want {
		t.Errorf("stdout %q, want %q", r.stdout, want)
	}
	if want := fmt.Sprintf("weir: job 999999: not found\nweir: job %d: already final (cancelled)\n", f.cancelled); r.stderr != want {
		t.Errorf("stderr %q, want %q", r.stderr, want)
	}
	for _, n := range []int64{f.failed, f.available} {
		if job := showJob(t, f.weir, n); job.State != "cancelled" {
			t.Errorf("job %d is %s after cancel", n, job.State)
		}
	}

	r = f.weir(t, "jobs", "delete", id(f.running), id(f.failed))
	if want := fmt.Sprintf("job %d: deleted\n", f.failed); r.code != exitFailure || r.stdout != want ||
		r.stderr != fmt.Sprintf("weir: job %d: running: cancel it first\n", f.running) {
		t.Fatalf("delete of a running and a final job: %v", r)
	}
}

// wantTerminalSafe fails t if out holds anything a terminal acts on but line
// breaks and tabs.
func wantTerminalSafe(t *testing.T, out string) {
	t.Helper()
	for _, r := range out {
		if r != '\n' && r != '\t' && (unsafeRune(r) || r == utf8.RuneError) {
			t.Errorf("output holds %U:\n%s", r, out)
			return
		}
	}
}

// TestJobsShowEscapes: what a job's writer stored reaches the terminal
// escaped, in jobs show and jobs list; the JSON form keeps it exact.
func TestJobsShowEscapes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const (
		evilError = "boom\x1b[2J\x1b]0;pwned\x07 \u202eevil\u009b31m\nsecond\rline"
		evilTrace = "main.work()\n\twork.go:12\x1b[31m"
	)
	pool := dbtest.Pool(t, nil)
	if _, err := pool.Exec(t.Context(), `UPDATE `+pgx.Identifier{f.schema, "weir_job"}.Sanitize()+` SET
		errors = jsonb_build_array(jsonb_build_object('attempt', 1, 'at', now(), 'error', $2::text, 'trace', $3::text)),
		args = jsonb_build_object('s', $4::text), metadata = jsonb_build_object('m', $5::text),
		attempted_by = $6, tags = $7, output = to_jsonb($8::text), progress = jsonb_build_object('p', $9::text)
		WHERE id = $1`, f.failed, evilError, evilTrace, "\u202e\u0085x\u2066", "\x1b[1m", "host\x1b[5m", []string{"t\u202e1", "t\x1b2"},
		"done\u202e\x1b[2J", "\u2066step\u0085"); err != nil {
		t.Fatal(err)
	}
	r := f.weir(t, "jobs", "show", fmt.Sprint(f.failed))
	wantOK(t, r)
	wantTerminalSafe(t, r.stdout)
	for _, s := range []string{
		`args: {"s": "\u202e\u0085x\u2066"}`, `metadata: {"m": "\u001b[1m"}`, `attempted_by: host\x1b[5m`, `tags: t\u202e1,t\x1b2`,
		`output: "done\u202e\u001b[2J"`, `progress: {"p": "\u2066step\u0085"}`,
	} {
		if !slices.Contains(normalizedLines(r.stdout), s) {
			t.Errorf("show does not print %q:\n%s", s, r.stdout)
		}
	}
	for _, s := range []string{
		"\n    boom\\x1b[2J\\x1b]0;pwned\\x07 \\u202eevil\\u009b31m\n    second\\rline\n",
		"\n    trace:\n      main.work()\n      \twork.go:12\\x1b[31m\n",
	} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("show does not print %q:\n%s", s, r.stdout)
		}
	}

	// The JSON forms escape what a terminal acts on (encoding/json leaves DEL,
	// C1 and the bidirectional controls raw) and keep the values exact.
	for _, args := range [][]string{{"jobs", "show", fmt.Sprint(f.failed), "--json"}, {"jobs", "list", "--json"}} {
		r := f.weir(t, args...)
		wantOK(t, r)
		wantTerminalSafe(t, r.stdout)
	}
	job := showJob(t, f.weir, f.failed)
	var attempt weir.AttemptError
	if err := json.Unmarshal(job.Errors[0], &attempt); err != nil || attempt.Error != evilError || attempt.Trace != evilTrace {
		t.Errorf("show --json: %+v, %v", attempt, err)
	}
	var output string
	var progress struct{ P string }
	if err := json.Unmarshal(job.Output, &output); err != nil || output != "done\u202e\x1b[2J" {
		t.Errorf("show --json: output %s, %v", job.Output, err)
	}
	if err := json.Unmarshal(job.Progress, &progress); err != nil || progress.P != "\u2066step\u0085" {
		t.Errorf("show --json: progress %s, %v", job.Progress, err)
	}

	r = f.weir(t, "jobs", "list")
	wantOK(t, r)
	wantTerminalSafe(t, r.stdout)
}

// TestJobsUpdate: update replaces a job's metadata or tags; a running or
// missing job is refused with a line, bad flags with a usage error, and none
// of them changes anything.
func TestJobsUpdate(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	run := func(t *testing.T, args ...string) result { return f.weir(t, args...) }
	r := f.weir(t, "jobs", "update", fmt.Sprint(f.scheduled), "--metadata", `{"owner": "ops"}`, "--tags", "urgent,eu")
	wantOK(t, r)
	if want := fmt.Sprintf("job %d: metadata and tags replaced\n", f.scheduled); r.stdout != want {
		t.Errorf("stdout %q, want %q", r.stdout, want)
	}
	job := showJob(t, run, f.scheduled)
	var meta map[string]string
	decodeJSON(t, string(job.Metadata), &meta)
	if meta["owner"] != "ops" || len(meta) != 1 || !slices.Equal(job.Tags, []string{"urgent", "eu"}) {
		t.Errorf("after update: metadata %s tags %v", job.Metadata, job.Tags)
	}
	wantOK(t, f.weir(t, "jobs", "update", fmt.Sprint(f.scheduled), "--clear-tags"))
	if job := showJob(t, run, f.scheduled); len(job.Tags) != 0 || !strings.Contains(string(job.Metadata), "ops") {
		t.Errorf("after --clear-tags: metadata %s tags %v", job.Metadata, job.Tags)
	}

	before := dbState(t, f.schema)
	for _, c := range []struct {
		args []string
		code int
		says []string
	}{
		{[]string{fmt.Sprint(f.running), "--tags", "x"}, 1, []string{"running: it can be updated once it ends"}},
		{[]string{"999999999", "--tags", "x"}, 1, []string{"not found"}},
		{[]string{fmt.Sprint(f.scheduled)}, 2, []string{"nothing to change"}},
		{[]string{fmt.Sprint(f.scheduled), "--tags", "x", "--clear-tags"}, 2, []string{"--tags and --clear-tags"}},
		{[]string{fmt.Sprint(f.scheduled), "--metadata", "[1]"}, 2, []string{"metadata must be a JSON object"}},
		{[]string{fmt.Sprint(f.scheduled), "--metadata", "@/nonexistent/meta.json"}, 2, []string{"--metadata"}},
		{[]string{fmt.Sprint(f.scheduled), "--tags", "bad tag"}, 2, []string{`tag "bad tag"`}},
		{[]string{fmt.Sprint(f.scheduled), fmt.Sprint(f.running), "--tags", "x"}, 2, []string{"want one job id"}},
	} {
		wantFailure(t, f.weir(t, append([]string{"jobs", "update"}, c.args...)...), c.code, c.says...)
	}
	if after := dbState(t, f.schema); after != before {
		t.Errorf("a refused update changed the database:\nbefore %s\nafter  %s", before, after)
	}
}
