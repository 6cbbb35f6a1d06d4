package main

import (
	"strings"
	"testing"

	"github.com/weirq/weir/internal/dbtest"
)

// TestDemoPostgres runs the demo on PostgreSQL in a fresh schema.
func TestDemoPostgres(t *testing.T) {
	t.Parallel()
	schema := dbtest.Schema(t)
	r := runWeir(t, nil, "demo", "--database-url", dbtest.URL(), "--schema", schema)
	wantOK(t, r)
	for _, want := range []string{
		"enqueued 29 demo jobs in PostgreSQL schema " + schema,
		"completed     27       27",
		"cancelled      1        1",
		"discarded      1        1",
		"every demo job ended as expected",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("demo output lacks %q:\n%s", want, r.stdout)
		}
	}
	// A second run in the same schema works too, counting only its own jobs.
	wantOK(t, runWeir(t, nil, "demo", "--database-url", dbtest.URL(), "--schema", schema))
}

func TestDemoFailures(t *testing.T) {
	t.Parallel()
	wantFailure(t, runWeir(t, nil, "demo", "--database-url", "postgres://%zz"), 2, "does not parse")
	wantFailure(t, runWeir(t, nil, "demo", "--bogus"), 2, "bogus")
	wantFailure(t, runWeir(t, nil, "demo", "--database-url", "postgres://postgres@127.0.0.1:1/test?connect_timeout=2"), 1, "cannot reach")
}
