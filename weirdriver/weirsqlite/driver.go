// Package weirsqlite is weir's SQLite driver, built on modernc.org/sqlite (pure Go,
// no cgo). It suits one process, or a few on one host, sharing a database file;
// docs/sqlite.md says when to move to PostgreSQL and what differs from weirpgx.
//
// The driver opens two pools on the file: one writer connection, through which
// every write runs in a BEGIN IMMEDIATE transaction, and a pool of read-only
// connections. SQLite allows one writer at a time anyway; queueing writers in the
// process instead of in SQLite's busy loop keeps waits cancellable and fair.
package weirsqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/weirq/weir/weirdriver"
)

// DefaultBusyTimeout is how long a statement waits for another process's write
// lock when Config.BusyTimeout is zero.
const DefaultBusyTimeout = 10 * time.Second

// Config configures a Driver. The zero value is ready to use.
type Config struct {
	// BusyTimeout is how long a write waits for another process that holds the
	// file's write lock before it fails with SQLITE_BUSY. Default: 10 s.
	BusyTimeout time.Duration
	// MaxReadConns bounds the pool of read-only connections. Default: the number
	// of CPUs, at least 4.
	MaxReadConns int
}

// Driver keeps jobs in a SQLite database file. It is safe for concurrent use.
type Driver struct {
	path   string
	writer *sql.DB // one connection: every write, in BEGIN IMMEDIATE transactions
	reader *sql.DB // read-only connections

	// writeTurn is held by the driver's write transaction in progress. Writers
	// queue for it in arrival order (a channel's waiting senders are FIFO), where
	// database/sql would hand the connection to a random waiter, so that no
	// writer (a heartbeat, a maintenance batch) waits behind a stream of others.
	writeTurn chan struct{}

	// pubMu is held from COMMIT to the end of the publication of its
	// notifications, so that listeners receive them in commit order.
	pubMu  sync.Mutex
	broker *broker

	closeOnce sync.Once
	closeErr  error
}

// Open opens the SQLite database at path, creating the file if it does not exist
// (readable and writable by its owner only, as are the -wal and -shm files that
// SQLite makes beside it), in WAL mode with synchronous=FULL (and fullfsync), foreign keys on and a busy
// timeout. It fails with an *OpenError naming path, for instance when the file
// is not a SQLite database. Close the driver when done.
func Open(path string, config *Config) (*Driver, error) {
	var cfg Config
	if config != nil {
		cfg = *config
	}
	switch {
	case path == "":
		return nil, &OpenError{Err: errors.New("path is empty")}
	case path == ":memory:" || strings.HasPrefix(path, "file:"):
		// An in-memory database is private to one connection, and the driver
		// opens several; URIs could override the settings below.
		return nil, &OpenError{Path: path, Err: errors.New("give the path of a database file (not :memory: or a file: URI)")}
	case cfg.BusyTimeout < 0:
		return nil, &OpenError{Path: path, Err: fmt.Errorf("busy timeout %v is negative", cfg.BusyTimeout)}
	case cfg.MaxReadConns < 0:
		return nil, &OpenError{Path: path, Err: fmt.Errorf("MaxReadConns %d is negative", cfg.MaxReadConns)}
	}
	if cfg.BusyTimeout == 0 {
		cfg.BusyTimeout = DefaultBusyTimeout
	}
	if cfg.MaxReadConns == 0 {
		cfg.MaxReadConns = max(4, runtime.NumCPU())
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, &OpenError{Path: path, Err: err}
	}
	if err := createPrivate(abs); err != nil {
		return nil, &OpenError{Path: abs, Err: err}
	}

	// A file: URI with the path escaped, so that a path holding '?' or '#' is
	// not read as the start of the parameters.
	slashed := filepath.ToSlash(abs)
	if !strings.HasPrefix(slashed, "/") {
		slashed = "/" + slashed // a Windows drive letter
	}
	base := (&url.URL{Scheme: "file", Path: slashed}).String()
	params := url.Values{}
	params.Set("_busy_timeout", strconv.FormatInt(cfg.BusyTimeout.Milliseconds(), 10))
	params.Set("_foreign_keys", "1")
	params.Set("_synchronous", "FULL")
	// On macOS fsync does not flush the drive's cache; F_FULLFSYNC does. It is a
	// no-op elsewhere.
	params.Set("_pragma", "fullfsync(1)")
	params.Set("_txlock", "immediate")

	d := &Driver{path: abs, broker: newBroker(), writeTurn: make(chan struct{}, 1)}
	d.writer, err = sql.Open("sqlite", base+"?"+params.Encode())
	if err != nil {
		return nil, &OpenError{Path: abs, Err: err}
	}
	// One connection, kept open: the in-process queue of writers.
	d.writer.SetMaxOpenConns(1)
	d.writer.SetMaxIdleConns(1)
	d.writer.SetConnMaxLifetime(0)
	d.writer.SetConnMaxIdleTime(0)

	params.Set("_query_only", "1")
	d.reader, err = sql.Open("sqlite", base+"?"+params.Encode())
	if err != nil {
		d.writer.Close()
		return nil, &OpenError{Path: abs, Err: err}
	}
	d.reader.SetMaxOpenConns(cfg.MaxReadConns)
	d.reader.SetMaxIdleConns(cfg.MaxReadConns)

	if err := d.check(cfg.BusyTimeout); err != nil {
		d.reader.Close()
		d.writer.Close()
		return nil, err
	}
	return d, nil
}

// createPrivate creates the database file at path, empty and readable and
// writable by its owner only, when nothing is there: a job's args, errors and
// outputs are the application's data. SQLite would create the file with mode
// 0644 (less the umask), and it gives the -wal and -shm files it creates beside
// a database the database file's mode. A file that exists keeps its mode,
// which its owner chose; SQLite takes an empty file for an empty database.
func createPrivate(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create the file: %w", err)
	}
	return f.Close()
}

// OpenError is Open's error: the database at Path could not be opened, and Err
// says why. errors.Is and errors.As see through to Err; a command can show
// Path and Err under its own words.
type OpenError struct {
	// Path is the database file's path, made absolute once Open got that far;
	// empty when Open was given none.
	Path string
	Err  error
}

func (e *OpenError) Error() string {
	if e.Path == "" {
		return "weirsqlite: open: " + e.Err.Error()
	}
	return "weirsqlite: open " + e.Path + ": " + e.Err.Error()
}

func (e *OpenError) Unwrap() error { return e.Err }

// check makes sure the file is a SQLite database before anything writes to it,
// then switches it to WAL mode (a setting kept in the file).
func (d *Driver) check(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout+5*time.Second)
	defer cancel()
	var version int64
	if err := d.writer.QueryRowContext(ctx, "PRAGMA schema_version").Scan(&version); err != nil {
		return &OpenError{Path: d.path, Err: fmt.Errorf("not a usable SQLite database: %w", err)}
	}
	var mode string
	if err := d.writer.QueryRowContext(ctx, "PRAGMA journal_mode = WAL").Scan(&mode); err != nil {
		return &OpenError{Path: d.path, Err: fmt.Errorf("set WAL mode: %w", err)}
	}
	if !strings.EqualFold(mode, "wal") {
		return &OpenError{Path: d.path, Err: fmt.Errorf("journal mode is %q, want wal", mode)}
	}
	if err := d.reader.PingContext(ctx); err != nil {
		return &OpenError{Path: d.path, Err: fmt.Errorf("read connection: %w", err)}
	}
	return nil
}

// takeTurn waits for the driver's turn to write, in arrival order, or for ctx.
func (d *Driver) takeTurn(ctx context.Context) error {
	select {
	case d.writeTurn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (d *Driver) endTurn() { <-d.writeTurn }

// Close closes the database and every listener. It is safe to call twice.
func (d *Driver) Close() error {
	d.closeOnce.Do(func() {
		d.broker.close()
		d.closeErr = errors.Join(d.reader.Close(), d.writer.Close())
		if d.closeErr != nil {
			d.closeErr = fmt.Errorf("weirsqlite: close %s: %w", d.path, d.closeErr)
		}
	})
	return d.closeErr
}

// Path is the absolute path of the database file.
func (d *Driver) Path() string { return d.path }

// DB is the driver's write connection, for the caller's own transactions that
// insert jobs (UnwrapTx). It is one connection: keep such transactions short, since
// every write of the driver waits for them.
func (d *Driver) DB() *sql.DB { return d.writer }

// Name implements weirdriver.Driver.
func (d *Driver) Name() string { return "sqlite" }

// Schema implements weirdriver.Driver: weir's tables live in the main database.
func (d *Driver) Schema() string { return "main" }

// Executor implements weirdriver.Driver.
func (d *Driver) Executor() weirdriver.Executor { return &executor{d: d} }

// UnwrapTx implements weirdriver.Driver. It takes a *sql.Tx opened on this
// database, best on DB(). The jobs it inserts wake no workers (NotifyInsert does
// nothing), which find them by polling, since the driver cannot see the caller's
// commit.
func (d *Driver) UnwrapTx(tx any) (weirdriver.Inserter, error) {
	switch tx := tx.(type) {
	case *sql.Tx:
		if tx == nil {
			return nil, errors.New("weirsqlite: transaction is nil")
		}
		return &executor{d: d, tx: &txn{tx: tx}}, nil
	default:
		return nil, fmt.Errorf("weirsqlite: transaction of type %T is not supported (use a *sql.Tx)", tx)
	}
}

//go:embed migrations/*.sql
var migrationFS embed.FS

var migrations = mustLoadMigrations(migrationFS)

// Migrations implements weirdriver.Driver. The versions and names are weirpgx's.
func (d *Driver) Migrations() []weirdriver.Migration {
	return append([]weirdriver.Migration(nil), migrations...)
}

// PrereleaseMigrations implements weirdriver.PrereleaseChain: the chain that
// migration 1, the baseline, replaces.
func (d *Driver) PrereleaseMigrations() []string {
	return []string{"create_job", "create_leader", "create_queue", "migration_compatible",
		"job_output_progress", "create_periodic", "create_client", "queue_limits", "key_limits",
		"queue_shares"}
}

// mustLoadMigrations reads the embedded migrations; a bad file is a build mistake.
func mustLoadMigrations(fsys fs.FS) []weirdriver.Migration {
	ms, err := weirdriver.LoadMigrations(fsys, "migrations")
	if err != nil {
		panic("weirsqlite: " + err.Error())
	}
	return ms
}
