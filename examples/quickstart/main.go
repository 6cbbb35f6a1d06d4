// Command quickstart shows weir end to end on PostgreSQL: it migrates a schema,
// enqueues jobs alone, in a transaction, in bulk and uniquely, lists them as an
// operator would, then starts a client that works them and stops it gracefully.
// The database comes from WEIR_DATABASE_URL (default: the local server), the
// schema is weir_quickstart.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirq/weir"
	"github.com/weirq/weir/weirdriver/weirpgx"
	"github.com/weirq/weir/weirmigrate"
)

// SendEmail is a job's arguments: Kind names the job type, the fields are its JSON.
type SendEmail struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

func (SendEmail) Kind() string { return "email.send" }

// ResizeImage carries its own insert defaults.
type ResizeImage struct {
	Path  string `json:"path"`
	Width int    `json:"width"`
}

func (ResizeImage) Kind() string { return "image.resize" }

func (ResizeImage) InsertOpts() weir.InsertOpts {
	return weir.InsertOpts{Queue: "media", Priority: 3}
}

func main() {
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	url := os.Getenv("WEIR_DATABASE_URL")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()

	driver, err := weirpgx.New(pool, &weirpgx.Config{Schema: "weir_quickstart"})
	if err != nil {
		return err
	}
	// Start from an empty schema each run: revert every migration, dropping the
	// previous run's jobs (Force, since Down refuses to drop jobs, schedules
	// or queue settings otherwise),
	// then apply them.
	migrator := weirmigrate.New(driver)
	if _, err := migrator.Down(ctx, &weirmigrate.DownOpts{All: true, Force: true}); err != nil {
		return err
	}
	applied, err := migrator.Up(ctx, nil)
	if err != nil {
		return err
	}
	fmt.Printf("migrated schema weir_quickstart: %v\n", applied)

	client, err := weir.NewClient(driver, nil)
	if err != nil {
		return err
	}

	// One job, in its own transaction.
	res, err := client.Insert(ctx, SendEmail{To: "ada@example.com", Subject: "welcome"}, nil)
	if err != nil {
		return err
	}
	fmt.Printf("inserted job %d (%s) in queue %s\n", res.Job.ID, res.Job.Kind, res.Job.Queue)

	// A job in the caller's transaction: it exists, and wakes workers, only if
	// the transaction commits.
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	res, err = client.InsertTx(ctx, tx, ResizeImage{Path: "/img/1.png", Width: 640}, nil)
	if err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	fmt.Printf("inserted job %d (%s) in queue %s with the transaction\n", res.Job.ID, res.Job.Kind, res.Job.Queue)

	// Many jobs at once; large batches go through COPY.
	batch := make([]weir.InsertManyParams, 1000)
	for i := range batch {
		batch[i] = weir.InsertManyParams{Args: ResizeImage{Path: fmt.Sprintf("/img/%d.png", i), Width: 320}}
	}
	many, err := client.InsertMany(ctx, batch)
	if err != nil {
		return err
	}
	fmt.Printf("inserted %d jobs in bulk (ids %d..%d)\n", len(many), many[0].Job.ID, many[len(many)-1].Job.ID)

	// A unique job: the second insert finds the first.
	unique := &weir.InsertOpts{Unique: weir.UniqueOpts{ByArgs: true, ByPeriod: time.Hour}}
	first, err := client.Insert(ctx, SendEmail{To: "ada@example.com", Subject: "digest"}, unique)
	if err != nil {
		return err
	}
	second, err := client.Insert(ctx, SendEmail{To: "ada@example.com", Subject: "digest"}, unique)
	if err != nil {
		return err
	}
	fmt.Printf("unique insert: first %d, second duplicate=%v of %d\n", first.Job.ID, second.Duplicate, second.Job.ID)

	// A job for tomorrow, then cancelled by an operator.
	later, err := client.Insert(ctx, SendEmail{To: "bob@example.com"}, &weir.InsertOpts{ScheduledAt: time.Now().Add(24 * time.Hour)})
	if err != nil {
		return err
	}
	cancelled, err := client.JobCancel(ctx, later.Job.ID)
	if err != nil {
		return err
	}
	fmt.Printf("job %d was %s, now %s\n", later.Job.ID, later.Job.State, cancelled.State)

	queues, err := client.QueueList(ctx)
	if err != nil {
		return err
	}
	fmt.Println("\nqueue      scheduled  available  cancelled")
	for _, q := range queues {
		fmt.Printf("%-10s %9d  %9d  %9d\n", q.Name, q.Counts[weir.JobStateScheduled],
			q.Counts[weir.JobStateAvailable], q.Counts[weir.JobStateCancelled])
	}
	page, err := client.JobList(ctx, &weir.JobListParams{Queues: []string{"default"}, Limit: 5})
	if err != nil {
		return err
	}
	fmt.Println("\njobs in queue default:")
	for _, j := range page.Jobs {
		fmt.Printf("  %d %-12s %-9s %s\n", j.ID, j.Kind, j.State, j.Args)
	}
	return work(ctx, driver)
}

// work starts a client with a worker per kind, waits until every due job has
// ended, and stops the client.
func work(ctx context.Context, driver *weirpgx.Driver) error {
	var sent, resized, failedOnce atomic.Int64
	workers := weir.NewWorkers()
	weir.AddWorker(workers, weir.WorkFunc(func(ctx context.Context, job *weir.Job[SendEmail]) error {
		sent.Add(1)
		return nil
	}))
	weir.AddWorker(workers, weir.WorkFunc(func(ctx context.Context, job *weir.Job[ResizeImage]) error {
		// One image fails its first attempt and succeeds on the retry.
		if job.Args.Path == "/img/7.png" && failedOnce.CompareAndSwap(0, 1) {
			return errors.New("transient: image store busy")
		}
		resized.Add(1)
		return nil
	}))
	client, err := weir.NewClient(driver, &weir.Config{
		Workers: workers,
		Queues: map[string]weir.QueueConfig{
			weir.DefaultQueue: {MaxWorkers: 10},
			"media":           {MaxWorkers: 50},
		},
		RetryPolicy: weir.ExponentialBackoff{Base: 100 * time.Millisecond},
	})
	if err != nil {
		return err
	}
	done, unsubscribe := client.Subscribe(weir.EventJobCompleted)
	defer unsubscribe()
	if err := client.Start(ctx); err != nil {
		return err
	}
	// Due jobs: two emails, 1,001 images. The cancelled one never runs.
	const due = 2 + 1001
	for completed := 0; completed < due; completed++ {
		select {
		case <-done:
		case <-ctx.Done():
			return fmt.Errorf("worked %d of %d jobs: %w", completed, due, ctx.Err())
		}
	}
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil {
		return err
	}
	fmt.Printf("\nworked: %d emails sent, %d images resized (one after a retry); stopped cleanly\n",
		sent.Load(), resized.Load())
	return nil
}
