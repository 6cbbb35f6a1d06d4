package main

import (
	"bytes"
	"errors"
	"slices"
	"testing"
)

func TestTermSafe(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{"", ""},
		{"plain text, ünïcödé, 日本語, emoji 🙂", "plain text, ünïcödé, 日本語, emoji 🙂"},
		{`a\x1b stays as written`, `a\x1b stays as written`},
		{"\x1b[2J\x1b]0;pwned\x07", `\x1b[2J\x1b]0;pwned\x07`},
		{"a\nb\tc\rd\x00e\x7f", `a\nb\tc\rd\x00e\x7f`},
		{"c1 \u0085 \u009b31m \u0080", `c1 \u0085 \u009b31m \u0080`},
		{"bidi \u202aa\u202bb\u202cc\u202dd\u202ee", `bidi \u202aa\u202bb\u202cc\u202dd\u202ee`},
		{"isolates \u2066a\u2067b\u2068c\u2069", `isolates \u2066a\u2067b\u2068c\u2069`},
		{"marks \u200e\u200f\u061c", `marks \u200e\u200f\u061c`},
		{"separators \u2028\u2029", `separators \u2028\u2029`},
		{"bad \xff\xfe utf-8 \xe2\x80", `bad \xff\xfe utf-8 \xe2\x80`},
		{"\ufffd is a real character", "\ufffd is a real character"},
	} {
		if got := termSafe(tt.in); got != tt.want {
			t.Errorf("termSafe(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	got := termSafeBlock("boom\x1b[31m\nmain.work()\n\twork.go:12\r")
	want := []string{`boom\x1b[31m`, "main.work()", "\twork.go:12\\r"}
	if !slices.Equal(got, want) {
		t.Errorf("termSafeBlock: got %q, want %q", got, want)
	}
}

// TestReportEscapes: a failure's line is escaped too, since it may quote the
// server or stored data.
func TestReportEscapes(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	if code := report(&buf, errors.New("job 1: \x1b]0;pwned\x07 \u202eevil\nnext")); code != exitFailure {
		t.Errorf("exit status %d", code)
	}
	if got, want := buf.String(), "weir: job 1: \\x1b]0;pwned\\x07 \\u202eevil next\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
