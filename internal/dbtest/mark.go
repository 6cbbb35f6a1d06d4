package dbtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// A schema that Schema creates carries a mark, its comment, saying which
// process made it and when: "weir test: <host> <pid> <unix seconds>". Several
// test binaries share a database, and a binary that crashes or is killed
// leaves its schemas behind; the mark lets Main drop those (sweep) without
// touching a schema of a binary still running, or one that is not a test's.
const (
	markPrefix = "weir test: "
	// keptPrefix replaces markPrefix on a schema kept after its test failed
	// (envKeep): it is swept only once older than staleAge, so that whoever
	// debugs the failure has time to look at it.
	keptPrefix = "weir test (kept): "
	// staleAge is the age after which a marked schema is swept whoever made
	// it: no test binary runs that long.
	staleAge = 6 * time.Hour
)

// envKeep, set to "1", keeps the schema of a test that failed (marked kept)
// rather than dropping it, and logs its name.
const envKeep = "DBTEST_KEEP_FAILED"

// schemaName is the form of the names SchemaName makes; only schemas so
// named are swept.
var schemaName = regexp.MustCompile(`^t_[0-9a-f]{12}$`)

// mark is what a schema's mark says.
type mark struct {
	host string
	pid  int
	made time.Time
	kept bool
}

// newMark is the mark of a schema this process makes at now.
func newMark(now time.Time) mark {
	return mark{host: hostname(), pid: os.Getpid(), made: now}
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "unknown-host"
	}
	return h
}

// String returns the comment that marks the schema.
func (m mark) String() string {
	prefix := markPrefix
	if m.kept {
		prefix = keptPrefix
	}
	return fmt.Sprintf("%s%s %d %d", prefix, m.host, m.pid, m.made.Unix())
}

// parseMark reads a schema's comment; false when it is no mark.
func parseMark(comment string) (mark, bool) {
	var m mark
	rest, ok := strings.CutPrefix(comment, markPrefix)
	if !ok {
		if rest, ok = strings.CutPrefix(comment, keptPrefix); !ok {
			return mark{}, false
		}
		m.kept = true
	}
	f := strings.Fields(rest)
	if len(f) != 3 {
		return mark{}, false
	}
	pid, err1 := strconv.Atoi(f[1])
	made, err2 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil || pid <= 0 {
		return mark{}, false
	}
	m.host, m.pid, m.made = f[0], pid, time.Unix(made, 0)
	return m, true
}

// stale reports whether the schema m marks may be dropped at now by a process
// on host: it is older than staleAge, or it is not kept and was made on host
// by a process that is gone (alive says whether one is).
func (m mark) stale(now time.Time, host string, alive func(pid int) bool) bool {
	if now.Sub(m.made) > staleAge {
		return true
	}
	return !m.kept && m.host == host && !alive(m.pid)
}

// processAlive reports whether process pid of this host runs: signal 0 checks
// it without sending anything. A process of another user is alive too.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// markedSchemasSQL lists the schemas whose comment may be a mark.
const markedSchemasSQL = `SELECT n.nspname, d.description FROM pg_namespace n
JOIN pg_description d ON d.objoid = n.oid AND d.classoid = 'pg_namespace'::regclass AND d.objsubid = 0
WHERE d.description LIKE 'weir test%'`

// sweep drops the schemas that carry a mark that is stale at now for a
// process on host, and returns their names. A schema it cannot drop (another
// binary dropped it first, say) is left, and its error reported with the
// others.
func sweep(ctx context.Context, now time.Time, host string, alive func(pid int) bool) ([]string, error) {
	conn, err := pgx.Connect(ctx, URL())
	if err != nil {
		return nil, fmt.Errorf("connecting: %w", err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, markedSchemasSQL)
	if err != nil {
		return nil, fmt.Errorf("listing marked schemas: %w", err)
	}
	var stale []string
	for rows.Next() {
		var name, comment string
		if err := rows.Scan(&name, &comment); err != nil {
			return nil, fmt.Errorf("listing marked schemas: %w", err)
		}
		if m, ok := parseMark(comment); ok && schemaName.MatchString(name) && m.stale(now, host, alive) {
			stale = append(stale, name)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing marked schemas: %w", err)
	}
	var dropped []string
	var errs []string
	for _, name := range stale {
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
			errs = append(errs, fmt.Sprintf("dropping %s: %v", name, err))
			continue
		}
		dropped = append(dropped, name)
	}
	if len(errs) > 0 {
		return dropped, fmt.Errorf("sweeping stale test schemas: %s", strings.Join(errs, "; "))
	}
	return dropped, nil
}

// sweepStale is the sweep Main runs before the tests: it reports on stderr
// what it dropped and what failed, and never fails the tests.
func sweepStale() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dropped, err := sweep(ctx, time.Now(), hostname(), processAlive)
	if len(dropped) > 0 {
		fmt.Fprintf(os.Stderr, "dbtest: dropped %d stale test schemas\n", len(dropped))
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "dbtest: %v\n", err)
	}
}

// release ends a test's use of schema name: it drops the schema, or, when
// keep is set, marks it kept (if it exists) and leaves it.
func release(ctx context.Context, name string, keep bool, now time.Time) error {
	id := pgx.Identifier{name}.Sanitize()
	if !keep {
		return execSQL(ctx, "DROP SCHEMA IF EXISTS "+id+" CASCADE")
	}
	m := newMark(now)
	m.kept = true
	// A DO block, so that a schema the code under test never made is no error.
	return execSQL(ctx, `DO $$BEGIN
		IF EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = `+quote(name)+`) THEN
			COMMENT ON SCHEMA `+id+` IS `+quote(m.String())+`;
		END IF;
	END$$`)
}

// keepFailed reports whether the schema of a test that ended, failed or not,
// is kept (envKeep).
func keepFailed(failed bool) bool {
	return failed && os.Getenv(envKeep) == "1"
}

// quote returns s as an SQL string literal.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}
