package weirotel

import (
	"strconv"
	"testing"
)

// TestAttrCacheBounded checks that the cache of attribute sets stops growing at
// its bound, since kinds and queues come from rows anyone may insert, and that
// a set past the bound is still built.
func TestAttrCacheBounded(t *testing.T) {
	var c attrCache
	for i := range maxCachedSets + 50 {
		if c.get(setKey{queue: "q", kind: "k" + strconv.Itoa(i)}) == nil {
			t.Fatalf("no set for key %d", i)
		}
	}
	if n := c.n.Load(); n != maxCachedSets {
		t.Fatalf("%d sets kept, want %d", n, maxCachedSets)
	}
	if _, ok := c.sets.Load(setKey{queue: "q", kind: "k" + strconv.Itoa(maxCachedSets+10)}); ok {
		t.Fatal("a set past the bound was kept")
	}
	// A kept one is returned again, not rebuilt.
	a, b := c.get(setKey{queue: "q", kind: "k1"}), c.get(setKey{queue: "q", kind: "k1"})
	if a != b {
		t.Fatal("a kept set was built again")
	}
}
