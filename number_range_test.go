package weir_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/weirq/weir"
)

// TestNumbersOutsideFloat64Refused: a number outside float64's range (1e400)
// is JSON that both stores keep but that no Go handler can decode into a
// float64 or an any; every way of writing a job's JSON refuses it, naming the
// number, and writes nothing. Inserts are in TestInsertUnstorableInput's cases,
// weir enqueue in cmd/weir's TestEnqueueUnstorableInput, weir_enqueue in
// floatArgs take a number as a float64, which 1e400 does not fit.
type floatArgs struct {
	A float64 `json:"a"`
}

func (floatArgs) Kind() string { return "float" }

// numberArgs take a number as written, whatever its size.
type numberArgs struct {
	A json.Number `json:"a"`
}

func (numberArgs) Kind() string { return "number" }

// TestSQLEnqueueNumbersOutsideFloat64: weir_enqueue takes a number outside
// float64's range (jsonb keeps it, as its digits); a handler whose args hold
// it in a float64 is never called: each attempt fails with the decode error,
// and the job ends discarded when its attempts run out. A json.Number field
// receives the number's digits (docs/handlers.md).
func TestSQLEnqueueNumbersOutsideFloat64(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	conn := b.sqlConn(t)
	called := make(chan string, 2)
	w := weir.NewWorkers()
	weir.AddWorker(w, weir.WorkFunc(func(ctx context.Context, job *weir.Job[floatArgs]) error {
		called <- "float"
		return nil
	}))
	weir.AddWorker(w, weir.WorkFunc(func(ctx context.Context, job *weir.Job[numberArgs]) error {
		called <- job.Args.A.String()
		return nil
	}))
	ids := map[string]int64{}
	for _, kind := range []string{"float", "number"} {
		var id int64
		if err := conn.QueryRow(testCtx(t), "SELECT id FROM "+b.schema+
			`.weir_enqueue($1, '{"a": 1e400}', max_attempts => 2)`, kind).Scan(&id); err != nil {
			t.Fatalf("weir_enqueue of 1e400: %v", err)
		}
		ids[kind] = id
	}
	cfg := fastConfig(w, nil)
	cfg.RetryPolicy = weir.ExponentialBackoff{Base: time.Millisecond, Max: time.Millisecond}
	c := b.start(t, cfg)
	for _, id := range ids {
		waitFor(t, 20*time.Second, "the jobs to end", func() bool { return getJob(t, c, id).State.Final() })
	}
	j := getJob(t, c, ids["float"])
	if j.State != weir.JobStateDiscarded || len(j.Errors) != 2 ||
		!strings.Contains(j.Errors[1].Error, `decode args of kind "float": json: cannot unmarshal number 1`+strings.Repeat("0", 400)+` into Go struct field floatArgs.a of type float64`) {
		t.Errorf("the float64 job: %s, errors %+v", j.State, j.Errors)
	}
	if j := getJob(t, c, ids["number"]); j.State != weir.JobStateCompleted {
		t.Errorf("the json.Number job: %s, errors %+v", j.State, j.Errors)
	}
	if got := <-called; got != "1"+strings.Repeat("0", 400) {
		t.Errorf("a handler received %q, want the number's digits from the json.Number job only", got)
	}
	select {
	case got := <-called:
		t.Errorf("a handler was called again, with %q", got)
	default:
	}
}
