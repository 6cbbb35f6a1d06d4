package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirdriver/weirpgx"
	"github.com/weirq/weir/weirdriver/weirsqlite"
)

// envDatabaseURL names the environment variable that holds the database URL when
// --database-url is not given.
const envDatabaseURL = "WEIR_DATABASE_URL"

// pingTimeout bounds the first contact with the database.
const pingTimeout = 10 * time.Second

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
	if err := weirpgx.ValidateSchema(f.schema); err != nil {
		return usagef("%s: bad --schema: %s", cmdName(fs), strings.TrimPrefix(err.Error(), "weirpgx: "))
	}
	return nil
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
// "sqlite:" URL (sqlite:relative/path.db, sqlite:///absolute/path.db) or a plain
// path ending in ".db".
func sqlitePath(rawURL string) (string, bool) {
	if rest, ok := strings.CutPrefix(rawURL, "sqlite:"); ok {
		return strings.TrimPrefix(rest, "//"), true
	}
	if strings.HasSuffix(rawURL, ".db") && !strings.Contains(rawURL, "://") {
		return rawURL, true
	}
	return "", false
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
	if err != nil {
		return nil, nil, fmt.Errorf("cannot open the SQLite database: %s", strings.TrimPrefix(err.Error(), "weirsqlite: "))
	}
	return driver, func() { _ = driver.Close() }, nil
}

// openPostgres opens a pool on rawURL, puts weirpgx on it and checks that the
// server answers.
func openPostgres(ctx context.Context, rawURL, schema string) (weirdriver.Driver, func(), error) {
	cfg, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		return nil, nil, usagef("database URL does not parse: %s", redact(parseReason(err), rawURL, ""))
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = "weir"
	}
	password := cfg.ConnConfig.Password
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot open the database: %s", redact(err.Error(), rawURL, password))
	}
	driver, err := weirpgx.New(pool, &weirpgx.Config{Schema: schema})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	pingCtx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("cannot reach the database: %s", redact(err.Error(), rawURL, password))
	}
	return driver, pool.Close, nil
}

// parseReason says why pgx could not parse a connection string, leaving out the
// string itself, which pgx and net/url quote (pgx masks the password only on a
// best-effort basis).
func parseReason(err error) string {
	var pe *pgconn.ParseConfigError
	if !errors.As(err, &pe) {
		return err.Error()
	}
	// pe.Error() is "cannot parse `<string>`: <msg>" or "... <msg> (<inner>)".
	text := pe.Error()
	inner := pe.Unwrap()
	if inner != nil {
		text = strings.TrimSuffix(text, " ("+inner.Error()+")")
	}
	msg := text
	if i := strings.LastIndex(text, "`: "); i >= 0 {
		msg = text[i+len("`: "):]
	}
	if inner == nil {
		return msg
	}
	var ue *url.Error
	if errors.As(inner, &ue) {
		return msg + ": " + ue.Err.Error()
	}
	return msg + ": " + inner.Error()
}

var kvPassword = regexp.MustCompile(`(?i)\b(?:ssl)?password\s*=\s*('(?:[^'\\]|\\.)*'|[^\s&]+)`)

// redact removes the connection string raw and every password it or the parsed
// configuration holds from msg.
func redact(msg, raw, password string) string {
	if raw != "" {
		msg = strings.ReplaceAll(msg, strconv.Quote(raw), "<database URL>")
		msg = strings.ReplaceAll(msg, raw, "<database URL>")
	}
	secrets := []string{password}
	// The userinfo password of a URL, found even when the URL does not parse.
	if _, rest, ok := strings.Cut(raw, "://"); ok {
		authority := rest
		if i := strings.IndexAny(authority, "/?#"); i >= 0 {
			authority = authority[:i]
		}
		if i := strings.LastIndex(authority, "@"); i >= 0 {
			if _, pw, ok := strings.Cut(authority[:i], ":"); ok {
				secrets = append(secrets, pw)
			}
		}
	}
	// password=... in the query or in key=value form.
	for _, m := range kvPassword.FindAllStringSubmatch(raw, -1) {
		secrets = append(secrets, m[1], strings.Trim(m[1], "'"))
	}
	for _, s := range secrets {
		for _, form := range []string{s, unescape(s)} {
			// Masking very short strings would garble the message more than it protects.
			if len(form) >= 3 {
				msg = strings.ReplaceAll(msg, form, "xxxxx")
			}
		}
	}
	return msg
}

func unescape(s string) string {
	if u, err := url.PathUnescape(s); err == nil {
		return u
	}
	return s
}
