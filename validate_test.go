package weir_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/weirq/weir"
	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirdriver/weirsqlite"
	"github.com/weirq/weir/weirmigrate"
)

// TestInsertUnstorableInput checks that what PostgreSQL cannot store (NUL,
// invalid UTF-8, unpaired surrogates, times outside years 1..9999), what the
// stores would keep differently (a key twice), and a nil args pointer are
// refused before anything is written, alone and in a batch on the COPY path.
// SQLite could store most of them, but both stores must refuse the same inputs
// with the same words.
func TestInsertUnstorableInput(t *testing.T) {
	t.Parallel()
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		runInputCases(t, b.client, func() int { return b.count(t, "true") })
	})
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		d, err := weirsqlite.Open(filepath.Join(t.TempDir(), "jobs.db"), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		if _, err := weirmigrate.New(d).Up(testCtx(t), nil); err != nil {
			t.Fatal(err)
		}
		c, err := weir.NewClient(d, nil)
		if err != nil {
			t.Fatal(err)
		}
		runInputCases(t, c, func() int {
			jobs, err := d.Executor().JobList(testCtx(t), &weirdriver.JobListParams{Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			return len(jobs)
		})
	})
}

// TestJobListTimeBoundsOutOfRange checks that listing bounds outside the years
// 1..9999 are refused as bad input rather than sent to the database.
func TestJobListTimeBoundsOutOfRange(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, p := range []*weir.JobListParams{
		{CreatedAfter: time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC)},
		{CreatedBefore: time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		_, err := b.client.JobList(testCtx(t), p)
		if !errors.Is(err, weir.ErrInvalid) || !strings.Contains(err.Error(), "is out of range: it must fall in the years 1..9999 UTC") {
			t.Errorf("%+v: %v", p, err)
		}
	}
}

// TestHandlerErrorNotStorable checks that a handler's error holding NUL and
// invalid UTF-8 is recorded with U+FFFD in their place: the outcome write must
// not fail on it, which would leave the job running until its lease expired.
func TestHandlerErrorNotStorable(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	workers := probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
		return errors.New("bad\x00byte\xff")
	})
	c := b.start(t, fastConfig(workers, nil))
	events, stop := c.Subscribe(weir.EventJobDiscarded)
	defer stop()
	res, err := c.Insert(testCtx(t), probeArgs{Name: "nul"}, &weir.InsertOpts{MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-events:
		if ev.Job.ID != res.Job.ID {
			t.Fatalf("event for job %d, want %d", ev.Job.ID, res.Job.ID)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("job %d was never discarded: its outcome was not written", res.Job.ID)
	}
	j := b.job(t, res.Job.ID)
	if j.State != weir.JobStateDiscarded || len(j.Errors) != 1 || j.Errors[0].Error != "bad\uFFFDbyte\uFFFD" {
		t.Fatalf("job %s with errors %+v", j.State, j.Errors)
	}
}

// TestExtremeTimesReadable checks the ends of the time range through every path
// that reads a job (insert from Go and SQL, list, get, claim, cancel, delete),
// and that the table refuses times outside it, however they are written.
func TestExtremeTimesReadable(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := testCtx(t)
	first := time.Date(1, 1, 1, 0, 0, 0, 1000, time.UTC)
	last := time.Date(9999, 12, 31, 23, 59, 59, 999_999_000, time.UTC)
	early, err := b.client.Insert(ctx, probeArgs{Name: "early"}, &weir.InsertOpts{ScheduledAt: first})
	if err != nil {
		t.Fatal(err)
	}
	var late int64
	if err := b.sqlConn(t).QueryRow(ctx, "SELECT id FROM "+b.schema+".weir_enqueue('probe', scheduled_at => $1)", last).Scan(&late); err != nil {
		t.Fatal(err)
	}
	list, err := b.client.JobList(ctx, nil)
	if err != nil || len(list.Jobs) != 2 {
		t.Fatalf("list: %v, %+v", err, list)
	}
	if j := b.job(t, late); !j.ScheduledAt.Equal(last) || j.State != weir.JobStateScheduled {
		t.Fatalf("late job %s at %s", j.State, j.ScheduledAt)
	}
	claimed, _, err := b.driver.Executor().JobClaim(ctx, &weirdriver.JobClaimParams{
		Queue: weir.DefaultQueue, Max: 10, ClientID: "t", LeaseDuration: time.Minute})
	if err != nil || len(claimed) != 1 || claimed[0].ID != early.Job.ID || !claimed[0].ScheduledAt.Equal(first) {
		t.Fatalf("claim: %v, %+v", err, claimed)
	}
	if j, err := b.client.JobCancel(ctx, late); err != nil || j.State != weir.JobStateCancelled {
		t.Fatalf("cancel: %v, %+v", err, j)
	}
	if _, err := b.client.JobDelete(ctx, late); err != nil {
		t.Fatalf("delete: %v", err)
	}

	for _, set := range []string{
		"scheduled_at = 'infinity'", "scheduled_at = '-infinity'", "created_at = '10000-01-01 00:00:00+00'",
		"attempted_at = '0001-12-31 BC'", "lease_expires_at = 'infinity'", "cancel_requested_at = '-infinity'",
	} {
		_, err := b.pool.Exec(ctx, "UPDATE "+b.schema+".weir_job SET "+set+" WHERE id = $1", early.Job.ID)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "23514" {
			t.Errorf("SET %s: %v, want a check violation", set, err)
		}
	}
	_, err = b.pool.Exec(ctx, "UPDATE "+b.schema+".weir_job SET state = 'completed', lease_expires_at = NULL, finalized_at = 'infinity' WHERE id = $1", early.Job.ID)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23514" {
		t.Errorf("finalized_at infinity: %v, want a check violation", err)
	}
}

// farRetry retries after the years weir stores.
type farRetry struct{}

func (farRetry) NextRetry(*weir.JobRow) time.Time {
	return time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC)
}

// TestRetryPastYear9999 checks that a retry policy's time past the year 9999 is
// written as the last moment of that year, rather than failing the outcome write
// (and with it every outcome of its batch).
func TestRetryPastYear9999(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	workers := probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
		return errors.New("again")
	})
	cfg := fastConfig(workers, nil)
	cfg.RetryPolicy = farRetry{}
	c := b.start(t, cfg)
	events, stop := c.Subscribe(weir.EventJobFailed)
	defer stop()
	res, err := c.Insert(testCtx(t), probeArgs{Name: "far"}, &weir.InsertOpts{MaxAttempts: 2})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-events:
	case <-time.After(30 * time.Second):
		t.Fatalf("job %d never failed: its outcome was not written", res.Job.ID)
	}
	j := b.job(t, res.Job.ID)
	if want := time.Date(9999, 12, 31, 23, 59, 59, 999_999_000, time.UTC); j.State != weir.JobStateRetryable || !j.ScheduledAt.Equal(want) {
		t.Fatalf("job %s at %s, want retryable at %s", j.State, j.ScheduledAt, want)
	}
}
