package weir_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirq/weir"
	"github.com/weirq/weir/weirdriver"
)

// progressStore is a migrated store for the tests that run on both, with a
// way to move a job's lease token as if another worker had taken the job.
type progressStore struct {
	name   string
	driver weirdriver.Driver
	// bumpToken adds one to job id's lease token.
	bumpToken func(t testing.TB, id int64)
}

// progressStores returns a fresh PostgreSQL schema and a fresh SQLite file.
func progressStores(t *testing.T) []progressStore {
	t.Helper()
	b := setup(t, nil)
	sq := sqliteStore(t)
	return []progressStore{
		{"postgres", b.driver, func(t testing.TB, id int64) {
			if _, err := b.pool.Exec(testCtx(t), "UPDATE "+b.schema+".weir_job SET lease_token = lease_token + 1 WHERE id = $1", id); err != nil {
				t.Fatal(err)
			}
		}},
		{"sqlite", sq, func(t testing.TB, id int64) {
			if _, err := sq.DB().ExecContext(testCtx(t), "UPDATE weir_job SET lease_token = lease_token + 1 WHERE id = ?", id); err != nil {
				t.Fatal(err)
			}
		}},
	}
}

// renewSpy is a driver whose executor keeps the progress every renewal
// carried: SetProgress must reach the database only through them.
type renewSpy struct {
	weirdriver.Driver
	// before, if set, sees each renewal's params before the statement runs.
	before   func(p *weirdriver.JobRenewParams)
	mu       sync.Mutex
	renewals int                         // renewal statements
	carried  map[int64][]json.RawMessage // per job, the progress renewals carried
}

func newRenewSpy(d weirdriver.Driver) *renewSpy {
	return &renewSpy{Driver: d, carried: map[int64][]json.RawMessage{}}
}

func (s *renewSpy) Executor() weirdriver.Executor { return &spyExecutor{s.Driver.Executor(), s} }

func (s *renewSpy) counts(id int64) (renewals int, carried []json.RawMessage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.renewals, append([]json.RawMessage(nil), s.carried[id]...)
}

type spyExecutor struct {
	weirdriver.Executor
	spy *renewSpy
}

func (e *spyExecutor) JobRenew(ctx context.Context, p *weirdriver.JobRenewParams) (*weirdriver.JobRenewResult, error) {
	e.spy.mu.Lock()
	e.spy.renewals++
	for i, v := range p.Progress {
		if v != nil {
			e.spy.carried[p.IDs[i]] = append(e.spy.carried[p.IDs[i]], v)
		}
	}
	e.spy.mu.Unlock()
	if e.spy.before != nil {
		e.spy.before(p)
	}
	return e.Executor.JobRenew(ctx, p)
}

// getJob reads job id through c.
func getJob(t testing.TB, c *weir.Client, id int64) *weir.JobRow {
	t.Helper()
	j, err := c.JobGet(testCtx(t), id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// sameJSON reports whether got holds the JSON value want ("" for none).
// PostgreSQL's jsonb respaces JSON, so values are compared, not bytes.
func sameJSON(got json.RawMessage, want string) bool {
	if got == nil || want == "" {
		return got == nil && want == ""
	}
	var g, w any
	if json.Unmarshal(got, &g) != nil || json.Unmarshal([]byte(want), &w) != nil {
		return false
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	return string(gb) == string(wb)
}

// invalidField returns the Field of err, an *InvalidError, or fails.
func invalidField(t testing.TB, what string, err error) *weir.InvalidError {
	t.Helper()
	var ie *weir.InvalidError
	if !errors.As(err, &ie) {
		t.Fatalf("%s: %v, want an *InvalidError", what, err)
	}
	return ie
}

// TestRecordOutput, on both stores: the output a handler records is stored
// with its job's completion (the last value recorded wins), not with a
// failure; an output over Config.MaxArgsBytes is refused and records
// nothing; RecordOutput and SetProgress outside a handler, or after it
// returned, are refused. Jobs that record output and complete together, once
// every other job has ended, keep their outputs: their batches hold plain
// completions only, which PostgreSQL's driver writes with a statement of
// their own (the common path), where the first jobs' mix of outcomes takes
// the general one.
func TestRecordOutput(t *testing.T) {
	t.Parallel()
	for _, st := range progressStores(t) {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			leaked := make(chan context.Context, 1)
			bigErr := make(chan error, 1)
			badErrs := make(chan map[string]error, 1)
			const together = 4
			batchedStarted, releaseBatched := make(chan struct{}, together), make(chan struct{})
			w := probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
				switch job.Args.Name {
				case "batched":
					if err := weir.RecordOutput(ctx, map[string]int64{"job": job.ID}); err != nil {
						return err
					}
					batchedStarted <- struct{}{}
					select { // all return at once, their completions queued together
					case <-releaseBatched:
					case <-ctx.Done():
					}
					return nil
				case "twice":
					if err := weir.RecordOutput(ctx, map[string]int{"n": 1}); err != nil {
						return err
					}
					return weir.RecordOutput(ctx, map[string]any{"n": 2, "note": "<b>"})
				case "fail":
					if err := weir.RecordOutput(ctx, "partial"); err != nil {
						return err
					}
					return errors.New("failed after recording output")
				case "big":
					err := weir.RecordOutput(ctx, strings.Repeat("x", 2000))
					bigErr <- err
					if err == nil {
						return errors.New("an output over the limit was taken")
					}
					return nil
				case "leak":
					leaked <- ctx
					return nil
				case "bad":
					// Each refused, recording nothing: the job completes
					// without output or progress.
					badErrs <- map[string]error{
						"output not JSON":      weir.RecordOutput(ctx, make(chan int)),
						"progress not JSON":    weir.SetProgress(ctx, func() {}),
						"output with NUL":      weir.RecordOutput(ctx, "a\x00b"),
						"progress bad UTF-8":   weir.SetProgress(ctx, "a\xffb"),
						"progress key twice":   weir.SetProgress(ctx, json.RawMessage(`{"a":1,"a":2}`)),
						"progress over limit":  weir.SetProgress(ctx, strings.Repeat("y", 1023)),
						"output invalid bytes": weir.RecordOutput(ctx, json.RawMessage(`{"a":`)),
					}
					return nil
				}
				return errors.New("unknown probe")
			})
			cfg := fastConfig(w, nil)
			cfg.MaxArgsBytes = 1024
			c, err := weir.NewClient(st.driver, cfg)
			if err != nil {
				t.Fatal(err)
			}
			ids := map[string]int64{}
			for _, name := range []string{"twice", "fail", "big", "leak", "bad"} {
				res, err := c.Insert(testCtx(t), probeArgs{Name: name}, &weir.InsertOpts{MaxAttempts: 1})
				if err != nil {
					t.Fatal(err)
				}
				ids[name] = res.Job.ID
			}
			if err := c.Start(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Stop(context.Background()) })
			for name, id := range ids {
				waitFor(t, 20*time.Second, name+" to end", func() bool { return getJob(t, c, id).State.Final() })
			}

			if j := getJob(t, c, ids["twice"]); j.State != weir.JobStateCompleted || !sameJSON(j.Output, `{"n":2,"note":"<b>"}`) {
				t.Errorf("twice: state %s output %s, want completed with the last output", j.State, j.Output)
			}
			if j := getJob(t, c, ids["fail"]); j.State != weir.JobStateDiscarded || j.Output != nil {
				t.Errorf("fail: state %s output %s, want discarded without output", j.State, j.Output)
			}
			ie := invalidField(t, "an output over the limit", <-bigErr)
			if ie.Field != "v" || !strings.Contains(ie.Message, "2002 bytes") || !strings.Contains(ie.Message, "1024") {
				t.Errorf("an output over the limit: field %q message %q, want v, naming 2002 bytes and the limit 1024", ie.Field, ie.Message)
			}
			for what, err := range <-badErrs {
				if ie := invalidField(t, what, err); ie.Field != "v" {
					t.Errorf("%s: field %q message %q, want v", what, ie.Field, ie.Message)
				}
			}
			if j := getJob(t, c, ids["bad"]); j.State != weir.JobStateCompleted || j.Output != nil || j.Progress != nil {
				t.Errorf("bad: state %s output %s progress %s, want completed with neither", j.State, j.Output, j.Progress)
			}
			if j := getJob(t, c, ids["big"]); j.State != weir.JobStateCompleted || j.Output != nil {
				t.Errorf("big: state %s output %s, want completed without output", j.State, j.Output)
			}

			leakedCtx := <-leaked
			for name, call := range map[string]func(context.Context) error{
				"RecordOutput": func(ctx context.Context) error { return weir.RecordOutput(ctx, 1) },
				"SetProgress":  func(ctx context.Context) error { return weir.SetProgress(ctx, 1) },
			} {
				if ie := invalidField(t, name+" outside a handler", call(testCtx(t))); ie.Field != "ctx" || !strings.Contains(ie.Message, "outside a handler") {
					t.Errorf("%s outside a handler: field %q message %q", name, ie.Field, ie.Message)
				}
				if ie := invalidField(t, name+" after the handler returned", call(leakedCtx)); ie.Field != "ctx" || !strings.Contains(ie.Message, "returned") {
					t.Errorf("%s after the handler returned: field %q message %q", name, ie.Field, ie.Message)
				}
			}
			if j := getJob(t, c, ids["leak"]); j.Output != nil || j.Progress != nil {
				t.Errorf("leak: output %s progress %s after calls once its handler returned, want none", j.Output, j.Progress)
			}

			// Every job above has ended, so these jobs' batches hold their
			// plain completions only.
			params := make([]weir.InsertManyParams, together)
			for i := range params {
				params[i] = weir.InsertManyParams{Args: probeArgs{Name: "batched"}, InsertOpts: &weir.InsertOpts{MaxAttempts: 1}}
			}
			batched, err := c.InsertMany(testCtx(t), params)
			if err != nil {
				t.Fatal(err)
			}
			for range together {
				select {
				case <-batchedStarted:
				case <-time.After(30 * time.Second):
					t.Fatal("the batched jobs' handlers did not all start")
				}
			}
			close(releaseBatched)
			for _, res := range batched {
				id := res.Job.ID
				waitFor(t, 20*time.Second, "a batched job to end", func() bool { return getJob(t, c, id).State.Final() })
				if j := getJob(t, c, id); j.State != weir.JobStateCompleted || !sameJSON(j.Output, `{"job":`+itoa(id)+`}`) {
					t.Errorf("batched job %d: state %s output %s, want completed with its own output", id, j.State, j.Output)
				}
			}
		})
	}
}

// progressOf reads job id's progress through c from a handler, where a
// failed read must not end the test: it reads as none.
func progressOf(c *weir.Client, id int64) json.RawMessage {
	j, err := c.JobGet(context.Background(), id)
	if err != nil {
		return nil
	}
	return j.Progress
}

// TestRecordOutputJobCompleteTx: the output a handler records before
// JobCompleteTx commits with the completion in its transaction; one recorded
// after is refused; a rolled back transaction stores nothing and leaves the
// output to the client's own completion.
func TestRecordOutputJobCompleteTx(t *testing.T) {
	t.Parallel()
	for _, kind := range txKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			table := b.ledger(t)
			after := make(chan error, 1)
			w := probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
				if err := weir.RecordOutput(ctx, map[string]string{"tx": job.Args.Name}); err != nil {
					return err
				}
				if err := weir.SetProgress(ctx, map[string]string{"step": "in tx"}); err != nil {
					return err
				}
				commit := job.Args.Name == "commit"
				if err := b.completeInTx(ctx, kind, table, job.JobRow, commit); err != nil {
					return err
				}
				if commit {
					after <- weir.RecordOutput(ctx, "too late")
				}
				return nil
			})
			commit := b.insertProbe(t, "commit", &weir.InsertOpts{MaxAttempts: 1})
			rollback := b.insertProbe(t, "rollback", &weir.InsertOpts{MaxAttempts: 1})
			c := b.start(t, fastConfig(w, nil))
			for _, id := range []int64{commit, rollback} {
				waitFor(t, 20*time.Second, "the jobs to complete", func() bool { return getJob(t, c, id).State == weir.JobStateCompleted })
			}
			if ie := invalidField(t, "RecordOutput after JobCompleteTx", <-after); ie.Field != "ctx" || !strings.Contains(ie.Message, "JobCompleteTx") {
				t.Errorf("RecordOutput after JobCompleteTx: field %q message %q", ie.Field, ie.Message)
			}
			for id, want := range map[int64]string{commit: `{"tx":"commit"}`, rollback: `{"tx":"rollback"}`} {
				j := getJob(t, c, id)
				if !sameJSON(j.Output, want) || !sameJSON(j.Progress, `{"step":"in tx"}`) {
					t.Errorf("job %d: output %s progress %s, want %s and the progress", id, j.Output, j.Progress, want)
				}
			}
			// The committed completion was written in the handler's
			// transaction: the client's own write found the job ended.
			if n := len(b.ledgerTokens(t, table, commit)); n != 1 {
				t.Errorf("ledger rows of the committed job: %d", n)
			}
		})
	}
}

// TestProgressRenewedAndHanded, on both stores: progress a handler records is
// written by the lease renewals, never by a statement of its own (many
// SetProgress calls, few renewals, each carrying the latest value), and the
// next attempt after a failure sees it as Job.Progress. A completion keeps it.
func TestProgressRenewedAndHanded(t *testing.T) {
	t.Parallel()
	for _, st := range progressStores(t) {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			spy := newRenewSpy(st.driver)
			var client *weir.Client
			seen := make(chan json.RawMessage, 2)
			const calls = 200
			w := probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
				seen <- job.Progress
				if job.Attempt > 1 {
					return nil
				}
				for i := 1; i <= calls; i++ {
					if err := weir.SetProgress(ctx, map[string]int{"done": i}); err != nil {
						return err
					}
				}
				// Wait for a renewal to write it; a failure then hands it on.
				for !sameJSON(progressOf(client, job.ID), `{"done":200}`) {
					select {
					case <-ctx.Done():
						return context.Cause(ctx)
					case <-time.After(10 * time.Millisecond):
					}
				}
				return errors.New("fail after progress")
			})
			cfg := fastConfig(w, nil)
			cfg.RetryPolicy = weir.ExponentialBackoff{Base: time.Millisecond, Max: time.Millisecond}
			c, err := weir.NewClient(spy, cfg)
			if err != nil {
				t.Fatal(err)
			}
			client = c
			res, err := c.Insert(testCtx(t), probeArgs{Name: "p"}, &weir.InsertOpts{MaxAttempts: 2})
			if err != nil {
				t.Fatal(err)
			}
			id := res.Job.ID
			if err := c.Start(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Stop(context.Background()) })
			waitFor(t, 30*time.Second, "the job to complete", func() bool { return getJob(t, c, id).State == weir.JobStateCompleted })

			if first := <-seen; first != nil {
				t.Errorf("first attempt saw progress %s, want none", first)
			}
			if second := <-seen; !sameJSON(second, `{"done":200}`) {
				t.Errorf("second attempt saw progress %s, want the first attempt's last", second)
			}
			_, carried := spy.counts(id)
			if len(carried) == 0 || len(carried) >= calls || !sameJSON(carried[len(carried)-1], `{"done":200}`) {
				t.Errorf("renewals carried %d progress values (last %s) for %d SetProgress calls; want a few, the last the latest",
					len(carried), lastOf(carried), calls)
			}
			if j := getJob(t, c, id); !sameJSON(j.Progress, `{"done":200}`) {
				t.Errorf("completed job's progress %s, want kept", j.Progress)
			}
		})
	}
}

func lastOf(v []json.RawMessage) json.RawMessage {
	if len(v) == 0 {
		return nil
	}
	return v[len(v)-1]
}

// TestProgressWithOutcome, on both stores: progress recorded just before the
// handler returns, which no renewal carried, is written by the outcome: a
// snooze hands it to the next attempt, and a release at shutdown too.
func TestProgressWithOutcome(t *testing.T) {
	t.Parallel()
	for _, st := range progressStores(t) {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			seen := make(chan json.RawMessage, 4)
			started := make(chan struct{}, 1)
			w := probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
				seen <- job.Progress
				switch {
				case job.Args.Name == "snooze" && job.Progress == nil:
					if err := weir.SetProgress(ctx, "before snooze"); err != nil {
						return err
					}
					return weir.JobSnooze(0)
				case job.Args.Name == "release":
					if err := weir.SetProgress(ctx, "before release"); err != nil {
						return err
					}
					started <- struct{}{}
					<-ctx.Done()
					return context.Cause(ctx)
				}
				return nil
			})
			cfg := fastConfig(w, nil)
			cfg.HeartbeatInterval = 20 * time.Minute // no renewal carries it
			cfg.LeaseDuration = time.Hour
			c, err := weir.NewClient(st.driver, cfg)
			if err != nil {
				t.Fatal(err)
			}
			snooze, err := c.Insert(testCtx(t), probeArgs{Name: "snooze"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Start(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 20*time.Second, "the snoozed job to complete", func() bool {
				return getJob(t, c, snooze.Job.ID).State == weir.JobStateCompleted
			})
			if first, second := <-seen, <-seen; first != nil || !sameJSON(second, `"before snooze"`) {
				t.Errorf("snoozed job: attempts saw progress %s then %s, want none then the first's", first, second)
			}
			release, err := c.Insert(testCtx(t), probeArgs{Name: "release"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			<-seen
			select {
			case <-started:
			case <-time.After(20 * time.Second):
				t.Fatal("the release job did not start")
			}
			if err := c.StopAndCancel(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			j := getJob(t, c, release.Job.ID)
			if j.State != weir.JobStateAvailable || j.ReleaseCount != 1 || !sameJSON(j.Progress, `"before release"`) {
				t.Errorf("released job: state %s released %d progress %s, want available, 1, the progress", j.State, j.ReleaseCount, j.Progress)
			}
		})
	}
}

// TestProgressFenced, on both stores: once the job's lease token moved (as if
// it had been rescued and claimed again elsewhere), neither the old lease's
// renewal nor its outcome writes progress. The token moves just before the
// renewal that carries the new progress runs, so that renewal is the stale
// one.
func TestProgressFenced(t *testing.T) {
	t.Parallel()
	for _, st := range progressStores(t) {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			spy := newRenewSpy(st.driver)
			var client *weir.Client
			moved := make(chan struct{})
			spy.before = func(p *weirdriver.JobRenewParams) {
				for i, v := range p.Progress {
					if sameJSON(v, `"stale"`) {
						select {
						case <-moved:
						default:
							st.bumpToken(t, p.IDs[i])
							close(moved)
						}
					}
				}
			}
			w := probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
				if err := weir.SetProgress(ctx, "mine"); err != nil {
					return err
				}
				for !sameJSON(progressOf(client, job.ID), `"mine"`) {
					select {
					case <-ctx.Done():
						return context.Cause(ctx)
					case <-time.After(10 * time.Millisecond):
					}
				}
				if err := weir.SetProgress(ctx, "stale"); err != nil {
					return err
				}
				// The next renewal carries it, under the moved token: it
				// finds the lease gone and cancels the handler, whose
				// outcome then carries the progress recorded since.
				<-ctx.Done()
				return weir.SetProgress(context.WithoutCancel(ctx), "after") // the handler still runs: taken
			})
			c, err := weir.NewClient(spy, fastConfig(w, nil))
			if err != nil {
				t.Fatal(err)
			}
			client = c
			res, err := c.Insert(testCtx(t), probeArgs{Name: "f"}, &weir.InsertOpts{MaxAttempts: 1})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Start(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Stop(context.Background()) })
			<-moved
			waitFor(t, 20*time.Second, "the lease to be found lost and the outcome found stale", func() bool {
				s := c.Stats()
				return s.LeasesLost == 1 && s.StaleWrites == 1
			})
			_, carried := spy.counts(res.Job.ID)
			if !sameJSON(lastOf(carried), `"stale"`) {
				t.Errorf("renewals carried %s; want the stale value sent under the old lease", carried)
			}
			// Rescue may have discarded the job since (its one attempt spent); it
			// keeps the progress.
			if j := getJob(t, c, res.Job.ID); !sameJSON(j.Progress, `"mine"`) {
				t.Errorf("job: state %s progress %s, want the progress written under its lease", j.State, j.Progress)
			}
		})
	}
}
