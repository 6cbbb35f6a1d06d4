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
// weir enqueue in cmd/weir's TestEnqueueUnstorableInput; here are what a
// handler records, an operator's metadata, and weir_enqueue.
func TestNumbersOutsideFloat64Refused(t *testing.T) {
	t.Parallel()
	for _, st := range progressStores(t) {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			recorded := make(chan map[string]error, 1)
			w := probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
				recorded <- map[string]error{
					"output":   weir.RecordOutput(ctx, json.RawMessage(`{"sum":1e400}`)),
					"progress": weir.SetProgress(ctx, map[string]any{"rate": json.RawMessage(`-2E308`)}),
				}
				return nil
			})
			c, err := weir.NewClient(st.driver, fastConfig(w, nil))
			if err != nil {
				t.Fatal(err)
			}
			res, err := c.Insert(testCtx(t), probeArgs{Name: "huge"}, &weir.InsertOpts{ScheduledAt: time.Now().Add(time.Hour)})
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.JobUpdate(testCtx(t), res.Job.ID, &weir.JobUpdateParams{Metadata: json.RawMessage(`{"n":[1e309]}`)})
			if ie := invalidField(t, "JobUpdate", err); ie.Field != "JobUpdateParams.Metadata" ||
				!strings.Contains(ie.Message, "metadata has the number 1e309 at byte 6, outside float64's range") {
				t.Errorf("JobUpdate: %v", err)
			}
			if j := getJob(t, c, res.Job.ID); string(j.Metadata) != "{}" {
				t.Errorf("metadata after the refused update: %s", j.Metadata)
			}

			if _, err := c.JobRetry(testCtx(t), res.Job.ID); err != nil {
				t.Fatal(err)
			}
			if err := c.Start(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Stop(context.Background()) })
			errs := <-recorded
			for what, want := range map[string]string{
				"output":   "output has the number 1e400 at byte 7, outside float64's range",
				"progress": "progress has the number -2E308 at byte 8, outside float64's range",
			} {
				if ie := invalidField(t, what, errs[what]); !strings.Contains(ie.Message, want) {
					t.Errorf("%s: %v, want %q", what, errs[what], want)
				}
			}
			waitFor(t, 20*time.Second, "the job to end", func() bool { return getJob(t, c, res.Job.ID).State.Final() })
			if j := getJob(t, c, res.Job.ID); j.State != weir.JobStateCompleted || j.Output != nil {
				t.Errorf("state %s output %s, want completed without output", j.State, j.Output)
			}
		})
	}
}
