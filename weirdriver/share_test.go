package weirdriver

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestFairShare: the parts of every client add up to the limit, or to what
// they all want when that is less; none gets more than it wants; any two
// differ by at most one unless the smaller got all it wants; and the order of
// the wants does not matter.
func TestFairShare(t *testing.T) {
	for _, c := range []struct {
		limit int
		wants []int
		want  []int
	}{
		{10, []int{8}, []int{8}},
		{10, []int{8, 8}, []int{5, 5}},
		{200, []int{250, 250, 250, 250}, []int{50, 50, 50, 50}},
		{10, []int{2, 100, 100}, []int{2, 4, 4}},
		{10, []int{100, 100, 100}, []int{4, 3, 3}}, // the remainder to the first by id
		{5, []int{1, 1, 1}, []int{1, 1, 1}},
		{0, []int{3, 3}, []int{0, 0}},
	} {
		ws := make([]ShareOf, len(c.wants))
		for i, w := range c.wants {
			ws[i] = ShareOf{ClientID: fmt.Sprint("c", i), Want: w}
		}
		for i := range ws {
			if got := FairShare(c.limit, ws, ws[i].ClientID); got != c.want[i] {
				t.Errorf("limit %d, wants %v: client %d gets %d, want %d", c.limit, c.wants, i, got, c.want[i])
			}
		}
	}

	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		limit := r.IntN(300)
		ws := make([]ShareOf, 1+r.IntN(8))
		total := 0
		for i := range ws {
			ws[i] = ShareOf{ClientID: fmt.Sprint("c", r.IntN(1000), "-", i), Want: 1 + r.IntN(120)}
			total += ws[i].Want
		}
		shuffled := append([]ShareOf(nil), ws...)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		parts := make([]int, len(ws))
		sum := 0
		for i, w := range ws {
			parts[i] = FairShare(limit, ws, w.ClientID)
			if again := FairShare(limit, shuffled, w.ClientID); again != parts[i] {
				t.Fatalf("limit %d, wants %+v: %s gets %d, %d when shuffled", limit, ws, w.ClientID, parts[i], again)
			}
			if parts[i] < 0 || parts[i] > w.Want {
				t.Fatalf("limit %d, wants %+v: %s gets %d", limit, ws, w.ClientID, parts[i])
			}
			sum += parts[i]
		}
		if sum != min(limit, total) {
			t.Fatalf("limit %d, wants %+v: parts %v add up to %d, want %d", limit, ws, parts, sum, min(limit, total))
		}
		for i := range ws {
			for j := range ws {
				if parts[i] < ws[i].Want && parts[j] > parts[i]+1 {
					t.Fatalf("limit %d, wants %+v: parts %v: %d short of its want, yet %d has more than one more", limit, ws, parts, i, j)
				}
			}
		}
	}
}

// TestDivideShare: a client gets its fair part as far as the room allows, and
// never less than it keeps.
func TestDivideShare(t *testing.T) {
	others := []ShareOf{{ClientID: "a", Want: 8, Slots: 8}}
	p := &QueueShareParams{ClientID: "b", Want: 8}
	if got := DivideShare(10, 0, others, p); got != (QueueShare{Limit: 10, Slots: 2, Fair: 2}) {
		t.Errorf("b beside a holding 8 of 10: %+v", got)
	}
	if got := DivideShare(10, 3, others, p); got != (QueueShare{Limit: 10, Slots: 0, Fair: 0}) {
		t.Errorf("b beside a holding 8 of 10 and 3 running without a share: %+v", got)
	}
	p.Keep = 4
	if got := DivideShare(10, 3, others, p); got != (QueueShare{Limit: 10, Slots: 4, Fair: 0}) {
		t.Errorf("b keeping 4 with no room: %+v", got)
	}
}

// TestKeyPart: the buckets of a queue's keys are divided among its holders
// one each, then in proportion to what each wants, by the largest
// remainder; equal wants divide them as evenly as FairShare does; a client
// that does not say counts as wanting the mean; the parts add up to
// KeyBuckets, whatever the order of the clients.
func TestKeyPart(t *testing.T) {
	for _, c := range []struct {
		wants []int
		want  []int
	}{
		{[]int{250}, []int{64}},
		{[]int{250, 250, 250, 250}, []int{16, 16, 16, 16}},
		{[]int{5, 5, 5}, []int{22, 21, 21}}, // the remainder to the first by id
		{[]int{100, 4}, []int{61, 3}},       // 1 + 62·100/104 = 60.6, 1 + 62·4/104 = 3.4: the larger remainder
		{[]int{300, 100}, []int{48, 16}},    // 1 + 46.5, 1 + 15.5: the tie to the first by id
		{[]int{100, 0, 100}, []int{22, 21, 21}},
		{[]int{0, 0}, []int{32, 32}},
		{[]int{1_000_000, 1}, []int{63, 1}},
	} {
		ws := make([]ShareOf, len(c.wants))
		for i, w := range c.wants {
			ws[i] = ShareOf{ClientID: fmt.Sprint("c", i), Want: w}
		}
		for i := range ws {
			if got := KeyPart(ws, ws[i].ClientID); got != c.want[i] {
				t.Errorf("wants %v: client %d gets %d, want %d", c.wants, i, got, c.want[i])
			}
		}
	}
	if got := KeyPart([]ShareOf{{ClientID: "a", Want: 1}}, "b"); got != 0 {
		t.Errorf("a client not among the holders gets %d", got)
	}

	r := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		ws := make([]ShareOf, 1+r.IntN(80))
		equal := 1 + r.IntN(50)
		same := r.IntN(2) == 0
		for i := range ws {
			ws[i] = ShareOf{ClientID: fmt.Sprint("c", r.IntN(1000), "-", i), Want: r.IntN(120)}
			if same {
				ws[i].Want = equal
			}
		}
		shuffled := append([]ShareOf(nil), ws...)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		sum := 0
		for _, w := range ws {
			part := KeyPart(ws, w.ClientID)
			if again := KeyPart(shuffled, w.ClientID); again != part {
				t.Fatalf("%v: %s gets %d, or %d in another order", ws, w.ClientID, part, again)
			}
			if len(ws) <= KeyBuckets && part < 1 {
				t.Fatalf("%v: %s gets no bucket among %d clients", ws, w.ClientID, len(ws))
			}
			if same && len(ws) <= KeyBuckets {
				// Equal wants divide them evenly: as FairShare does among
				// clients that each want every bucket.
				all := make([]ShareOf, len(ws))
				for i, o := range ws {
					all[i] = ShareOf{ClientID: o.ClientID, Want: KeyBuckets}
				}
				if even := FairShare(KeyBuckets, all, w.ClientID); part != even {
					t.Fatalf("%v: equal wants, %s gets %d, FairShare %d", ws, w.ClientID, part, even)
				}
			}
			sum += part
		}
		if sum != KeyBuckets {
			t.Fatalf("%v: parts add up to %d", ws, sum)
		}
	}
}
