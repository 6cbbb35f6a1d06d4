package weir

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestJSONChecker checks the checker on text that encoding/json accepts, where
// only the string contents decide.
func TestJSONChecker(t *testing.T) {
	t.Parallel()
	var c jsonChecker
	for _, tt := range []struct {
		json     string
		replaced bool
		want     string // "" means accepted
	}{
		{`{}`, true, ""},
		{`{"a":"\\","b":"\\u0000","c":"\"\u0001"}`, true, ""},
		{`{"a":"\u0000"}`, false, "NUL character (\\u0000) at byte 6"},
		{`{"a":"\U0000"}`, false, ""}, // not an escape JSON knows; json.Valid refuses it first
		{`{"a":"\ufffd"}`, false, ""},
		{`{"a":"\uFFFD"}`, true, "invalid UTF-8 at byte 6"},
		{"{\"a\":\"\uFFFD\"}", true, ""},
		{`{"a":"\ud83d\ude00"}`, true, ""},
		{`{"a":"\ud83d\u0041"}`, true, "unpaired UTF-16 surrogate"},
		{`{"a":"\ud83d"}`, true, "unpaired UTF-16 surrogate"},
		{`{"a":"\ude00\ud83d"}`, true, "unpaired UTF-16 surrogate"},
		{"{\"a\":\"\xed\xa0\x80\"}", true, "invalid UTF-8 at byte 6"}, // a surrogate written as UTF-8
		{"{\"a\":\"\xf0\x9f\x98\"}", true, "invalid UTF-8 at byte 6"},
		{`{"a":1,"a":1}`, true, `the key "a" twice`},
		{`{"a":{"b":1},"b":{"a":1,"b":[{"a":1},{"a":2}]}}`, true, ""},
		{`{"a":[{"x":1,"x":2}]}`, true, `the key "x" twice`},
		{`{"a\"b":1,"a\u0022b":2}`, true, `the key "a\"b" twice`},
		{`{"k":["a","a"],"l":"k"}`, true, ""},
		{`{"":1,"":2}`, true, `the key "" twice`},
	} {
		err := c.check([]byte(tt.json), tt.replaced)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v", tt.json, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: %v, want %q", tt.json, err, tt.want)
		}
	}
}

func TestStorableText(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"plain":       "plain",
		"":            "",
		"a\x00b":      "a\uFFFDb",
		"caf\xe9\x00": "caf\uFFFD\uFFFD",
		"ok \uFFFD":   "ok \uFFFD",
	} {
		if got := storableText(in); got != want {
			t.Errorf("storableText(%q) = %q, want %q", in, got, want)
		}
	}
}

// BenchmarkJSONChecker measures the check alone on typical small args and on
// args of the 1 MiB default limit.
func BenchmarkJSONChecker(b *testing.B) {
	small, _ := json.Marshal(map[string]any{"to": "ada@example.com", "subject": "Welcome, Ada", "order": 42, "items": []int{1, 2, 3}})
	var big strings.Builder
	big.WriteString("{")
	for i := 0; big.Len() < 1<<20-100; i++ {
		fmt.Fprintf(&big, `"key%d":"value number %d with some text, é and \"quotes\"",`, i, i)
	}
	big.WriteString(`"end":true}`)
	for _, bc := range []struct {
		name string
		json []byte
	}{{"small", small}, {"1MiB", []byte(big.String())}} {
		b.Run(bc.name, func(b *testing.B) {
			var c jsonChecker
			b.SetBytes(int64(len(bc.json)))
			for b.Loop() {
				if err := c.check(bc.json, true); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
