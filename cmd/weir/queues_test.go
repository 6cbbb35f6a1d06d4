package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/weirq/weir/internal/dbtest"
)

// listedQueue is a queue as `weir queues list --json` prints it.
type listedQueue struct {
	Name        string `json:"name"`
	Paused      bool   `json:"paused"`
	GlobalLimit *int   `json:"global_limit"`
	RateLimit   *struct {
		Limit  int    `json:"limit"`
		Period string `json:"period"`
	} `json:"rate_limit"`
	KeyLimit *struct {
		Key   string `json:"key"`
		Limit int    `json:"limit"`
		Rate  *struct {
			Limit  int    `json:"limit"`
			Period string `json:"period"`
		} `json:"rate"`
	} `json:"key_limit"`
	Counts map[string]int64 `json:"counts"`
}

func TestQueues(t *testing.T) {
	t.Parallel()
	_, weir := migrated(t)

	r := weir(t, "queues", "list")
	wantOK(t, r)
	if r.stdout != "no queues\n" {
		t.Fatalf("list of no queues printed %q", r.stdout)
	}
	r = weir(t, "queues", "list", "--json")
	wantOK(t, r)
	if r.stdout != "[]\n" {
		t.Fatalf("JSON list of no queues printed %q", r.stdout)
	}

	wantOK(t, weir(t, "enqueue", "--kind", "k", "--queue", "mail", "--count", "2"))
	r = weir(t, "enqueue", "--kind", "k", "--queue", "mail", "--in", "1h")
	wantOK(t, r)
	wantOK(t, weir(t, "jobs", "cancel", strings.TrimSpace(r.stdout)))
	wantOK(t, weir(t, "enqueue", "--kind", "k"))

	r = weir(t, "queues", "pause", "mail")
	wantOK(t, r)
	if r.stdout != "queue mail paused\n" {
		t.Fatalf("pause printed %q", r.stdout)
	}
	// Pausing twice is fine. A queue weir does not know is taken for a typo,
	// and changes nothing, unless --create pauses it ahead of its jobs.
	wantOK(t, weir(t, "queues", "pause", "mail"))
	before := weir(t, "queues", "list")
	wantFailure(t, weir(t, "queues", "pause", "empty"), exitFailure,
		`weir: queues pause: no queue "empty": it has no jobs and is not paused`, "--create")
	if after := weir(t, "queues", "list"); after != before {
		t.Fatalf("a refused pause changed the queues: %v, then %v", before, after)
	}
	wantOK(t, weir(t, "queues", "pause", "empty", "--create"))
	// Once paused, weir knows it.
	wantOK(t, weir(t, "queues", "pause", "empty"))

	r = weir(t, "queues", "list")
	wantOK(t, r)
	header, rows := tableRows(t, r.stdout)
	if header != "NAME PAUSED GLOBAL LIMIT RATE KEY LIMIT SCHEDULED AVAILABLE RUNNING RETRYABLE COMPLETED CANCELLED DISCARDED" {
		t.Fatalf("header %q", header)
	}
	want := [][]string{
		{"default", "no", "-", "-", "-", "0", "1", "0", "0", "0", "0", "0"},
		{"empty", "yes", "-", "-", "-", "0", "0", "0", "0", "0", "0", "0"},
		{"mail", "yes", "-", "-", "-", "0", "2", "0", "0", "0", "1", "0"},
	}
	if !slices.EqualFunc(rows, want, slices.Equal) {
		t.Fatalf("list:\n%s\nwant rows %q", r.stdout, want)
	}

	r = weir(t, "queues", "list", "--json")
	wantOK(t, r)
	var queues []listedQueue
	decodeJSON(t, r.stdout, &queues)
	if len(queues) != 3 || queues[2].Name != "mail" || !queues[2].Paused || queues[0].Paused {
		t.Fatalf("list --json: %+v", queues)
	}
	for _, q := range queues {
		if len(q.Counts) != 7 {
			t.Errorf("queue %s counts %d states, want all 7: %v", q.Name, len(q.Counts), q.Counts)
		}
	}
	if c := queues[2].Counts; c["available"] != 2 || c["cancelled"] != 1 || c["scheduled"] != 0 {
		t.Errorf("mail counts %v", c)
	}

	r = weir(t, "queues", "resume", "mail")
	wantOK(t, r)
	if r.stdout != "queue mail resumed\n" {
		t.Fatalf("resume printed %q", r.stdout)
	}
	// Resuming a queue that is not paused changes nothing and succeeds.
	wantOK(t, weir(t, "queues", "resume", "default"))
	r = weir(t, "queues", "list", "--json")
	wantOK(t, r)
	queues = nil
	decodeJSON(t, r.stdout, &queues)
	for _, q := range queues {
		if q.Paused != (q.Name == "empty") {
			t.Errorf("after resume, queue %s paused=%v", q.Name, q.Paused)
		}
	}
}

// TestQueuesSetGlobalLimit: set stores a queue's global limit and none
// removes it; list shows it; an unknown queue needs --create; a bad value is
// refused with an error that names it, and changes nothing.
func TestQueuesSetGlobalLimit(t *testing.T) {
	t.Parallel()
	_, weir := migrated(t)
	wantOK(t, weir(t, "enqueue", "--kind", "k", "--queue", "mail"))

	r := weir(t, "queues", "set", "mail", "--global-limit", "7")
	wantOK(t, r)
	if r.stdout != "queue mail: global limit 7\n" {
		t.Fatalf("set printed %q", r.stdout)
	}
	limits := func() map[string]*int {
		t.Helper()
		r := weir(t, "queues", "list", "--json")
		wantOK(t, r)
		var queues []listedQueue
		decodeJSON(t, r.stdout, &queues)
		out := map[string]*int{}
		for _, q := range queues {
			out[q.Name] = q.GlobalLimit
		}
		return out
	}
	if l := limits(); len(l) != 1 || l["mail"] == nil || *l["mail"] != 7 {
		t.Fatalf("limits after set: %v", l)
	}
	r = weir(t, "queues", "list")
	wantOK(t, r)
	if _, rows := tableRows(t, r.stdout); len(rows) != 1 || rows[0][2] != "7" {
		t.Fatalf("list after set:\n%s", r.stdout)
	}

	before := weir(t, "queues", "list", "--json")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"mail"}, "nothing to set: give --global-limit, --rate or --key-limit"},
		{[]string{"mail", "--rate", "50"}, `--rate "50" is not N/PERIOD`},
		{[]string{"mail", "--rate", "0/1s"}, `--rate "0/1s" is not N/PERIOD`},
		{[]string{"mail", "--rate", "50/0s"}, `--rate "50/0s": the period is not a duration from 1ms to 24h`},
		{[]string{"mail", "--rate", "50/25h"}, `--rate "50/25h": the period`},
		{[]string{"mail", "--rate", "50/1ns"}, `--rate "50/1ns": the period`},
		{[]string{"mail", "--global-limit", "0"}, `--global-limit "0" is not a number from 1 to 1000000, nor none`},
		{[]string{"mail", "--global-limit", "-3"}, `--global-limit "-3" is not a number`},
		{[]string{"mail", "--global-limit", "1000001"}, `--global-limit "1000001" is not a number`},
		{[]string{"mail", "--global-limit", "ten"}, `--global-limit "ten" is not a number`},
		{[]string{"mail", "--key-limit", "args.customer"}, `--key-limit "args.customer" is not KEY:N`},
		{[]string{"mail", "--key-limit", "args.customer:0"}, `--key-limit "args.customer:0": the limit "0" is not a number from 1 to 1000000`},
		{[]string{"mail", "--key-limit", "args.customer:2,0/1s"}, `--key-limit "args.customer:2,0/1s": the rate "0/1s" is not N/PERIOD`},
		{[]string{"mail", "--key-limit", "customer:2"}, `--key-limit "customer:2": key "customer" starts with neither args. nor metadata.`},
		{[]string{"mail", "--key-limit", "args.a b:2"}, `field "a b" outside`},
		{[]string{"mail", "--key-limit", "args.\x1b[31m:2"}, `field "\x1b[31m" outside`},
	} {
		wantFailure(t, weir(t, append([]string{"queues", "set"}, c.args...)...), exitUsage, c.want)
	}
	wantFailure(t, weir(t, "queues", "set", "nope", "--global-limit", "3"), exitFailure,
		`weir: queues set: no queue "nope"`, "--create")
	if after := weir(t, "queues", "list", "--json"); after != before {
		t.Fatalf("refused changes changed the queues: %v, then %v", before, after)
	}

	// --create limits a queue before its first job; none removes a limit.
	wantOK(t, weir(t, "queues", "set", "later", "--global-limit", "2", "--create"))
	r = weir(t, "queues", "set", "mail", "--global-limit", "none")
	wantOK(t, r)
	if r.stdout != "queue mail: no global limit\n" {
		t.Fatalf("set none printed %q", r.stdout)
	}
	if l := limits(); l["mail"] != nil || l["later"] == nil || *l["later"] != 2 {
		t.Fatalf("limits after none: %v", l)
	}

	// A rate limit, with the global limit or alone.
	r = weir(t, "queues", "set", "mail", "--rate", "50/1s", "--global-limit", "4")
	wantOK(t, r)
	if r.stdout != "queue mail: global limit 4\nqueue mail: rate limit 50/1s\n" {
		t.Fatalf("set both printed %q", r.stdout)
	}
	r = weir(t, "queues", "list", "--json")
	wantOK(t, r)
	var rated []listedQueue
	decodeJSON(t, r.stdout, &rated)
	for _, q := range rated {
		if q.Name == "mail" && (q.RateLimit == nil || q.RateLimit.Limit != 50 || q.RateLimit.Period != "1s") {
			t.Fatalf("mail's rate limit in the JSON list: %+v", q.RateLimit)
		}
	}
	r = weir(t, "queues", "list")
	wantOK(t, r)
	if _, rows := tableRows(t, r.stdout); len(rows) != 2 || rows[1][0] != "mail" || rows[1][2] != "4" || rows[1][3] != "50/1s" {
		t.Fatalf("list with a rate limit:\n%s", r.stdout)
	}
	r = weir(t, "queues", "set", "mail", "--rate", "none")
	wantOK(t, r)
	if r.stdout != "queue mail: no rate limit\n" {
		t.Fatalf("set --rate none printed %q", r.stdout)
	}

	// A key limit.
	r = weir(t, "queues", "set", "mail", "--key-limit", "args.customer_id:2")
	wantOK(t, r)
	if r.stdout != "queue mail: key limit args.customer_id:2\n" {
		t.Fatalf("set --key-limit printed %q", r.stdout)
	}
	r = weir(t, "queues", "list", "--json")
	wantOK(t, r)
	var keyed []listedQueue
	decodeJSON(t, r.stdout, &keyed)
	if q := keyed[1]; q.Name != "mail" || q.KeyLimit == nil || q.KeyLimit.Key != "args.customer_id" || q.KeyLimit.Limit != 2 {
		t.Fatalf("mail in the JSON list: %+v", q)
	}
	r = weir(t, "queues", "list")
	wantOK(t, r)
	if _, rows := tableRows(t, r.stdout); len(rows) != 2 || rows[1][4] != "args.customer_id:2" {
		t.Fatalf("list with a key limit:\n%s", r.stdout)
	}
	r = weir(t, "queues", "set", "mail", "--key-limit", "args.customer_id:10/1s")
	wantOK(t, r)
	if r.stdout != "queue mail: key limit args.customer_id:10/1s\n" {
		t.Fatalf("set --key-limit with a rate printed %q", r.stdout)
	}
	r = weir(t, "queues", "set", "mail", "--key-limit", "args.customer_id:2,10/1s")
	wantOK(t, r)
	r = weir(t, "queues", "list", "--json")
	wantOK(t, r)
	keyed = nil
	decodeJSON(t, r.stdout, &keyed)
	if q := keyed[1]; q.KeyLimit == nil || q.KeyLimit.Limit != 2 || q.KeyLimit.Rate == nil || q.KeyLimit.Rate.Limit != 10 || q.KeyLimit.Rate.Period != "1s" {
		t.Fatalf("mail with a key rate in the JSON list: %+v", q.KeyLimit)
	}
	r = weir(t, "queues", "set", "mail", "--key-limit", "none")
	wantOK(t, r)
	if r.stdout != "queue mail: no key limit\n" {
		t.Fatalf("set --key-limit none printed %q", r.stdout)
	}
}

func TestNotMigrated(t *testing.T) {
	t.Parallel()
	commands := [][]string{
		{"enqueue", "--kind", "k"},
		{"enqueue", "--kind", "k", "--count", "100"},
		{"jobs", "list"},
		{"jobs", "list", "--json"},
		{"jobs", "show", "1"},
		{"jobs", "retry", "1", "2"},
		{"jobs", "cancel", "1", "2"},
		{"jobs", "delete", "1", "2"},
		{"queues", "list"},
		{"queues", "pause", "default"},
		{"queues", "resume", "default"},
		{"queues", "set", "default", "--global-limit", "3"},
		{"clients", "list"},
	}
	for _, args := range commands {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			t.Parallel()
			env := map[string]string{envDatabaseURL: dbtest.URL()}

			// An empty schema.
			schema := dbtest.Schema(t)
			before := dbState(t, schema)
			r := runWeir(t, env, append(args, "--schema", schema)...)
			wantFailure(t, r, exitFailure, "weir: schema is not migrated: ", schema, "001_baseline", "run `weir migrate up`")
			if after := dbState(t, schema); after != before {
				t.Fatalf("the database changed:\nbefore %s\nafter  %s", before, after)
			}

			// A schema that does not exist: weir does not create it.
			missing := "nx_" + schema
			r = runWeir(t, env, append(args, "--schema", missing)...)
			wantFailure(t, r, exitFailure, "run `weir migrate up`")
			if s := snapshot(t, missing); !strings.HasPrefix(s, "schema=false") {
				t.Fatalf("schema %s after the failure: %s", missing, s)
			}
		})
	}
}
