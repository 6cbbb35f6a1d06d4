package weir_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/weirq/weir"
)

// TestJobListWindow: a window bounds what each page reads; a page the window
// ends before it is full says how far it searched and continues from there,
// in either order, until no job lies beyond; a page that fills is as without
// a window; a negative window is refused.
func TestJobListWindow(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var ids, rare []int64
	for i := range 30 {
		queue := "common"
		if i == 1 || i == 26 {
			queue = "rare"
		}
		id := b.insertProbe(t, "x", &weir.InsertOpts{Queue: queue})
		ids = append(ids, id)
		if queue == "rare" {
			rare = append(rare, id)
		}
	}
	type page struct {
		jobs             []int64
		next, searchedTo int64
	}
	list := func(p weir.JobListParams) page {
		t.Helper()
		res, err := b.client.JobList(testCtx(t), &p)
		if err != nil {
			t.Fatal(err)
		}
		var out page
		for _, j := range res.Jobs {
			out.jobs = append(out.jobs, j.ID)
		}
		out.next, out.searchedTo = res.Next, res.SearchedTo
		return out
	}
	// Newest first, 10 ids a page: ids[29]..ids[20] hold rare[1], ids[19]..ids[10]
	// nothing, ids[9]..ids[0] rare[0], and nothing lies below.
	p := weir.JobListParams{Queues: []string{"rare"}, Descending: true, Limit: 5, Window: 10}
	got := list(p)
	if !slices.Equal(got.jobs, rare[1:]) || got.searchedTo != ids[20] || got.next != ids[20] {
		t.Fatalf("first window: %+v, want %v searched to %d", got, rare[1:], ids[20])
	}
	p.Cursor = got.next
	got = list(p)
	if len(got.jobs) != 0 || got.searchedTo != ids[10] || got.next != ids[10] {
		t.Fatalf("second window: %+v, want none searched to %d", got, ids[10])
	}
	p.Cursor = got.next
	got = list(p)
	if !slices.Equal(got.jobs, rare[:1]) || got.searchedTo != 0 || got.next != 0 {
		t.Fatalf("last window: %+v, want %v and the end", got, rare[:1])
	}

	// Oldest first.
	p = weir.JobListParams{Queues: []string{"rare"}, Limit: 5, Window: 15}
	got = list(p)
	if !slices.Equal(got.jobs, rare[:1]) || got.searchedTo != ids[14] || got.next != ids[14] {
		t.Fatalf("first window, oldest first: %+v, want %v searched to %d", got, rare[:1], ids[14])
	}
	p.Cursor = got.next
	got = list(p)
	if !slices.Equal(got.jobs, rare[1:]) || got.next != 0 || got.searchedTo != 0 {
		t.Fatalf("second window, oldest first: %+v, want %v and the end", got, rare[1:])
	}

	// A page that fills within the window pages as without one.
	got = list(weir.JobListParams{Queues: []string{"common"}, Descending: true, Limit: 3, Window: 10})
	if !slices.Equal(got.jobs, []int64{ids[29], ids[28], ids[27]}) || got.next != ids[27] || got.searchedTo != 0 {
		t.Fatalf("a full page: %+v", got)
	}

	_, err := b.client.JobList(testCtx(t), &weir.JobListParams{Window: -1})
	if e, ok := errors.AsType[*weir.InvalidError](err); !ok || e.Field != "JobListParams.Window" {
		t.Fatalf("negative window: %v", err)
	}
}
