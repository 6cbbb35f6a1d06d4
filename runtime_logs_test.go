package weir_test

import (
	"context"
	"errors"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirq/weir"
)

// TestFailuresAreLogged checks that a failed attempt is logged at WARN with its
// kind, job, attempt and error (and the stack of a panic), and a discarded job at
// ERROR; and that when one kind fails often, every failure is either logged or
// counted in a summary line.
func TestFailuresAreLogged(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	logs := &logRecorder{}
	cfg := fastConfig(probeWorkers(func(_ context.Context, job *weir.Job[probeArgs]) error {
		switch {
		case job.Args.Name == "panic":
			panic("handler exploded")
		case strings.HasPrefix(job.Args.Name, "many"):
			return errors.New("many fail")
		}
		return errors.New("failed on purpose: " + job.Args.Name)
	}), map[string]weir.QueueConfig{weir.DefaultQueue: {MaxWorkers: 20}})
	cfg.Logger = slog.New(logs)
	cfg.RetryPolicy = retryLater{}
	c := b.start(t, cfg)

	fail := b.insertProbe(t, "retry-me", &weir.InsertOpts{MaxAttempts: 5})
	boom := b.insertProbe(t, "panic", &weir.InsertOpts{MaxAttempts: 5})
	last := b.insertProbe(t, "last-try", &weir.InsertOpts{MaxAttempts: 1})
	waitFor(t, 30*time.Second, "the three outcomes", func() bool {
		return b.job(t, fail).State == weir.JobStateRetryable && b.job(t, boom).State == weir.JobStateRetryable &&
			b.job(t, last).State == weir.JobStateDiscarded
	})
	one := func(pattern string) string {
		t.Helper()
		re := regexp.MustCompile(pattern)
		var found []string
		for _, line := range logs.matching("") {
			if re.MatchString(line) {
				found = append(found, line)
			}
		}
		if len(found) != 1 {
			t.Fatalf("%d lines match %q, want 1; all lines:\n%s", len(found), pattern, strings.Join(logs.matching(""), "\n"))
		}
		return found[0]
	}
	id := func(n int64) string { return "job_id=" + strconv.FormatInt(n, 10) + " " }
	one(`^WARN weir: job attempt failed kind=probe ` + id(fail) + `attempt=1 max_attempts=5 error=failed on purpose: retry-me retry_at=`)
	panicLine := one(`^WARN weir: job attempt failed kind=probe ` + id(boom) + `attempt=1 max_attempts=5 error=panic: handler exploded retry_at=.* stack=`)
	if !strings.Contains(panicLine, "runtime_logs_test.go") {
		t.Errorf("the panic's stack does not show the handler: %s", panicLine)
	}
	one(`^ERROR weir: job discarded kind=probe ` + id(last) + `attempt=1 max_attempts=1 error=failed on purpose: last-try$`)

	// Many failures of one kind: each is logged or counted.
	const many = 40
	params := make([]weir.InsertManyParams, many)
	for i := range params {
		params[i] = weir.InsertManyParams{Args: probeArgs{Name: "many"}, InsertOpts: &weir.InsertOpts{MaxAttempts: 5}}
	}
	if _, err := b.client.InsertMany(testCtx(t), params); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the many failures", func() bool {
		return b.count(t, "args->>'name' = 'many' AND state = 'retryable'") == many
	})
	if err := c.Stop(testCtx(t)); err != nil { // flushes the summaries
		t.Fatal(err)
	}
	logged := len(logs.matching("error=many fail"))
	suppressed := 0
	for _, line := range logs.matching("similar lines message=weir: job attempt failed key=probe") {
		m := regexp.MustCompile(`suppressed (\d+) similar`).FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("summary line %q", line)
		}
		n, _ := strconv.Atoi(m[1])
		suppressed += n
	}
	if logged+suppressed != many || logged > many {
		t.Fatalf("%d failures logged and %d counted as suppressed, want %d in all", logged, suppressed, many)
	}
}

// retryLater retries a failed job in an hour, so that it stays retryable.
type retryLater struct{}

func (retryLater) NextRetry(*weir.JobRow) time.Time { return time.Now().Add(time.Hour) }
