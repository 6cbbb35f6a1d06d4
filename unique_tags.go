package weir

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
)

// uniqueTag is the struct tag that puts a field of an args struct in the unique
// key: `weir:"unique"`.
const uniqueTag = "unique"

// uniqueTagCache maps an args type to its uniqueTagResult: reflection runs once
// per type, not once per insert.
var uniqueTagCache sync.Map

type uniqueTagResult struct {
	keys []string
	err  error
}

// uniqueTagKeys returns the JSON names of the fields of args type t (a struct,
// or a pointer to one) tagged `weir:"unique"`, in field order, or nil when it
// has none. A field that encoding/json leaves out, or a weir tag other than
// "unique", is an error. The slice is shared: callers must not change it.
func uniqueTagKeys(t reflect.Type) ([]string, error) {
	if t == nil {
		return nil, nil
	}
	if got, ok := uniqueTagCache.Load(t); ok {
		r := got.(*uniqueTagResult)
		return r.keys, r.err
	}
	keys, err := findUniqueTags(t, nil)
	if err == nil && len(keys) > maxUniqueArgsKeys {
		err = fmt.Errorf("%d fields are tagged weir:%q; the limit is %d", len(keys), uniqueTag, maxUniqueArgsKeys)
	}
	if err == nil {
		err = checkTagKeys(keys)
	}
	uniqueTagCache.Store(t, &uniqueTagResult{keys: keys, err: err})
	return keys, err
}

// checkTagKeys checks tag-derived names as ByArgsKeys' are checked, and says
// which rule failed without naming the option the caller did not set.
func checkTagKeys(keys []string) error {
	if err := checkUniqueArgsKeys(keys); err != nil {
		return fmt.Errorf("its fields tagged weir:%q give %s", uniqueTag, err.(*InvalidError).Message)
	}
	return nil
}

// findUniqueTags walks t's fields as encoding/json does for the top level of
// the object: an embedded struct without a JSON name of its own lends its
// fields to the top level. seen guards against embedding cycles through
// pointers.
func findUniqueTags(t reflect.Type, seen []reflect.Type) ([]string, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil, nil
	}
	for _, s := range seen {
		if s == t {
			return nil, nil
		}
	}
	seen = append(seen, t)
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		tag, tagged := f.Tag.Lookup("weir")
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tagged && tag != uniqueTag {
			return nil, fmt.Errorf("field %s has weir tag %q; the only one known is %q", f.Name, tag, uniqueTag)
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
			if tagged {
				// encoding/json spreads its fields over the top level.
				return nil, fmt.Errorf("embedded field %s is tagged weir:%q; tag its fields instead", f.Name, uniqueTag)
			}
			inner, err := findUniqueTags(ft, seen)
			if err != nil {
				return nil, err
			}
			keys = append(keys, inner...)
			continue
		}
		if !tagged {
			continue
		}
		if !f.IsExported() || name == "-" && f.Tag.Get("json") == "-" {
			return nil, fmt.Errorf("field %s is tagged weir:%q but is not encoded in the args", f.Name, uniqueTag)
		}
		if name == "" {
			name = f.Name
		}
		keys = append(keys, name)
	}
	return keys, nil
}
