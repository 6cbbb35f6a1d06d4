package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirdriver/weirpgx"
	"github.com/weirq/weir/weirdriver/weirsqlite"
)

// envDatabaseURL names the environment variable that holds the database URL when
// --database-url is not given.
const envDatabaseURL = "WEIR_DATABASE_URL"

// defaultConnectTimeout bounds a connection attempt to PostgreSQL when the
// connection string sets no connect_timeout.
const defaultConnectTimeout = 10 * time.Second

// pingSlack bounds the first query on a connection that was made.
const pingSlack = 10 * time.Second

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
	if err != nil {
		return nil, nil, fmt.Errorf("cannot open the SQLite database: %s", strings.TrimPrefix(err.Error(), "weirsqlite: "))
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
		return nil, nil, fmt.Errorf("cannot open the database: %s", redact(err.Error(), rawURL, cfg.ConnConfig.Password))
	}
	driver, err := weirpgx.New(pool, &weirpgx.Config{Schema: schema})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	if err := pingPostgres(ctx, pool, cfg, rawURL); err != nil {
		pool.Close()
		return nil, nil, err
	}
	return driver, pool.Close, nil
}

// postgresConfig parses rawURL into a pool configuration. Each connection
// attempt is bounded by the string's connect_timeout, or by
// defaultConnectTimeout when it sets none (or 0, which libpq takes for no
// bound: a command line tool should not hang for ever). Its errors never
// contain the string.
func postgresConfig(rawURL string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		return nil, usagef("database URL does not parse: %s", redact(parseReason(err), rawURL, ""))
	}
	if cfg.ConnConfig.ConnectTimeout <= 0 {
		cfg.ConnConfig.ConnectTimeout = defaultConnectTimeout
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = "weir"
	}
	return cfg, nil
}

// pingPostgres checks that the server of pool answers. The connection
// attempts are bounded by the configuration's connect timeout, each host in
// turn; the deadline here only bounds the rest (a server that lets weir in
// and then says nothing), so that the connection's own error, which names
// the host, is the one reported.
func pingPostgres(ctx context.Context, pool *pgxpool.Pool, cfg *pgxpool.Config, rawURL string) error {
	hosts := postgresHosts(cfg)
	budget := pingBudget(cfg)
	pingCtx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	err := pool.Ping(pingCtx)
	if err == nil {
		return nil
	}
	at := strings.Join(hosts, ", ")
	var pgErr *pgconn.PgError
	var reason string
	switch {
	case errors.As(err, &pgErr):
		// The server answered and refused: with sslmode=prefer pgx tries TLS
		// first, and what the server said matters more than how that attempt
		// failed (say, a server without TLS).
		return fmt.Errorf("the database at %s refused the connection: %s",
			at, redact(pgErr.Error(), rawURL, cfg.ConnConfig.Password))
	case ctx.Err() != nil:
		reason = err.Error()
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		var ce *pgconn.ConnectError
		if errors.As(err, &ce) {
			reason = fmt.Sprintf("no answer within %s (connect_timeout)", cfg.ConnConfig.ConnectTimeout)
		} else {
			reason = fmt.Sprintf("no answer within %s", budget)
		}
	default:
		reason = err.Error()
	}
	return fmt.Errorf("cannot reach the database at %s: %s", at, redact(reason, rawURL, cfg.ConnConfig.Password))
}

// pingBudget is the deadline of the first contact with the server: time for
// every connection attempt, each bounded by the connect timeout (a host name
// may resolve to two addresses, IPv4 and IPv6, each tried in turn), and for
// the first query.
func pingBudget(cfg *pgxpool.Config) time.Duration {
	attempts := 2 * len(postgresHosts(cfg))
	return cfg.ConnConfig.ConnectTimeout*time.Duration(attempts) + pingSlack
}

// isTimeout reports whether err is a network time-out.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// postgresHosts lists the hosts cfg tries, as host:port (or a socket
// directory), without repeats: a URL never shows a password here.
func postgresHosts(cfg *pgxpool.Config) []string {
	c := cfg.ConnConfig
	var hosts []string
	add := func(host string, port uint16) {
		h := net.JoinHostPort(host, strconv.Itoa(int(port)))
		if strings.HasPrefix(host, "/") {
			h = host
		}
		if !slices.Contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	add(c.Host, c.Port)
	for _, fb := range c.Fallbacks {
		add(fb.Host, fb.Port)
	}
	return hosts
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
