package weir_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/weirq/weir"
	"github.com/weirq/weir/weirmigrate"
)

// sqlConn is a plain connection, as another language's driver or psql would have.
func (b *bundle) sqlConn(t *testing.T) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(testCtx(t), b.pool.Config().ConnConfig.ConnString())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// TestSQLEnqueue checks weir_enqueue from a plain SQL connection: the job exists,
// and wakes workers, when the caller's transaction commits (G8), with the options
// given; and a worker runs it.
func TestSQLEnqueue(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := testCtx(t)
	conn := b.sqlConn(t)
	notes := listen(t, b)

	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var (
		id  int64
		dup bool
	)
	err = tx.QueryRow(ctx, "SELECT id, duplicate FROM "+b.schema+`.weir_enqueue('probe', '{"name": "from sql"}',
		queue => 'sqlq', priority => 1, max_attempts => 7, tags => ARRAY['a', 'b'], metadata => '{"lang": "sql"}')`).Scan(&id, &dup)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.JobGet(ctx, id); !errors.Is(err, weir.ErrNotFound) {
		t.Fatalf("job visible before commit: %v", err)
	}
	b.marker(t, "before")
	if got := notes.next(t); got != "before" {
		t.Fatalf("notification %q before commit", got)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := notes.next(t); got != "sqlq" {
		t.Fatalf("after commit: notification %q, want sqlq", got)
	}
	j := b.job(t, id)
	if dup || j.Kind != "probe" || j.Queue != "sqlq" || j.Priority != 1 || j.MaxAttempts != 7 ||
		strings.Join(j.Tags, ",") != "a,b" || !strings.Contains(string(j.Metadata), "sql") || j.State != weir.JobStateAvailable {
		t.Fatalf("job %+v", j)
	}

	// A rolled-back enqueue leaves nothing and sends nothing.
	tx, err = conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(ctx, "SELECT id FROM "+b.schema+".weir_enqueue('probe', queue => 'sqlq')").Scan(&id); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	b.marker(t, "after")
	if got := notes.next(t); got != "after" {
		t.Fatalf("notification %q after a rollback", got)
	}
	if _, err := b.client.JobGet(ctx, id); !errors.Is(err, weir.ErrNotFound) {
		t.Fatalf("rolled-back job: %v", err)
	}

	// A scheduled job from SQL.
	if err := conn.QueryRow(ctx, "SELECT id FROM "+b.schema+".weir_enqueue('probe', scheduled_at => now() + interval '1 hour')").Scan(&id); err != nil {
		t.Fatal(err)
	}
	if j := b.job(t, id); j.State != weir.JobStateScheduled {
		t.Fatalf("scheduled from SQL: %s", j.State)
	}
}

// TestSQLEnqueueBadInput checks that weir_enqueue refuses what the Go client
// refuses, with the same words, and writes nothing.
func TestSQLEnqueueBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := testCtx(t)
	conn := b.sqlConn(t)
	for _, tt := range []struct{ call, want string }{
		{`weir_enqueue('')`, "kind is empty"},
		{`weir_enqueue('send email')`, `kind "send email" has characters outside`},
		{`weir_enqueue(repeat('k', 129))`, "the limit is 128"},
		{`weir_enqueue('k', '[1, 2]')`, "must be a JSON object"},
		{`weir_enqueue('k', '"text"')`, "must be a JSON object"},
		{`weir_enqueue('k', '{"a": "` + strings.Repeat("x", 100) + `"}', max_args_bytes => 50)`, "the limit is 50"},
		{`weir_enqueue('k', queue => 'q/1')`, `queue "q/1" has characters outside`},
		{`weir_enqueue('k', priority => 0)`, "priority 0 is out of range 1..4"},
		{`weir_enqueue('k', priority => 5)`, "priority 5 is out of range 1..4"},
		{`weir_enqueue('k', max_attempts => 0)`, "max attempts 0 is out of range"},
		{`weir_enqueue('k', tags => ARRAY['a b'])`, `tag "a b"`},
		{`weir_enqueue('k', tags => ARRAY[''])`, "tag is empty"},
		{`weir_enqueue('k', metadata => '[1]')`, "metadata must be a JSON object"},
		{`weir_enqueue('k', unique_period => interval '-1 second')`, "is negative"},
		{`weir_enqueue('k', unique_period => interval '10 milliseconds')`, "under one second"},
		{`weir_enqueue('k', unique_states => ARRAY['available', 'bogus'])`, `"bogus" is not a job state`},
		{`weir_enqueue('k', unique_states => ARRAY['scheduled', 'available', 'retryable'])`, `must include "running"`},
		{`weir_enqueue('k', scheduled_at => 'infinity')`, "scheduled time infinity is out of range: it must fall in the years 1..9999 UTC"},
		{`weir_enqueue('k', scheduled_at => '-infinity')`, "scheduled time -infinity is out of range"},
		{`weir_enqueue('k', scheduled_at => '10000-01-01 00:00:00+00')`, "is out of range"},
		{`weir_enqueue('k', scheduled_at => '0001-12-31 23:59:59.999999+00 BC')`, "is out of range"},
		{`weir_enqueue('k', metadata => jsonb_build_object('m', repeat('x', 1048576)))`, "metadata is 1048585 bytes; the limit is 1048576"},
		{`weir_enqueue('k', metadata => '{"m": "` + strings.Repeat("x", 100) + `"}', max_args_bytes => 50)`, "metadata is 109 bytes; the limit is 50"},
		{`weir_enqueue('k', max_args_bytes => NULL)`, "max_args_bytes NULL is not a positive number of bytes"},
		{`weir_enqueue('k', max_args_bytes => 0)`, "max_args_bytes 0 is not a positive number of bytes"},
		{`weir_enqueue('k', max_args_bytes => 1048577)`, "max_args_bytes 1048577 is above the server's limit of 1048576 bytes"},
	} {
		_, err := conn.Exec(ctx, "SELECT * FROM "+b.schema+"."+tt.call)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "22023" || !strings.HasPrefix(pgErr.Message, "weir: invalid: ") ||
			!strings.Contains(pgErr.Message, tt.want) {
			t.Errorf("%s: %v, want invalid_parameter_value saying %q", tt.call, err, tt.want)
		}
	}
	if n := b.count(t, "true"); n != 0 {
		t.Fatalf("%d jobs written by bad calls", n)
	}
}

// TestSQLEnqueueUniqueMatchesGo checks that unique keys from SQL and from Go agree:
// the same job enqueued both ways collides, whichever comes first, whatever the
// key order and spacing of its args.
func TestSQLEnqueueUniqueMatchesGo(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := testCtx(t)
	conn := b.sqlConn(t)
	at := time.Now().Add(48 * time.Hour).Truncate(time.Hour).Add(10 * time.Minute)
	opts := &weir.InsertOpts{Queue: "u", ScheduledAt: at,
		Unique: weir.UniqueOpts{ByArgs: true, ByQueue: true, ByPeriod: time.Hour}}
	sqlEnqueue := func(args string, at time.Time) (int64, bool) {
		t.Helper()
		var (
			id  int64
			dup bool
		)
		err := conn.QueryRow(ctx, "SELECT id, duplicate FROM "+b.schema+`.weir_enqueue('report', $1::jsonb, queue => 'u',
			scheduled_at => $2, unique_by_args => true, unique_by_queue => true, unique_period => interval '1 hour')`,
			args, at).Scan(&id, &dup)
		if err != nil {
			t.Fatal(err)
		}
		return id, dup
	}

	// Go first, then SQL with the keys in another order.
	goFirst, err := b.client.Insert(ctx, reportArgs{Day: "mon"}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if id, dup := sqlEnqueue(`{ "day" : "mon" }`, at.Add(20*time.Minute)); !dup || id != goFirst.Job.ID {
		t.Fatalf("SQL after Go: id %d duplicate %v, want a duplicate of %d", id, dup, goFirst.Job.ID)
	}
	// SQL first, then Go.
	sqlFirst, dup := sqlEnqueue(`{"day": "tue"}`, at)
	if dup {
		t.Fatal("a new SQL job was reported as a duplicate")
	}
	res, err := b.client.Insert(ctx, reportArgs{Day: "tue"}, opts)
	if err != nil || !res.Duplicate || res.Job.ID != sqlFirst {
		t.Fatalf("Go after SQL: %v %+v, want a duplicate of %d", err, res, sqlFirst)
	}
	// Another period, another queue or other args: new jobs.
	if _, dup := sqlEnqueue(`{"day": "mon"}`, at.Add(time.Hour)); dup {
		t.Fatal("the next period collided")
	}
	if _, dup := sqlEnqueue(`{"day": "wed"}`, at); dup {
		t.Fatal("other args collided")
	}
	if n := b.count(t, "kind = 'report'"); n != 4 {
		t.Fatalf("%d report jobs, want 4", n)
	}
}

// sqlUnique calls weir_enqueue on conn with the named arguments in extra and
// returns its three columns.
func (b *bundle) sqlUnique(t *testing.T, conn *pgx.Conn, kind, args, extra string, params ...any) (id int64, dup, replaced bool) {
	t.Helper()
	call := "SELECT id, duplicate, replaced FROM " + b.schema + ".weir_enqueue(" + quoteLiteral(kind) + ", " + quoteLiteral(args) + "::jsonb"
	if extra != "" {
		call += ", " + extra
	}
	if err := conn.QueryRow(testCtx(t), call+")", params...).Scan(&id, &dup, &replaced); err != nil {
		t.Fatal(err)
	}
	return id, dup, replaced
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// TestSQLEnqueueUniqueArgsKeysMatchesGo checks that a key by some of the args
// is the same from SQL (unique_args_keys) as from Go (struct tags or
// ByArgsKeys), whichever comes first, whatever the key order, spacing or other
// args; and that listed keys the args lack are left out on both sides.
func TestSQLEnqueueUniqueArgsKeysMatchesGo(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := testCtx(t)
	conn := b.sqlConn(t)
	byArgs := &weir.InsertOpts{Unique: weir.UniqueOpts{ByArgs: true}}
	keys := `unique_args_keys => ARRAY['region', 'account']`

	goFirst, err := b.client.Insert(ctx, syncArgs{Account: "a1", Region: "eu", Note: "go"}, byArgs)
	if err != nil {
		t.Fatal(err)
	}
	if id, dup, _ := b.sqlUnique(t, conn, "sync", `{"note": "sql", "region": "eu", "account": "a1"}`, keys); !dup || id != goFirst.Job.ID {
		t.Fatalf("SQL after Go (tags): id %d duplicate %v, want a duplicate of %d", id, dup, goFirst.Job.ID)
	}
	sqlFirst, dup, _ := b.sqlUnique(t, conn, "sync", `{"account": "a2", "note": {"deep": [1, 2]}, "region": "us"}`, keys)
	if dup {
		t.Fatal("a new SQL job was reported as a duplicate")
	}
	res, err := b.client.Insert(ctx, syncArgs{Account: "a2", Region: "us", Note: "go"}, byArgs)
	if err != nil || !res.Duplicate || res.Job.ID != sqlFirst {
		t.Fatalf("Go (tags) after SQL: %v %+v, want a duplicate of %d", err, res, sqlFirst)
	}
	raw := &weir.InsertOpts{Unique: weir.UniqueOpts{ByArgsKeys: []string{"account", "region"}}}
	res, err = b.client.Insert(ctx, weir.RawArgs{KindName: "sync", JSON: json.RawMessage(`{"region":"us","account":"a2","x":1}`)}, raw)
	if err != nil || !res.Duplicate || res.Job.ID != sqlFirst {
		t.Fatalf("Go (ByArgsKeys) after SQL: %v %+v, want a duplicate of %d", err, res, sqlFirst)
	}
	// A key the args lack: left out on both sides (omitempty drops the region).
	noRegion, dup, _ := b.sqlUnique(t, conn, "sync", `{"account": "a3", "note": "n"}`, keys)
	if dup {
		t.Fatal("a3 collided")
	}
	if res, err := b.client.Insert(ctx, syncArgs{Account: "a3"}, byArgs); err != nil || !res.Duplicate || res.Job.ID != noRegion {
		t.Fatalf("absent key: %v %+v, want a duplicate of %d", err, res, noRegion)
	}
	// Values compare as JSON values: a number written otherwise is another
	// value on neither side; a nested object's key order does not matter.
	nested, _, _ := b.sqlUnique(t, conn, "sync", `{"account": {"b": 1, "a": [true, null]}}`, `unique_args_keys => ARRAY['account']`)
	res, err = b.client.Insert(ctx, weir.RawArgs{KindName: "sync", JSON: json.RawMessage(`{"account":{"a":[true,null],"b":1},"z":0}`)},
		&weir.InsertOpts{Unique: weir.UniqueOpts{ByArgsKeys: []string{"account"}}})
	if err != nil || !res.Duplicate || res.Job.ID != nested {
		t.Fatalf("nested value: %v %+v, want a duplicate of %d", err, res, nested)
	}
	if n := b.count(t, "kind = 'sync'"); n != 4 {
		t.Fatalf("%d sync jobs, want 4", n)
	}
}

// TestSQLEnqueueOnConflict checks unique_on_conflict: the same rules as the Go
// client's modes, a third column saying whether the job was replaced, and a job
// inserted from Go replaced from SQL and the other way round.
func TestSQLEnqueueOnConflict(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := testCtx(t)
	conn := b.sqlConn(t)
	soon := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	later := soon.Add(time.Hour)
	first, err := b.client.Insert(ctx, syncArgs{Account: "a", Note: "go"}, &weir.InsertOpts{ScheduledAt: soon, Unique: weir.UniqueOpts{ByArgs: true}})
	if err != nil {
		t.Fatal(err)
	}
	mode := func(m string) string {
		return `unique_args_keys => ARRAY['account', 'region'], unique_on_conflict => '` + m + `', scheduled_at => $1, tags => ARRAY['` + m + `']`
	}
	if id, dup, rep := b.sqlUnique(t, conn, "sync", `{"account": "a", "note": "skip"}`, mode("skip"), later); id != first.Job.ID || !dup || rep {
		t.Fatalf("skip: %d %v %v", id, dup, rep)
	}
	if j := b.job(t, first.Job.ID); !strings.Contains(string(j.Args), `"go"`) {
		t.Fatalf("skip changed the job: %s", j.Args)
	}
	if id, dup, rep := b.sqlUnique(t, conn, "sync", `{"account": "a", "note": "replace"}`, mode("replace")+", priority => 4", later); id != first.Job.ID || !dup || !rep {
		t.Fatalf("replace: %d %v %v", id, dup, rep)
	}
	j := b.job(t, first.Job.ID)
	if !strings.Contains(string(j.Args), `"replace"`) || j.Priority != 4 || strings.Join(j.Tags, ",") != "replace" || !j.ScheduledAt.Equal(soon) ||
		string(j.UniqueKey) != string(first.Job.UniqueKey) {
		t.Fatalf("after replace: %+v", j)
	}
	if _, _, rep := b.sqlUnique(t, conn, "sync", `{"account": "a", "note": "debounce"}`, mode("debounce"), later); !rep {
		t.Fatal("debounce did not replace")
	}
	if j = b.job(t, first.Job.ID); !j.ScheduledAt.Equal(later) || j.State != weir.JobStateScheduled {
		t.Fatalf("after debounce: at %s %s, want %s", j.ScheduledAt, j.State, later)
	}
	// From Go, on the job SQL changed: the Go key is the SQL key.
	res, err := b.client.Insert(ctx, syncArgs{Account: "a", Note: "go again"}, &weir.InsertOpts{Unique: weir.UniqueOpts{ByArgs: true, OnConflict: weir.UniqueDebounce}})
	if err != nil || !res.Replaced || res.Job.State != weir.JobStateAvailable {
		t.Fatalf("Go debounce after SQL: %+v %v", res, err)
	}
	// Running: no mode changes it.
	if _, err := b.pool.Exec(ctx, "UPDATE "+b.schema+`.weir_job SET state = 'running', attempt = 1, lease_token = 1,
		lease_expires_at = now() + interval '1 hour', attempted_at = now() WHERE id = $1`, first.Job.ID); err != nil {
		t.Fatal(err)
	}
	before := b.job(t, first.Job.ID)
	for _, m := range []string{"skip", "replace", "debounce"} {
		if id, dup, rep := b.sqlUnique(t, conn, "sync", `{"account": "a", "note": "late"}`, mode(m), later); id != first.Job.ID || !dup || rep {
			t.Fatalf("%s on a running job: %d %v %v", m, id, dup, rep)
		}
	}
	if after := b.job(t, first.Job.ID); string(after.Args) != string(before.Args) || !after.ScheduledAt.Equal(before.ScheduledAt) ||
		strings.Join(after.Tags, ",") != strings.Join(before.Tags, ",") {
		t.Fatalf("a running job changed: %+v", after)
	}
	// A new job from SQL with a mode: inserted, not replaced.
	if _, dup, rep := b.sqlUnique(t, conn, "sync", `{"account": "b"}`, mode("debounce"), later); dup || rep {
		t.Fatalf("new job: duplicate %v replaced %v", dup, rep)
	}
	if n := b.count(t, "kind = 'sync'"); n != 2 {
		t.Fatalf("%d sync jobs, want 2", n)
	}
}

// TestSQLEnqueueConcurrent runs 8 weir_enqueue calls of the same unique job at
// once, each on its own connection, in each mode: one job results, one call
// inserted it, and every other call got it back (replaced in replace and
// debounce).
func TestSQLEnqueueConcurrent(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, m := range []string{"skip", "replace", "debounce"} {
		const n = 8
		type out struct {
			id       int64
			dup, rep bool
		}
		outs := make([]out, n)
		conns := make([]*pgx.Conn, n)
		for i := range conns {
			conns[i] = b.sqlConn(t)
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				outs[i].id, outs[i].dup, outs[i].rep = b.sqlUnique(t, conns[i], "sync", fmt.Sprintf(`{"account": %q, "note": "%d"}`, m, i),
					`unique_args_keys => ARRAY['account'], unique_on_conflict => '`+m+`', scheduled_at => now() + interval '1 hour'`)
			})
		}
		close(start)
		wg.Wait()
		inserted := 0
		for i, o := range outs {
			if o.id != outs[0].id {
				t.Fatalf("%s: call %d got job %d, call 0 job %d", m, i, o.id, outs[0].id)
			}
			if !o.dup {
				inserted++
			} else if o.rep != (m != "skip") {
				t.Fatalf("%s: call %d replaced=%v", m, i, o.rep)
			}
		}
		if inserted != 1 {
			t.Fatalf("%s: %d calls inserted, want 1", m, inserted)
		}
		if c := b.count(t, "kind = 'sync' AND args->>'account' = $1", m); c != 1 {
			t.Fatalf("%s: %d jobs, want 1", m, c)
		}
	}
}

// TestSQLEnqueueUniqueErrorsMatchGo checks that weir_enqueue refuses bad unique
// options with the Go client's words, and writes nothing.
func TestSQLEnqueueUniqueErrorsMatchGo(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := testCtx(t)
	conn := b.sqlConn(t)
	many := make([]string, 33)
	for i := range many {
		many[i] = fmt.Sprint("k", i)
	}
	for _, tt := range []struct {
		sql string
		u   weir.UniqueOpts
	}{
		{`unique_by_args => true, unique_on_conflict => 'upsert'`, weir.UniqueOpts{ByArgs: true, OnConflict: "upsert"}},
		{`unique_on_conflict => 'upsert'`, weir.UniqueOpts{OnConflict: "upsert"}},
		{`unique_on_conflict => 'replace'`, weir.UniqueOpts{OnConflict: weir.UniqueReplace}},
		{`unique_on_conflict => 'debounce'`, weir.UniqueOpts{OnConflict: weir.UniqueDebounce}},
		{`unique_args_keys => ARRAY['a', '']`, weir.UniqueOpts{ByArgsKeys: []string{"a", ""}}},
		{`unique_args_keys => ARRAY['a', 'b', 'a']`, weir.UniqueOpts{ByArgsKeys: []string{"a", "b", "a"}}},
		{`unique_args_keys => ARRAY[repeat('k', 129)]`, weir.UniqueOpts{ByArgsKeys: []string{strings.Repeat("k", 129)}}},
		{`unique_args_keys => ARRAY['` + strings.Join(many, "', '") + `']`, weir.UniqueOpts{ByArgsKeys: many}},
	} {
		_, goErr := b.client.Insert(ctx, weir.RawArgs{KindName: "k", JSON: json.RawMessage(`{}`)}, &weir.InsertOpts{Unique: tt.u})
		invalid, ok := errors.AsType[*weir.InvalidError](goErr)
		if !ok {
			t.Fatalf("%s: Go gave %v, want an *InvalidError", tt.sql, goErr)
		}
		_, err := conn.Exec(ctx, "SELECT * FROM "+b.schema+".weir_enqueue('k', "+tt.sql+")")
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "22023" || pgErr.Message != "weir: invalid: "+invalid.Message {
			t.Errorf("%s: %v, want 22023 %q", tt.sql, err, "weir: invalid: "+invalid.Message)
		}
	}
	// NULL keys are empty ones; NULL or '' as the mode is skip, its default.
	_, err := conn.Exec(ctx, "SELECT * FROM "+b.schema+".weir_enqueue('k', unique_args_keys => ARRAY[NULL::text])")
	if err == nil || !strings.Contains(err.Error(), "unique args key is empty") {
		t.Errorf("NULL key: %v", err)
	}
	if n := b.count(t, "true"); n != 0 {
		t.Fatalf("%d jobs written by bad calls", n)
	}
	for _, m := range []string{"NULL", "''"} {
		if _, err := conn.Exec(ctx, "SELECT * FROM "+b.schema+".weir_enqueue('k', unique_on_conflict => "+m+")"); err != nil {
			t.Errorf("mode %s: %v", m, err)
		}
	}
}

// TestSQLEnqueueDebounceNotifies checks that weir_enqueue wakes workers at
// commit when it moves a job to now, and not when the job stays scheduled.
func TestSQLEnqueueDebounceNotifies(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	conn := b.sqlConn(t)
	notes := listen(t, b)
	debounce := `queue => 'sq', unique_by_args => true, unique_on_conflict => 'debounce', scheduled_at => $1`
	b.sqlUnique(t, conn, "k", `{}`, debounce, time.Now().Add(time.Hour))
	if _, _, rep := b.sqlUnique(t, conn, "k", `{}`, debounce, time.Now().Add(2*time.Hour)); !rep {
		t.Fatal("debounce later did not replace")
	}
	b.marker(t, "scheduled")
	if got := notes.next(t); got != "scheduled" {
		t.Fatalf("notification %q for a job still scheduled", got)
	}
	if _, _, rep := b.sqlUnique(t, conn, "k", `{}`, debounce, time.Now().Add(-time.Second)); !rep {
		t.Fatal("debounce to now did not replace")
	}
	if got := notes.next(t); got != "sq" {
		t.Fatalf("debounce to now: notification %q, want sq", got)
	}
}

// enqueuerGrants is what docs/sql-enqueue.md grants a role that can only
// enqueue, with its names: role weir_enqueuer, schema weir.
const enqueuerGrants = `CREATE ROLE weir_enqueuer NOLOGIN;
GRANT USAGE ON SCHEMA weir TO weir_enqueuer;
GRANT EXECUTE ON FUNCTION weir.weir_enqueue(text, jsonb, text, integer, timestamptz, integer, text[], jsonb,
    boolean, boolean, interval, text[], integer, text[], text) TO weir_enqueuer;
`

// enqueuerUsageOnly is enqueuerGrants without the grant of EXECUTE.
const enqueuerUsageOnly = `CREATE ROLE weir_enqueuer NOLOGIN;
GRANT USAGE ON SCHEMA weir TO weir_enqueuer;
`

// TestSQLEnqueueGrantsDocumented checks that docs/sql-enqueue.md gives the
// grants the tests of the enqueue-only role make.
func TestSQLEnqueueGrantsDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("docs/sql-enqueue.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "```sql\n"+enqueuerGrants+"```") {
		t.Errorf("docs/sql-enqueue.md does not give the grants the tests make:\n%s", enqueuerGrants)
	}
}

// role makes a role by grants (enqueuerGrants or a part of it, whose names
// are replaced by the role's and b's schema's), lets it log in, connects as
// it, and drops it, with its privileges, when the test ends. Its name is b's
// schema's (which dbtest marks) followed by _enqueuer.
func (b *bundle) role(t *testing.T, grants string) (string, *pgx.Conn) {
	t.Helper()
	role := b.schema + "_enqueuer"
	grants = strings.NewReplacer("weir_enqueuer", role, "SCHEMA weir ", "SCHEMA "+b.schema+" ",
		"weir.weir_enqueue(", b.schema+".weir_enqueue(").Replace(grants)
	if _, err := b.pool.Exec(testCtx(t), grants+"ALTER ROLE "+role+" LOGIN", pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := b.pool.Exec(ctx, "DROP OWNED BY "+role+"; DROP ROLE "+role, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	cfg, err := pgx.ParseConfig(b.pool.Config().ConnConfig.ConnString())
	if err != nil {
		t.Fatal(err)
	}
	cfg.User, cfg.Password = role, ""
	conn, err := pgx.ConnectConfig(testCtx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) }) // runs before the drop
	return role, conn
}

// wantDenied fails the test unless err is PostgreSQL's insufficient_privilege
// (SQLSTATE 42501) with a message that contains want.
func wantDenied(t *testing.T, what string, err error, want string) {
	t.Helper()
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" || !strings.Contains(pgErr.Message, want) {
		t.Errorf("%s: %v, want insufficient_privilege saying %q", what, err, want)
	}
}

// TestSQLEnqueueRole checks the role docs/sql-enqueue.md grants, made by
// those statements: it enqueues through weir_enqueue, and a worker runs the
// job; it can neither read, insert, change, delete nor truncate any table of
// weir's, so it can neither read another job's args, cancel it, replace its
// args, nor insert a job that skips weir_enqueue's checks of names.
func TestSQLEnqueueRole(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := testCtx(t)
	ran := make(chan *weir.Job[probeArgs], 1)
	b.start(t, fastConfig(probeWorkers(func(_ context.Context, job *weir.Job[probeArgs]) error {
		ran <- job
		return nil
	}), nil))
	// Another job, in a queue no worker takes, that the role must not reach.
	secret := b.insertProbe(t, "card 4111 1111 1111 1111", &weir.InsertOpts{Queue: "secret"})
	_, conn := b.role(t, enqueuerGrants)

	var id int64
	if err := conn.QueryRow(ctx, "SELECT id FROM "+b.schema+`.weir_enqueue('probe', '{"name": "from the role"}')`).Scan(&id); err != nil {
		t.Fatalf("the role cannot enqueue: %v", err)
	}
	select {
	case job := <-ran:
		if job.ID != id || job.Args.Name != "from the role" {
			t.Fatalf("worker ran job %d %+v, want %d from the role", job.ID, job.Args, id)
		}
	case <-ctx.Done():
		t.Fatal("no worker ran the role's job")
	}

	job := "weir job " + strconv.FormatInt(secret, 10)
	_, err := conn.Exec(ctx, "SELECT args FROM "+b.schema+".weir_job WHERE id = $1", secret)
	wantDenied(t, "read "+job, err, "permission denied for table weir_job")
	_, err = conn.Exec(ctx, "UPDATE "+b.schema+".weir_job SET state = 'cancelled', finalized_at = now() WHERE id = $1", secret)
	wantDenied(t, "cancel "+job, err, "permission denied for table weir_job")
	_, err = conn.Exec(ctx, "UPDATE "+b.schema+`.weir_job SET args = '{"name": "forged"}' WHERE id = $1`, secret)
	wantDenied(t, "replace the args of "+job, err, "permission denied for table weir_job")
	_, err = conn.Exec(ctx, "INSERT INTO "+b.schema+".weir_job (kind, queue, args) VALUES ('send email', 'q/1', '{}')")
	wantDenied(t, "insert a job by hand", err, "permission denied for table weir_job")
	if j := b.job(t, secret); j.State != weir.JobStateAvailable || !strings.Contains(string(j.Args), "4111") {
		t.Fatalf("job %d is %s with args %s", secret, j.State, j.Args)
	}

	tables := b.tables(t)
	if !slices.Contains(tables, "weir_job") || !slices.Contains(tables, "weir_ready") {
		t.Fatalf("tables %q", tables)
	}
	for _, table := range tables {
		name := b.schema + "." + table
		for _, stmt := range []string{
			"SELECT * FROM " + name + " LIMIT 1",
			"INSERT INTO " + name + " DEFAULT VALUES",
			"UPDATE " + name + " SET " + b.firstColumn(t, table) + " = " + b.firstColumn(t, table),
			"DELETE FROM " + name,
			"TRUNCATE " + name,
		} {
			_, err := conn.Exec(ctx, stmt)
			wantDenied(t, stmt, err, "permission denied for table "+table)
		}
	}
	if n := b.count(t, "true"); n != 2 {
		t.Fatalf("%d jobs, want the role's and the secret one", n)
	}
}

// tables returns the names of the tables of b's schema, partitioned tables and
// partitions included.
func (b *bundle) tables(t *testing.T) []string {
	t.Helper()
	rows, err := b.pool.Query(testCtx(t), `SELECT relname FROM pg_class
		WHERE relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = $1) AND relkind IN ('r', 'p') ORDER BY 1`, b.schema)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// firstColumn returns the name of the first column of table in b's schema.
func (b *bundle) firstColumn(t *testing.T, table string) string {
	t.Helper()
	var name string
	if err := b.pool.QueryRow(testCtx(t), `SELECT attname FROM pg_attribute
		WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped ORDER BY attnum LIMIT 1`,
		b.schema+"."+table).Scan(&name); err != nil {
		t.Fatal(err)
	}
	return name
}

// TestSQLEnqueueRoleMaxArgsBytes checks that max_args_bytes may lower the
// function's limit of 1 MiB and never raise it, whoever calls it.
func TestSQLEnqueueRoleMaxArgsBytes(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := testCtx(t)
	_, conn := b.role(t, enqueuerGrants)
	large := `jsonb_build_object('pad', repeat('x', 1048576))`
	for _, tt := range []struct{ call, want string }{
		{`weir_enqueue('k', max_args_bytes => 1048577)`, "max_args_bytes 1048577 is above the server's limit of 1048576 bytes; it may only lower the limit"},
		{`weir_enqueue('k', ` + large + `, max_args_bytes => 2147483647)`, "max_args_bytes 2147483647 is above the server's limit of 1048576 bytes"},
		{`weir_enqueue('k', metadata => ` + large + `, max_args_bytes => 4194304)`, "max_args_bytes 4194304 is above the server's limit"},
		{`weir_enqueue('k', '{"a": "` + strings.Repeat("x", 100) + `"}', max_args_bytes => 50)`, "args of kind \"k\" are 109 bytes; the limit is 50"},
	} {
		_, err := conn.Exec(ctx, "SELECT * FROM "+b.schema+"."+tt.call)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "22023" || !strings.Contains(pgErr.Message, tt.want) {
			t.Errorf("%s: %v, want invalid_parameter_value saying %q", tt.call, err, tt.want)
		}
	}
	// At the limit, and below it, the call goes through.
	for _, limit := range []int{1048576, 1000} {
		if _, err := conn.Exec(ctx, "SELECT * FROM "+b.schema+".weir_enqueue('k', max_args_bytes => $1)", limit); err != nil {
			t.Errorf("max_args_bytes %d: %v", limit, err)
		}
	}
	if n := b.count(t, "true"); n != 2 {
		t.Fatalf("%d jobs, want the 2 calls within the limit", n)
	}
}

// TestSQLEnqueuePublicCannotExecute checks that a role with USAGE on weir's
// schema and no grant on weir_enqueue cannot call it: PUBLIC may not.
func TestSQLEnqueuePublicCannotExecute(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, conn := b.role(t, enqueuerUsageOnly)
	_, err := conn.Exec(testCtx(t), "SELECT * FROM "+b.schema+".weir_enqueue('k')")
	wantDenied(t, "weir_enqueue without a grant", err, "permission denied for function weir_enqueue")
	if n := b.count(t, "true"); n != 0 {
		t.Fatalf("%d jobs", n)
	}
}

// TestSQLEnqueueTempTables checks that weir_enqueue, which runs with its
// owner's rights, writes weir's tables and never a temporary table of its
// caller's with the same name: the role makes temporary weir_job and
// weir_ready tables and a weir_ready_mode sequence that says the list is
// off, enqueues, and makes a pending unique job available by
// debounce (which writes weir_ready from the update trigger); the jobs are in
// weir's tables and in its ready list, and its own tables stay empty.
func TestSQLEnqueueTempTables(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := testCtx(t)
	if err := b.driver.ReadyListOn(ctx); err != nil {
		t.Fatal(err)
	}
	_, conn := b.role(t, enqueuerGrants)
	for _, stmt := range []string{
		// The list's mode, off: the triggers would write no rows if they
		// read it.
		`CREATE TEMP SEQUENCE weir_ready_mode MINVALUE 0`,
		`SELECT setval('pg_temp.weir_ready_mode', 0, true)`,
		`CREATE TEMP TABLE weir_job (id bigserial, state text, queue text, kind text, args jsonb, priority smallint,
			max_attempts smallint, scheduled_at timestamptz, tags text[], metadata jsonb, unique_key bytea, unique_states smallint)`,
		`CREATE TEMP TABLE weir_ready (seg smallint, queue text, priority smallint, scheduled_at timestamptz, job_id bigint, key text)`,
	} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	enqueue := func(extra string) int64 {
		t.Helper()
		var id int64
		if err := conn.QueryRow(ctx, "SELECT id FROM "+b.schema+`.weir_enqueue('probe', '{"name": "a"}', unique_by_args => true, unique_by_queue => true`+extra+`)`).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	first := enqueue(", queue => 'now'")
	later := enqueue(", queue => 'later', scheduled_at => now() + interval '1 hour'")
	if later == first {
		t.Fatalf("the second unique job found the first, %d", first)
	}
	if again := enqueue(", queue => 'later', unique_on_conflict => 'debounce'"); again != later {
		t.Fatalf("debounce gave job %d, want %d", again, later)
	}
	for _, id := range []int64{first, later} {
		var ready int
		if err := b.pool.QueryRow(ctx, "SELECT count(*) FROM "+b.schema+".weir_ready WHERE job_id = $1", id).Scan(&ready); err != nil {
			t.Fatal(err)
		}
		if j := b.job(t, id); j.State != weir.JobStateAvailable || ready == 0 {
			t.Errorf("job %d is %s with %d rows in weir's ready list, want available and listed", id, j.State, ready)
		}
	}
	var temp int
	if err := conn.QueryRow(ctx, "SELECT (SELECT count(*) FROM pg_temp.weir_job) + (SELECT count(*) FROM pg_temp.weir_ready)").Scan(&temp); err != nil {
		t.Fatal(err)
	}
	if temp != 0 {
		t.Fatalf("%d rows went to the role's temporary tables", temp)
	}
}

// TestSQLEnqueueGrantsSurviveMigrations checks that a role granted as
// docs/sql-enqueue.md says keeps its grant when weir's migrations are reverted
// to the baseline and applied again, and when an up applies nothing: it
// enqueues after each. Between, at the baseline, weir_enqueue runs with its
// caller's rights, so the role, which has no rights on the tables, cannot.
func TestSQLEnqueueGrantsSurviveMigrations(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := testCtx(t)
	_, conn := b.role(t, enqueuerGrants)
	call := "SELECT * FROM " + b.schema + ".weir_enqueue('probe')"
	if _, err := conn.Exec(ctx, call); err != nil {
		t.Fatalf("before the migrations: %v", err)
	}
	m := weirmigrate.New(b.driver)
	if _, err := m.Down(ctx, &weirmigrate.DownOpts{TargetVersion: 1}); err != nil {
		t.Fatal(err)
	}
	_, err := conn.Exec(ctx, call)
	wantDenied(t, "weir_enqueue at the baseline", err, "permission denied for table weir_job")
	done, err := m.Up(ctx, nil)
	if err != nil || len(done) == 0 {
		t.Fatalf("up applied %v: %v", done, err)
	}
	if _, err := conn.Exec(ctx, call); err != nil {
		t.Fatalf("after down and up: %v", err)
	}
	if done, err := m.Up(ctx, nil); err != nil || len(done) != 0 {
		t.Fatalf("a second up applied %v: %v", done, err)
	}
	if _, err := conn.Exec(ctx, call); err != nil {
		t.Fatalf("after an up that applied nothing: %v", err)
	}
	if n := b.count(t, "true"); n != 3 {
		t.Fatalf("%d jobs, want 3", n)
	}
}
