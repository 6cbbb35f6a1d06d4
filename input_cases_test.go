package weir_test

// The insert inputs that PostgreSQL cannot store, or that the two stores would
// keep differently, and a check that a client refuses each of them the same way
// on every store: an error wrapping weir.ErrInvalid that names what was wrong,
// and nothing written. TestInsertUnstorableInput runs them on both stores.

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weirq/weir"
)

// inputStringArgs are args with one string field, encoded by encoding/json.
type inputStringArgs struct {
	S string `json:"s"`
}

func (inputStringArgs) Kind() string { return "strings" }

// inputPtrArgs are used through a pointer, which may be nil.
type inputPtrArgs struct {
	N int `json:"n"`
}

func (a *inputPtrArgs) Kind() string { _ = a.N; return "ptr" }

// inputOKArgs is a job that goes in.
type inputOKArgs struct {
	N int `json:"n"`
}

func (inputOKArgs) Kind() string { return "ok" }

func inputRaw(s string) weir.RawArgs { return weir.RawArgs{KindName: "raw", JSON: json.RawMessage(s)} }

// inputCase is one insert and what its error must say.
type inputCase struct {
	Name string
	Args weir.JobArgs
	Opts *weir.InsertOpts
	Want string
	// Field is the InvalidError's Field.
	Field string
}

// badInserts are inserts every client must refuse.
func badInserts() []inputCase {
	return []inputCase{
		{"NUL in args", inputRaw(`{"a":"x\u0000y"}`), nil, `args of kind "raw" have a NUL character (\u0000) at byte 7`, "Args"},
		{"NUL in a Go string", inputStringArgs{S: "a\x00b"}, nil, "args of kind \"strings\" have a NUL character", "Args"},
		{"NUL in a key", inputRaw(`{"\u0000":1}`), nil, `args of kind "raw" have a NUL character (\u0000) at byte 2`, "Args"},
		{"NUL in metadata", inputOKArgs{}, &weir.InsertOpts{Metadata: json.RawMessage(`{"m": ["\u0000"]}`)}, "metadata has a NUL character", "InsertOpts.Metadata"},
		{"invalid UTF-8 in a Go string", inputStringArgs{S: "caf\xe9"}, nil, "args of kind \"strings\" have invalid UTF-8 at byte 9 (encoding/json wrote it as \\ufffd)", "Args"},
		{"invalid UTF-8 in raw args", inputRaw("{\"a\":\"\xff\"}"), nil, `args of kind "raw" have invalid UTF-8 at byte 6`, "Args"},
		{"invalid UTF-8 in metadata", inputOKArgs{}, &weir.InsertOpts{Metadata: json.RawMessage("{\"m\":\"\xc3\"}")}, "metadata has invalid UTF-8", "InsertOpts.Metadata"},
		{"unpaired surrogate", inputRaw(`{"a":"\ud800x"}`), nil, `args of kind "raw" have an unpaired UTF-16 surrogate escape at byte 6`, "Args"},
		{"lone low surrogate", inputRaw(`{"a":"\uDC00"}`), nil, `args of kind "raw" have an unpaired UTF-16 surrogate escape at byte 6`, "Args"},
		{"duplicate key", inputRaw(`{"a":1,"b":2,"a":3}`), nil, `args of kind "raw" have the key "a" twice in one object`, "Args"},
		{"duplicate escaped key", inputRaw(`{"o":{"b":1,"\u0062":2}}`), nil, `args of kind "raw" have the key "b" twice`, "Args"},
		{"duplicate key among many", inputRaw(inputManyKeys(40, "k7")), nil, `args of kind "raw" have the key "k7" twice`, "Args"},
		{"duplicate key in metadata", inputOKArgs{}, &weir.InsertOpts{Metadata: json.RawMessage(`{"m":1, "m":2}`)}, `metadata has the key "m" twice`, "InsertOpts.Metadata"},
		{"number over float64's range", inputRaw(`{"a":1e400}`), nil, `args of kind "raw" have the number 1e400 at byte 5, outside float64's range`, "Args"},
		{"number under float64's range", inputRaw(`{"a":[1, -1.8E+308]}`), nil, `args of kind "raw" have the number -1.8E+308 at byte 8, outside float64's range`, "Args"},
		{"integer over float64's range", inputRaw(`{"a":` + inputOverMaxFloat + `}`), nil, `args of kind "raw" have the number 1797693134862315807937289714053034150799...`, "Args"},
		{"number over float64's range in metadata", inputOKArgs{}, &weir.InsertOpts{Metadata: json.RawMessage(`{"m": {"n": 2e308}}`)}, "metadata has the number 2e308 at byte 10, outside float64's range", "InsertOpts.Metadata"},
		{"nil pointer args", (*inputPtrArgs)(nil), nil, "args are a nil *weir_test.inputPtrArgs", "Args"},
		{"year 0", inputOKArgs{}, &weir.InsertOpts{ScheduledAt: time.Date(0, 6, 1, 0, 0, 0, 0, time.UTC)},
			"scheduled time 0000-06-01T00:00:00Z is out of range: it must fall in the years 1..9999 UTC", "InsertOpts.ScheduledAt"},
		{"year 300000", inputOKArgs{}, &weir.InsertOpts{ScheduledAt: time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC)},
			"scheduled time 300000-01-01T00:00:00Z is out of range", "InsertOpts.ScheduledAt"},
		{"year 10000", inputOKArgs{}, &weir.InsertOpts{ScheduledAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}, "scheduled time 10000-01-01T00:00:00Z is out of range", "InsertOpts.ScheduledAt"},
		{"before year 1 in UTC", inputOKArgs{}, &weir.InsertOpts{ScheduledAt: time.Date(1, 1, 1, 0, 30, 0, 0, time.FixedZone("east", 3600))}, "scheduled time 0000-12-31T23:30:00Z is out of range", "InsertOpts.ScheduledAt"},
	}
}

// goodInserts are inserts near the bad ones that every client must take.
func goodInserts() []inputCase {
	return []inputCase{
		{Name: "escaped U+FFFD in raw args", Args: inputRaw(`{"a":"\ufffd"}`)},
		{Name: "U+FFFD in a Go string", Args: inputStringArgs{S: "\uFFFD"}},
		{Name: "surrogate pair", Args: inputRaw(`{"a":"\ud83d\ude00"}`)},
		{Name: "same key in two objects", Args: inputRaw(`{"a":{"a":1},"b":{"a":2},"c":[{"a":1},{"a":1}]}`)},
		{Name: "many keys", Args: inputRaw(inputManyKeys(40, ""))},
		{Name: "backslash before u", Args: inputRaw(`{"a":"\\u0000"}`)},
		{Name: "float64's range", Args: inputRaw(`{"max":1.7976931348623157e308,"min":-1.7976931348623157E+308,"tiny":4.9e-324}`)},
		{Name: "integer that rounds to float64's largest", Args: inputRaw(`{"a":` + inputOverMaxFloat[:len(inputOverMaxFloat)-1] + `1}`)},
		{Name: "number that underflows to 0", Args: inputRaw(`{"a":1e-400,"b":-1e-400}`)},
		{Name: "integer over int64's range", Args: inputRaw(`{"a":123456789012345678901234567890}`)},
		{Name: "exponents in strings", Args: inputRaw(`{"1e400":"1e400"}`)},
		{Name: "year 1", Args: inputOKArgs{}, Opts: &weir.InsertOpts{ScheduledAt: time.Date(1, 1, 1, 0, 0, 0, 1000, time.UTC)}},
		{Name: "year 9999", Args: inputOKArgs{}, Opts: &weir.InsertOpts{ScheduledAt: time.Date(9999, 12, 31, 23, 59, 59, 999_999_000, time.UTC)}},
	}
}

// inputOverMaxFloat is 2^1024 - 2^970, the smallest integer that does not
// round to float64's largest value, 2^1024 - 2^971, but overflows.
const inputOverMaxFloat = "179769313486231580793728971405303415079934132710037826936173778980444968292764750946649017977587207096330286416692887910946555547851940402630657488671505820681908902000708383676273854845817711531764475730270069855571366959622842914819860834936475292719074168444365510704342711559699508093042880177904174497792"

// inputManyKeys is an object with n keys k0, k1...; dup, if set, comes again at the end.
func inputManyKeys(n int, dup string) string {
	var b strings.Builder
	b.WriteString("{")
	for i := range n {
		fmt.Fprintf(&b, `"k%d":%d,`, i, i)
	}
	if dup != "" {
		fmt.Fprintf(&b, "%q:0,", dup)
	}
	return strings.TrimSuffix(b.String(), ",") + "}"
}

// runInputCases inserts every bad input alone and as the last job of a batch large enough
// for the bulk path, checks the errors, and checks with count that nothing was
// written; then it inserts the good inputs.
func runInputCases(t *testing.T, c *weir.Client, count func() int) {
	t.Helper()
	ctx := t.Context()
	const batch = 200
	for _, tc := range badInserts() {
		_, err := c.Insert(ctx, tc.Args, tc.Opts)
		if !errors.Is(err, weir.ErrInvalid) || !strings.Contains(err.Error(), tc.Want) {
			t.Errorf("%s: %v, want an error wrapping ErrInvalid saying %q", tc.Name, err, tc.Want)
		}
		if e, ok := errors.AsType[*weir.InvalidError](err); !ok || e.Field != tc.Field || e.Job != 0 || e.Jobs != 0 {
			t.Errorf("%s: %#v, want an *InvalidError about %s", tc.Name, e, tc.Field)
		}
		params := make([]weir.InsertManyParams, batch)
		for i := range params {
			params[i] = weir.InsertManyParams{Args: inputOKArgs{N: i}}
		}
		params[batch-1] = weir.InsertManyParams{Args: tc.Args, InsertOpts: tc.Opts}
		_, err = c.InsertMany(ctx, params)
		want := fmt.Sprintf("job %d of %d: %s", batch, batch, tc.Want)
		if !errors.Is(err, weir.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s in a batch: %v, want an error wrapping ErrInvalid saying %q", tc.Name, err, want)
		}
		if e, ok := errors.AsType[*weir.InvalidError](err); !ok || e.Field != tc.Field || e.Job != batch || e.Jobs != batch {
			t.Errorf("%s in a batch: %#v, want an *InvalidError about %s of job %d of %d", tc.Name, e, tc.Field, batch, batch)
		}
	}
	if n := count(); n != 0 {
		t.Fatalf("%d jobs written by refused inserts", n)
	}
	for _, tc := range goodInserts() {
		res, err := c.Insert(ctx, tc.Args, tc.Opts)
		if err != nil {
			t.Errorf("%s: %v", tc.Name, err)
			continue
		}
		if tc.Opts != nil && !res.Job.ScheduledAt.Equal(tc.Opts.ScheduledAt) {
			t.Errorf("%s: scheduled at %s, want %s", tc.Name, res.Job.ScheduledAt, tc.Opts.ScheduledAt)
		}
	}
}
