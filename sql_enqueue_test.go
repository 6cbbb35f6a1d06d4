package weir_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/weirq/weir"
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
