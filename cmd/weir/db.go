package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"unicode"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirq/weir/cmd/weir/internal/pgurl"
	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirdriver/weirpgx"
	"github.com/weirq/weir/weirdriver/weirsqlite"
)

// envDatabaseURL names the environment variable that holds the database URL when
// --database-url is not given.
const envDatabaseURL = "WEIR_DATABASE_URL"

// dbFlags are the flags of every command that uses the database.
type dbFlags struct {
	url    string
	schema string
	// create lets open create a SQLite file that does not exist yet (migrate up).
	create bool
}

func (f *dbFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.url, "database-url", "", "database `URL`: postgres://user@host:5432/db, or sqlite:PATH or a PATH ending in .db (default $"+envDatabaseURL+")")
	fs.StringVar(&f.schema, "schema", weirpgx.DefaultSchema, "`NAME` of the schema that holds weir's tables")
}

// resolve fills in the URL from the environment and checks the flags, before
// anything touches the database.
func (f *dbFlags) resolve(e *env, fs *flag.FlagSet) error {
	if !isSet(fs, "database-url") {
		f.url = e.getenv(envDatabaseURL)
	}
	if f.url == "" {
		return usagef("%s: no database URL: pass --database-url or set %s", cmdName(fs), envDatabaseURL)
	}
	return checkSchema(cmdName(fs), f.schema)
}

// checkSchema refuses a --schema that weirpgx cannot use, as a usage error of
// command cmd.
func checkSchema(cmd, schema string) error {
	err := weirpgx.ValidateSchema(schema)
	if e, ok := errors.AsType[*weirpgx.SchemaError](err); ok {
		return usagef("%s: bad --schema: %s", cmd, e.Message)
	}
	return err
}

// database is an open database with weir's driver on it.
type database struct {
	driver weirdriver.Driver
	close  func()
}

func (db *database) Close() { db.close() }

// open connects to the database and checks that it answers. Its errors never
// contain the URL's password.
func (f *dbFlags) open(ctx context.Context) (*database, error) {
	driver, closeDB, err := openDriver(ctx, f.url, f.schema, f.create)
	if err != nil {
		return nil, err
	}
	return &database{driver: driver, close: closeDB}, nil
}

// openDriver returns the driver for the database at rawURL, and the function that
// closes what it opened. The URL picks the database: this is the one place that
// knows which databases weir runs on.
func openDriver(ctx context.Context, rawURL, schema string, create bool) (weirdriver.Driver, func(), error) {
	if path, ok := sqlitePath(rawURL); ok {
		return openSQLite(path, create)
	}
	return openPostgres(ctx, rawURL, schema)
}

// migrationsFor lists the migrations of the driver that rawURL picks, without
// opening the database.
func migrationsFor(rawURL string) []weirdriver.Migration {
	if _, ok := sqlitePath(rawURL); ok {
		return (&weirsqlite.Driver{}).Migrations()
	}
	return (&weirpgx.Driver{}).Migrations()
}

// sqlitePath reports whether rawURL names a SQLite database, and its path: a
// "sqlite:" URL (sqlite:relative/path.db, sqlite:///absolute/path.db), or a
// plain path that no connection string can be taken for (see plainDBPath).
// Anything else goes to PostgreSQL.
func sqlitePath(rawURL string) (string, bool) {
	if rest, ok := strings.CutPrefix(rawURL, "sqlite:"); ok {
		return strings.TrimPrefix(rest, "//"), true
	}
	if plainDBPath(rawURL) {
		return rawURL, true
	}
	return "", false
}

// plainDBPath reports whether s is a plain path to a SQLite file: it ends in
// ".db" and holds nothing a PostgreSQL connection string is made of. A libpq
// key/value string always holds "=" ("host=db1 password=... dbname=reports.db"),
// a URL "://" or "@" (and it starts with postgres: or postgresql:), so none of
// them is ever taken for a file, created, or echoed as a path.
func plainDBPath(s string) bool {
	if !strings.HasSuffix(s, ".db") || strings.Contains(s, "://") ||
		strings.HasPrefix(s, "postgres:") || strings.HasPrefix(s, "postgresql:") {
		return false
	}
	return !strings.ContainsFunc(s, func(r rune) bool {
		return r == '=' || r == '@' || unicode.IsSpace(r) || unicode.IsControl(r)
	})
}

// openSQLite opens the SQLite database at path, creating the file only when create
// is set, so that a mistyped path fails instead of leaving an empty file behind.
// --schema does not apply: SQLite keeps weir's tables in the file's main schema.
func openSQLite(path string, create bool) (weirdriver.Driver, func(), error) {
	if path == "" {
		return nil, nil, usagef("database URL does not parse: a sqlite: URL needs a file path")
	}
	if fi, err := os.Stat(path); !create {
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, nil, fmt.Errorf("no SQLite database at %s (run `weir migrate up` to create one)", path)
		case err != nil:
			return nil, nil, fmt.Errorf("cannot open the SQLite database: %v", err)
		case fi.Mode().IsRegular() && fi.Size() == 0:
			// SQLite takes an empty file for an empty database and would write
			// its header: that is creating one.
			return nil, nil, fmt.Errorf("no SQLite database at %s: the file is empty (run `weir migrate up` to create one)", path)
		}
	}
	driver, err := weirsqlite.Open(path, nil)
	if e, ok := errors.AsType[*weirsqlite.OpenError](err); ok {
		return nil, nil, fmt.Errorf("cannot open the SQLite database: %s: %v", e.Path, e.Err)
	}
	if err != nil {
		return nil, nil, err
	}
	return driver, func() { _ = driver.Close() }, nil
}

// openPostgres opens a pool on rawURL, puts weirpgx on it and checks that the
// server answers.
func openPostgres(ctx context.Context, rawURL, schema string) (weirdriver.Driver, func(), error) {
	cfg, err := postgresConfig(rawURL)
	if err != nil {
		return nil, nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot open the database: %s", pgurl.Redact(err.Error(), rawURL, cfg.ConnConfig.Password))
	}
	driver, err := weirpgx.New(pool, &weirpgx.Config{Schema: schema})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	if err := pgurl.Ping(ctx, pool, cfg, rawURL); err != nil {
		pool.Close()
		return nil, nil, err
	}
	return driver, pool.Close, nil
}

// postgresConfig is pgurl.Config, with a string that does not parse a
// mistake in the command line.
func postgresConfig(rawURL string) (*pgxpool.Config, error) {
	cfg, err := pgurl.Config(rawURL)
	if err != nil {
		return nil, usagef("%v", err)
	}
	return cfg, nil
}
