package weirdrivertest

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

// uniqueParams is a job of queue q unique by key among the default states.
func uniqueParams(q, key, args string) *weirdriver.JobInsertParams {
	p := params("u", q, args)
	p.UniqueKey = []byte(key)
	p.UniqueStates = []weirtype.JobState{
		weirtype.JobStateScheduled, weirtype.JobStateAvailable, weirtype.JobStateRunning,
		weirtype.JobStateRetryable, weirtype.JobStateCompleted,
	}
	return p
}

// holderIn inserts a unique job of queue q with key and brings it to state.
func holderIn(t *testing.T, d weirdriver.Driver, q, key string, state weirtype.JobState) *weirtype.JobRow {
	t.Helper()
	p := uniqueParams(q, key, `{"v":"old"}`)
	p.Metadata, p.Tags = json.RawMessage(`{"m":"old"}`), []string{"old"}
	if state == weirtype.JobStateScheduled {
		p.ScheduledAt = time.Now().Add(time.Hour)
	}
	job := insertOne(t, d, p)
	if state == weirtype.JobStateScheduled || state == weirtype.JobStateAvailable {
		return job
	}
	claimed := claim(t, d, q, 1, time.Hour)
	if len(claimed) != 1 || claimed[0].ID != job.ID {
		t.Fatalf("claim %s: %v, want job %d", q, ids(claimed), job.ID)
	}
	fin := &weirdriver.JobFinalizeParams{ID: job.ID, LeaseToken: claimed[0].LeaseToken}
	switch state {
	case weirtype.JobStateRunning:
		return getJob(t, d, job.ID)
	case weirtype.JobStateRetryable:
		fin.Outcome, fin.ScheduledAt = weirdriver.OutcomeRetry, time.Now().Add(time.Hour)
		fin.Error = &weirtype.AttemptError{Error: "boom"}
	case weirtype.JobStateCompleted:
		fin.Outcome = weirdriver.OutcomeCompleted
	default:
		t.Fatalf("holderIn: state %s", state)
	}
	ok, err := d.Executor().JobFinalize(ctx(t), []*weirdriver.JobFinalizeParams{fin})
	if err != nil || !ok[0] {
		t.Fatalf("finalize %d: %v %v", job.ID, ok, err)
	}
	got := getJob(t, d, job.ID)
	if got.State != state {
		t.Fatalf("holder %d is %s, want %s", job.ID, got.State, state)
	}
	return got
}

// testInsertUniqueOnConflict checks each conflict mode against a holder in each
// state that holds the key: a pending holder is skipped, replaced (args,
// metadata, tags, priority, max attempts; scheduled time, state, queue and
// attempts kept) or debounced (replaced, and its scheduled time and state
// follow the insert's); a running or final holder is never changed.
func testInsertUniqueOnConflict(t *testing.T, d weirdriver.Driver) {
	modes := []weirdriver.UniqueOnConflict{
		weirdriver.UniqueOnConflictSkip, weirdriver.UniqueOnConflictReplace, weirdriver.UniqueOnConflictDebounce,
	}
	states := []weirtype.JobState{
		weirtype.JobStateScheduled, weirtype.JobStateAvailable, weirtype.JobStateRetryable,
		weirtype.JobStateRunning, weirtype.JobStateCompleted,
	}
	for _, mode := range modes {
		for _, state := range states {
			for _, when := range []string{"past", "future"} {
				name := fmt.Sprintf("%d-%s-%s", mode, state, when)
				q := "q-" + name
				holder := holderIn(t, d, q, "key-"+name, state)
				p := uniqueParams("other-queue", "key-"+name, `{"v":"new"}`)
				p.Metadata, p.Tags, p.Priority, p.MaxAttempts = json.RawMessage(`{"m":"new"}`), []string{"new"}, 4, 9
				p.ScheduledAt = time.Now().Add(-time.Minute).Truncate(time.Microsecond)
				if when == "future" {
					p.ScheduledAt = time.Now().Add(2 * time.Hour).Truncate(time.Microsecond)
				}
				p.UniqueOnConflict = mode
				res, err := d.Executor().JobInsert(ctx(t), []*weirdriver.JobInsertParams{p})
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				r := res[0]
				pending := state != weirtype.JobStateRunning && state != weirtype.JobStateCompleted
				changes := pending && mode != weirdriver.UniqueOnConflictSkip
				if !r.Duplicate || r.Job.ID != holder.ID || r.Replaced != changes {
					t.Errorf("%s: duplicate=%v replaced=%v id %d, want a duplicate of %d replaced=%v",
						name, r.Duplicate, r.Replaced, r.Job.ID, holder.ID, changes)
					continue
				}
				got := getJob(t, d, holder.ID)
				if rowJSON(t, got) != rowJSON(t, r.Job) {
					t.Errorf("%s: result %s, store %s", name, rowJSON(t, r.Job), rowJSON(t, got))
				}
				if !changes {
					sameRow(t, d, name, holder)
					continue
				}
				var args struct{ V string }
				if err := json.Unmarshal(got.Args, &args); err != nil || args.V != "new" ||
					!slices.Equal(got.Tags, []string{"new"}) || got.Priority != 4 || got.MaxAttempts != 9 {
					t.Errorf("%s: not replaced: args %s tags %v priority %d max attempts %d", name, got.Args, got.Tags, got.Priority, got.MaxAttempts)
				}
				var meta struct{ M string }
				if err := json.Unmarshal(got.Metadata, &meta); err != nil || meta.M != "new" {
					t.Errorf("%s: metadata %s", name, got.Metadata)
				}
				if got.Queue != q || got.Attempt != holder.Attempt || string(got.UniqueKey) != string(holder.UniqueKey) ||
					!slices.Equal(got.UniqueStates, holder.UniqueStates) || len(got.Errors) != len(holder.Errors) {
					t.Errorf("%s: replace changed what it keeps: %s, was %s", name, rowJSON(t, got), rowJSON(t, holder))
				}
				wantAt, wantState := holder.ScheduledAt, holder.State
				if mode == weirdriver.UniqueOnConflictDebounce {
					wantAt = p.ScheduledAt
					switch {
					case when == "past":
						wantState = weirtype.JobStateAvailable
					case state != weirtype.JobStateRetryable:
						wantState = weirtype.JobStateScheduled
					}
				}
				if !got.ScheduledAt.Equal(wantAt) || got.State != wantState {
					t.Errorf("%s: scheduled %s in %s, want %s in %s", name, got.ScheduledAt, got.State, wantAt, wantState)
				}
			}
		}
	}
}

// testInsertUniqueArgsKeys checks keys by a subset of args: the key covers the
// object of the listed keys the args hold, as CanonicalArgs gives it, so jobs
// that differ only outside those keys collide, and one that replaces keeps its
// key while its other args change.
func testInsertUniqueArgsKeys(t *testing.T, d weirdriver.Driver) {
	subset := func(args, canonical string, mode weirdriver.UniqueOnConflict) *weirdriver.JobInsertParams {
		p := uniqueParams("q", "prefix", args)
		p.UniqueByArgs, p.UniqueArgsKeys, p.CanonicalArgs = true, []string{"a", "b"}, []byte(canonical)
		p.UniqueOnConflict = mode
		p.ScheduledAt = time.Now().Add(time.Hour)
		return p
	}
	first := insertOne(t, d, subset(`{"a":1,"c":"x"}`, `{"a":1}`, weirdriver.UniqueOnConflictSkip))
	res, err := d.Executor().JobInsert(ctx(t), []*weirdriver.JobInsertParams{
		subset(`{"c":"y","a":1}`, `{"a":1}`, weirdriver.UniqueOnConflictReplace),
		subset(`{"a":1,"b":2}`, `{"a":1,"b":2}`, weirdriver.UniqueOnConflictSkip),
	})
	if err != nil {
		t.Fatal(err)
	}
	if !res[0].Duplicate || !res[0].Replaced || res[0].Job.ID != first.ID {
		t.Fatalf("same subset, other args: %+v, want %d replaced", res[0], first.ID)
	}
	if res[1].Duplicate {
		t.Fatal("another subset collided")
	}
	got := getJob(t, d, first.ID)
	var args struct{ C string }
	if err := json.Unmarshal(got.Args, &args); err != nil || args.C != "y" {
		t.Fatalf("replaced args %s, want c=y", got.Args)
	}
	if string(got.UniqueKey) != string(first.UniqueKey) {
		t.Fatalf("replace changed the key: %x, was %x", got.UniqueKey, first.UniqueKey)
	}
	// All of the args, as the key of the subset object: the same key.
	all := uniqueParams("q", "prefix", `{"a":1}`)
	all.UniqueByArgs, all.CanonicalArgs = true, []byte(`{"a":1}`)
	if r := insertResult(t, d, all); !r.Duplicate || r.Job.ID != first.ID {
		t.Fatalf("all args equal to the subset: %+v, want a duplicate of %d", r, first.ID)
	}
}

func insertResult(t *testing.T, d weirdriver.Driver, p *weirdriver.JobInsertParams) weirdriver.JobInsertResult {
	t.Helper()
	res, err := d.Executor().JobInsert(ctx(t), []*weirdriver.JobInsertParams{p})
	if err != nil {
		t.Fatal(err)
	}
	return res[0]
}
