package weirdrivertest

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

func params(kind, queue string, args string) *weirdriver.JobInsertParams {
	return &weirdriver.JobInsertParams{
		Kind: kind, Queue: queue, Args: json.RawMessage(args), Priority: 2, MaxAttempts: 3,
	}
}

func insertOne(t *testing.T, d weirdriver.Driver, p *weirdriver.JobInsertParams) *weirtype.JobRow {
	t.Helper()
	res, err := d.Executor().JobInsert(ctx(t), []*weirdriver.JobInsertParams{p})
	if err != nil {
		t.Fatalf("insert: %v", err)
	}
	return res[0].Job
}

// testInsertOneAsInBatch: a job inserted alone comes back as the same job does
// in a batch (a driver may insert a lone job with a statement of its own):
// state by its time, defaults for what it leaves out, and what it sets.
func testInsertOneAsInBatch(t *testing.T, d weirdriver.Driver) {
	due := params("k", "one-batch", `{"a":[1,"x"]}`)
	later := params("k", "one-batch", `{}`)
	later.ScheduledAt = time.Now().Add(time.Hour)
	set := params("k2", "one-batch-set", `{"b":true}`)
	set.Priority, set.MaxAttempts = 4, 7
	set.Tags, set.Metadata = []string{"t1", "t2"}, json.RawMessage(`{"m":{"n":1}}`)
	set.ScheduledAt = time.Now().Add(-time.Minute)
	cases := []*weirdriver.JobInsertParams{due, later, set}
	batch, err := d.Executor().JobInsert(ctx(t), cases)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range cases {
		one := insertOne(t, d, p)
		b := batch[i].Job
		if one.ID == b.ID {
			t.Fatalf("case %d: the two inserts returned the same job %d", i, one.ID)
		}
		if one.State != b.State || one.Kind != b.Kind || one.Queue != b.Queue || one.Priority != b.Priority ||
			one.MaxAttempts != b.MaxAttempts || one.Attempt != b.Attempt || !p.ScheduledAt.IsZero() && !one.ScheduledAt.Equal(b.ScheduledAt) ||
			!slices.Equal(one.Tags, b.Tags) || !jsonEqual(one.Args, b.Args) || !jsonEqual(one.Metadata, b.Metadata) ||
			len(one.UniqueKey) != 0 || len(b.UniqueKey) != 0 || len(one.Errors) != 0 || one.AttemptedAt != nil || one.FinalizedAt != nil {
			t.Errorf("case %d: alone %+v, in a batch %+v", i, one, b)
		}
		if p.ScheduledAt.IsZero() && one.ScheduledAt.Sub(one.CreatedAt).Abs() > time.Second {
			t.Errorf("case %d: scheduled at %v, created at %v: want now", i, one.ScheduledAt, one.CreatedAt)
		}
		if !p.ScheduledAt.IsZero() && !one.ScheduledAt.Equal(p.ScheduledAt.Truncate(time.Microsecond)) {
			t.Errorf("case %d: scheduled at %v, want %v", i, one.ScheduledAt, p.ScheduledAt)
		}
	}
	if batch[0].Job.State != weirtype.JobStateAvailable || batch[1].Job.State != weirtype.JobStateScheduled ||
		batch[2].Job.State != weirtype.JobStateAvailable {
		t.Errorf("states %s, %s, %s; want available, scheduled, available",
			batch[0].Job.State, batch[1].Job.State, batch[2].Job.State)
	}
	if !jsonEqual(batch[0].Job.Metadata, json.RawMessage(`{}`)) || len(batch[0].Job.Tags) != 0 {
		t.Errorf("metadata and tags left out came back %s and %v, want {} and none", batch[0].Job.Metadata, batch[0].Job.Tags)
	}
}

// jsonEqual reports whether a and b hold the same JSON value.
func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

func testInsertReturnsJobsInOrder(t *testing.T, d weirdriver.Driver) {
	var batch []*weirdriver.JobInsertParams
	for i := range 20 {
		p := params(fmt.Sprintf("kind%d", i), "q", fmt.Sprintf(`{"n":%d}`, i))
		p.Tags = []string{"t", fmt.Sprint(i)}
		p.Metadata = json.RawMessage(`{"m":1}`)
		p.Priority = 1 + i%4
		batch = append(batch, p)
	}
	res, err := d.Executor().JobInsert(ctx(t), batch)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != len(batch) {
		t.Fatalf("got %d results for %d jobs", len(res), len(batch))
	}
	for i, r := range res {
		j := r.Job
		if r.Duplicate {
			t.Errorf("job %d: duplicate", i)
		}
		if j.Kind != batch[i].Kind || j.Priority != batch[i].Priority || j.State != weirtype.JobStateAvailable {
			t.Errorf("job %d: got kind %s priority %d state %s", i, j.Kind, j.Priority, j.State)
		}
		var args struct{ N int }
		if err := json.Unmarshal(j.Args, &args); err != nil || args.N != i {
			t.Errorf("job %d: args %s", i, j.Args)
		}
		if !slices.Equal(j.Tags, []string{"t", fmt.Sprint(i)}) {
			t.Errorf("job %d: tags %v", i, j.Tags)
		}
		if j.Attempt != 0 || j.MaxAttempts != 3 || j.LeaseToken != 0 || j.LeaseExpiresAt != nil || len(j.Errors) != 0 {
			t.Errorf("job %d: not fresh: %+v", i, j)
		}
		if i > 0 && j.ID <= res[i-1].Job.ID {
			t.Errorf("ids not increasing: %d after %d", j.ID, res[i-1].Job.ID)
		}
		got, err := d.Executor().JobGet(ctx(t), j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if string(got.Metadata) != `{"m": 1}` && string(got.Metadata) != `{"m":1}` {
			t.Errorf("job %d: metadata %s", i, got.Metadata)
		}
	}
}

func testInsertScheduledInFuture(t *testing.T, d weirdriver.Driver) {
	p := params("k", "q", `{}`)
	p.ScheduledAt = time.Now().Add(time.Hour)
	job := insertOne(t, d, p)
	if job.State != weirtype.JobStateScheduled {
		t.Fatalf("state %s, want scheduled", job.State)
	}
	if !job.ScheduledAt.Equal(p.ScheduledAt.Truncate(time.Microsecond)) {
		t.Fatalf("scheduled_at %v, want %v", job.ScheduledAt, p.ScheduledAt)
	}
	p.ScheduledAt = time.Now().Add(-time.Hour)
	if job := insertOne(t, d, p); job.State != weirtype.JobStateAvailable {
		t.Fatalf("past schedule: state %s, want available", job.State)
	}
}

func testInsertUnique(t *testing.T, d weirdriver.Driver) {
	unique := func() *weirdriver.JobInsertParams {
		p := params("u", "q", `{}`)
		p.UniqueKey = []byte("key-1")
		p.UniqueStates = []weirtype.JobState{
			weirtype.JobStateScheduled, weirtype.JobStateAvailable,
			weirtype.JobStateRunning, weirtype.JobStateRetryable,
		}
		return p
	}
	first := insertOne(t, d, unique())
	res, err := d.Executor().JobInsert(ctx(t), []*weirdriver.JobInsertParams{unique(), params("other", "q", `{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if !res[0].Duplicate || res[0].Job.ID != first.ID {
		t.Fatalf("second insert: duplicate=%v id=%d, want duplicate of %d", res[0].Duplicate, res[0].Job.ID, first.ID)
	}
	if res[1].Duplicate {
		t.Fatal("a job without a unique key was reported as a duplicate")
	}
	if !slices.Equal(first.UniqueStates, unique().UniqueStates) || string(first.UniqueKey) != "key-1" {
		t.Fatalf("unique fields not stored: %q %v", first.UniqueKey, first.UniqueStates)
	}
	// Once the holder leaves the unique states, the key is free again.
	if _, err := d.Executor().JobCancel(ctx(t), first.ID); err != nil {
		t.Fatal(err)
	}
	again := insertOne(t, d, unique())
	if again.ID == first.ID {
		t.Fatal("insert after cancel returned the cancelled job")
	}
	// Retrying the cancelled job would give two live jobs the same key.
	if _, err := d.Executor().JobRetry(ctx(t), first.ID); !errors.Is(err, weirdriver.ErrUniqueConflict) {
		t.Fatalf("retry of a job whose key is taken: %v, want ErrUniqueConflict", err)
	}
}

func testInsertBulk(t *testing.T, d weirdriver.Driver) {
	var batch []*weirdriver.JobInsertParams
	for i := range 500 {
		p := params("bulk", fmt.Sprintf("q%d", i%3), fmt.Sprintf(`{"n":%d}`, i))
		if i%10 == 0 {
			p.ScheduledAt = time.Now().Add(time.Hour)
		}
		p.Tags = []string{"b"}
		batch = append(batch, p)
	}
	jobs, err := d.Executor().JobInsertBulk(ctx(t), batch)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != len(batch) {
		t.Fatalf("got %d jobs for %d", len(jobs), len(batch))
	}
	for i, j := range jobs {
		got, err := d.Executor().JobGet(ctx(t), j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != j.State || got.Queue != batch[i].Queue || !slices.Equal(got.Tags, []string{"b"}) ||
			!got.CreatedAt.Equal(j.CreatedAt) || !got.ScheduledAt.Equal(j.ScheduledAt) {
			t.Fatalf("job %d: stored %+v, returned %+v", i, got, j)
		}
		want := weirtype.JobStateAvailable
		if i%10 == 0 {
			want = weirtype.JobStateScheduled
		}
		if got.State != want {
			t.Fatalf("job %d: state %s, want %s", i, got.State, want)
		}
	}
}

func testTxRollbackLeavesNothing(t *testing.T, d weirdriver.Driver) {
	tx, err := d.Executor().Begin(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	res, err := tx.JobInsert(ctx(t), []*weirdriver.JobInsertParams{params("k", "q", `{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Executor().JobGet(ctx(t), res[0].Job.ID); !errors.Is(err, weirdriver.ErrNotFound) {
		t.Fatalf("job after rollback: %v, want ErrNotFound", err)
	}
}

// testInsertTxAllOrNothing: BeginInsert, the client's way to write a batch whole
// or not at all, rolls back every insert of its transaction, and inside a
// transaction opens a savepoint whose rollback leaves the rest.
func testInsertTxAllOrNothing(t *testing.T, d weirdriver.Driver) {
	var ins weirdriver.Inserter = d.Executor()
	tx, err := ins.BeginInsert(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	res, err := tx.JobInsert(ctx(t), []*weirdriver.JobInsertParams{params("k", "ins-tx", `{}`)})
	if err != nil {
		t.Fatal(err)
	}
	bulk, err := tx.JobInsertBulk(ctx(t), []*weirdriver.JobInsertParams{params("k", "ins-tx", `{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.NotifyInsert(ctx(t), []string{"ins-tx"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx(t)); err != nil {
		t.Fatal(err)
	}
	for _, id := range []int64{res[0].Job.ID, bulk[0].ID} {
		if _, err := d.Executor().JobGet(ctx(t), id); !errors.Is(err, weirdriver.ErrNotFound) {
			t.Fatalf("job %d after rollback: %v, want ErrNotFound", id, err)
		}
	}

	outer, err := d.Executor().Begin(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer outer.Rollback(ctx(t)) //nolint:errcheck // a no-op after Commit
	kept, err := outer.JobInsert(ctx(t), []*weirdriver.JobInsertParams{params("k", "ins-sp", `{}`)})
	if err != nil {
		t.Fatal(err)
	}
	sp, err := outer.BeginInsert(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	dropped, err := sp.JobInsertBulk(ctx(t), []*weirdriver.JobInsertParams{params("k", "ins-sp", `{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := sp.Rollback(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if err := outer.Commit(ctx(t)); err != nil {
		t.Fatal(err)
	}
	getJob(t, d, kept[0].Job.ID)
	if _, err := d.Executor().JobGet(ctx(t), dropped[0].ID); !errors.Is(err, weirdriver.ErrNotFound) {
		t.Fatalf("job of a rolled back savepoint: %v, want ErrNotFound", err)
	}
}

// insertAt inserts a job into queue with the given priority and schedule.
func insertAt(t *testing.T, d weirdriver.Driver, queue string, priority int, at time.Time) *weirtype.JobRow {
	t.Helper()
	p := params("k", queue, `{}`)
	p.Priority = priority
	p.ScheduledAt = at
	return insertOne(t, d, p)
}

// testRuntimeNotifies checks that the statements that make jobs available wake
// workers of those queues, and the others do not.
// testInsertNotifies: an insert outside a transaction wakes the workers of each
// queue that got an available job, once it has committed; a scheduled job and
// a duplicate wake nobody.
func testInsertNotifies(t *testing.T, d weirdriver.Driver) {
	l := listen(t, d, d.InsertChannel())
	unique := func() *weirdriver.JobInsertParams {
		p := params("u", "ins-unique", `{}`)
		p.UniqueKey = []byte("notify-key")
		p.UniqueStates = []weirtype.JobState{weirtype.JobStateAvailable}
		return p
	}
	later := params("k", "ins-later", `{}`)
	later.ScheduledAt = time.Now().Add(time.Hour)
	insertOne(t, d, params("k", "ins-now", `{}`))
	insertOne(t, d, later)
	insertOne(t, d, unique())
	if got := notificationsBefore(t, d, l, "marker-1"); !slices.Equal(got, []string{"ins-now", "ins-unique"}) {
		t.Fatalf("inserts notified %v, want [ins-now ins-unique]", got)
	}
	if res, err := d.Executor().JobInsert(ctx(t), []*weirdriver.JobInsertParams{unique()}); err != nil || !res[0].Duplicate {
		t.Fatalf("second unique insert: %+v, %v; want a duplicate", res, err)
	}
	if got := notificationsBefore(t, d, l, "marker-2"); len(got) != 0 {
		t.Fatalf("a duplicate insert notified %v", got)
	}
	// A replace that leaves its job available wakes the workers as an insert
	// does; one that leaves it scheduled does not.
	debounce := func(at time.Time) *weirdriver.JobInsertParams {
		p := uniqueParams("ins-debounce", "debounce-key", `{}`)
		p.ScheduledAt, p.UniqueOnConflict = at, weirdriver.UniqueOnConflictDebounce
		return p
	}
	insertOne(t, d, debounce(time.Now().Add(time.Hour)))
	if res := insertResult(t, d, debounce(time.Now().Add(2*time.Hour))); !res.Replaced {
		t.Fatalf("debounce later: %+v", res)
	}
	if got := notificationsBefore(t, d, l, "marker-3"); len(got) != 0 {
		t.Fatalf("a job replaced and still scheduled notified %v", got)
	}
	if res := insertResult(t, d, debounce(time.Time{})); !res.Replaced || res.Job.State != weirtype.JobStateAvailable {
		t.Fatalf("debounce to now: %+v", res)
	}
	if got := notificationsBefore(t, d, l, "marker-4"); !slices.Equal(got, []string{"ins-debounce"}) {
		t.Fatalf("a job replaced and due notified %v, want [ins-debounce]", got)
	}
}

// testInsertNotifiesConcurrently: inserts from many goroutines at once, which a
// driver may notify for together, still wake the workers of every queue.
func testInsertNotifiesConcurrently(t *testing.T, d weirdriver.Driver) {
	l := listen(t, d, d.InsertChannel())
	const goroutines, each = 16, 10
	var wg sync.WaitGroup
	errs := make([]error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			for range each {
				p := params("k", fmt.Sprintf("conc-%d", g), `{}`)
				if _, err := d.Executor().JobInsert(ctx(t), []*weirdriver.JobInsertParams{p}); err != nil {
					errs[g] = err
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, q := range notificationsBefore(t, d, l, "marker") {
		got[q] = true
	}
	for g := range goroutines {
		if q := fmt.Sprintf("conc-%d", g); !got[q] {
			t.Errorf("no notification for queue %s (got %v)", q, got)
		}
	}
}
