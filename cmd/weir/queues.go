package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/weirq/weir"
	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

var queuesCommand = &command{
	name:    "queues",
	summary: "list queues with their jobs by state and limits; pause, resume or limit a queue",
	usage:   queuesUsage,
	run:     runQueues,
}

const queuesSynopsis = `Usage:

    weir queues list   [--json]
    weir queues pause  NAME [--create]
    weir queues resume NAME
    weir queues set    NAME [--global-limit N|none] [--rate N/PERIOD|none]
                            [--key-limit KEY:N|KEY:N/PERIOD|KEY:N,N/PERIOD|none] [--create]

Each action also takes --database-url URL and --schema NAME.

list prints every queue that has jobs, is paused or has a limit, with its
limits and its jobs counted by state, as a table or, with --json, as a JSON
array.
pause stops every client from starting jobs of the queue until it is resumed;
running jobs finish. Pausing a paused queue changes nothing. A queue weir does
not know (no jobs, not paused) is refused as a likely typo unless --create is
given, to pause a queue before its first job.
resume lets clients start the queue's jobs again. Resuming a queue that is not
paused changes nothing.
set --global-limit N lets at most N (1 to 1,000,000) of the queue's jobs run at
once across every client; none removes the limit. It takes effect at every
client's next claim, and stops no running job. set --rate N/PERIOD (such as
50/1s or 1000/1m) lets at most N jobs start per PERIOD (1ms to 24h) across
every client, spread evenly; none removes it. set --key-limit KEY:N (such as
args.customer_id:2) lets at most N (1 to 1,000,000) jobs with the same value
of that field of their args or metadata run at once across every client;
KEY:N/PERIOD lets at most N of them start per PERIOD, spread evenly; KEY:N,M/PERIOD
sets both; none removes them. A client started later that
declares a limit for the queue in its configuration stores its own. An unknown
queue is refused as for pause, unless --create is given.
`

var queuesGroup = &actionGroup{
	name: "queues", actions: []string{"list", "pause", "resume", "set"}, synopsis: queuesSynopsis,
	flags: func(action string) *flag.FlagSet { fs, _ := queuesFlags(action); return fs },
}

func queuesUsage(w io.Writer) { queuesGroup.usage(w) }

// queuesOpts are the flags of weir queues' actions.
type queuesOpts struct {
	db          dbFlags
	json        bool
	create      bool
	globalLimit string
	rate        string
	keyLimit    string
}

func queuesFlags(action string) (*flag.FlagSet, *queuesOpts) {
	o := &queuesOpts{}
	fs := newFlagSet("weir queues " + action)
	o.db.register(fs)
	switch action {
	case "list":
		fs.BoolVar(&o.json, "json", false, "print a JSON array of queues")
	case "pause":
		fs.BoolVar(&o.create, "create", false, "pause the queue even if weir does not know it yet (it has no jobs and is not paused)")
	case "set":
		fs.StringVar(&o.globalLimit, "global-limit", "", "the most jobs of the queue running at once across every client, 1 to 1000000, or none")
		fs.StringVar(&o.rate, "rate", "", "the most jobs of the queue started per period across every client, `N/PERIOD` (50/1s), or none")
		fs.StringVar(&o.keyLimit, "key-limit", "", "the most jobs of the queue with the same key running at once, started per period, or both, across every client: `KEY:N`, KEY:N/PERIOD or KEY:N,N/PERIOD (args.customer_id:2,10/1s), or none")
		fs.BoolVar(&o.create, "create", false, "set the limit even if weir does not know the queue yet")
	}
	return fs, o
}

func runQueues(ctx context.Context, e *env, args []string) error {
	action, err := queuesGroup.action(e, args)
	if err != nil {
		return err
	}
	fs, o := queuesFlags(action)
	positional, err := parseArgs(e, fs, args[1:], queuesUsage)
	if err != nil {
		return err
	}
	if err := o.db.resolve(e, fs); err != nil {
		return err
	}
	name, err := nameArg(fs, action, positional, "queue name")
	if err != nil {
		return err
	}

	var (
		limit    int
		rate     weir.RateLimit
		keyLimit weir.KeyLimit
	)
	if action == "set" {
		if o.globalLimit == "" && o.rate == "" && o.keyLimit == "" {
			return usagef("%s: nothing to set: give --global-limit, --rate or --key-limit (run `%s -h`)", cmdName(fs), fs.Name())
		}
		if o.globalLimit != "" {
			if limit, err = parseGlobalLimit(fs, o.globalLimit); err != nil {
				return err
			}
		}
		if o.rate != "" {
			if rate, err = parseRate(fs, o.rate); err != nil {
				return err
			}
		}
		if o.keyLimit != "" {
			if keyLimit, err = weir.ParseKeyLimit(o.keyLimit); err != nil {
				return usagef("%s: --key-limit %s", cmdName(fs), termSafe(err.Error()))
			}
		}
	}

	client, closeDB, err := openClient(ctx, &o.db)
	if err != nil {
		return err
	}
	defer closeDB()
	switch action {
	case "list":
		return queuesList(ctx, e, fs, o, client)
	case "pause", "set":
		if !o.create {
			known, err := queueKnown(ctx, client, name)
			if err != nil {
				return o.db.clientErr(fs, err)
			}
			if !known {
				return fmt.Errorf("%s: no queue %q: it has no jobs and is not paused or limited (check the name, or pass --create to %s it before its first job)",
					cmdName(fs), name, map[string]string{"pause": "pause", "set": "limit"}[action])
			}
		}
		if action == "set" {
			if o.globalLimit != "" {
				if err := client.QueueSetGlobalLimit(ctx, name, limit); err != nil {
					return o.db.clientErr(fs, err)
				}
				if limit == 0 {
					fmt.Fprintf(e.stdout, "queue %s: no global limit\n", termSafe(name))
				} else {
					fmt.Fprintf(e.stdout, "queue %s: global limit %d\n", termSafe(name), limit)
				}
			}
			if o.rate != "" {
				if err := client.QueueSetRateLimit(ctx, name, rate); err != nil {
					return o.db.clientErr(fs, err)
				}
				if rate.Limit == 0 {
					fmt.Fprintf(e.stdout, "queue %s: no rate limit\n", termSafe(name))
				} else {
					fmt.Fprintf(e.stdout, "queue %s: rate limit %s\n", termSafe(name), rate)
				}
			}
			if o.keyLimit != "" {
				if err := client.QueueSetKeyLimit(ctx, name, keyLimit); err != nil {
					return o.db.clientErr(fs, err)
				}
				if keyLimit == (weir.KeyLimit{}) {
					fmt.Fprintf(e.stdout, "queue %s: no key limit\n", termSafe(name))
				} else {
					fmt.Fprintf(e.stdout, "queue %s: key limit %s\n", termSafe(name), termSafe(keyLimit.String()))
				}
			}
			return nil
		}
		if err := client.QueuePause(ctx, name); err != nil {
			return o.db.clientErr(fs, err)
		}
		_, err = fmt.Fprintf(e.stdout, "queue %s paused\n", termSafe(name))
	case "resume":
		if err := client.QueueResume(ctx, name); err != nil {
			return o.db.clientErr(fs, err)
		}
		_, err = fmt.Fprintf(e.stdout, "queue %s resumed\n", termSafe(name))
	}
	return err
}

// parseGlobalLimit reads --global-limit: "none" (0) or 1 to 1,000,000.
func parseGlobalLimit(fs *flag.FlagSet, v string) (int, error) {
	if v == "" {
		return 0, usagef("%s: --global-limit is required: a number from 1 to %d, or none (run `%s -h`)", cmdName(fs), weirdriver.MaxGlobalLimit, fs.Name())
	}
	n, err := weir.ParseGlobalLimit(v)
	if err != nil {
		return 0, usagef("%s: --global-limit %s", cmdName(fs), termSafe(err.Error()))
	}
	return n, nil
}

// parseRate reads --rate: "none", or N/PERIOD with N 1 to 1,000,000 and
// PERIOD a Go duration from 1ms to 24h.
func parseRate(fs *flag.FlagSet, v string) (weir.RateLimit, error) {
	r, err := weir.ParseRateLimit(v)
	if err != nil {
		return r, usagef("%s: --rate %s", cmdName(fs), termSafe(err.Error()))
	}
	return r, nil
}

// queueKnown reports whether the queue has jobs or a row of its own, so that
// pause does not silently make a paused queue out of a mistyped name. A name
// outside the name rules is left to QueuePause to refuse.
func queueKnown(ctx context.Context, client *weir.Client, name string) (bool, error) {
	// One job is enough, and cheaper to find than the counts of every queue.
	page, err := client.JobList(ctx, &weir.JobListParams{Queues: []string{name}, Limit: 1})
	if errors.Is(err, weir.ErrInvalid) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	if len(page.Jobs) > 0 {
		return true, nil
	}
	queues, err := client.QueueList(ctx)
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(queues, func(q *weir.QueueStats) bool { return q.Name == name }), nil
}

// queueJSON is a queue as weir prints it for scripts. GlobalLimit,
// RateLimit and KeyLimit are null when the queue has none; Counts holds every
// state.
type queueJSON struct {
	Name        string                  `json:"name"`
	Paused      bool                    `json:"paused"`
	GlobalLimit *int                    `json:"global_limit"`
	RateLimit   *rateJSON               `json:"rate_limit"`
	KeyLimit    *keyLimitJSON           `json:"key_limit"`
	Counts      map[weir.JobState]int64 `json:"counts"`
}

// rateJSON is a rate limit: limit jobs per period (a Go duration).
type rateJSON struct {
	Limit  int    `json:"limit"`
	Period string `json:"period"`
}

// keyLimitJSON is a queue's limits per value of key: at most limit jobs
// running (0: none) and a rate (null: none).
type keyLimitJSON struct {
	Key   string    `json:"key"`
	Limit int       `json:"limit"`
	Rate  *rateJSON `json:"rate"`
}

// keyLimitOf is q's limits per key as JSON, nil when it has none.
func keyLimitOf(q *weir.QueueStats) *keyLimitJSON {
	if q.Key == "" {
		return nil
	}
	out := &keyLimitJSON{Key: q.Key, Limit: q.KeyLimit}
	if q.KeyRate > 0 {
		out.Rate = &rateJSON{Limit: q.KeyRate, Period: q.KeyRatePeriod.String()}
	}
	return out
}

func queuesList(ctx context.Context, e *env, fs *flag.FlagSet, o *queuesOpts, client *weir.Client) error {
	queues, err := client.QueueList(ctx)
	if err != nil {
		return o.db.clientErr(fs, err)
	}
	states := weirtype.JobStates()
	if o.json {
		out := make([]queueJSON, len(queues))
		for i, q := range queues {
			out[i] = queueJSON{Name: q.Name, Paused: q.Paused, Counts: map[weir.JobState]int64{}}
			if q.GlobalLimit > 0 {
				out[i].GlobalLimit = &q.GlobalLimit
			}
			if q.RateLimit > 0 {
				out[i].RateLimit = &rateJSON{Limit: q.RateLimit, Period: q.RatePeriod.String()}
			}
			out[i].KeyLimit = keyLimitOf(q)
			for _, s := range states {
				out[i].Counts[s] = q.Counts[s]
			}
		}
		return writeJSON(e.stdout, out)
	}
	if len(queues) == 0 {
		_, err := fmt.Fprintln(e.stdout, "no queues")
		return err
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 8, 2, ' ', 0)
	fmt.Fprint(tw, "NAME\tPAUSED\tGLOBAL LIMIT\tRATE\tKEY LIMIT")
	for _, s := range states {
		fmt.Fprintf(tw, "\t%s", strings.ToUpper(string(s)))
	}
	fmt.Fprintln(tw)
	for _, q := range queues {
		paused := "no"
		if q.Paused {
			paused = "yes"
		}
		limit := "-"
		if q.GlobalLimit > 0 {
			limit = strconv.Itoa(q.GlobalLimit)
		}
		rate := "-"
		if q.RateLimit > 0 {
			rate = weir.RateLimit{Limit: q.RateLimit, Period: q.RatePeriod}.String()
		}
		keyLimit := "-"
		if q.Key != "" {
			keyLimit = termSafe(weir.QueueKeyLimit(q).String())
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s", termSafe(q.Name), paused, limit, rate, keyLimit)
		for _, s := range states {
			fmt.Fprintf(tw, "\t%d", q.Counts[s])
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// nameArg checks the positional arguments of an action of a group whose list
// takes none and whose other actions take one name, and returns that name.
func nameArg(fs *flag.FlagSet, action string, positional []string, what string) (string, error) {
	switch {
	case action == "list" && len(positional) > 0:
		return "", usagef("%s: unexpected argument %q (run `%s -h`)", cmdName(fs), positional[0], fs.Name())
	case action != "list" && len(positional) != 1:
		return "", usagef("%s: want one %s, got %d arguments (run `%s -h`)", cmdName(fs), what, len(positional), fs.Name())
	case action != "list":
		return positional[0], nil
	}
	return "", nil
}
