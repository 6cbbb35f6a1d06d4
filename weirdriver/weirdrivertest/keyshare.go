package weirdrivertest

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirq/weir/weirdriver"
)

// keyShare asks about client's buckets of queue's keys.
func keyShare(t *testing.T, d weirdriver.Driver, p weirdriver.KeyShareParams) weirdriver.KeyShare {
	t.Helper()
	if p.Lease == 0 {
		p.Lease = time.Minute
	}
	s, err := d.Executor().KeyShare(ctx(t), &p)
	if err != nil {
		t.Fatalf("keys of %s for %s: %v", p.Queue, p.ClientID, err)
	}
	return s
}

// claimOwned claims up to max jobs of queue as client, naming buckets (none:
// a counted claim), and returns the jobs' keys read from their args.
func claimOwned(t *testing.T, d weirdriver.Driver, queue, client string, max int, buckets []int, skip []string) ([]string, weirdriver.ClaimLimit) {
	t.Helper()
	jobs, lim, err := d.Executor().JobClaim(ctx(t), &weirdriver.JobClaimParams{
		Queue: queue, Max: max, ClientID: client, LeaseDuration: time.Minute, KeyBuckets: buckets, SkipKeys: skip,
	})
	if err != nil {
		t.Fatalf("claim %s as %s: %v", queue, client, err)
	}
	keys := make([]string, len(jobs))
	for i, j := range jobs {
		var args struct{ C string }
		if err := json.Unmarshal(j.Args, &args); err != nil {
			t.Fatal(err)
		}
		keys[i] = args.C
	}
	if lim.Owned && !slices.Equal(lim.Keys, keys) {
		t.Fatalf("claim as holder returned keys %v, the jobs' args have %v", lim.Keys, keys)
	}
	return keys, lim
}

// span is the buckets from..to-1.
func span(from, to int) []int {
	var bs []int
	for b := from; b < to; b++ {
		bs = append(bs, b)
	}
	return bs
}

// testKeyShare: the buckets of a queue's keys are divided evenly among the
// clients that ask; a client holds more only until it releases them; a
// bucket is taken only while none of its jobs runs; a holder claims its
// buckets' jobs without the count, at most KeyDepth of a key and none of the
// keys it skips, each job with its key; a counted claim passes over held
// buckets and says the keys may be held; giving up, removing the limit and
// a new key field drop the buckets; bad requests are refused and change
// nothing. A driver without shares of keys (opts.NoKeyShares) answers Limit 0
// and counts every claim. (testKeySharePart: parts by what clients want.)
func testKeyShare(t *testing.T, d weirdriver.Driver, opts Options) {
	const q = "keyshared"
	ps := make([]*weirdriver.JobInsertParams, 0, 240)
	for i := range 240 {
		ps = append(ps, params("k", q, fmt.Sprintf(`{"c": "c%d"}`, i%40)))
	}
	if _, err := d.Executor().JobInsert(ctx(t), ps); err != nil {
		t.Fatal(err)
	}
	if s := keyShare(t, d, weirdriver.KeyShareParams{Queue: q, ClientID: "a"}); s.Limit != 0 || len(s.Held) != 0 {
		t.Fatalf("keys of a queue without a limit per key: %+v, want none", s)
	}
	setKeyLimit(t, d, q, "args.c", 1)
	if opts.NoKeyShares {
		if s := keyShare(t, d, weirdriver.KeyShareParams{Queue: q, ClientID: "a"}); s.Limit != 0 || len(s.Held) != 0 {
			t.Fatalf("keys on a driver without shares of keys: %+v, want none", s)
		}
		keys, lim := claimOwned(t, d, q, "a", 100, span(0, 64), nil)
		if lim.Owned || len(keys) != 40 {
			t.Fatalf("claim naming buckets on a driver without shares of keys: %d jobs, owned %v; want 40 counted", len(keys), lim.Owned)
		}
		return
	}

	a := keyShare(t, d, weirdriver.KeyShareParams{Queue: q, ClientID: "a"})
	if a.Limit != 1 || a.Key != "args.c" || a.Target != 64 || !slices.Equal(a.Held, span(0, 64)) {
		t.Fatalf("a alone: %+v, want limit 1 of args.c, all 64 buckets", a)
	}
	if b := keyShare(t, d, weirdriver.KeyShareParams{Queue: q, ClientID: "b"}); b.Target != 32 || len(b.Held) != 0 {
		t.Fatalf("b joins while a holds every bucket: %+v, want a part of 32 and none held", b)
	}
	if a = keyShare(t, d, weirdriver.KeyShareParams{Queue: q, ClientID: "a"}); a.Target != 32 || len(a.Held) != 64 {
		t.Fatalf("a renews: %+v, want a part of 32, still holding 64 until it releases them", a)
	}
	if a = keyShare(t, d, weirdriver.KeyShareParams{Queue: q, ClientID: "a", Release: span(32, 64)}); !slices.Equal(a.Held, span(0, 32)) {
		t.Fatalf("a releases 32..63: holds %v", a.Held)
	}

	// a claims its buckets' jobs, uncounted: at most KeyDepth of a key.
	mine := map[string]bool{}
	for i := range 40 {
		k := fmt.Sprintf("c%d", i)
		mine[k] = weirdriver.KeyBucket(k) < 32
	}
	keys, lim := claimOwned(t, d, q, "a", 200, a.Held, []string{"c1", "c2"})
	if !lim.Owned || lim.Limited {
		t.Fatalf("claim as holder: %+v, want owned and not cut short", lim)
	}
	per := map[string]int{}
	for _, k := range keys {
		per[k]++
		if !mine[k] || k == "c1" || k == "c2" {
			t.Fatalf("claim as holder of 0..31 took a job of key %s (bucket %d)", k, weirdriver.KeyBucket(k))
		}
	}
	deepest := 0
	for k, n := range per {
		if n > weirdriver.KeyDepth(1) {
			t.Fatalf("claim as holder took %d jobs of key %s, want at most %d (KeyDepth)", n, k, weirdriver.KeyDepth(1))
		}
		deepest = max(deepest, n)
	}
	if deepest != weirdriver.KeyDepth(1) {
		t.Fatalf("claim as holder took at most %d jobs of a key, want %d of some (6 of each wait)", deepest, weirdriver.KeyDepth(1))
	}

	// A counted claim passes over a's buckets, and says the keys may be held.
	keys, lim = claimOwned(t, d, q, "c", 200, nil, nil)
	if lim.Owned || !lim.KeyShare || !lim.Limited {
		t.Fatalf("counted claim: %+v, want counted, cut short, told the keys may be held", lim)
	}
	for _, k := range keys {
		if mine[k] {
			t.Fatalf("counted claim took a job of key %s, in a bucket a holds", k)
		}
	}
	// b takes what a released, except the buckets of c's running jobs.
	busy := map[int]bool{}
	for _, k := range keys {
		busy[weirdriver.KeyBucket(k)] = true
	}
	b := keyShare(t, d, weirdriver.KeyShareParams{Queue: q, ClientID: "b"})
	for _, bk := range b.Held {
		if busy[bk] || bk < 32 {
			t.Fatalf("b took bucket %d, in which c runs a job or which a holds: %v", bk, b.Held)
		}
	}
	if len(b.Held)+len(busy) != 32 {
		t.Fatalf("b holds %v with %d buckets busy, want the other free ones", b.Held, len(busy))
	}

	// Bad requests change nothing.
	for _, p := range []weirdriver.KeyShareParams{
		{Queue: "", ClientID: "a", Lease: time.Minute},
		{Queue: strings.Repeat("q", 1000), ClientID: "a", Lease: time.Minute},
		{Queue: q, ClientID: "", Lease: time.Minute},
		{Queue: q, ClientID: "a", Lease: time.Microsecond},
		{Queue: q, ClientID: "a", Lease: time.Minute, Release: []int{64}},
		{Queue: q, ClientID: "a", Lease: time.Minute, Release: []int{-1}},
		{Queue: q, ClientID: "a", Lease: time.Minute, Release: []int{3, 3}},
		{Queue: q, ClientID: "a", Lease: time.Minute, Want: -1},
		{Queue: q, ClientID: "a", Lease: time.Minute, Want: weirdriver.MaxGlobalLimit + 1},
	} {
		if _, err := d.Executor().KeyShare(ctx(t), &p); err == nil {
			t.Fatalf("KeyShare(%+v) was accepted", p)
		}
	}
	if _, _, err := d.Executor().JobClaim(ctx(t), &weirdriver.JobClaimParams{
		Queue: q, Max: 1, ClientID: "a", LeaseDuration: time.Minute, KeyBuckets: []int{99},
	}); err == nil || !strings.Contains(err.Error(), "bucket 99") {
		t.Fatalf("claim naming bucket 99: %v, want refused", err)
	}
	if a2 := keyShare(t, d, weirdriver.KeyShareParams{Queue: q, ClientID: "a"}); !slices.Equal(a2.Held, a.Held) {
		t.Fatalf("after bad requests a holds %v, want %v", a2.Held, a.Held)
	}

	// Given up, a's buckets are claimed counted: a key whose jobs run (those
	// a claimed as holder) has no room; c1 and c2, passed over, have.
	keyShare(t, d, weirdriver.KeyShareParams{Queue: q, ClientID: "a", GiveUp: true})
	var free []string
	for _, k := range []string{"c1", "c2"} {
		if mine[k] {
			free = append(free, k)
		}
	}
	keys, lim = claimOwned(t, d, q, "a", 10, span(0, 32), nil)
	slices.Sort(keys)
	if lim.Owned || !slices.Equal(keys, free) {
		t.Fatalf("claim naming buckets given up: keys %v, owned %v; want a counted claim of %v", keys, lim.Owned, free)
	}
	// A new key field drops every bucket.
	setKeyLimit(t, d, q, "metadata.tenant", 1)
	if s := keyShare(t, d, weirdriver.KeyShareParams{Queue: q, ClientID: "b"}); s.Key != "metadata.tenant" {
		t.Fatalf("after a new key field: %+v", s)
	}
	// Removing the limit drops every bucket: claims are plain again.
	setKeyLimit(t, d, q, "", 0)
	if s := keyShare(t, d, weirdriver.KeyShareParams{Queue: q, ClientID: "b"}); s.Limit != 0 || len(s.Held) != 0 {
		t.Fatalf("keys after the limit was removed: %+v, want none", s)
	}
	if _, lim := claimOwned(t, d, q, "b", 10, span(32, 64), nil); lim.Owned || lim.KeyShare {
		t.Fatalf("claim of a queue without limits naming buckets: %+v, want a plain claim", lim)
	}
}

// testKeyShareMovedKey: a job whose key changed after it became available
// (its metadata updated; the key is a metadata field) is claimed by the
// holder of its key's bucket, not by the holder of the bucket its old key
// was in, and is not lost between them.
func testKeyShareMovedKey(t *testing.T, d weirdriver.Driver, opts Options) {
	if opts.NoKeyShares {
		t.Skip("the driver holds no buckets of keys")
	}
	const q = "keymoved"
	// Two keys, one in each half of the buckets.
	var low, high string
	for i := 0; low == "" || high == ""; i++ {
		k := fmt.Sprintf("t%d", i)
		if weirdriver.KeyBucket(k) < 32 && low == "" {
			low = k
		} else if weirdriver.KeyBucket(k) >= 32 && high == "" {
			high = k
		}
	}
	setKeyLimit(t, d, q, "metadata.tenant", 1)
	p := params("k", q, `{}`)
	p.Metadata = json.RawMessage(fmt.Sprintf(`{"tenant": %q}`, low))
	job := insertOne(t, d, p)

	// a holds 0..31 (low's bucket), b 32..63 (high's).
	keyShare(t, d, weirdriver.KeyShareParams{Queue: q, ClientID: "a"})
	keyShare(t, d, weirdriver.KeyShareParams{Queue: q, ClientID: "b"})
	if a := keyShare(t, d, weirdriver.KeyShareParams{Queue: q, ClientID: "a", Release: span(32, 64)}); !slices.Equal(a.Held, span(0, 32)) {
		t.Fatalf("a holds %v, want 0..31", a.Held)
	}
	if b := keyShare(t, d, weirdriver.KeyShareParams{Queue: q, ClientID: "b"}); !slices.Equal(b.Held, span(32, 64)) {
		t.Fatalf("b holds %v, want 32..63", b.Held)
	}

	if _, err := d.Executor().JobUpdate(ctx(t), job.ID, &weirdriver.JobUpdateParams{
		Metadata: json.RawMessage(fmt.Sprintf(`{"tenant": %q}`, high)),
	}); err != nil {
		t.Fatal(err)
	}
	jobs, lim, err := d.Executor().JobClaim(ctx(t), &weirdriver.JobClaimParams{
		Queue: q, Max: 10, ClientID: "a", LeaseDuration: time.Minute, KeyBuckets: span(0, 32),
	})
	if err != nil || !lim.Owned || len(jobs) != 0 {
		t.Fatalf("claim by the holder of the old key's bucket: %d jobs, %+v, %v; want none, owned", len(jobs), lim, err)
	}
	jobs, lim, err = d.Executor().JobClaim(ctx(t), &weirdriver.JobClaimParams{
		Queue: q, Max: 10, ClientID: "b", LeaseDuration: time.Minute, KeyBuckets: span(32, 64),
	})
	if err != nil || !lim.Owned || len(jobs) != 1 || jobs[0].ID != job.ID || !slices.Equal(lim.Keys, []string{high}) {
		t.Fatalf("claim by the holder of the new key's bucket: %d jobs, %+v, %v; want job %d of key %s", len(jobs), lim, err, job.ID, high)
	}
}

// testKeyShareHiddenKey: when the head of a holder's bucket is all of keys
// that the holder passes over (it holds enough of their jobs waiting), the
// claim walks the bucket's keys and takes the job of a key hidden behind
// their backlogs at once, not in some later claim.
func testKeyShareHiddenKey(t *testing.T, d weirdriver.Driver, opts Options) {
	if opts.NoKeyShares {
		t.Skip("the driver holds no buckets of keys")
	}
	const q = "keyhidden"
	// Four keys of one bucket: three with backlogs, and one behind them.
	var keys []string
	bucket := weirdriver.KeyBucket("h0")
	for i := 0; len(keys) < 4; i++ {
		if k := fmt.Sprintf("h%d", i); weirdriver.KeyBucket(k) == bucket {
			keys = append(keys, k)
		}
	}
	hot, hidden := keys[:3], keys[3]
	setKeyLimit(t, d, q, "args.c", 1)
	var ps []*weirdriver.JobInsertParams
	for range 20 {
		for _, k := range hot {
			ps = append(ps, params("k", q, fmt.Sprintf(`{"c": %q}`, k)))
		}
	}
	ps = append(ps, params("k", q, fmt.Sprintf(`{"c": %q}`, hidden)))
	if _, err := d.Executor().JobInsert(ctx(t), ps); err != nil {
		t.Fatal(err)
	}
	if s := keyShare(t, d, weirdriver.KeyShareParams{Queue: q, ClientID: "a"}); !slices.Contains(s.Held, bucket) {
		t.Fatalf("a holds %v, not bucket %d", s.Held, bucket)
	}
	// The holder names the hot keys as passed over: the head of the bucket
	// (6 + 2 rows for a claim of 6) is all theirs.
	got, lim := claimOwned(t, d, q, "a", 6, []int{bucket}, hot)
	if !lim.Owned || !slices.Equal(got, []string{hidden}) {
		t.Fatalf("claim passing over %v took %v (%+v), want the job of %s", hot, got, lim, hidden)
	}
}

// testKeySharePart: the buckets are divided in proportion to what each
// client wants (its MaxWorkers; weirdriver.KeyPart), and a client that does
// not say (Want 0) counts as wanting what the others do on average.
func testKeySharePart(t *testing.T, d weirdriver.Driver, opts Options) {
	if opts.NoKeyShares {
		t.Skip("the driver holds no buckets of keys")
	}
	const q = "keypart"
	setKeyLimit(t, d, q, "args.c", 1)
	target := func(client string, want int) int {
		t.Helper()
		return keyShare(t, d, weirdriver.KeyShareParams{Queue: q, ClientID: client, Want: want}).Target
	}
	if a := target("a", 300); a != 64 {
		t.Fatalf("a alone wanting 300: part %d, want 64", a)
	}
	// 1 each, then 62 by 300 to 100: 46.5 and 15.5, the tie to a.
	if b, a := target("b", 100), target("a", 300); b != 16 || a != 48 {
		t.Fatalf("a wanting 300 and b 100: parts %d and %d, want 48 and 16", a, b)
	}
	// c does not say: it counts as wanting 200, the mean of a's and b's.
	// 1 each, then 61 by 300, 100 and 200: 30.5, 10.17 and 20.33, the one
	// left to a's largest remainder.
	if c, b, a := target("c", 0), target("b", 100), target("a", 300); a != 32 || b != 11 || c != 21 {
		t.Fatalf("a wanting 300, b 100, c not saying: parts %d, %d and %d, want 32, 11 and 21", a, b, c)
	}
}
