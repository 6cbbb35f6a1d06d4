// Package pgurl connects weir's commands to the PostgreSQL that a connection
// string names: it parses the string into a pool configuration whose
// connection attempts are bounded, checks that the server answers, and words
// what went wrong in one line that shows neither the string nor its password.
package pgurl

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// defaultConnectTimeout bounds a connection attempt to PostgreSQL when the
// connection string sets no connect_timeout.
const defaultConnectTimeout = 10 * time.Second

// pingSlack bounds the first query on a connection that was made.
const pingSlack = 10 * time.Second

// Config parses rawURL into a pool configuration. Each connection attempt is
// bounded by the string's connect_timeout, or by defaultConnectTimeout when it
// sets none (or 0, which libpq takes for no bound: a command line tool should
// not hang for ever). Its only error is a string that does not parse, and it
// never contains the string.
func Config(rawURL string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		return nil, fmt.Errorf("database URL does not parse: %s", Redact(ParseReason(err), rawURL, ""))
	}
	if cfg.ConnConfig.ConnectTimeout <= 0 {
		cfg.ConnConfig.ConnectTimeout = defaultConnectTimeout
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = "weir"
	}
	return cfg, nil
}

// Ping checks that the server of pool, opened with cfg on rawURL, answers. The
// connection attempts are bounded by the configuration's connect timeout, each
// host in turn; the deadline here only bounds the rest (a server that lets weir
// in and then says nothing), so that the connection's own error, which names
// the host, is the one reported.
func Ping(ctx context.Context, pool *pgxpool.Pool, cfg *pgxpool.Config, rawURL string) error {
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
			at, Redact(pgErr.Error(), rawURL, cfg.ConnConfig.Password))
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
	return fmt.Errorf("cannot reach the database at %s: %s", at, Redact(reason, rawURL, cfg.ConnConfig.Password))
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

// ParseReason says why pgx could not parse a connection string, leaving out the
// string itself, which pgx and net/url quote (pgx masks the password only on a
// best-effort basis).
func ParseReason(err error) string {
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

// Redact removes the connection string raw and every password it or the parsed
// configuration holds from msg.
func Redact(msg, raw, password string) string {
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

// OneLine folds a multi-line message into one line. pgx puts the error of each
// connection attempt on a line of its own, and with sslmode=prefer the same
// refusal comes twice: repeated lines are dropped.
func OneLine(s string) string {
	var lines []string
	for line := range strings.SplitSeq(s, "\n") {
		line = strings.Join(strings.Fields(line), " ")
		if line != "" && !slices.Contains(lines, line) {
			lines = append(lines, line)
		}
	}
	return strings.Join(lines, " ")
}
