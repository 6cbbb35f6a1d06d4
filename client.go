package weir

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirmigrate"
)

// DefaultMaxArgsBytes is the default limit on a job's encoded args.
const DefaultMaxArgsBytes = 1 << 20

// bulkThreshold is the batch size from which InsertMany writes with the driver's
// bulk path (COPY on PostgreSQL) instead of one INSERT statement.
const bulkThreshold = 64

// Config configures a Client. The zero value of each field means its default.
type Config struct {
	// ID names this client in the rows of the jobs it runs. Default: the host
	// name, the process id and a random suffix.
	ID string
	// MaxArgsBytes limits a job's encoded args (and its metadata). Default: 1 MiB.
	MaxArgsBytes int
	// Workers are the handlers this client runs, by job kind.
	Workers *Workers
	// Logger receives the client's logs. Default: slog.Default().
	Logger *slog.Logger
}

// Client inserts jobs, runs them and lets operators see and steer them.
type Client struct {
	config Config
	driver weirdriver.Driver
}

// NewClient returns a client on driver. It does no I/O; a schema that is not
// migrated shows up as an error wrapping ErrNotMigrated at first use.
func NewClient(driver weirdriver.Driver, config *Config) (*Client, error) {
	if driver == nil {
		return nil, invalidf("driver is nil")
	}
	c := &Client{driver: driver}
	if config != nil {
		c.config = *config
	}
	cfg := &c.config
	if cfg.MaxArgsBytes < 0 {
		return nil, invalidf("Config.MaxArgsBytes %d is negative", cfg.MaxArgsBytes)
	}
	if cfg.MaxArgsBytes == 0 {
		cfg.MaxArgsBytes = DefaultMaxArgsBytes
	}
	if cfg.ID == "" {
		cfg.ID = defaultClientID()
	} else if len(cfg.ID) > maxNameLen {
		return nil, invalidf("Config.ID is %d bytes long; the limit is %d", len(cfg.ID), maxNameLen)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Workers == nil {
		cfg.Workers = NewWorkers()
	}
	return c, nil
}

// ID is the client's instance id.
func (c *Client) ID() string { return c.config.ID }

// Driver is the driver the client runs on.
func (c *Client) Driver() weirdriver.Driver { return c.driver }

func defaultClientID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "weir"
	}
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	return fmt.Sprintf("%s-%d-%s", truncate(host), os.Getpid(), hex.EncodeToString(suffix[:]))
}

// InsertResult is an inserted job, or the existing job that a unique insert found.
type InsertResult struct {
	Job *JobRow
	// Duplicate is true when the job was not inserted because a job with the same
	// unique key exists; Job is that job.
	Duplicate bool
}

// InsertManyParams is one job of an InsertMany call.
type InsertManyParams struct {
	Args       JobArgs
	InsertOpts *InsertOpts
}

// Insert inserts a job in its own transaction.
func (c *Client) Insert(ctx context.Context, args JobArgs, opts *InsertOpts) (*InsertResult, error) {
	res, err := c.insert(ctx, c.driver.Executor(), []InsertManyParams{{Args: args, InsertOpts: opts}})
	if err != nil {
		return nil, err
	}
	return res[0], nil
}

// InsertTx inserts a job inside the caller's transaction: the job exists, and wakes
// workers, exactly when tx commits.
func (c *Client) InsertTx(ctx context.Context, tx pgx.Tx, args JobArgs, opts *InsertOpts) (*InsertResult, error) {
	return c.insertOneTx(ctx, tx, args, opts)
}

// InsertSQLTx is InsertTx for a database/sql transaction.
func (c *Client) InsertSQLTx(ctx context.Context, tx *sql.Tx, args JobArgs, opts *InsertOpts) (*InsertResult, error) {
	return c.insertOneTx(ctx, tx, args, opts)
}

func (c *Client) insertOneTx(ctx context.Context, tx any, args JobArgs, opts *InsertOpts) (*InsertResult, error) {
	exec, err := c.driver.UnwrapTx(tx)
	if err != nil {
		return nil, invalidf("%v", err)
	}
	res, err := c.insert(ctx, exec, []InsertManyParams{{Args: args, InsertOpts: opts}})
	if err != nil {
		return nil, err
	}
	return res[0], nil
}

// InsertMany inserts jobs in one transaction and returns them in order. Large
// batches of jobs without unique options are written with COPY.
func (c *Client) InsertMany(ctx context.Context, params []InsertManyParams) ([]*InsertResult, error) {
	return c.insert(ctx, c.driver.Executor(), params)
}

// InsertManyTx is InsertMany inside the caller's transaction.
func (c *Client) InsertManyTx(ctx context.Context, tx pgx.Tx, params []InsertManyParams) ([]*InsertResult, error) {
	exec, err := c.driver.UnwrapTx(tx)
	if err != nil {
		return nil, invalidf("%v", err)
	}
	return c.insert(ctx, exec, params)
}

// InsertManySQLTx is InsertManyTx for a database/sql transaction.
func (c *Client) InsertManySQLTx(ctx context.Context, tx *sql.Tx, params []InsertManyParams) ([]*InsertResult, error) {
	exec, err := c.driver.UnwrapTx(tx)
	if err != nil {
		return nil, invalidf("%v", err)
	}
	return c.insert(ctx, exec, params)
}

// insert validates every job before it writes any, then writes them all or none.
func (c *Client) insert(ctx context.Context, exec weirdriver.Executor, params []InsertManyParams) ([]*InsertResult, error) {
	if len(params) == 0 {
		return nil, invalidf("no jobs to insert")
	}
	now := time.Now()
	all := make([]*weirdriver.JobInsertParams, len(params))
	var unique, bulk []int // indexes into all
	for i, p := range params {
		ip, err := c.insertParams(p.Args, p.InsertOpts, now)
		if err != nil {
			if len(params) > 1 {
				return nil, fmt.Errorf("job %d of %d: %w", i+1, len(params), err)
			}
			return nil, err
		}
		all[i] = ip
		if ip.UniqueKey != nil {
			unique = append(unique, i)
		} else {
			bulk = append(bulk, i)
		}
	}

	results := make([]*InsertResult, len(params))
	err := c.withSchemaCheck(ctx, func() error {
		// A batch with too few plain jobs for the bulk path goes through one
		// INSERT, which needs no transaction of its own.
		if len(bulk) < bulkThreshold {
			return c.insertStatement(ctx, exec, all, results)
		}
		tx, err := exec.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
		if len(unique) > 0 {
			if err := c.insertStatementAt(ctx, tx, all, unique, results); err != nil {
				return err
			}
		}
		bulkParams := make([]*weirdriver.JobInsertParams, len(bulk))
		for j, i := range bulk {
			bulkParams[j] = all[i]
		}
		jobs, err := tx.JobInsertBulk(ctx, bulkParams)
		if err != nil {
			return err
		}
		var queues []string
		seen := map[string]bool{}
		for j, i := range bulk {
			results[i] = &InsertResult{Job: jobs[j]}
			if jobs[j].State == JobStateAvailable && !seen[jobs[j].Queue] {
				seen[jobs[j].Queue] = true
				queues = append(queues, jobs[j].Queue)
			}
		}
		if err := tx.NotifyInsert(ctx, queues); err != nil {
			return err
		}
		return tx.Commit(ctx)
	})
	if err != nil {
		return nil, fmt.Errorf("weir: insert: %w", err)
	}
	return results, nil
}

func (c *Client) insertStatement(ctx context.Context, exec weirdriver.Executor, all []*weirdriver.JobInsertParams, results []*InsertResult) error {
	idx := make([]int, len(all))
	for i := range idx {
		idx[i] = i
	}
	return c.insertStatementAt(ctx, exec, all, idx, results)
}

// insertStatementAt inserts all[idx...] with one statement. Jobs of the batch that
// share a unique key are sent once; the later ones are duplicates of the first.
func (c *Client) insertStatementAt(ctx context.Context, exec weirdriver.Executor, all []*weirdriver.JobInsertParams, idx []int, results []*InsertResult) error {
	var (
		send   []*weirdriver.JobInsertParams
		from   []int // index into all for each sent job
		firsts = map[string]int{}
		dups   = map[int]int{} // index into all -> index into all of the job it repeats
	)
	for _, i := range idx {
		if key := all[i].UniqueKey; key != nil {
			if first, ok := firsts[string(key)]; ok {
				dups[i] = first
				continue
			}
			firsts[string(key)] = i
		}
		send = append(send, all[i])
		from = append(from, i)
	}
	res, err := exec.JobInsert(ctx, send)
	if err != nil {
		return err
	}
	for j, r := range res {
		results[from[j]] = &InsertResult{Job: r.Job, Duplicate: r.Duplicate}
	}
	for i, first := range dups {
		results[i] = &InsertResult{Job: results[first].Job, Duplicate: true}
	}
	return nil
}

// withSchemaCheck runs fn and, when it fails because the schema is missing or
// behind, returns an error that names the missing migrations.
func (c *Client) withSchemaCheck(ctx context.Context, fn func() error) error {
	err := fn()
	if err == nil || !errors.Is(err, weirdriver.ErrSchemaMissing) {
		return err
	}
	if checkErr := weirmigrate.New(c.driver).Check(context.WithoutCancel(ctx)); checkErr != nil {
		return checkErr
	}
	return err
}
