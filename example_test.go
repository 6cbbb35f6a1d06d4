package weir_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/weirq/weir"
	"github.com/weirq/weir/weirdriver/weirsqlite"
	"github.com/weirq/weir/weirmigrate"
)

// The examples keep their jobs in a SQLite file, so that they run anywhere; on
// PostgreSQL only the driver changes: weirpgx.New(pool, nil).

// SendWelcome is a job's arguments: Kind names the job type, the fields are its JSON.
type SendWelcome struct {
	To string `json:"to"`
}

func (SendWelcome) Kind() string { return "welcome.send" }

// exampleStore opens a migrated SQLite store in a fresh directory and returns the
// driver and a function that closes it and removes the directory.
func exampleStore() (*weirsqlite.Driver, func()) {
	dir, err := os.MkdirTemp("", "weir-example-")
	if err != nil {
		log.Fatal(err)
	}
	driver, err := weirsqlite.Open(filepath.Join(dir, "jobs.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := weirmigrate.New(driver).Up(context.Background(), nil); err != nil {
		log.Fatal(err)
	}
	return driver, func() {
		driver.Close()
		os.RemoveAll(dir)
	}
}

func ExampleClient_Insert() {
	ctx := context.Background()
	driver, done := exampleStore()
	defer done()

	client, err := weir.NewClient(driver, nil)
	if err != nil {
		log.Fatal(err)
	}
	res, err := client.Insert(ctx, SendWelcome{To: "ada@example.com"}, &weir.InsertOpts{
		Queue:    "mail",
		Priority: 1,
		Tags:     []string{"signup"},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Job.Kind, res.Job.Queue, res.Job.State, string(res.Job.Args))
	// Output: welcome.send mail available {"to":"ada@example.com"}
}

func ExampleClient_InsertSQLTx() {
	ctx := context.Background()
	driver, done := exampleStore()
	defer done()
	client, err := weir.NewClient(driver, nil)
	if err != nil {
		log.Fatal(err)
	}

	// The job commits, or rolls back, with the rest of the transaction: here it
	// rolls back, so no job exists afterwards.
	tx, err := driver.DB().BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := client.InsertSQLTx(ctx, tx, SendWelcome{To: "bob@example.com"}, nil); err != nil {
		log.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		log.Fatal(err)
	}
	page, err := client.JobList(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("jobs after the rollback:", len(page.Jobs))
	// Output: jobs after the rollback: 0
}

func ExampleAddWorker() {
	ctx := context.Background()
	driver, done := exampleStore()
	defer done()

	workers := weir.NewWorkers()
	weir.AddWorker(workers, weir.WorkFunc(func(ctx context.Context, job *weir.Job[SendWelcome]) error {
		fmt.Println("welcome sent to", job.Args.To)
		return nil // nil completes the job; an error retries it with backoff
	}))
	client, err := weir.NewClient(driver, &weir.Config{
		Workers: workers,
		Queues:  map[string]weir.QueueConfig{weir.DefaultQueue: {MaxWorkers: 10}},
	})
	if err != nil {
		log.Fatal(err)
	}
	completed, unsubscribe := client.Subscribe(weir.EventJobCompleted)
	defer unsubscribe()
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := client.Insert(ctx, SendWelcome{To: "ada@example.com"}, nil); err != nil {
		log.Fatal(err)
	}
	<-completed

	// On shutdown, the deadline is the whole budget of the graceful stop.
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil {
		log.Fatal(err)
	}
	// Output: welcome sent to ada@example.com
}

func ExampleClient_Queues() {
	ctx := context.Background()
	driver, done := exampleStore()
	defer done()

	workers := weir.NewWorkers()
	weir.AddWorker(workers, weir.WorkFunc(func(ctx context.Context, job *weir.Job[SendWelcome]) error {
		fmt.Println("sent to", job.Args.To, "from queue", job.Queue)
		return nil
	}))
	client, err := weir.NewClient(driver, &weir.Config{
		Workers: workers,
		Queues:  map[string]weir.QueueConfig{weir.DefaultQueue: {MaxWorkers: 10}},
	})
	if err != nil {
		log.Fatal(err)
	}
	completed, unsubscribe := client.Subscribe(weir.EventJobCompleted)
	defer unsubscribe()
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}

	// A queue added to a running client claims at once.
	queues := client.Queues()
	if err := queues.Add(ctx, "bulk", weir.QueueConfig{MaxWorkers: 2}); err != nil {
		log.Fatal(err)
	}
	if _, err := client.Insert(ctx, SendWelcome{To: "ada@example.com"}, &weir.InsertOpts{Queue: "bulk"}); err != nil {
		log.Fatal(err)
	}
	<-completed
	if err := queues.Update(ctx, "bulk", weir.QueueConfig{MaxWorkers: 8}); err != nil {
		log.Fatal(err)
	}
	fmt.Println("bulk runs", queues.List()["bulk"].MaxWorkers, "at once")
	// Remove waits, within its context, for the queue's running handlers.
	removeCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := queues.Remove(removeCtx, "bulk"); err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(queues.List()), "queue left")

	if err := client.Stop(removeCtx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// sent to ada@example.com from queue bulk
	// bulk runs 8 at once
	// 1 queue left
}

func ExampleClient_JobCancel() {
	ctx := context.Background()
	driver, done := exampleStore()
	defer done()
	client, err := weir.NewClient(driver, nil)
	if err != nil {
		log.Fatal(err)
	}

	res, err := client.Insert(ctx, SendWelcome{To: "eve@example.com"}, &weir.InsertOpts{
		ScheduledAt: time.Now().Add(time.Hour),
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("inserted:", res.Job.State)
	job, err := client.JobCancel(ctx, res.Job.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("cancelled:", job.State)
	job, err = client.JobRetry(ctx, job.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("retried:", job.State)
	// Output:
	// inserted: scheduled
	// cancelled: cancelled
	// retried: available
}

func ExampleClient_QueueList() {
	ctx := context.Background()
	driver, done := exampleStore()
	defer done()
	client, err := weir.NewClient(driver, nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, queue := range []string{"mail", "mail", "media"} {
		if _, err := client.Insert(ctx, SendWelcome{To: "ada@example.com"}, &weir.InsertOpts{Queue: queue}); err != nil {
			log.Fatal(err)
		}
	}
	queues, err := client.QueueList(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, q := range queues {
		fmt.Println(q.Name, q.Counts[weir.JobStateAvailable])
	}
	// Output:
	// mail 2
	// media 1
}

func ExampleWorkerMiddleware() {
	ctx := context.Background()
	driver, done := exampleStore()
	defer done()

	// A middleware that runs around every attempt, as HTTP middleware runs
	// around a handler.
	logAttempts := func(next weir.WorkHandler) weir.WorkHandler {
		return func(ctx context.Context, job *weir.JobRow) error {
			fmt.Println("starting", job.Kind, "attempt", job.Attempt)
			err := next(ctx, job)
			fmt.Println("finished", job.Kind, "error:", err)
			return err
		}
	}
	workers := weir.NewWorkers()
	weir.AddWorker(workers, weir.WorkFunc(func(ctx context.Context, job *weir.Job[SendWelcome]) error {
		fmt.Println("welcome sent to", job.Args.To)
		return nil
	}))
	client, err := weir.NewClient(driver, &weir.Config{
		Workers:          workers,
		Queues:           map[string]weir.QueueConfig{weir.DefaultQueue: {MaxWorkers: 10}},
		WorkerMiddleware: []weir.WorkerMiddleware{logAttempts},
	})
	if err != nil {
		log.Fatal(err)
	}
	completed, unsubscribe := client.Subscribe(weir.EventJobCompleted)
	defer unsubscribe()
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := client.Insert(ctx, SendWelcome{To: "ada@example.com"}, nil); err != nil {
		log.Fatal(err)
	}
	<-completed
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// starting welcome.send attempt 1
	// welcome sent to ada@example.com
	// finished welcome.send error: <nil>
}

func ExampleInsertMiddleware() {
	ctx := context.Background()
	driver, done := exampleStore()
	defer done()

	// A middleware that puts the tenant in every job's metadata; the client
	// checks every job again after it.
	stampTenant := func(next weir.InsertHandler) weir.InsertHandler {
		return func(ctx context.Context, jobs []*weir.InsertParams) ([]*weir.InsertResult, error) {
			for _, job := range jobs {
				job.Metadata = json.RawMessage(`{"tenant":"acme"}`)
			}
			return next(ctx, jobs)
		}
	}
	client, err := weir.NewClient(driver, &weir.Config{InsertMiddleware: []weir.InsertMiddleware{stampTenant}})
	if err != nil {
		log.Fatal(err)
	}
	res, err := client.Insert(ctx, SendWelcome{To: "ada@example.com"}, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(res.Job.Metadata))
	// Output: {"tenant":"acme"}
}

func ExampleJobCompleteSQLTx() {
	ctx := context.Background()
	driver, done := exampleStore()
	defer done()
	db := driver.DB()
	if _, err := db.ExecContext(ctx, `CREATE TABLE welcomes (address TEXT PRIMARY KEY)`); err != nil {
		log.Fatal(err)
	}

	// The handler records the welcome and completes its job in one
	// transaction: both commit, or neither does.
	workers := weir.NewWorkers()
	weir.AddWorker(workers, weir.WorkFunc(func(ctx context.Context, job *weir.Job[SendWelcome]) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() //nolint:errcheck // a no-op after Commit
		if _, err := tx.ExecContext(ctx, `INSERT INTO welcomes (address) VALUES (?)`, job.Args.To); err != nil {
			return err
		}
		if err := weir.JobCompleteSQLTx(ctx, tx, job.JobRow); err != nil {
			return err // ErrLeaseLost: the job was taken back; the insert rolls back
		}
		return tx.Commit()
	}))
	client, err := weir.NewClient(driver, &weir.Config{
		Workers: workers,
		Queues:  map[string]weir.QueueConfig{weir.DefaultQueue: {MaxWorkers: 1}},
	})
	if err != nil {
		log.Fatal(err)
	}
	completed, unsubscribe := client.Subscribe(weir.EventJobCompleted)
	defer unsubscribe()
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := client.Insert(ctx, SendWelcome{To: "ada@example.com"}, nil); err != nil {
		log.Fatal(err)
	}
	<-completed
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil {
		log.Fatal(err)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM welcomes`).Scan(&n); err != nil {
		log.Fatal(err)
	}
	fmt.Println("welcomes recorded:", n, "stale writes:", client.Stats().StaleWrites)
	// Output: welcomes recorded: 1 stale writes: 0
}

// SyncAccount is unique by its account alone: the tagged field is the key, the
// reason is not.
type SyncAccount struct {
	Account string `json:"account" weir:"unique"`
	Reason  string `json:"reason"`
}

func (SyncAccount) Kind() string { return "account.sync" }

// A burst of changes to one account syncs it once, a while after the last
// change, with the last change's args: each insert debounces the pending job.
func ExampleUniqueDebounce() {
	ctx := context.Background()
	driver, done := exampleStore()
	defer done()

	client, err := weir.NewClient(driver, nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, reason := range []string{"signup", "email changed", "plan changed"} {
		res, err := client.Insert(ctx, SyncAccount{Account: "a1", Reason: reason}, &weir.InsertOpts{
			ScheduledAt: time.Now().Add(30 * time.Second),
			Unique:      weir.UniqueOpts{ByArgs: true, OnConflict: weir.UniqueDebounce},
		})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(res.Job.ID, res.Duplicate, res.Replaced, string(res.Job.Args))
	}
	// Output:
	// 1 false false {"account":"a1","reason":"signup"}
	// 1 true true {"account":"a1","reason":"email changed"}
	// 1 true true {"account":"a1","reason":"plan changed"}
}

// Backfill is a long job that resumes where its last attempt stopped.
type Backfill struct {
	Rows int `json:"rows"`
}

func (Backfill) Kind() string { return "backfill" }

func ExampleSetProgress() {
	ctx := context.Background()
	driver, done := exampleStore()
	defer done()

	type cursor struct {
		Done int `json:"done"`
	}
	workers := weir.NewWorkers()
	weir.AddWorker(workers, weir.WorkFunc(func(ctx context.Context, job *weir.Job[Backfill]) error {
		var c cursor
		if job.Progress != nil { // an earlier attempt got this far
			if err := json.Unmarshal(job.Progress, &c); err != nil {
				return weir.JobDiscard(err)
			}
		}
		fmt.Println("attempt", job.Attempt, "starts at row", c.Done)
		for c.Done < job.Args.Rows {
			if job.Attempt == 1 && c.Done == 50 {
				return fmt.Errorf("connection reset at row %d", c.Done) // retried; the progress is kept
			}
			c.Done += 10 // a batch of ten rows done
			// Kept in memory: the lease renewal and the attempt's outcome write it.
			if err := weir.SetProgress(ctx, c); err != nil {
				return err
			}
		}
		// Stored with the completion, and only with it.
		return weir.RecordOutput(ctx, map[string]int{"rows": c.Done})
	}))
	client, err := weir.NewClient(driver, &weir.Config{
		Workers:     workers,
		Queues:      map[string]weir.QueueConfig{weir.DefaultQueue: {MaxWorkers: 1}},
		RetryPolicy: weir.ExponentialBackoff{Base: time.Millisecond, Max: time.Millisecond},
	})
	if err != nil {
		log.Fatal(err)
	}
	completed, unsubscribe := client.Subscribe(weir.EventJobCompleted)
	defer unsubscribe()
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	res, err := client.Insert(ctx, Backfill{Rows: 100}, nil)
	if err != nil {
		log.Fatal(err)
	}
	<-completed
	job, err := client.JobGet(ctx, res.Job.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(job.State, string(job.Output), string(job.Progress))

	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// attempt 1 starts at row 0
	// attempt 2 starts at row 50
	// completed {"rows":100} {"done":100}
}
