package weir_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirq/weir"
)

// markRunning puts a job in the running state as a worker's claim would.
func (b *bundle) markRunning(t *testing.T, id int64) {
	t.Helper()
	_, err := b.pool.Exec(testCtx(t), `UPDATE `+b.schema+`.weir_job
		SET state = 'running', attempt = attempt + 1, lease_token = lease_token + 1,
			lease_expires_at = now() + interval '1 minute', attempted_at = now(), attempted_by = 'test'
		WHERE id = $1`, id)
	if err != nil {
		t.Fatal(err)
	}
}

func TestJobListPages(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := testCtx(t)
	var ids []int64
	for i := range 25 {
		res, err := b.client.Insert(ctx, noopArgs{N: i}, &weir.InsertOpts{Queue: []string{"a", "b"}[i%2]})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.Job.ID)
	}
	var got []int64
	params := &weir.JobListParams{Limit: 10}
	pages := 0
	for {
		page, err := b.client.JobList(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, j := range page.Jobs {
			got = append(got, j.ID)
		}
		if page.Next == 0 {
			break
		}
		params.Cursor = page.Next
	}
	if pages != 3 || len(got) != 25 || got[0] != ids[0] || got[24] != ids[24] {
		t.Fatalf("%d pages, ids %v", pages, got)
	}
	// An exact multiple of the limit ends without an empty page.
	page, err := b.client.JobList(ctx, &weir.JobListParams{Queues: []string{"b"}, Limit: 12})
	if err != nil || len(page.Jobs) != 12 || page.Next != 0 {
		t.Fatalf("queue b: %v, %d jobs, next %d", err, len(page.Jobs), page.Next)
	}
	page, err = b.client.JobList(ctx, &weir.JobListParams{Descending: true, Limit: 2})
	if err != nil || page.Jobs[0].ID != ids[24] || page.Next != ids[23] {
		t.Fatalf("descending: %v %+v", err, page)
	}
}

// TestJobListSearch: Search keeps the jobs whose kind or args hold the text,
// whatever its case; the longest search allowed is accepted.
func TestJobListSearch(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := testCtx(t)
	want, err := b.client.Insert(ctx, probeArgs{Name: "Needle in a haystack"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.Insert(ctx, probeArgs{Name: "hay"}, nil); err != nil {
		t.Fatal(err)
	}
	page, err := b.client.JobList(ctx, &weir.JobListParams{Search: "NEEDLE"})
	if err != nil || len(page.Jobs) != 1 || page.Jobs[0].ID != want.Job.ID {
		t.Fatalf("search NEEDLE: %+v, %v; want job %d", page, err, want.Job.ID)
	}
	page, err = b.client.JobList(ctx, &weir.JobListParams{Search: strings.Repeat("é", weir.MaxSearchLength)})
	if err != nil || len(page.Jobs) != 0 {
		t.Fatalf("the longest search: %+v, %v", page, err)
	}
}

func TestJobListBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	now := time.Now()
	for _, tc := range []struct {
		p     *weir.JobListParams
		field string
	}{
		{&weir.JobListParams{Limit: -1}, "JobListParams.Limit"},
		{&weir.JobListParams{Limit: weir.MaxListLimit + 1}, "JobListParams.Limit"},
		{&weir.JobListParams{Cursor: -5}, "JobListParams.Cursor"},
		{&weir.JobListParams{States: []weir.JobState{"nope"}}, "JobListParams.States"},
		{&weir.JobListParams{Queues: []string{"bad queue"}}, "JobListParams.Queues"},
		{&weir.JobListParams{Kinds: []string{""}}, "JobListParams.Kinds"},
		{&weir.JobListParams{Tags: []string{"bad tag"}}, "JobListParams.Tags"},
		{&weir.JobListParams{Tags: make([]string, weir.MaxTags+1)}, "JobListParams.Tags"},
		{&weir.JobListParams{CreatedAfter: now, CreatedBefore: now.Add(-time.Hour)}, "JobListParams.CreatedAfter"},
		{&weir.JobListParams{CreatedBefore: time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC)}, "JobListParams.CreatedBefore"},
		{&weir.JobListParams{Search: strings.Repeat("é", weir.MaxSearchLength+1)}, "JobListParams.Search"},
		{&weir.JobListParams{Search: "a\x00b"}, "JobListParams.Search"},
		{&weir.JobListParams{Search: "line\nbreak"}, "JobListParams.Search"},
		{&weir.JobListParams{Search: "\xff"}, "JobListParams.Search"},
	} {
		_, err := b.client.JobList(testCtx(t), tc.p)
		if e, ok := errors.AsType[*weir.InvalidError](err); !ok || e.Field != tc.field || !errors.Is(err, weir.ErrInvalid) {
			t.Errorf("%+v: %v, want an *InvalidError about %s", tc.p, err, tc.field)
		}
	}
	for _, tc := range []struct {
		name, field string
		call        func() error
	}{
		{"JobCancel(0)", "id", func() error { _, err := b.client.JobCancel(testCtx(t), 0); return err }},
		{"JobRetry(-1)", "id", func() error { _, err := b.client.JobRetry(testCtx(t), -1); return err }},
		{"QueuePause(\"\")", "name", func() error { return b.client.QueuePause(testCtx(t), "") }},
		{"QueueResume(\"a b\")", "name", func() error { return b.client.QueueResume(testCtx(t), "a b") }},
	} {
		err := tc.call()
		if e, ok := errors.AsType[*weir.InvalidError](err); !ok || e.Field != tc.field {
			t.Errorf("%s: %v, want an *InvalidError about %s", tc.name, err, tc.field)
		}
	}
}

func TestJobCancelRetryDelete(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := testCtx(t)
	insert := func() *weir.JobRow {
		res, err := b.client.Insert(ctx, noopArgs{}, &weir.InsertOpts{MaxAttempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		return res.Job
	}

	// A running job: cancel asks it to stop and leaves it running; retry and
	// delete refuse it.
	running := insert()
	b.markRunning(t, running.ID)
	got, err := b.client.JobCancel(ctx, running.ID)
	if err != nil || got.State != weir.JobStateRunning || got.CancelRequestedAt == nil {
		t.Fatalf("cancel running: %v %+v", err, got)
	}
	if _, err := b.client.JobRetry(ctx, running.ID); !errors.Is(err, weir.ErrJobRunning) {
		t.Fatalf("retry running: %v", err)
	}
	if _, err := b.client.JobDelete(ctx, running.ID); !errors.Is(err, weir.ErrJobRunning) {
		t.Fatalf("delete running: %v", err)
	}

	// A final job: cancel refuses, retry gives it one more attempt.
	done := insert()
	b.markRunning(t, done.ID)
	if _, err := b.pool.Exec(ctx, "UPDATE "+b.schema+".weir_job SET state = 'discarded', finalized_at = now(), lease_expires_at = NULL WHERE id = $1", done.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.JobCancel(ctx, done.ID); !errors.Is(err, weir.ErrJobFinal) || !strings.Contains(err.Error(), "discarded") {
		t.Fatalf("cancel discarded: %v", err)
	}
	got, err = b.client.JobRetry(ctx, done.ID)
	if err != nil || got.State != weir.JobStateAvailable || got.MaxAttempts != 2 || got.Attempt != 1 || got.FinalizedAt != nil {
		t.Fatalf("retry discarded: %v %+v", err, got)
	}
	got, err = b.client.JobDelete(ctx, done.ID)
	if err != nil || got.ID != done.ID {
		t.Fatalf("delete: %v %+v", err, got)
	}
	if _, err := b.client.JobGet(ctx, done.ID); !errors.Is(err, weir.ErrNotFound) {
		t.Fatalf("get deleted: %v", err)
	}
	for _, id := range []int64{0, -1} {
		if _, err := b.client.JobCancel(ctx, id); !errors.Is(err, weir.ErrInvalid) {
			t.Fatalf("cancel id %d: %v", id, err)
		}
	}
	if _, err := b.client.JobGet(ctx, 987654); !errors.Is(err, weir.ErrNotFound) {
		t.Fatalf("get missing: %v", err)
	}
}

func TestQueueList(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := testCtx(t)
	for _, q := range []string{"mail", "mail", "video"} {
		if _, err := b.client.Insert(ctx, noopArgs{}, &weir.InsertOpts{Queue: q}); err != nil {
			t.Fatal(err)
		}
	}
	queues, err := b.client.QueueList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(queues) != 2 || queues[0].Name != "mail" || queues[0].Counts[weir.JobStateAvailable] != 2 ||
		queues[1].Counts[weir.JobStateAvailable] != 1 {
		t.Fatalf("queues %+v", queues)
	}
	// On a small table the estimate is the count, and marks nothing.
	estimated, err := b.client.QueueListEstimated(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(estimated) != 2 || estimated[0].Counts[weir.JobStateAvailable] != 2 || estimated[0].Estimated != nil ||
		estimated[1].Counts[weir.JobStateAvailable] != 1 {
		t.Fatalf("estimated queues %+v", estimated)
	}
}

// TestJobUpdate: JobUpdate replaces a job's metadata or tags; every bad input
// is refused with an *InvalidError naming its field, and changes nothing.
func TestJobUpdate(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	res, err := b.client.Insert(testCtx(t), probeArgs{Name: "upd"}, &weir.InsertOpts{
		Metadata: json.RawMessage(`{"tenant":"acme"}`), Tags: []string{"a"},
	})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Job.ID
	got, err := b.client.JobUpdate(testCtx(t), id, &weir.JobUpdateParams{Metadata: json.RawMessage(` { "tenant" : "beta" } `)})
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Metadata) != `{"tenant": "beta"}` && string(got.Metadata) != `{"tenant":"beta"}` || !slices.Equal(got.Tags, []string{"a"}) {
		t.Fatalf("after the update: metadata %s tags %v", got.Metadata, got.Tags)
	}
	before := b.job(t, id)
	for _, tc := range []struct {
		id    int64
		p     *weir.JobUpdateParams
		field string
	}{
		{id, nil, "JobUpdateParams"},
		{id, &weir.JobUpdateParams{}, "JobUpdateParams"},
		{0, &weir.JobUpdateParams{Tags: []string{"x"}}, "id"},
		{id, &weir.JobUpdateParams{Metadata: json.RawMessage(`[1]`)}, "JobUpdateParams.Metadata"},
		{id, &weir.JobUpdateParams{Metadata: json.RawMessage(`{"a":`)}, "JobUpdateParams.Metadata"},
		{id, &weir.JobUpdateParams{Metadata: json.RawMessage(`{"a":"\u0000"}`)}, "JobUpdateParams.Metadata"},
		{id, &weir.JobUpdateParams{Metadata: json.RawMessage(`{"a":1,"a":2}`)}, "JobUpdateParams.Metadata"},
		{id, &weir.JobUpdateParams{Metadata: json.RawMessage(`{"a":"` + strings.Repeat("x", 1<<20) + `"}`)}, "JobUpdateParams.Metadata"},
		{id, &weir.JobUpdateParams{Tags: []string{"bad tag"}}, "JobUpdateParams.Tags"},
		{id, &weir.JobUpdateParams{Tags: make([]string, weir.MaxTags+1)}, "JobUpdateParams.Tags"},
	} {
		_, err := b.client.JobUpdate(testCtx(t), tc.id, tc.p)
		if e, ok := errors.AsType[*weir.InvalidError](err); !ok || e.Field != tc.field {
			t.Errorf("JobUpdate(%d, %+v): %v, want an *InvalidError about %s", tc.id, tc.p, err, tc.field)
		}
	}
	if after := b.job(t, id); !reflect.DeepEqual(after, before) {
		t.Fatalf("a refused update changed the job: %+v, was %+v", after, before)
	}
	if _, err := b.client.JobUpdate(testCtx(t), 1<<50, &weir.JobUpdateParams{Tags: []string{}}); !errors.Is(err, weir.ErrNotFound) {
		t.Fatalf("update of a missing job: %v, want ErrNotFound", err)
	}
}
