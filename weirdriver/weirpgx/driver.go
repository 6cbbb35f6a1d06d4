// Package weirpgx is weir's PostgreSQL driver, built on pgx v5 and its pool.
package weirpgx

import (
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirq/weir/weirdriver"
)

// DefaultSchema is the schema weir's tables live in when Config.Schema is empty.
const DefaultSchema = "public"

// Config configures a Driver. The zero value is ready to use.
type Config struct {
	// Schema holds weir's tables. Default: "public". It must be a lower-case SQL
	// identifier: a letter or underscore, then letters, digits or underscores, at
	// most 50 characters (so that its notification channel names fit in 63).
	Schema string
	// Logger receives the driver's warnings (an insert notification that could
	// not be sent). Default: slog.Default().
	Logger *slog.Logger
}

// Driver keeps jobs in PostgreSQL.
type Driver struct {
	pool     *pgxpool.Pool
	schema   string
	q        *queries
	notifier *notifier
	compact  *compactState
}

// schemaPattern keeps names short enough that the notification channels
// "<schema>.weir_insert" and "<schema>.weir_control" fit PostgreSQL's 63 bytes.
var schemaPattern = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,49}$`)

// New returns a driver on pool. The caller keeps ownership of the pool.
// Through a connection pooler in transaction mode (PgBouncer), the pool's
// connection string needs default_query_exec_mode=cache_describe, and the
// clients weir.Config.PollOnly: docs/poolers.md in weir's repository.
func New(pool *pgxpool.Pool, config *Config) (*Driver, error) {
	if pool == nil {
		return nil, errors.New("weirpgx: pool is nil")
	}
	schema, logger := DefaultSchema, slog.Default()
	if config != nil && config.Schema != "" {
		schema = config.Schema
	}
	if config != nil && config.Logger != nil {
		logger = config.Logger
	}
	if err := ValidateSchema(schema); err != nil {
		return nil, err
	}
	q := newQueries(schema)
	return &Driver{pool: pool, schema: schema, q: q, notifier: newNotifier(pool, q, logger), compact: &compactState{}}, nil
}

// ValidateSchema reports whether name can be weir's schema: a lower-case SQL
// identifier that is not one of PostgreSQL's own schemas (information_schema,
// and pg_catalog, pg_toast, pg_temp_N and every other name PostgreSQL
// reserves with the pg_ prefix). It returns a *SchemaError when name cannot.
func ValidateSchema(name string) error {
	if !schemaPattern.MatchString(name) {
		return &SchemaError{Schema: name, Message: fmt.Sprintf("schema %q is not a lower-case SQL identifier (a letter or _, then letters, digits or _, at most 50 characters)", name)}
	}
	if name == "information_schema" || strings.HasPrefix(name, "pg_") {
		return &SchemaError{Schema: name, Message: fmt.Sprintf("schema %q is one of PostgreSQL's system schemas (information_schema, or a name starting with pg_)", name)}
	}
	return nil
}

// SchemaError is the error for a schema name weirpgx cannot use
// (ValidateSchema). A command can show Message under its own name for the
// setting.
type SchemaError struct {
	// Schema is the name refused.
	Schema string
	// Message says why, naming the schema.
	Message string
}

func (e *SchemaError) Error() string { return "weirpgx: " + e.Message }

// Name implements weirdriver.Driver.
func (d *Driver) Name() string { return "postgres" }

// Schema implements weirdriver.Driver.
func (d *Driver) Schema() string { return d.schema }

// Pool is the pool the driver runs on.
func (d *Driver) Pool() *pgxpool.Pool { return d.pool }

// Executor implements weirdriver.Driver.
func (d *Driver) Executor() weirdriver.Executor {
	return &executor{db: d.pool, q: d.q, notifier: d.notifier, compact: d.compact}
}

// UnwrapTx implements weirdriver.Driver. It takes a pgx.Tx, or a *sql.Tx opened on
// PostgreSQL (through pgx's stdlib adapter or any other PostgreSQL driver). Inside a
// *sql.Tx the jobs are inserted with the one-statement path (no COPY).
func (d *Driver) UnwrapTx(tx any) (weirdriver.Inserter, error) {
	switch tx := tx.(type) {
	case pgx.Tx:
		if tx == nil {
			return nil, errors.New("weirpgx: transaction is nil")
		}
		return &executor{db: tx, q: d.q}, nil
	case *sql.Tx:
		if tx == nil {
			return nil, errors.New("weirpgx: transaction is nil")
		}
		return &sqlExecutor{tx: tx, q: d.q}, nil
	default:
		return nil, fmt.Errorf("weirpgx: transaction of type %T is not supported (use pgx.Tx or *sql.Tx)", tx)
	}
}

//go:embed migrations/*.sql functions/*.sql
var migrationFS embed.FS

var migrations = mustLoadMigrations(migrationFS)

// Migrations implements weirdriver.Driver.
func (d *Driver) Migrations() []weirdriver.Migration {
	return append([]weirdriver.Migration(nil), migrations...)
}

// PrereleaseMigrations implements weirdriver.PrereleaseChain: the chain that
// migration 1, the baseline, replaces.
func (d *Driver) PrereleaseMigrations() []string {
	return []string{"create_job", "create_leader", "create_queue", "create_enqueue", "check_times",
		"migration_compatible", "job_output_progress", "enqueue_unique_modes", "create_periodic",
		"create_client", "ready_list", "queue_limits", "key_limits", "key_claim_arrays",
		"queue_shares", "key_shares", "key_claim_reads", "key_claim_hints", "key_holder_want"}
}

// mustLoadMigrations reads the embedded migrations; a bad file is a build mistake.
func mustLoadMigrations(fsys fs.FS) []weirdriver.Migration {
	ms, err := weirdriver.LoadMigrations(fsys, "migrations")
	if err != nil {
		panic("weirpgx: " + err.Error())
	}
	return ms
}

// NotificationsFailed counts the insert notifications the driver could not send
// (each is also logged). Workers still find those jobs by polling.
func (d *Driver) NotificationsFailed() int64 { return d.notifier.failed.Load() }
