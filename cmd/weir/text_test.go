package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
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

// TestWriteJSONEscapes: every character termSafe escapes is a JSON escape in
// writeJSON's output, which decodes to the same value.
func TestWriteJSONEscapes(t *testing.T) {
	t.Parallel()
	in := map[string]string{"k\u202e": "\x1b[2J\x07 \u202egnp.exe \u2066\u2069 \u200e\u061c \u0085\u009b \x7f \u2028\n\t ünï 🙂"}
	var buf bytes.Buffer
	if err := writeJSON(&buf, in); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, r := range out {
		if r != '\n' && unsafeRune(r) {
			t.Fatalf("writeJSON wrote %U raw:\n%s", r, out)
		}
	}
	for _, esc := range []string{`\u202e`, `\u2066`, `\u0085`, `\u009b`, `\u007f`, `\u001b`, `\u2028`, "ünï 🙂"} {
		if !strings.Contains(out, esc) {
			t.Errorf("writeJSON's output lacks %s:\n%s", esc, out)
		}
	}
	var back map[string]string
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil || !maps.Equal(back, in) {
		t.Fatalf("writeJSON's output decodes to %q, %v; want %q", back, err, in)
	}
}
