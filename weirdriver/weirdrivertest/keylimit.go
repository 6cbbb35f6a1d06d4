package weirdrivertest

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

func setKeyLimit(t *testing.T, d weirdriver.Driver, queue, key string, limit int) {
	t.Helper()
	if err := d.Executor().QueueSetKeyLimit(ctx(t), queue, keyLimit(key, limit)); err != nil {
		t.Fatalf("set the key limit of %s to %s:%d: %v", queue, key, limit, err)
	}
}

// keyLimit is a limit of limit running jobs per key, or none when limit is 0.
func keyLimit(key string, limit int) weirdriver.KeyLimitParams {
	if limit == 0 {
		return weirdriver.KeyLimitParams{}
	}
	return weirdriver.KeyLimitParams{Key: key, Limit: limit}
}

// insertKeyed inserts n jobs of queue whose args are args.
func insertKeyed(t *testing.T, d weirdriver.Driver, queue, args string, n int) {
	t.Helper()
	ps := make([]*weirdriver.JobInsertParams, n)
	for i := range ps {
		ps[i] = params("k", queue, args)
	}
	if _, err := d.Executor().JobInsert(ctx(t), ps); err != nil {
		t.Fatal(err)
	}
}

// byCustomer counts jobs by their args' customer field, as text.
func byCustomer(t *testing.T, jobs []*weirtype.JobRow) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, j := range jobs {
		out[customerOf(t, j)]++
	}
	return out
}

// customerOf is j's args' customer field as text, "" when it has none.
func customerOf(t *testing.T, j *weirtype.JobRow) string {
	t.Helper()
	var args struct{ Customer any }
	if err := json.Unmarshal(j.Args, &args); err != nil {
		t.Fatal(err)
	}
	if args.Customer == nil {
		return ""
	}
	return fmt.Sprint(args.Customer)
}

// testKeyLimit: a claim of a queue limited per key leases, in claim order,
// only jobs whose key has a free slot, also those behind a long backlog of a
// key without one; a job without the field counts under the empty key; an
// outcome frees its key's slot; changing the key re-keys the waiting jobs;
// removing the limit lets the rest go; QueueList shows it.
func testKeyLimit(t *testing.T, d weirdriver.Driver) {
	setKeyLimit(t, d, "keyed", "args.customer", 2)
	insertKeyed(t, d, "keyed", `{"customer": "a", "region": "eu"}`, 60) // ahead of the rest
	insertKeyed(t, d, "keyed", `{"customer": 7, "region": "eu"}`, 3)
	insertKeyed(t, d, "keyed", `{"region": "us"}`, 1)

	got, limited := claimLimited(t, d, "keyed", 10, time.Minute)
	if want := map[string]int{"a": 2, "7": 2, "": 1}; fmt.Sprint(byCustomer(t, got)) != fmt.Sprint(want) || !limited {
		t.Fatalf("claim of 10, 2 per customer: %v, limited %v; want %v, true", byCustomer(t, got), limited, want)
	}
	if more, limited := claimLimited(t, d, "keyed", 10, time.Minute); len(more) != 0 || !limited {
		t.Fatalf("claim with every key at its limit: %v, limited %v; want none, true", byCustomer(t, more), limited)
	}
	if q := queueStats(t, d, "keyed"); q == nil || q.KeyLimit != 2 || q.Key != "args.customer" {
		t.Fatalf("queue listed as %+v", q)
	}

	// An outcome frees a slot of its key only.
	var a *weirtype.JobRow
	for _, j := range got {
		if customerOf(t, j) == "a" {
			a = j
		}
	}
	if applied := finalize(t, d, &weirdriver.JobFinalizeParams{ID: a.ID, LeaseToken: a.LeaseToken, Outcome: weirdriver.OutcomeCompleted}); !applied[0] {
		t.Fatal("completion did not apply")
	}
	if one, limited := claimLimited(t, d, "keyed", 10, time.Minute); fmt.Sprint(byCustomer(t, one)) != "map[a:1]" || !limited {
		t.Fatalf("claim after an a completed: %v, limited %v; want one a, true", byCustomer(t, one), limited)
	}

	// Keyed by region instead, at 3 a key: eu has 5 running, us 1.
	setKeyLimit(t, d, "keyed", "args.region", 3)
	if none, _ := claimLimited(t, d, "keyed", 10, time.Minute); len(none) != 0 {
		t.Fatalf("claim keyed by region, eu over its limit and us out of jobs: %d jobs", len(none))
	}
	insertKeyed(t, d, "keyed", `{"customer": "a", "region": "us"}`, 5)
	if us, _ := claimLimited(t, d, "keyed", 10, time.Minute); len(us) != 2 {
		t.Fatalf("claim keyed by region with us at 1 of 3: %d jobs, want 2", len(us))
	}

	// A key in the metadata.
	setKeyLimit(t, d, "keyed-meta", "metadata.tenant.id", 1)
	for _, tenant := range []string{"x", "x", "y"} {
		p := params("k", "keyed-meta", `{}`)
		p.Metadata = json.RawMessage(`{"tenant": {"id": "` + tenant + `"}}`)
		insertOne(t, d, p)
	}
	if meta, _ := claimLimited(t, d, "keyed-meta", 10, time.Minute); len(meta) != 2 {
		t.Fatalf("claim keyed by metadata.tenant.id, 1 a tenant, tenants x, x, y: %d jobs, want 2", len(meta))
	}

	// Without the limit the rest go.
	setKeyLimit(t, d, "keyed", "", 0)
	rest, limited := claimLimited(t, d, "keyed", 100, time.Minute)
	if len(rest) != 60+3+1+5-6-2 || limited {
		t.Fatalf("claim without the limit: %d jobs, limited %v; want the %d left, false", len(rest), limited, 60+3+1+5-6-2)
	}
	if q := queueStats(t, d, "keyed"); q == nil || q.KeyLimit != 0 || q.Key != "" {
		t.Fatalf("queue whose key limit was removed listed as %+v", q)
	}
}

// testKeyLimitConcurrent: claimers racing on a queue limited per key, each on
// its own executor, lease no more than the limit of any key between them, and
// every key's slots end up leased.
func testKeyLimitConcurrent(t *testing.T, d weirdriver.Driver) {
	const limit, keys, claimers = 2, 4, 12
	setKeyLimit(t, d, "key-race", "args.customer", limit)
	for k := range keys {
		insertKeyed(t, d, "key-race", `{"customer": "c`+strconv.Itoa(k)+`"}`, 25)
	}
	claimed := raceClaims(t, d, "key-race", claimers)
	counts := byCustomer(t, claimed)
	if len(counts) != keys {
		t.Fatalf("%d claimers leased jobs of %d keys, want %d: %v", claimers, len(counts), keys, counts)
	}
	for k, n := range counts {
		if n != limit {
			t.Fatalf("%d claimers leased %d jobs of key %s, limited to %d: %v", claimers, n, k, limit, counts)
		}
	}
}

// testKeyLimitRejectsBadInput: a key limit out of range, a key that names no
// source or a field outside the rules, or a queue name empty or too long, is
// refused with an error that names it, and the stored limit stays.
func testKeyLimitRejectsBadInput(t *testing.T, d weirdriver.Driver) {
	setKeyLimit(t, d, "bad-key", "args.customer", 4)
	long := string(make([]byte, 129))
	deep := "args" + strings.Repeat(".f", weirdriver.MaxKeyDepth+1)
	for _, c := range []struct {
		queue, key string
		limit      int
		says       string
	}{
		{"bad-key", "args.customer", -1, "out of range"},
		{"bad-key", "args.customer", weirdriver.MaxKeyLimit + 1, "out of range"},
		{"bad-key", "customer", 2, "neither args. nor metadata."},
		{"bad-key", "args", 2, "1 to 8"},
		{"bad-key", deep, 2, "1 to 8"},
		{"bad-key", "args.a..b", 2, `field ""`},
		{"bad-key", "args.a b", 2, `field "a b"`},
		{"bad-key", `args.a"b`, 2, `field "a\"b"`},
		{"bad-key", "args." + strings.Repeat("f", 65), 2, "64 bytes"},
		{"", "args.customer", 3, "queue is empty"},
		{long, "args.customer", 3, "queue name"},
	} {
		err := d.Executor().QueueSetKeyLimit(ctx(t), c.queue, keyLimit(c.key, c.limit))
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("key limit %s:%d of queue %.20q: %v; want an error saying %q", c.key, c.limit, c.queue, err, c.says)
		}
	}
	for _, c := range []struct {
		p    weirdriver.KeyLimitParams
		says string
	}{
		{weirdriver.KeyLimitParams{Key: "args.customer", Rate: -1, RatePeriod: time.Second}, "rate limit -1 is out of range"},
		{weirdriver.KeyLimitParams{Key: "args.customer", Rate: 5}, "rate period 0s is out of range"},
		{weirdriver.KeyLimitParams{Key: "args.customer", Rate: 5, RatePeriod: 25 * time.Hour}, "rate period 25h0m0s is out of range"},
		{weirdriver.KeyLimitParams{Key: "args.customer"}, "neither a limit nor a rate"},
		{weirdriver.KeyLimitParams{Key: "customer", Rate: 5, RatePeriod: time.Second}, "neither args. nor metadata."},
	} {
		err := d.Executor().QueueSetKeyLimit(ctx(t), "bad-key", c.p)
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("key limits %+v: %v; want an error saying %q", c.p, err, c.says)
		}
	}
	if q := queueStats(t, d, "bad-key"); q == nil || q.KeyLimit != 4 || q.Key != "args.customer" || q.KeyRate != 0 {
		t.Fatalf("queue after refused changes: %+v", q)
	}
}

// testKeyRateLimit: a queue with a rate limit per key leases at most each
// key's burst at once and says when the next is due; executors racing for a
// while never lease more of one key within an interval of W (by the claims'
// times) than W/T + burst, each key at its own rate; bad input is refused
// (testKeyLimitRejectsBadInput); removing the limit lets the rest go.
func testKeyRateLimit(t *testing.T, d weirdriver.Driver) {
	const limit, period = 100, time.Second // T = 10 ms a key; burst 2 + 1 = 3
	burst := weirdriver.RateBurst(limit, period)
	insertKeyed(t, d, "key-rated", `{"customer": "a"}`, 150)
	insertKeyed(t, d, "key-rated", `{"customer": "b"}`, 150)
	rate := weirdriver.KeyLimitParams{Key: "args.customer", Rate: limit, RatePeriod: period}
	if err := d.Executor().QueueSetKeyLimit(ctx(t), "key-rated", rate); err != nil {
		t.Fatal(err)
	}
	if q := queueStats(t, d, "key-rated"); q == nil || q.KeyRate != limit || q.KeyRatePeriod != period || q.KeyLimit != 0 || q.Key != "args.customer" {
		t.Fatalf("queue listed as %+v", q)
	}
	first, lim := claimRated(t, d, "key-rated", 100, time.Minute)
	if got := byCustomer(t, first); got["a"] != burst || got["b"] != burst || !lim.Limited || lim.Wait <= 0 || lim.Wait > 10*time.Millisecond {
		t.Fatalf("first claim of 100: %v, %+v; want the burst of %d of each key, limited, the next due within 10ms", got, lim, burst)
	}
	// A claim that the keys' rates leave empty says when the next is due.
	second, lim := claimRated(t, d, "key-rated", 100, time.Minute)
	if len(second) == 0 && (!lim.Limited || lim.Wait <= 0 || lim.Wait > 10*time.Millisecond) {
		t.Fatalf("claim with every key ahead of its rate: nothing, %+v; want limited, the next due within 10ms", lim)
	}
	all := append(append(first, second...), claimFor(t, d, "key-rated", 300*time.Millisecond)...)
	tick := period / limit
	for _, key := range []string{"a", "b"} {
		var jobs []*weirtype.JobRow
		for _, j := range all {
			if customerOf(t, j) == key {
				jobs = append(jobs, j)
			}
		}
		if len(jobs) <= burst {
			t.Errorf("key %s: %d jobs claimed in 300 ms at %d per %s: its rate admitted nothing after the burst", key, len(jobs), limit, period)
		}
		for _, w := range []time.Duration{20 * time.Millisecond, 100 * time.Millisecond, 300 * time.Millisecond} {
			if most, bound := mostWithin(jobs, w), int(w/tick)+burst; most > bound {
				t.Errorf("key %s: %d jobs claimed within %s under %d per %s a key: the bound is %d", key, most, w, limit, period, bound)
			}
		}
	}

	if err := d.Executor().QueueSetKeyLimit(ctx(t), "key-rated", weirdriver.KeyLimitParams{}); err != nil {
		t.Fatal(err)
	}
	rest, lim := claimRated(t, d, "key-rated", 1000, time.Minute)
	if len(rest) != 300-len(all) || lim.Limited {
		t.Fatalf("claim without the limit: %d jobs, %+v; want the %d left", len(rest), lim, 300-len(all))
	}
}

// testKeyLimitManyKeys: behind a backlog of 300 keys at their limit, longer
// than the part of the queue a claim reads first, the jobs of 100 keys with
// room are claimed within a few claims: a claim that looks for keys with
// room among the queue's keys visits a bounded number of them, and the next
// goes on where it stopped.
func testKeyLimitManyKeys(t *testing.T, d weirdriver.Driver) {
	setKeyLimit(t, d, "many-keys", "args.c", 1)
	for round := range 3 {
		ps := make([]*weirdriver.JobInsertParams, 300)
		for i := range ps {
			ps[i] = params("k", "many-keys", fmt.Sprintf(`{"c": "c%03d", "round": %d}`, i, round))
		}
		if _, err := d.Executor().JobInsert(ctx(t), ps); err != nil {
			t.Fatal(err)
		}
	}
	if first, _ := claimLimited(t, d, "many-keys", 300, time.Minute); len(first) != 300 {
		t.Fatalf("first claim of 300 over 300 keys: %d jobs", len(first))
	}
	ps := make([]*weirdriver.JobInsertParams, 100)
	for i := range ps {
		ps[i] = params("k", "many-keys", fmt.Sprintf(`{"c": "d%03d"}`, i))
	}
	if _, err := d.Executor().JobInsert(ctx(t), ps); err != nil {
		t.Fatal(err)
	}
	var got []int
	for range 3 {
		jobs, _ := claimLimited(t, d, "many-keys", 5, time.Minute)
		got = append(got, len(jobs))
		for _, j := range jobs {
			if !strings.Contains(string(j.Args), `"d`) {
				t.Fatalf("claimed %s, of a key at its limit", j.Args)
			}
		}
	}
	if total := got[0] + got[1] + got[2]; total < 5 {
		t.Fatalf("three claims of 5 behind 600 jobs of 300 keys at their limit took %v jobs of the 100 keys with room", got)
	}
}
