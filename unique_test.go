package weir_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirq/weir"
	"github.com/weirq/weir/weirdriver"
)

// store is a client on one of the two stores, for the tests that must hold on
// both.
type store struct {
	name   string
	client *weir.Client
	// pg is set on PostgreSQL.
	pg *bundle
}

// count returns the number of jobs of kind.
func (s *store) count(t *testing.T, kind string) int {
	t.Helper()
	jobs, err := s.client.Driver().Executor().JobList(testCtx(t), &weirdriver.JobListParams{Kinds: []string{kind}, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return len(jobs)
}

func (s *store) job(t *testing.T, id int64) *weir.JobRow {
	t.Helper()
	j, err := s.client.JobGet(testCtx(t), id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// stores runs fn on PostgreSQL and on SQLite, each a subtest on a fresh store.
func stores(t *testing.T, fn func(t *testing.T, s *store)) {
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		fn(t, &store{name: "postgres", client: b.client, pg: b})
	})
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		client, err := weir.NewClient(sqliteStore(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		fn(t, &store{name: "sqlite", client: client})
	})
}

// syncArgs is unique by its account and region (struct tags), not its note.
type syncArgs struct {
	Account string `json:"account" weir:"unique"`
	Region  string `json:"region,omitempty" weir:"unique"`
	Note    string `json:"note"`
}

func (syncArgs) Kind() string { return "sync" }

// pushArgs takes its unique field from an embedded struct, as encoding/json
// spreads it over the top level.
type pushArgs struct {
	pushTarget
	Body string `json:"body"`
}

type pushTarget struct {
	Device string `json:"device" weir:"unique"`
}

func (pushArgs) Kind() string { return "push" }

func raw(kind, js string) weir.RawArgs {
	return weir.RawArgs{KindName: kind, JSON: json.RawMessage(js)}
}

// insert inserts and fails the test on error.
func insert(t *testing.T, s *store, args weir.JobArgs, opts *weir.InsertOpts) *weir.InsertResult {
	t.Helper()
	res, err := s.client.Insert(testCtx(t), args, opts)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestUniqueByArgsKeys checks keys made of some of the args: by struct tags
// and by ByArgsKeys, which give the same key for the same fields; keys the args
// lack are left out; without tags all args count.
func TestUniqueByArgsKeys(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, s *store) {
		byArgs := &weir.InsertOpts{Unique: weir.UniqueOpts{ByArgs: true}}
		first := insert(t, s, syncArgs{Account: "a1", Region: "eu", Note: "one"}, byArgs)
		if first.Duplicate {
			t.Fatal("first insert was a duplicate")
		}
		// Another note: the same key.
		if r := insert(t, s, syncArgs{Account: "a1", Region: "eu", Note: "two"}, byArgs); !r.Duplicate || r.Job.ID != first.Job.ID {
			t.Fatalf("other note: %+v, want a duplicate of %d", r, first.Job.ID)
		}
		// Another tagged field: a new job.
		if r := insert(t, s, syncArgs{Account: "a1", Region: "us"}, byArgs); r.Duplicate {
			t.Fatal("another region collided")
		}
		// The same fields named with ByArgsKeys on raw JSON, in another order
		// and spacing: the same key as the tags gave.
		keys := &weir.InsertOpts{Unique: weir.UniqueOpts{ByArgsKeys: []string{"region", "account"}}}
		if r := insert(t, s, raw("sync", `{ "note": "raw", "region": "eu", "account": "a1" }`), keys); !r.Duplicate || r.Job.ID != first.Job.ID {
			t.Fatalf("ByArgsKeys on raw args: %+v, want a duplicate of %d", r, first.Job.ID)
		}
		// A listed key the args lack is left out: {"account":"a2"} either way,
		// whether omitempty dropped the region or the key was never there.
		noRegion := insert(t, s, syncArgs{Account: "a2", Note: "x"}, byArgs)
		if r := insert(t, s, raw("sync", `{"account": "a2", "other": 1}`), keys); !r.Duplicate || r.Job.ID != noRegion.Job.ID {
			t.Fatalf("absent key: %+v, want a duplicate of %d", r, noRegion.Job.ID)
		}
		// ByArgsKeys wins over the tags.
		byNote := &weir.InsertOpts{Unique: weir.UniqueOpts{ByArgs: true, ByArgsKeys: []string{"note"}}}
		n1 := insert(t, s, syncArgs{Account: "b1", Note: "same"}, byNote)
		if r := insert(t, s, syncArgs{Account: "b2", Note: "same"}, byNote); !r.Duplicate || r.Job.ID != n1.Job.ID {
			t.Fatalf("ByArgsKeys over tags: %+v, want a duplicate of %d", r, n1.Job.ID)
		}
		// Tags of an embedded struct count at the top level.
		p1 := insert(t, s, pushArgs{pushTarget{Device: "d1"}, "hi"}, byArgs)
		if r := insert(t, s, pushArgs{pushTarget{Device: "d1"}, "bye"}, byArgs); !r.Duplicate || r.Job.ID != p1.Job.ID {
			t.Fatalf("embedded tag: %+v, want a duplicate of %d", r, p1.Job.ID)
		}
		// Without tags, all args are the key, as before.
		insert(t, s, emailArgs{To: "x", Subject: "1"}, byArgs)
		if r := insert(t, s, emailArgs{To: "x", Subject: "2"}, byArgs); r.Duplicate {
			t.Fatal("untagged args: another subject collided")
		}
		// Without ByArgs, the tags do nothing.
		byQueue := &weir.InsertOpts{Queue: "tagless", Unique: weir.UniqueOpts{ByQueue: true}}
		q1 := insert(t, s, syncArgs{Account: "c1"}, byQueue)
		if r := insert(t, s, syncArgs{Account: "c2"}, byQueue); !r.Duplicate || r.Job.ID != q1.Job.ID {
			t.Fatalf("tags without ByArgs: %+v, want a duplicate of %d", r, q1.Job.ID)
		}
		if n := s.count(t, "sync"); n != 5 {
			t.Fatalf("%d sync jobs, want 5", n)
		}
	})
}

// TestUniqueOnConflict checks what each mode does to a pending duplicate
// through the client, with a key by some of the args: replace changes the
// non-key args and keeps the key and the scheduled time, debounce moves the
// time too; a running duplicate is reported and left as it is.
func TestUniqueOnConflict(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, s *store) {
		ctx := testCtx(t)
		soon := time.Now().Add(time.Hour).Truncate(time.Microsecond)
		later := soon.Add(time.Hour)
		opts := func(mode weir.UniqueConflict, at time.Time, tags ...string) *weir.InsertOpts {
			return &weir.InsertOpts{ScheduledAt: at, Tags: tags, Priority: 3, MaxAttempts: 4,
				Metadata: json.RawMessage(`{"tags":"` + strings.Join(tags, ",") + `"}`),
				Unique:   weir.UniqueOpts{ByArgs: true, OnConflict: mode}}
		}
		first := insert(t, s, syncArgs{Account: "a", Note: "first"}, opts(weir.UniqueSkip, soon, "one"))

		skipped := insert(t, s, syncArgs{Account: "a", Note: "skip"}, opts(weir.UniqueSkip, later, "skip"))
		if !skipped.Duplicate || skipped.Replaced || !strings.Contains(string(s.job(t, first.Job.ID).Args), "first") {
			t.Fatalf("skip: %+v changed the job", skipped)
		}

		replaced := insert(t, s, syncArgs{Account: "a", Note: "replace"}, &weir.InsertOpts{ScheduledAt: later, Tags: []string{"two"},
			Priority: 1, MaxAttempts: 9, Metadata: json.RawMessage(`{"v":2}`), Unique: weir.UniqueOpts{ByArgs: true, OnConflict: weir.UniqueReplace}})
		j := s.job(t, first.Job.ID)
		if !replaced.Duplicate || !replaced.Replaced || replaced.Job.ID != first.Job.ID {
			t.Fatalf("replace: %+v", replaced)
		}
		if !strings.Contains(string(j.Args), `"replace"`) || !slices.Equal(j.Tags, []string{"two"}) || j.Priority != 1 ||
			j.MaxAttempts != 9 || !strings.Contains(string(j.Metadata), "2") {
			t.Fatalf("replace did not take the new fields: %+v", j)
		}
		if !j.ScheduledAt.Equal(soon) || j.State != weir.JobStateScheduled {
			t.Fatalf("replace moved the job: %s %s, want %s scheduled", j.ScheduledAt, j.State, soon)
		}
		if string(j.UniqueKey) != string(first.Job.UniqueKey) || !strings.Contains(string(replaced.Job.Args), `"replace"`) {
			t.Fatalf("replace changed the key or returned the old row: %x vs %x, %s", j.UniqueKey, first.Job.UniqueKey, replaced.Job.Args)
		}

		debounced := insert(t, s, syncArgs{Account: "a", Note: "debounce"}, opts(weir.UniqueDebounce, later, "three"))
		j = s.job(t, first.Job.ID)
		if !debounced.Replaced || !j.ScheduledAt.Equal(later) || j.State != weir.JobStateScheduled || !strings.Contains(string(j.Args), "debounce") {
			t.Fatalf("debounce: %+v, job at %s %s args %s", debounced, j.ScheduledAt, j.State, j.Args)
		}
		// Debounced to now: due at once.
		now := insert(t, s, syncArgs{Account: "a", Note: "now"}, opts(weir.UniqueDebounce, time.Time{}, "four"))
		if j = s.job(t, first.Job.ID); !now.Replaced || j.State != weir.JobStateAvailable || !j.ScheduledAt.Before(soon) {
			t.Fatalf("debounce to now: %+v, job at %s %s", now, j.ScheduledAt, j.State)
		}

		// Running: every mode reports the duplicate and changes nothing.
		claimed, _, err := s.client.Driver().Executor().JobClaim(ctx, &weirdriver.JobClaimParams{
			Queue: weir.DefaultQueue, Max: 1, ClientID: "test", LeaseDuration: time.Hour})
		if err != nil || len(claimed) != 1 || claimed[0].ID != first.Job.ID {
			t.Fatalf("claim: %v %v", claimed, err)
		}
		running := s.job(t, first.Job.ID)
		for _, mode := range []weir.UniqueConflict{weir.UniqueSkip, weir.UniqueReplace, weir.UniqueDebounce} {
			r := insert(t, s, syncArgs{Account: "a", Note: "late"}, opts(mode, later, "late"))
			if !r.Duplicate || r.Replaced || r.Job.ID != first.Job.ID || r.Job.State != weir.JobStateRunning {
				t.Fatalf("%s on a running job: %+v", mode, r)
			}
			if got := s.job(t, first.Job.ID); string(got.Args) != string(running.Args) || !got.ScheduledAt.Equal(running.ScheduledAt) ||
				!slices.Equal(got.Tags, running.Tags) {
				t.Fatalf("%s changed a running job: %+v", mode, got)
			}
		}
		if n := s.count(t, "sync"); n != 1 {
			t.Fatalf("%d jobs, want 1", n)
		}
	})
}

// TestUniqueInsertManySameKey checks a batch that holds one key several times:
// it ends as inserting its jobs one after another would, so the later ones of
// replace and debounce win, and each job is told what it did.
func TestUniqueInsertManySameKey(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, s *store) {
		ctx := testCtx(t)
		t1 := time.Now().Add(time.Hour).Truncate(time.Microsecond)
		t2, t3 := t1.Add(time.Hour), t1.Add(2*time.Hour)
		job := func(note string, mode weir.UniqueConflict, at time.Time) weir.InsertManyParams {
			return weir.InsertManyParams{Args: syncArgs{Account: "k", Note: note},
				InsertOpts: &weir.InsertOpts{ScheduledAt: at, Priority: len(note)%4 + 1, Unique: weir.UniqueOpts{ByArgs: true, OnConflict: mode}}}
		}
		// No holder: the first inserts, the later replace and debounce win in turn.
		res, err := s.client.InsertMany(ctx, []weir.InsertManyParams{
			job("first", weir.UniqueSkip, t1),
			{Args: noopArgs{N: 1}},
			job("debounced", weir.UniqueDebounce, t3),
			job("skipped", weir.UniqueSkip, t2),
			job("replaced", weir.UniqueReplace, t2),
		})
		if err != nil {
			t.Fatal(err)
		}
		id := res[0].Job.ID
		if res[0].Duplicate || !res[2].Replaced || !res[3].Duplicate || res[3].Replaced || !res[4].Replaced || res[1].Duplicate {
			t.Fatalf("results: %+v %+v %+v %+v", res[0], res[2], res[3], res[4])
		}
		for _, i := range []int{0, 2, 3, 4} {
			if res[i].Job.ID != id || !strings.Contains(string(res[i].Job.Args), "replaced") {
				t.Fatalf("result %d: job %d args %s, want job %d as the batch left it", i, res[i].Job.ID, res[i].Job.Args, id)
			}
		}
		j := s.job(t, id)
		if !strings.Contains(string(j.Args), "replaced") || !j.ScheduledAt.Equal(t3) || j.Priority != len("replaced")%4+1 {
			t.Fatalf("job after the batch: args %s at %s priority %d", j.Args, j.ScheduledAt, j.Priority)
		}
		// A pending holder: a skip first leaves it, a replace after it changes it.
		res, err = s.client.InsertMany(ctx, []weir.InsertManyParams{
			job("skip-again", weir.UniqueSkip, t2),
			job("replace-again", weir.UniqueReplace, t2),
		})
		if err != nil {
			t.Fatal(err)
		}
		if !res[0].Duplicate || res[0].Replaced || !res[1].Replaced || res[0].Job.ID != id || res[1].Job.ID != id {
			t.Fatalf("second batch: %+v %+v", res[0], res[1])
		}
		if j = s.job(t, id); !strings.Contains(string(j.Args), "replace-again") || !j.ScheduledAt.Equal(t3) {
			t.Fatalf("after the second batch: %s at %s", j.Args, j.ScheduledAt)
		}
		if n := s.count(t, "sync"); n != 1 {
			t.Fatalf("%d sync jobs, want 1", n)
		}
	})
}

// TestUniqueConcurrentInserts runs 8 inserts of the same unique job at once in
// each mode: one job results, one caller inserted it, and every other caller
// got that job back, replaced in replace and debounce (the job stays pending).
func TestUniqueConcurrentInserts(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, s *store) {
		for _, mode := range []weir.UniqueConflict{weir.UniqueSkip, weir.UniqueReplace, weir.UniqueDebounce} {
			const n = 8
			results := make([]*weir.InsertResult, n)
			errs := make([]error, n)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					<-start
					results[i], errs[i] = s.client.Insert(testCtx(t), syncArgs{Account: string(mode), Note: fmt.Sprint(i)},
						&weir.InsertOpts{ScheduledAt: time.Now().Add(time.Hour), Unique: weir.UniqueOpts{ByArgs: true, OnConflict: mode}})
				})
			}
			close(start)
			wg.Wait()
			inserted, notes := 0, map[string]bool{}
			var id int64
			for i, r := range results {
				if errs[i] != nil {
					t.Fatalf("%s: insert %d: %v", mode, i, errs[i])
				}
				if !r.Duplicate {
					inserted++
					id = r.Job.ID
				} else if r.Replaced != (mode != weir.UniqueSkip) {
					t.Fatalf("%s: insert %d: replaced=%v", mode, i, r.Replaced)
				}
				notes[fmt.Sprint(i)] = true
			}
			if inserted != 1 {
				t.Fatalf("%s: %d callers inserted, want 1", mode, inserted)
			}
			jobs, err := s.client.Driver().Executor().JobList(testCtx(t), &weirdriver.JobListParams{Kinds: []string{"sync"}, Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			var mine []*weir.JobRow
			for _, j := range jobs {
				var a syncArgs
				if err := json.Unmarshal(j.Args, &a); err != nil {
					t.Fatal(err)
				}
				if a.Account == string(mode) {
					mine = append(mine, j)
				}
			}
			if len(mine) != 1 || mine[0].ID != id {
				t.Fatalf("%s: %d jobs, want the one inserted (%d)", mode, len(mine), id)
			}
			for i, r := range results {
				if r.Job.ID != id {
					t.Fatalf("%s: insert %d got job %d, want %d", mode, i, r.Job.ID, id)
				}
			}
			var got syncArgs
			if err := json.Unmarshal(mine[0].Args, &got); err != nil || !notes[got.Note] {
				t.Fatalf("%s: job args %s come from no caller", mode, mine[0].Args)
			}
		}
	})
}

// TestUniqueBadInput checks that bad unique options and tags are refused with
// an *InvalidError naming the field, and that nothing is written.
func TestUniqueBadInput(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, s *store) {
		tooMany := make([]string, 33)
		for i := range tooMany {
			tooMany[i] = fmt.Sprint("k", i)
		}
		tests := []struct {
			name  string
			args  weir.JobArgs
			u     weir.UniqueOpts
			field string
			want  string
		}{
			{"unknown mode", syncArgs{}, weir.UniqueOpts{ByArgs: true, OnConflict: "upsert"}, "InsertOpts.Unique.OnConflict",
				`unique conflict mode "upsert" is not one of skip, replace, debounce`},
			{"mode alone", syncArgs{}, weir.UniqueOpts{OnConflict: weir.UniqueReplace}, "InsertOpts.Unique.OnConflict",
				`unique conflict mode "replace" is set but the job is not unique`},
			{"empty key", syncArgs{}, weir.UniqueOpts{ByArgsKeys: []string{"a", ""}}, "InsertOpts.Unique.ByArgsKeys", "unique args key is empty"},
			{"long key", syncArgs{}, weir.UniqueOpts{ByArgsKeys: []string{strings.Repeat("k", 129)}}, "InsertOpts.Unique.ByArgsKeys",
				"is 129 bytes long; the limit is 128"},
			{"key twice", syncArgs{}, weir.UniqueOpts{ByArgsKeys: []string{"a", "b", "a"}}, "InsertOpts.Unique.ByArgsKeys", `unique args key "a" is listed twice`},
			{"key not UTF-8", syncArgs{}, weir.UniqueOpts{ByArgsKeys: []string{"a\xff"}}, "InsertOpts.Unique.ByArgsKeys", "is not valid UTF-8 or holds a NUL byte"},
			{"key with NUL", syncArgs{}, weir.UniqueOpts{ByArgsKeys: []string{"a\x00"}}, "InsertOpts.Unique.ByArgsKeys", "is not valid UTF-8 or holds a NUL byte"},
			{"too many keys", syncArgs{}, weir.UniqueOpts{ByArgsKeys: tooMany}, "InsertOpts.Unique.ByArgsKeys", "33 unique args keys given; the limit is 32"},
			{"unknown tag", badTagArgs{}, weir.UniqueOpts{ByArgs: true}, "Args", `field A has weir tag "uniq"; the only one known is "unique"`},
			{"tag on skipped field", hiddenTagArgs{}, weir.UniqueOpts{ByArgs: true}, "Args", `field A is tagged weir:"unique" but is not encoded in the args`},
			{"tag on embedded", embeddedTagArgs{}, weir.UniqueOpts{ByArgs: true}, "Args", `embedded field pushTarget is tagged weir:"unique"; tag its fields instead`},
		}
		for _, tt := range tests {
			for _, many := range []bool{false, true} {
				var err error
				if many {
					_, err = s.client.InsertMany(testCtx(t), []weir.InsertManyParams{{Args: noopArgs{}}, {Args: tt.args, InsertOpts: &weir.InsertOpts{Unique: tt.u}}})
				} else {
					_, err = s.client.Insert(testCtx(t), tt.args, &weir.InsertOpts{Unique: tt.u})
				}
				e, ok := errors.AsType[*weir.InvalidError](err)
				if !ok || !errors.Is(err, weir.ErrInvalid) || e.Field != tt.field || !strings.Contains(e.Message, tt.want) {
					t.Errorf("%s (batch %v): %v (%#v), want an *InvalidError about %s saying %q", tt.name, many, err, e, tt.field, tt.want)
				}
			}
		}
		// An explicit skip alone is no unique option at all, as weir_enqueue's
		// default 'skip' is.
		a := insert(t, s, noopArgs{}, &weir.InsertOpts{Unique: weir.UniqueOpts{OnConflict: weir.UniqueSkip}})
		b := insert(t, s, noopArgs{}, &weir.InsertOpts{Unique: weir.UniqueOpts{OnConflict: weir.UniqueSkip}})
		if a.Duplicate || b.Duplicate || len(a.Job.UniqueKey) != 0 {
			t.Fatalf("skip alone made the job unique: %+v %+v", a, b)
		}
		for _, kind := range []string{"sync", "badtag", "hiddentag", "embeddedtag"} {
			if n := s.count(t, kind); n != 0 {
				t.Fatalf("%d %s jobs written by bad inserts", n, kind)
			}
		}
		if n := s.count(t, "noop"); n != 2 {
			t.Fatalf("%d noop jobs, want the 2 good ones", n)
		}
	})
}

type badTagArgs struct {
	A string `json:"a" weir:"uniq"`
}

func (badTagArgs) Kind() string { return "badtag" }

type hiddenTagArgs struct {
	A string `json:"-" weir:"unique"`
	B string `json:"b"`
}

func (hiddenTagArgs) Kind() string { return "hiddentag" }

type embeddedTagArgs struct {
	pushTarget `weir:"unique"`
}

func (embeddedTagArgs) Kind() string { return "embeddedtag" }
