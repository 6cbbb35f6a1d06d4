package weirbench

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Options say what Run runs. DefaultOptions gives the sizes of the benchmark
// specification; RegisterFlags makes each one a command-line flag.
type Options struct {
	// DatabaseURL is the PostgreSQL to run on.
	DatabaseURL string `json:"-"`
	// Title heads the report ("weir vs River").
	Title string `json:"title"`
	// Command and Args are the command that reproduces the run, printed in
	// the report: Command as it is ("cd bench && go run ./cmd/compare"), then
	// Args quoted as a shell needs them.
	Command string   `json:"command"`
	Args    []string `json:"args"`
	// Workloads are the workloads to run, by the names Workloads lists.
	Workloads []string `json:"workloads"`
	// Rounds is how many times each workload runs on each system, alternating
	// the systems.
	Rounds int `json:"rounds"`
	// MaxConns is the pool size of each client.
	MaxConns int `json:"max_conns"`

	// DrainJobs is the number of jobs W1 inserts and then drains.
	DrainJobs int `json:"drain_jobs"`
	// DrainCeiling says whether each W1 drain is followed by as many jobs
	// drained with raw SQL from a table of the benchmark's own (the
	// ceiling), in CeilingSchema (default DefaultCeilingSchema), which Run
	// claims as it claims the systems' schemas.
	DrainCeiling  bool   `json:"drain_ceiling"`
	CeilingSchema string `json:"ceiling_schema,omitempty"`
	// Batch is the number of jobs of each bulk insert in W1, W4 and W5.
	Batch int `json:"batch"`
	// InsertJobs is the number of jobs W4 bulk-inserts.
	InsertJobs int `json:"insert_jobs"`
	// InsertDuration is how long each W4 single-insert run lasts.
	InsertDuration time.Duration `json:"insert_duration"`
	// MixedRates are the rates W2 offers, in jobs/s, one run each.
	MixedRates []int `json:"mixed_rates"`
	// MixedDuration is how long each W2 run offers its rate.
	MixedDuration time.Duration `json:"mixed_duration"`
	// LatencyRate is the rate W3 offers, in jobs/s.
	LatencyRate int `json:"latency_rate"`
	// LatencyDuration is how long each W3 run offers its rate.
	LatencyDuration time.Duration `json:"latency_duration"`
	// RSSJobs and RSSWorkers are the jobs W5's worker process drains and the
	// handlers it runs at once.
	RSSJobs    int `json:"rss_jobs"`
	RSSWorkers int `json:"rss_workers"`
	// PressureRate and PressureDuration are W7's offered rate, in jobs/s, and
	// how long it offers it.
	PressureRate     int           `json:"pressure_rate"`
	PressureDuration time.Duration `json:"pressure_duration"`
	// ScaleJobs is the jobs each W8 drain works down; ScaleProcs the
	// numbers of worker processes that share it, one run each; ScaleWorkers
	// the handlers of all of them together. ScaleRate is the rate W8's
	// mixed load offers for ScaleDuration, worked by ScaleMixedProcs
	// processes.
	ScaleJobs       int           `json:"scale_jobs"`
	ScaleProcs      []int         `json:"scale_procs"`
	ScaleWorkers    int           `json:"scale_workers"`
	ScaleRate       int           `json:"scale_rate"`
	ScaleDuration   time.Duration `json:"scale_duration"`
	ScaleMixedProcs int           `json:"scale_mixed_procs"`
	// LimitJobs is the jobs each W6 drain works down, by LimitProcs worker
	// processes sharing ScaleWorkers handlers, once without a limit, once
	// with a global limit of GlobalLimit on the queue, and once with a limit
	// of KeyLimit per key, the jobs having LimitKeys keys in turn.
	LimitJobs   int `json:"limit_jobs"`
	LimitProcs  int `json:"limit_procs"`
	GlobalLimit int `json:"global_limit"`
	KeyLimit    int `json:"key_limit"`
	LimitKeys   int `json:"limit_keys"`
	// Timeout bounds each drain; a run that takes longer fails.
	Timeout time.Duration `json:"timeout"`

	// Progress receives progress and the systems' warnings: a line that
	// updates in place on a terminal, plain lines otherwise. Nil means none.
	Progress io.Writer `json:"-"`
	// ChildCommand re-executes this program (its path and arguments) as W5's
	// worker process; the program must call RunChild when it finds ChildEnv
	// in its environment. Required for the rss workload.
	ChildCommand []string `json:"-"`
}

// Workloads lists the workloads in the order Run runs them:
//
//	drain             W1: DrainJobs jobs inserted, then worked down (Throughput)
//	mixed             W2: a producer offers each of MixedRates while a client works (Throughput)
//	latency           W3: LatencyRate single inserts per second, pickup latency (Latency)
//	latency-defaults  W3 with every system's defaults (Defaults)
//	bulk              W4: InsertJobs jobs in bulk inserts of Batch
//	single1, single8  W4: single inserts from 1 and 8 goroutines, and pgbench's
//	                  single-row INSERT into the same table, their ceiling
//	rss               W5: a worker process of RSSWorkers handlers drains RSSJobs jobs
//	pressure          W7: PressureRate jobs/s for PressureDuration while another
//	                  transaction holds a snapshot open from the start (Throughput)
//	pressure-clean    W7 without the snapshot, the baseline it is judged by
//	scale             W8: ScaleJobs jobs drained by each of ScaleProcs worker
//	                  processes at once, ScaleWorkers handlers among them
//	scale-mixed       W8: ScaleRate jobs/s for ScaleDuration, worked by
//	                  ScaleMixedProcs worker processes
//	limit             W6: LimitJobs jobs drained by LimitProcs worker processes,
//	                  without a limit, then with a global limit of GlobalLimit,
//	                  then with KeyLimit per key of LimitKeys (systems that have
//	                  no such limits run the first only)
func Workloads() []string {
	return []string{"drain", "mixed", "latency", "latency-defaults", "bulk", "single1", "single8", "rss",
		"pressure", "pressure-clean", "scale", "scale-mixed", "limit"}
}

// longWorkloads are the workloads DefaultOptions leaves out, asked for by
// name: W7 runs for PressureDuration (10 minutes) per round and system, and
// W8 starts worker processes of its own.
var longWorkloads = []string{"pressure", "pressure-clean", "scale", "scale-mixed", "limit"}

// DefaultOptions returns the benchmark specification's sizes and every workload
// but the long ones (W7), which are asked for by name.
func DefaultOptions() Options {
	return Options{
		Workloads:        slices.DeleteFunc(Workloads(), func(w string) bool { return slices.Contains(longWorkloads, w) }),
		Rounds:           3,
		MaxConns:         20,
		DrainJobs:        200_000,
		DrainCeiling:     true,
		Batch:            5_000,
		InsertJobs:       200_000,
		InsertDuration:   10 * time.Second,
		MixedRates:       []int{2_000, 5_000, 10_000},
		MixedDuration:    30 * time.Second,
		LatencyRate:      1_000,
		LatencyDuration:  30 * time.Second,
		RSSJobs:          1_000_000,
		RSSWorkers:       2_000,
		PressureRate:     5_000,
		PressureDuration: 10 * time.Minute,
		ScaleJobs:        400_000,
		ScaleProcs:       []int{1, 2, 4},
		ScaleWorkers:     1_000,
		LimitJobs:        200_000,
		LimitProcs:       4,
		GlobalLimit:      200,
		KeyLimit:         1,
		LimitKeys:        1_000,
		ScaleRate:        10_000,
		ScaleDuration:    30 * time.Second,
		ScaleMixedProcs:  4,
		Timeout:          10 * time.Minute,
	}
}

// RegisterFlags defines a flag for each option but DatabaseURL, Title, Command,
// Progress and ChildCommand, with o's values as the defaults. A bad list is
// reported by fs.Parse; Validate checks the rest.
func (o *Options) RegisterFlags(fs *flag.FlagSet) {
	fs.Var((*nameList)(&o.Workloads), "workloads", "comma-separated `list` of workloads to run: "+strings.Join(Workloads(), ", "))
	fs.IntVar(&o.Rounds, "rounds", o.Rounds, "`N` runs of each workload per system")
	fs.IntVar(&o.MaxConns, "max-conns", o.MaxConns, "pool size of each client, in connections")
	fs.IntVar(&o.DrainJobs, "drain-jobs", o.DrainJobs, "`N` jobs inserted and then drained in W1")
	fs.BoolVar(&o.DrainCeiling, "drain-ceiling", o.DrainCeiling, "after each W1 drain, drain as many jobs with a raw SQL claim-and-complete loop on a table of its own, the ceiling (false: none)")
	fs.IntVar(&o.Batch, "batch", o.Batch, "`N` jobs per bulk insert")
	fs.IntVar(&o.InsertJobs, "insert-jobs", o.InsertJobs, "`N` jobs bulk-inserted in W4")
	fs.DurationVar(&o.InsertDuration, "insert-duration", o.InsertDuration, "how long each W4 single-insert run lasts")
	fs.Var((*intList)(&o.MixedRates), "mixed-rates", "comma-separated `rates` in jobs/s that W2 offers, one run each")
	fs.DurationVar(&o.MixedDuration, "mixed-duration", o.MixedDuration, "how long each W2 run offers its rate")
	fs.IntVar(&o.LatencyRate, "latency-rate", o.LatencyRate, "`rate` in jobs/s that W3 offers")
	fs.DurationVar(&o.LatencyDuration, "latency-duration", o.LatencyDuration, "how long each W3 run offers its rate")
	fs.IntVar(&o.RSSJobs, "rss-jobs", o.RSSJobs, "`N` jobs drained by W5's worker process")
	fs.IntVar(&o.RSSWorkers, "rss-workers", o.RSSWorkers, "`N` handlers at once in W5's worker process")
	fs.IntVar(&o.PressureRate, "pressure-rate", o.PressureRate, "`rate` in jobs/s that W7 offers")
	fs.DurationVar(&o.PressureDuration, "pressure-duration", o.PressureDuration, "how long each W7 run offers its rate")
	fs.IntVar(&o.ScaleJobs, "scale-jobs", o.ScaleJobs, "`N` jobs each W8 drain works down")
	fs.Var((*intList)(&o.ScaleProcs), "scale-procs", "comma-separated `counts` of worker processes that share a W8 drain, one run each")
	fs.IntVar(&o.ScaleWorkers, "scale-workers", o.ScaleWorkers, "`N` handlers of all W8 worker processes together")
	fs.IntVar(&o.ScaleRate, "scale-rate", o.ScaleRate, "`rate` in jobs/s that W8's mixed load offers")
	fs.DurationVar(&o.ScaleDuration, "scale-duration", o.ScaleDuration, "how long W8's mixed load offers its rate")
	fs.IntVar(&o.ScaleMixedProcs, "scale-mixed-procs", o.ScaleMixedProcs, "`N` worker processes that work W8's mixed load")
	fs.IntVar(&o.LimitJobs, "limit-jobs", o.LimitJobs, "`N` jobs each W6 drain works down")
	fs.IntVar(&o.LimitProcs, "limit-procs", o.LimitProcs, "`N` worker processes that share each W6 drain")
	fs.IntVar(&o.GlobalLimit, "global-limit", o.GlobalLimit, "`N`, the global limit of W6's limited drain")
	fs.IntVar(&o.KeyLimit, "key-limit", o.KeyLimit, "`N`, the limit per key of W6's keyed drain")
	fs.IntVar(&o.LimitKeys, "limit-keys", o.LimitKeys, "`N` keys that the jobs of W6's keyed drain have in turn")
	fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "give up a drain after this long")
}

// Validate checks the options, naming the flag of any that is wrong.
func (o *Options) Validate() error {
	if len(o.Workloads) == 0 {
		return errors.New("--workloads: no workload given")
	}
	for _, w := range o.Workloads {
		if !slices.Contains(Workloads(), w) {
			return fmt.Errorf("--workloads: unknown workload %q: want some of %s", w, strings.Join(Workloads(), ", "))
		}
	}
	for _, c := range []struct {
		flag     string
		v, least int
	}{
		{"rounds", o.Rounds, 1}, {"max-conns", o.MaxConns, 2}, {"drain-jobs", o.DrainJobs, 1},
		{"batch", o.Batch, 1}, {"insert-jobs", o.InsertJobs, 1}, {"latency-rate", o.LatencyRate, 1},
		{"rss-jobs", o.RSSJobs, 1}, {"rss-workers", o.RSSWorkers, 1}, {"pressure-rate", o.PressureRate, 1},
		{"scale-jobs", o.ScaleJobs, 1}, {"scale-workers", o.ScaleWorkers, 1}, {"scale-rate", o.ScaleRate, 1},
		{"scale-mixed-procs", o.ScaleMixedProcs, 1},
		{"limit-jobs", o.LimitJobs, 1}, {"global-limit", o.GlobalLimit, 1},
		{"key-limit", o.KeyLimit, 1}, {"limit-keys", o.LimitKeys, 1},
	} {
		if c.v < c.least {
			return fmt.Errorf("--%s must be at least %d, got %d", c.flag, c.least, c.v)
		}
	}
	if o.DrainCeiling && len(o.ceilingSchema()) > maxIdentifier {
		return fmt.Errorf("--drain-ceiling: the schema of W1's raw SQL ceiling, %q, is longer than PostgreSQL's %d bytes", o.ceilingSchema(), maxIdentifier)
	}
	if len(o.MixedRates) == 0 {
		return errors.New("--mixed-rates: no rate given")
	}
	for _, r := range o.MixedRates {
		if r < 1 {
			return fmt.Errorf("--mixed-rates: rate %d is not a positive number of jobs/s", r)
		}
	}
	for _, c := range []struct {
		flag string
		v    time.Duration
	}{
		{"insert-duration", o.InsertDuration}, {"mixed-duration", o.MixedDuration},
		{"latency-duration", o.LatencyDuration}, {"pressure-duration", o.PressureDuration}, {"scale-duration", o.ScaleDuration}, {"timeout", o.Timeout},
	} {
		if c.v <= 0 {
			return fmt.Errorf("--%s must be positive, got %s", c.flag, c.v)
		}
	}
	// The recorders of W2 and W3 hold two timestamps per job offered.
	for _, r := range o.MixedRates {
		if float64(r)*o.MixedDuration.Seconds() > maxOffered {
			return fmt.Errorf("--mixed-rates: %d jobs/s for %s is more than %d jobs", r, o.MixedDuration, int(maxOffered))
		}
	}
	if len(o.ScaleProcs) == 0 {
		return errors.New("--scale-procs: no count given")
	}
	for _, n := range append(slices.Clone(o.ScaleProcs), o.ScaleMixedProcs, o.LimitProcs) {
		if n < 1 || n > 16 {
			return fmt.Errorf("--scale-procs, --scale-mixed-procs, --limit-procs: %d worker processes is outside 1..16", n)
		}
	}
	if float64(o.ScaleRate)*o.ScaleDuration.Seconds() > maxOffered {
		return fmt.Errorf("--scale-rate: %d jobs/s for %s is more than %d jobs", o.ScaleRate, o.ScaleDuration, int(maxOffered))
	}
	if float64(o.PressureRate)*o.PressureDuration.Seconds() > maxOffered {
		return fmt.Errorf("--pressure-rate: %d jobs/s for %s is more than %d jobs", o.PressureRate, o.PressureDuration, int(maxOffered))
	}
	if float64(o.LatencyRate)*o.LatencyDuration.Seconds() > maxOffered {
		return fmt.Errorf("--latency-rate: %d jobs/s for %s is more than %d jobs", o.LatencyRate, o.LatencyDuration, int(maxOffered))
	}
	return nil
}

// maxIdentifier is PostgreSQL's longest name, in bytes; it cuts a longer one
// short, which would make a schema claimed by its full name another.
const maxIdentifier = 63

// maxOffered bounds the jobs a W2 or W3 run offers.
const maxOffered = 10e6

// nameList is a comma-separated list of names, as a flag.
type nameList []string

func (l *nameList) String() string { return strings.Join(*l, ",") }

func (l *nameList) Set(s string) error {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return fmt.Errorf("%q has an empty item", s)
		}
		out = append(out, item)
	}
	*l = out
	return nil
}

// intList is a comma-separated list of integers, as a flag.
type intList []int

func (l *intList) String() string {
	var s []string
	for _, v := range *l {
		s = append(s, strconv.Itoa(v))
	}
	return strings.Join(s, ",")
}

func (l *intList) Set(s string) error {
	var out []int
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		v, err := strconv.Atoi(strings.ReplaceAll(item, "_", ""))
		if err != nil {
			return fmt.Errorf("%q is not a number", item)
		}
		out = append(out, v)
	}
	*l = out
	return nil
}
