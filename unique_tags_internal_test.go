package weir

import (
	"reflect"
	"slices"
	"testing"
)

type tagCacheArgs struct {
	A string `json:"a" weir:"unique"`
	B string `json:"b,omitempty" weir:"unique"`
	C string `json:"c"`
	D string `weir:"unique"` // no json tag: the field's name
}

type tagCacheBad struct {
	A string `json:"a" weir:"unique,other"`
}

// TestUniqueTagKeysCached checks the JSON names found and that the lookup runs
// once per type: the second call returns the very slice (or error) of the first.
func TestUniqueTagKeysCached(t *testing.T) {
	typ := reflect.TypeFor[*tagCacheArgs]()
	keys, err := uniqueTagKeys(typ)
	if err != nil || !slices.Equal(keys, []string{"a", "b", "D"}) {
		t.Fatalf("keys %q, %v", keys, err)
	}
	again, err := uniqueTagKeys(typ)
	if err != nil || &again[0] != &keys[0] {
		t.Fatal("the second lookup did not come from the cache")
	}
	if _, ok := uniqueTagCache.Load(typ); !ok {
		t.Fatal("nothing cached")
	}
	_, err1 := uniqueTagKeys(reflect.TypeFor[tagCacheBad]())
	_, err2 := uniqueTagKeys(reflect.TypeFor[tagCacheBad]())
	if err1 == nil || err1 != err2 {
		t.Fatalf("bad tag: %v then %v, want one cached error", err1, err2)
	}
	if keys, err := uniqueTagKeys(reflect.TypeFor[map[string]any]()); keys != nil || err != nil {
		t.Fatalf("not a struct: %q %v", keys, err)
	}
}
