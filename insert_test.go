package weir_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/weirq/weir"
	"github.com/weirq/weir/weirdriver"
)

func TestInsertDefaults(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	res, err := b.client.Insert(testCtx(t), emailArgs{To: "a@example.com"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	j := res.Job
	if res.Duplicate || j.Kind != "email.send" || j.Queue != weir.DefaultQueue || j.Priority != weir.DefaultPriority ||
		j.MaxAttempts != weir.DefaultMaxAttempts || j.State != weir.JobStateAvailable || len(j.Tags) != 0 {
		t.Fatalf("unexpected job: %+v", j)
	}
	var args emailArgs
	if err := json.Unmarshal(j.Args, &args); err != nil || args.To != "a@example.com" {
		t.Fatalf("args %s", j.Args)
	}
}

func TestInsertOptsFromArgsAndOverride(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	res, err := b.client.Insert(testCtx(t), reportArgs{Day: "mon"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if j := res.Job; j.Queue != "reports" || j.Priority != 3 || j.MaxAttempts != 5 {
		t.Fatalf("kind defaults not applied: %+v", j)
	}
	at := time.Now().Add(time.Hour)
	res, err = b.client.Insert(testCtx(t), reportArgs{Day: "tue"}, &weir.InsertOpts{
		Priority: 1, ScheduledAt: at, Tags: []string{"nightly", "v2.1"}, Metadata: json.RawMessage(`{"by": "cron"}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	j := res.Job
	if j.Queue != "reports" || j.Priority != 1 || j.MaxAttempts != 5 || j.State != weir.JobStateScheduled ||
		strings.Join(j.Tags, ",") != "nightly,v2.1" || !strings.Contains(string(j.Metadata), "cron") {
		t.Fatalf("override not applied: %+v", j)
	}
}

// TestInsertBadInput checks that each bad input gets an error naming what was wrong
// and that nothing is written.
func TestInsertBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{config: &weir.Config{MaxArgsBytes: 200}})
	long := strings.Repeat("x", 129)
	tests := []struct {
		name string
		args weir.JobArgs
		opts *weir.InsertOpts
		want string
		// field is the InvalidError's Field.
		field string
	}{
		{"nil args", nil, nil, "args are nil", "Args"},
		{"args not an object", listArgs{1, 2}, nil, "must encode to a JSON object", "Args"},
		{"args not JSON", weir.RawArgs{KindName: "raw", JSON: json.RawMessage(`{"a":`)}, nil, "do not encode as JSON", "Args"},
		{"args not encodable", badJSONArgs{C: make(chan int)}, nil, "do not encode as JSON", "Args"},
		{"args empty", weir.RawArgs{KindName: "raw"}, nil, "do not encode as JSON", "Args"},
		{"args over limit", emailArgs{To: strings.Repeat("a", 300)}, nil, "the limit is 200", "Args"},
		{"kind empty", weir.RawArgs{JSON: json.RawMessage(`{}`)}, nil, "kind is empty", "Kind"},
		{"kind too long", weir.RawArgs{KindName: long, JSON: json.RawMessage(`{}`)}, nil, "kind \"xxxx", "Kind"},
		{"kind bad chars", weir.RawArgs{KindName: "send email", JSON: json.RawMessage(`{}`)}, nil, "characters outside", "Kind"},
		{"kind leading dash", weir.RawArgs{KindName: "-x", JSON: json.RawMessage(`{}`)}, nil, "characters outside", "Kind"},
		{"queue too long", emailArgs{}, &weir.InsertOpts{Queue: long}, "queue \"xxxx", "InsertOpts.Queue"},
		{"queue bad chars", emailArgs{}, &weir.InsertOpts{Queue: "q/1"}, "queue \"q/1\" has characters outside", "InsertOpts.Queue"},
		{"queue unicode", emailArgs{}, &weir.InsertOpts{Queue: "köln"}, "has characters outside", "InsertOpts.Queue"},
		{"priority low", emailArgs{}, &weir.InsertOpts{Priority: -1}, "priority -1 is out of range 1..4", "InsertOpts.Priority"},
		{"priority high", emailArgs{}, &weir.InsertOpts{Priority: 5}, "priority 5 is out of range 1..4", "InsertOpts.Priority"},
		{"max attempts negative", emailArgs{}, &weir.InsertOpts{MaxAttempts: -3}, "max attempts -3 is out of range", "InsertOpts.MaxAttempts"},
		{"max attempts huge", emailArgs{}, &weir.InsertOpts{MaxAttempts: 100_000}, "max attempts 100000 is out of range", "InsertOpts.MaxAttempts"},
		{"tag empty", emailArgs{}, &weir.InsertOpts{Tags: []string{""}}, "tag is empty", "InsertOpts.Tags"},
		{"tag bad chars", emailArgs{}, &weir.InsertOpts{Tags: []string{"a b"}}, "tag \"a b\"", "InsertOpts.Tags"},
		{"too many tags", emailArgs{}, &weir.InsertOpts{Tags: make([]string, 33)}, "33 tags given", "InsertOpts.Tags"},
		{"metadata not object", emailArgs{}, &weir.InsertOpts{Metadata: json.RawMessage(`[1]`)}, "metadata must be a JSON object", "InsertOpts.Metadata"},
		{"metadata not JSON", emailArgs{}, &weir.InsertOpts{Metadata: json.RawMessage(`{x}`)}, "metadata must be a JSON object", "InsertOpts.Metadata"},
		{"unique negative period", emailArgs{}, &weir.InsertOpts{Unique: weir.UniqueOpts{ByPeriod: -time.Second}}, "unique period -1s is negative", "InsertOpts.Unique.ByPeriod"},
		{"unique tiny period", emailArgs{}, &weir.InsertOpts{Unique: weir.UniqueOpts{ByPeriod: time.Millisecond}}, "under one second", "InsertOpts.Unique.ByPeriod"},
		{"unique unknown state", emailArgs{}, &weir.InsertOpts{Unique: weir.UniqueOpts{ByState: []weir.JobState{"available", "bogus"}}}, "\"bogus\" is not a job state", "InsertOpts.Unique.ByState"},
		{"unique without running", emailArgs{}, &weir.InsertOpts{Unique: weir.UniqueOpts{ByState: []weir.JobState{
			weir.JobStateScheduled, weir.JobStateAvailable, weir.JobStateRetryable}}}, "must include \"running\"", "InsertOpts.Unique.ByState"},
	}
	for _, tt := range tests {
		_, err := b.client.Insert(testCtx(t), tt.args, tt.opts)
		if err == nil {
			t.Errorf("%s: no error", tt.name)
			continue
		}
		if !errors.Is(err, weir.ErrInvalid) {
			t.Errorf("%s: error %q does not wrap ErrInvalid", tt.name, err)
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %q does not say %q", tt.name, err, tt.want)
		}
		if e, ok := errors.AsType[*weir.InvalidError](err); !ok || e.Field != tt.field {
			t.Errorf("%s: %#v, want an *InvalidError about %s", tt.name, e, tt.field)
		}
	}
	if n := b.count(t, "true"); n != 0 {
		t.Fatalf("%d jobs written by bad inserts", n)
	}
}

func TestInsertArgsLimitDefault(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	big := emailArgs{To: strings.Repeat("a", 1<<20)}
	_, err := b.client.Insert(testCtx(t), big, nil)
	if !errors.Is(err, weir.ErrInvalid) || !strings.Contains(err.Error(), "the limit is 1048576") {
		t.Fatalf("1 MiB args: %v", err)
	}
	// Just under the limit goes in.
	fits := emailArgs{To: strings.Repeat("a", 1<<20-len(`{"to":""}`))}
	if _, err := b.client.Insert(testCtx(t), fits, nil); err != nil {
		t.Fatalf("args at the limit: %v", err)
	}
}

func TestNewClientBadConfig(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{noMigrate: true})
	for _, tc := range []struct {
		name   string
		driver weirdriver.Driver
		config *weir.Config
		field  string
	}{
		{"negative MaxArgsBytes", b.driver, &weir.Config{MaxArgsBytes: -1}, "Config.MaxArgsBytes"},
		{"long ID", b.driver, &weir.Config{ID: strings.Repeat("i", 200)}, "Config.ID"},
		{"bad queue name", b.driver, &weir.Config{Queues: map[string]weir.QueueConfig{"a b": {MaxWorkers: 1}}}, "Config.Queues"},
		{"nil driver", nil, nil, "driver"},
	} {
		_, err := weir.NewClient(tc.driver, tc.config)
		if e, ok := errors.AsType[*weir.InvalidError](err); !ok || e.Field != tc.field || !errors.Is(err, weir.ErrInvalid) {
			t.Errorf("%s: %v, want an *InvalidError about %s", tc.name, err, tc.field)
		}
	}
}

// TestInsertManyIsAllOrNothing checks that one bad job in a batch writes nothing.
func TestInsertManyIsAllOrNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, size := range []int{10, 500} { // the statement path and the COPY path
		params := make([]weir.InsertManyParams, size)
		for i := range params {
			params[i] = weir.InsertManyParams{Args: noopArgs{N: i}}
		}
		params[size/2].InsertOpts = &weir.InsertOpts{Priority: 9}
		_, err := b.client.InsertMany(testCtx(t), params)
		want := fmt.Sprintf("job %d of %d", size/2+1, size)
		if !errors.Is(err, weir.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Fatalf("size %d: %v, want an error naming %q", size, err, want)
		}
		// The position and the message are fields, for a caller to show as it likes.
		invalid, ok := errors.AsType[*weir.InvalidError](err)
		if !ok || invalid.Job != size/2+1 || invalid.Jobs != size || !strings.Contains(invalid.Message, "priority") ||
			strings.Contains(invalid.Message, "job ") {
			t.Fatalf("size %d: %#v, want an *InvalidError for job %d of %d about the priority", size, invalid, size/2+1, size)
		}
	}
	_, err := b.client.Insert(testCtx(t), noopArgs{}, &weir.InsertOpts{Priority: 9})
	if invalid, ok := errors.AsType[*weir.InvalidError](err); !ok || invalid.Job != 0 || invalid.Jobs != 0 {
		t.Fatalf("single insert: %#v, want an *InvalidError about no batch", err)
	}
	if n := b.count(t, "true"); n != 0 {
		t.Fatalf("%d jobs written", n)
	}
	if _, err := b.client.InsertMany(testCtx(t), nil); !errors.Is(err, weir.ErrInvalid) {
		t.Fatalf("empty batch: %v", err)
	}
}

// TestInsertManyCopy inserts 100k jobs through the COPY path.
func TestInsertManyCopy(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	const n = 100_000
	params := make([]weir.InsertManyParams, n)
	for i := range params {
		params[i] = weir.InsertManyParams{Args: noopArgs{N: i}}
		if i%1000 == 0 {
			params[i].InsertOpts = &weir.InsertOpts{Queue: "other", ScheduledAt: time.Now().Add(time.Hour)}
		}
	}
	res, err := b.client.InsertMany(testCtx(t), params)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != n {
		t.Fatalf("%d results", len(res))
	}
	seen := make(map[int64]bool, n)
	for i, r := range res {
		var args noopArgs
		if err := json.Unmarshal(r.Job.Args, &args); err != nil || args.N != i {
			t.Fatalf("result %d has args %s", i, r.Job.Args)
		}
		if seen[r.Job.ID] {
			t.Fatalf("id %d returned twice", r.Job.ID)
		}
		seen[r.Job.ID] = true
	}
	if got := b.count(t, "state = 'available' AND queue = 'default'"); got != n-n/1000 {
		t.Fatalf("%d available jobs, want %d", got, n-n/1000)
	}
	if got := b.count(t, "state = 'scheduled' AND queue = 'other'"); got != n/1000 {
		t.Fatalf("%d scheduled jobs, want %d", got, n/1000)
	}
	// The returned rows are the stored ones.
	last := res[n-1].Job
	stored, err := b.client.JobGet(testCtx(t), last.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !stored.CreatedAt.Equal(last.CreatedAt) || stored.State != last.State || stored.Kind != last.Kind {
		t.Fatalf("stored %+v, returned %+v", stored, last)
	}
}

func TestInsertUnique(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := testCtx(t)
	byArgs := &weir.InsertOpts{Unique: weir.UniqueOpts{ByArgs: true}}

	first, err := b.client.Insert(ctx, weir.RawArgs{KindName: "u", JSON: json.RawMessage(`{"a":1,"b":2}`)}, byArgs)
	if err != nil || first.Duplicate {
		t.Fatalf("first: %v %+v", err, first)
	}
	// Same args with the keys in another order and other spacing: a duplicate.
	second, err := b.client.Insert(ctx, weir.RawArgs{KindName: "u", JSON: json.RawMessage(`{ "b": 2, "a": 1 }`)}, byArgs)
	if err != nil {
		t.Fatal(err)
	}
	if !second.Duplicate || second.Job.ID != first.Job.ID {
		t.Fatalf("second insert: duplicate=%v id=%d, want the first job %d", second.Duplicate, second.Job.ID, first.Job.ID)
	}
	// Other args: a new job.
	other, err := b.client.Insert(ctx, weir.RawArgs{KindName: "u", JSON: json.RawMessage(`{"a":2}`)}, byArgs)
	if err != nil || other.Duplicate {
		t.Fatalf("other args: %v %+v", err, other)
	}
	// By queue: the same kind in another queue is a new job.
	byQueue := func(q string) *weir.InsertOpts {
		return &weir.InsertOpts{Queue: q, Unique: weir.UniqueOpts{ByQueue: true}}
	}
	q1, _ := b.client.Insert(ctx, noopArgs{}, byQueue("q1"))
	q2, _ := b.client.Insert(ctx, noopArgs{}, byQueue("q2"))
	q1again, err := b.client.Insert(ctx, noopArgs{N: 7}, byQueue("q1"))
	if err != nil || q1.Duplicate || q2.Duplicate || !q1again.Duplicate || q1again.Job.ID != q1.Job.ID {
		t.Fatalf("by queue: %v %v %v %v", err, q1.Duplicate, q2.Duplicate, q1again.Duplicate)
	}
	// By period: jobs scheduled in the same hour collide, the next hour does not.
	hour := time.Now().Add(48 * time.Hour).Truncate(time.Hour)
	byPeriod := func(at time.Time) *weir.InsertOpts {
		return &weir.InsertOpts{ScheduledAt: at, Unique: weir.UniqueOpts{ByPeriod: time.Hour}}
	}
	p1, _ := b.client.Insert(ctx, emailArgs{}, byPeriod(hour.Add(time.Minute)))
	p2, _ := b.client.Insert(ctx, emailArgs{}, byPeriod(hour.Add(59*time.Minute)))
	p3, err := b.client.Insert(ctx, emailArgs{}, byPeriod(hour.Add(61*time.Minute)))
	if err != nil || p1.Duplicate || !p2.Duplicate || p2.Job.ID != p1.Job.ID || p3.Duplicate {
		t.Fatalf("by period: %v %v %v %v", err, p1.Duplicate, p2.Duplicate, p3.Duplicate)
	}
	// Within one batch, the second of two equal jobs is a duplicate of the first.
	batch, err := b.client.InsertMany(ctx, []weir.InsertManyParams{
		{Args: reportArgs{Day: "x"}, InsertOpts: byArgs},
		{Args: reportArgs{Day: "x"}, InsertOpts: byArgs},
	})
	if err != nil || batch[0].Duplicate || !batch[1].Duplicate || batch[1].Job.ID != batch[0].Job.ID {
		t.Fatalf("batch: %v %+v %+v", err, batch[0], batch[1])
	}
	// By default completed jobs hold the key, cancelled ones do not.
	if _, err := b.client.JobCancel(ctx, first.Job.ID); err != nil {
		t.Fatal(err)
	}
	third, err := b.client.Insert(ctx, weir.RawArgs{KindName: "u", JSON: json.RawMessage(`{"a":1,"b":2}`)}, byArgs)
	if err != nil || third.Duplicate || third.Job.ID == first.Job.ID {
		t.Fatalf("after cancel: %v %+v", err, third)
	}
	if n := b.count(t, "kind = 'u'"); n != 3 {
		t.Fatalf("%d jobs of kind u, want 3", n)
	}
}

// TestInsertManyMixed inserts unique and plain jobs in one batch large enough for COPY.
func TestInsertManyMixed(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := testCtx(t)
	existing, err := b.client.Insert(ctx, emailArgs{To: "x"}, &weir.InsertOpts{Unique: weir.UniqueOpts{ByArgs: true}})
	if err != nil {
		t.Fatal(err)
	}
	params := make([]weir.InsertManyParams, 200)
	for i := range params {
		params[i] = weir.InsertManyParams{Args: noopArgs{N: i}}
	}
	params[10] = weir.InsertManyParams{Args: emailArgs{To: "x"}, InsertOpts: &weir.InsertOpts{Unique: weir.UniqueOpts{ByArgs: true}}}
	params[20] = weir.InsertManyParams{Args: emailArgs{To: "y"}, InsertOpts: &weir.InsertOpts{Unique: weir.UniqueOpts{ByArgs: true}}}
	res, err := b.client.InsertMany(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if !res[10].Duplicate || res[10].Job.ID != existing.Job.ID || res[20].Duplicate || res[0].Duplicate {
		t.Fatalf("results: %+v %+v", res[10], res[20])
	}
	if n := b.count(t, "true"); n != 1+199 {
		t.Fatalf("%d jobs, want 200", n)
	}
}

// notifications listens on the insert channel of b's schema.
type notifications struct {
	conn *pgx.Conn
}

func listen(t *testing.T, b *bundle) *notifications {
	t.Helper()
	conn, err := pgx.Connect(testCtx(t), b.pool.Config().ConnConfig.ConnString())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(testCtx(t), `LISTEN "`+b.schema+`.weir_insert"`); err != nil {
		t.Fatal(err)
	}
	return &notifications{conn: conn}
}

// marker sends a notification on the insert channel from its own transaction. The
// server delivers notifications in commit order, so a marker received first proves
// that no insert notification was committed before it.
func (b *bundle) marker(t *testing.T, payload string) {
	t.Helper()
	if _, err := b.pool.Exec(testCtx(t), "SELECT pg_notify($1, $2)", b.schema+".weir_insert", payload); err != nil {
		t.Fatal(err)
	}
}

func (n *notifications) next(t *testing.T) string {
	t.Helper()
	note, err := n.conn.WaitForNotification(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	return note.Payload
}

// TestInsertTxVisibility checks G8: a job inserted in a transaction exists exactly
// when the transaction commits, and wakes workers only then.
func TestInsertTxVisibility(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := testCtx(t)
	notes := listen(t, b)

	for _, commit := range []bool{true, false} {
		tx, err := b.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		res, err := b.client.InsertTx(ctx, tx, emailArgs{To: "tx"}, &weir.InsertOpts{Queue: "txq"})
		if err != nil {
			t.Fatal(err)
		}
		// Inside the transaction the job is there; outside it is not, and no
		// notification has gone out.
		var inside int
		if err := tx.QueryRow(ctx, "SELECT count(*) FROM "+b.schema+".weir_job WHERE id = $1", res.Job.ID).Scan(&inside); err != nil || inside != 1 {
			t.Fatalf("inside the transaction: %d rows, %v", inside, err)
		}
		if _, err := b.client.JobGet(ctx, res.Job.ID); !errors.Is(err, weir.ErrNotFound) {
			t.Fatalf("before commit, outside the transaction: %v, want ErrNotFound", err)
		}
		b.marker(t, "before")
		if got := notes.next(t); got != "before" {
			t.Fatalf("notification %q arrived before the transaction ended", got)
		}
		if commit {
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if got := notes.next(t); got != "txq" {
				t.Fatalf("after commit: notification %q, want txq", got)
			}
			if _, err := b.client.JobGet(ctx, res.Job.ID); err != nil {
				t.Fatalf("after commit: %v", err)
			}
		} else {
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			b.marker(t, "after")
			if got := notes.next(t); got != "after" {
				t.Fatalf("after rollback: notification %q, want none before the marker", got)
			}
			if _, err := b.client.JobGet(ctx, res.Job.ID); !errors.Is(err, weir.ErrNotFound) {
				t.Fatalf("after rollback: %v, want ErrNotFound", err)
			}
		}
	}
}

// TestInsertManyTxVisibility is TestInsertTxVisibility for the COPY path.
func TestInsertManyTxVisibility(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := testCtx(t)
	notes := listen(t, b)
	params := make([]weir.InsertManyParams, 1000)
	for i := range params {
		params[i] = weir.InsertManyParams{Args: noopArgs{N: i}, InsertOpts: &weir.InsertOpts{Queue: "bulkq"}}
	}
	for _, commit := range []bool{false, true} {
		tx, err := b.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.client.InsertManyTx(ctx, tx, params); err != nil {
			t.Fatal(err)
		}
		if n := b.count(t, "queue = 'bulkq'"); n != 0 {
			t.Fatalf("%d jobs visible before commit", n)
		}
		b.marker(t, "before")
		if got := notes.next(t); got != "before" {
			t.Fatalf("notification %q before the transaction ended", got)
		}
		if commit {
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if got := notes.next(t); got != "bulkq" {
				t.Fatalf("after commit: %q, want bulkq", got)
			}
			if n := b.count(t, "queue = 'bulkq'"); n != 1000 {
				t.Fatalf("%d jobs after commit", n)
			}
		} else {
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			b.marker(t, "after")
			if got := notes.next(t); got != "after" {
				t.Fatalf("after rollback: %q", got)
			}
			if n := b.count(t, "queue = 'bulkq'"); n != 0 {
				t.Fatalf("%d jobs after rollback", n)
			}
		}
	}
}

// TestInsertSQLTx checks the database/sql variant the same way.
func TestInsertSQLTx(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := testCtx(t)
	db := stdlib.OpenDBFromPool(b.pool)
	t.Cleanup(func() { db.Close() })
	notes := listen(t, b)

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := b.client.InsertSQLTx(ctx, tx, emailArgs{To: "sql"}, &weir.InsertOpts{Queue: "sqlq", Tags: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	many := make([]weir.InsertManyParams, 100)
	for i := range many {
		many[i] = weir.InsertManyParams{Args: noopArgs{N: i}, InsertOpts: &weir.InsertOpts{Queue: "sqlq"}}
	}
	if _, err := b.client.InsertManySQLTx(ctx, tx, many); err != nil {
		t.Fatal(err)
	}
	if res.Job.Queue != "sqlq" || res.Job.Tags[0] != "a" {
		t.Fatalf("job %+v", res.Job)
	}
	if n := b.count(t, "queue = 'sqlq'"); n != 0 {
		t.Fatalf("%d jobs visible before commit", n)
	}
	b.marker(t, "before")
	if got := notes.next(t); got != "before" {
		t.Fatalf("notification %q before commit", got)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := notes.next(t); got != "sqlq" {
		t.Fatalf("after commit: %q", got)
	}
	if n := b.count(t, "queue = 'sqlq'"); n != 101 {
		t.Fatalf("%d jobs after commit, want 101", n)
	}
}

func TestInsertTxWrongType(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, err := b.client.InsertTx(testCtx(t), nil, emailArgs{}, nil)
	if e, ok := errors.AsType[*weir.InvalidError](err); !ok || e.Field != "tx" || !errors.Is(err, weir.ErrInvalid) {
		t.Fatalf("nil tx: %v, want an *InvalidError about tx", err)
	}
}

// TestNotMigrated checks that an unmigrated schema is reported with the missing
// migration's name, and that nothing is created by the attempt.
func TestNotMigrated(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{noMigrate: true})
	ctx := testCtx(t)
	_, err := b.client.Insert(ctx, emailArgs{}, nil)
	if !errors.Is(err, weir.ErrNotMigrated) || !strings.Contains(err.Error(), "001_baseline") ||
		!strings.Contains(err.Error(), "weir migrate up") {
		t.Fatalf("insert on an unmigrated schema: %v", err)
	}
	if _, err := b.client.JobList(ctx, nil); !errors.Is(err, weir.ErrNotMigrated) {
		t.Fatalf("list on an unmigrated schema: %v", err)
	}
	var tables int
	if err := b.pool.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname = $1", b.schema).Scan(&tables); err != nil || tables != 0 {
		t.Fatalf("%d tables in the schema after failed calls (%v)", tables, err)
	}
}
