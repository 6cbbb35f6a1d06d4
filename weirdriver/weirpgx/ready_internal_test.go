package weirpgx

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirmigrate"
)

// TestReadyCompactCountsBeforeMoving: statistics that call a segment all dead
// while it holds more than compactMaxLive rows (a backend's late report of a
// TRUNCATE zeroes the counts of rows written after it) do not have the
// segment's rows moved while claims wait: the segment is counted, left as it
// is and held off. Once few rows are left, it is compacted.
func TestReadyCompactCountsBeforeMoving(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(t, nil)
	schema := dbtest.Schema(t)
	d, err := New(pool, &Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := weirmigrate.New(d).Up(ctx, nil); err != nil {
		t.Fatal(err)
	}
	e := d.Executor().(*executor)
	if err := e.readyEnsureOn(ctx); err != nil {
		t.Fatal(err)
	}
	const q = "crowded"
	params := make([]*weirdriver.JobInsertParams, compactMaxLive+1000)
	for i := range params {
		params[i] = &weirdriver.JobInsertParams{Kind: "k", Queue: q, Args: json.RawMessage(`{}`), Priority: 2, MaxAttempts: 3}
	}
	if _, err := e.JobInsert(ctx, params); err != nil {
		t.Fatal(err)
	}
	// One statement writes its rows to one segment (weir_ready_seg reads
	// now(), the statement's time).
	var seg int
	var rows int64
	if err := pool.QueryRow(ctx, "SELECT seg, count(*) FROM "+pgx.Identifier{schema, "weir_ready"}.Sanitize()+
		" GROUP BY seg").Scan(&seg, &rows); err != nil {
		t.Fatal(err)
	}
	if rows != int64(len(params)) {
		t.Fatalf("segment %d holds %d rows, want %d", seg, rows, len(params))
	}
	other := (seg + 1) % readySegments
	allDead := []segmentStats{{n: seg, live: 0, dead: 50000}}

	res, err := e.compactSegments(ctx, false, other, 0, allDead)
	if err != nil {
		t.Fatal(err)
	}
	if res.Crowded != 1 || res.Compacted != 0 || res.Moved != 0 {
		t.Fatalf("compaction of a segment of %d rows that statistics call dead: %+v, want it counted and left", rows, res)
	}
	segRows := func() int64 {
		t.Helper()
		var n int64
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+
			pgx.Identifier{schema, "weir_ready_" + strconv.Itoa(seg)}.Sanitize()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := segRows(); n != rows {
		t.Fatalf("segment %d holds %d rows after the compaction left it, want %d", seg, n, rows)
	}
	// Held off: the next pass does not count it again.
	if res, err = e.compactSegments(ctx, false, other, 0, allDead); err != nil || res.Crowded != 0 || res.Compacted != 0 {
		t.Fatalf("the next pass: %+v, %v; want the segment held off", res, err)
	}

	// With few rows left it is compacted: its live rows move to the segment
	// written to.
	jobs, _, err := e.JobClaim(ctx, &weirdriver.JobClaimParams{Queue: q, Max: len(params) - 10, ClientID: "c", LeaseDuration: time.Minute})
	if err != nil || len(jobs) != len(params)-10 {
		t.Fatalf("claim: %d jobs, %v", len(jobs), err)
	}
	e.compact = &compactState{}
	if res, err = e.compactSegments(ctx, false, other, 0, allDead); err != nil || res.Compacted != 1 || res.Moved != 10 || res.Crowded != 0 {
		t.Fatalf("compaction of the segment with 10 rows left: %+v, %v; want it compacted and the 10 moved", res, err)
	}
	if n := segRows(); n != 0 {
		t.Fatalf("segment %d holds %d rows after its compaction", seg, n)
	}
}
