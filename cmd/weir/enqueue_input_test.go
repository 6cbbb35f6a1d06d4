package main

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/weirq/weir/internal/dbtest"
)

// TestEnqueueUnstorableInput checks that weir enqueue refuses, as a usage error
// that names what was wrong, what the client refuses before writing: text
// PostgreSQL cannot store, a key twice, a number no Go handler can decode, a
// time outside the years 1..9999.
func TestEnqueueUnstorableInput(t *testing.T) {
	t.Parallel()
	schema, weir := migrated(t)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--args", `{"a": "x\u0000"}`}, `weir: enqueue: args of kind "k" have a NUL character (\u0000) at byte 7`},
		{[]string{"--args", `{"a": 1, "a": 2}`}, `weir: enqueue: args of kind "k" have the key "a" twice in one object`},
		{[]string{"--args", `{"a": "\udc00"}`}, `weir: enqueue: args of kind "k" have an unpaired UTF-16 surrogate escape`},
		{[]string{"--args", `{"a": 1e400}`}, `weir: enqueue: args of kind "k" have the number 1e400 at byte 5, outside float64's range`},
		{[]string{"--args", `{"a": [-1e309]}`}, `weir: enqueue: args of kind "k" have the number -1e309 at byte 6, outside float64's range`},
		{[]string{"--run-at", "0000-01-01T00:00:00Z"}, "weir: enqueue: scheduled time 0000-01-01T00:00:00Z is out of range: it must fall in the years 1..9999 UTC"},
		{[]string{"--run-at", "0001-01-01T00:00:00+01:00"}, "weir: enqueue: scheduled time 0000-12-31T23:00:00Z is out of range"},
	} {
		r := weir(t, append([]string{"enqueue", "--kind", "k", "--count", "3"}, tt.args...)...)
		wantFailure(t, r, exitUsage, tt.want)
	}
	var n int
	if err := dbtest.Pool(t, nil).QueryRow(t.Context(), "SELECT count(*) FROM "+pgx.Identifier{schema, "weir_job"}.Sanitize()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d jobs written by refused enqueues", n)
	}
}
