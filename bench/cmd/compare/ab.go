package main

// A/B mode (--ab REV): weir at a git revision (A, the base) against weir of
// the working tree (B). Each is built from its own source tree as the weir
// binary and run as `weir bench`, one workload and one round at a time, on a
// schema of its own; which of the two goes first alternates round by round,
// since on a 2-core machine the first of a pair tends to be faster. The runs'
// JSON reports are merged into one report, B beside A, with the ratio B/A and
// the pairs' ratios round by round.

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/weirq/weir/internal/pgcluster"
	"github.com/weirq/weir/internal/weirbench"
)

var abRev = flag.String("ab", "", "run weir at git revision `REV` (A, the base) against weir of the working tree (B), each built and run as `weir bench` in turn, which goes first alternating round by round (bench/README.md)")

// abSchemas are the schemas of A and B; `weir bench` adds _sql for its W1
// ceiling's.
var abSchemas = [2]string{"weirbench_ab_a", "weirbench_ab_b"}

// abOwnFlags are the flags of compare that --ab reads itself; any other flag
// given must be one that abPassFlags passes on to `weir bench`.
var abOwnFlags = []string{"ab", "database-url", "json", "plot", "start-postgres", "rounds", "workloads"}

// abPassFlags maps the flags of compare that --ab passes on to `weir bench`,
// when given, to their names there: weir's settings and every option of the
// engine but the rounds and workloads, which --ab runs one by one.
func abPassFlags() map[string]string {
	m := map[string]string{"weir-max-workers": "max-workers", "weir-prefetch": "prefetch"}
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	o := weirbench.DefaultOptions()
	o.RegisterFlags(fs)
	fs.VisitAll(func(f *flag.Flag) { m[f.Name] = f.Name })
	delete(m, "rounds")
	delete(m, "workloads")
	return m
}

// abConfig is what an A/B run runs.
type abConfig struct {
	rev       string   // the base as given
	url       string   // the database; never printed
	rounds    int      // pairs of runs of each workload
	workloads []string // in the engine's order
	pass      []string // `weir bench` flags, --name=value, as given to compare
	options   weirbench.Options
	startPG   bool
	jsonPath  string
	plotPath  string
	schemas   [2]string
	args      []string // compare's arguments, for the report's command line
}

// abConfigFrom reads an A/B run's configuration from compare's parsed flags
// fs and options o. A flag given that --ab neither reads nor passes on is an
// error naming it.
func abConfigFrom(fs *flag.FlagSet, o weirbench.Options, args []string) (abConfig, error) {
	pass := abPassFlags()
	c := abConfig{rev: fs.Lookup("ab").Value.String(), rounds: o.Rounds, options: o, schemas: abSchemas}
	given := map[string]bool{}
	var err error
	fs.Visit(func(f *flag.Flag) {
		given[f.Name] = true
		switch to, ok := pass[f.Name]; {
		case ok:
			c.pass = append(c.pass, "--"+to+"="+f.Value.String())
		case !slices.Contains(abOwnFlags, f.Name) && err == nil:
			err = fmt.Errorf("--ab: --%s does not apply: --ab runs weir against weir, as `weir bench`", f.Name)
		}
	})
	if err != nil {
		return c, err
	}
	if c.rev == "" {
		return c, errors.New("--ab: no revision given")
	}
	if strings.HasPrefix(c.rev, "-") {
		return c, fmt.Errorf("--ab: %q is not a revision", c.rev)
	}
	c.url = fs.Lookup("database-url").Value.String()
	c.jsonPath = fs.Lookup("json").Value.String()
	// compare's default plot is its comparison's; an A/B run plots only when
	// asked.
	if given["plot"] {
		c.plotPath = fs.Lookup("plot").Value.String()
	}
	c.startPG = fs.Lookup("start-postgres").Value.String() == "true"
	chosen := o.Workloads
	if !given["workloads"] {
		// weir bench's default: latency-defaults is latency for weir alone.
		chosen = slices.DeleteFunc(slices.Clone(chosen), func(w string) bool { return w == "latency-defaults" })
	}
	for _, w := range weirbench.Workloads() {
		if slices.Contains(chosen, w) {
			c.workloads = append(c.workloads, w)
		}
	}
	c.options.Workloads = c.workloads
	if err := c.options.Validate(); err != nil {
		return c, err
	}
	c.args = redact(args, c.url)
	return c, nil
}

// abMain is compare --ab: it runs, prints and writes, or fails.
func abMain(o weirbench.Options) {
	c, err := abConfigFrom(flag.CommandLine, o, os.Args[1:])
	if err != nil {
		fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := runAB(ctx, c, os.Stdout, os.Stderr); err != nil {
		fail(err)
	}
}

// abSide is A or B: what it is called, the binary built, its schema.
type abSide struct {
	name, bin, schema string
}

// abRun is one run of `weir bench`: one workload, one round, one side.
type abRun struct {
	Workload string
	Round    int
	Side     int  // 0: A, 1: B
	First    bool // it ran first of its pair
	rep      *weirbench.Report
	options  map[string]any // rep's options as its JSON has them
}

// runAB builds A and B, runs them, and writes the merged report: its table
// and the pairs' ratios to stdout, progress to stderr. After a run that fails
// it reports the runs before it and returns the error. The base's worktree
// and the binaries are removed at the end, also on an error or an interrupt.
func runAB(ctx context.Context, c abConfig, stdout, stderr io.Writer) (err error) {
	root, err := gitOut(ctx, "", "rev-parse", "--show-toplevel")
	if err != nil {
		return fmt.Errorf("--ab: find the repository: %w", err)
	}
	commit, err := gitOut(ctx, root, "rev-parse", "--verify", "--quiet", "--end-of-options", c.rev+"^{commit}")
	if err != nil {
		return fmt.Errorf("--ab: %q is not a commit of the repository", c.rev)
	}
	short, err := gitOut(ctx, root, "rev-parse", "--short", commit)
	if err != nil {
		return fmt.Errorf("--ab: %w", err)
	}
	tmp, err := os.MkdirTemp("", "weir-ab-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	base := filepath.Join(tmp, "base")
	// Not bound to ctx: an interrupt lets it finish, and the removal below
	// undo it.
	if out, err := exec.Command("git", "-C", root, "worktree", "add", "--detach", base, commit).CombinedOutput(); err != nil {
		return fmt.Errorf("--ab: git worktree add: %w: %s", err, strings.TrimSpace(string(out)))
	}
	defer func() {
		if out, rerr := exec.Command("git", "-C", root, "worktree", "remove", "--force", base).CombinedOutput(); rerr != nil {
			err = errors.Join(err, fmt.Errorf("--ab: remove the base's worktree %s (git worktree prune clears it once the directory is gone): %w: %s",
				base, rerr, strings.TrimSpace(string(out))))
		}
	}()

	sides := [2]abSide{
		{name: "weir@" + short, bin: filepath.Join(tmp, "weir-a"), schema: c.schemas[0]},
		{name: "weir (working tree)", bin: filepath.Join(tmp, "weir-b"), schema: c.schemas[1]},
	}
	for i, dir := range []string{base, root} {
		fmt.Fprintf(stderr, "building %s\n", sides[i].name)
		// -trimpath: the same source in another directory hits the build
		// cache.
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", sides[i].bin, "./cmd/weir")
		cmd.Dir, cmd.Stdout, cmd.Stderr = dir, stderr, stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("--ab: build %s: %w", sides[i].name, err)
		}
	}
	for _, s := range sides {
		help, _ := exec.CommandContext(ctx, s.bin, "bench", "--help").CombinedOutput()
		if err := abCheckHelp(s.name, string(help), c.pass, c.workloads); err != nil {
			return err
		}
	}

	url := c.url
	if c.startPG {
		cl, err := pgcluster.Start(pgcluster.Options{DirPrefix: "weir-compare-", Settings: []string{"fsync=on"}})
		if err != nil {
			return fmt.Errorf("--start-postgres: %w", err)
		}
		defer cl.Stop() //nolint:errcheck // the benchmark's result is what matters
		url = cl.URL()
	}
	// Fresh schemas: a weir of an older revision refuses one that a newer
	// weir migrated.
	for _, s := range sides {
		for _, schema := range []string{s.schema, s.schema + "_sql"} {
			if err := weirbench.DropScratchSchema(ctx, url, schema); err != nil {
				return fmt.Errorf("--ab: %w", err)
			}
		}
	}

	// A run that fails ends the A/B run; the runs before it are reported.
	var (
		runs   []abRun
		runErr error
	)
run:
	for _, w := range c.workloads {
		for round := 1; round <= c.rounds; round++ {
			order := abOrder(round)
			fmt.Fprintf(stderr, "A/B %s, round %d of %d: %s, then %s\n", w, round, c.rounds, sides[order[0]].name, sides[order[1]].name)
			for k, side := range order {
				rep, opts, err := abBench(ctx, sides[side], url, w, c.pass, filepath.Join(tmp, fmt.Sprintf("%s-%d-%d.json", w, round, side)), stderr)
				if err != nil {
					runErr = err
					break run
				}
				runs = append(runs, abRun{Workload: w, Round: round, Side: side, First: k == 0, rep: rep, options: opts})
			}
		}
	}
	if len(runs) == 0 {
		return runErr
	}
	rep, notes := abMerge(runs, c, [2]string{sides[0].name, sides[1].name})
	for _, n := range notes {
		fmt.Fprintln(stderr, "note:", n)
	}
	out := abReport{Report: rep, AB: abInfo{Base: commit, A: sides[0].name, B: sides[1].name, Runs: runs, Pairs: abPairs(rep, runs)}}
	if err := rep.WriteTable(stdout); err != nil {
		return errors.Join(runErr, err)
	}
	if err := out.writePairs(stdout); err != nil {
		return errors.Join(runErr, err)
	}
	for _, f := range []struct {
		path  string
		write func(io.Writer) error
	}{{c.jsonPath, out.writeJSON}, {c.plotPath, rep.WriteSVG}} {
		if f.path == "" {
			continue
		}
		if err := weirbench.WriteFile(f.path, f.write); err != nil {
			return errors.Join(runErr, err)
		}
		fmt.Fprintf(stderr, "wrote %s\n", f.path)
	}
	return runErr
}

// abOrder is the sides in the order they run in round: A first in odd rounds,
// B first in even ones.
func abOrder(round int) [2]int {
	if round%2 == 1 {
		return [2]int{0, 1}
	}
	return [2]int{1, 0}
}

// abBench runs one side's `weir bench` of workload, one round, and reads its
// JSON report, and its options as the JSON has them. Its progress goes to stderr; its table is dropped. An
// interrupt reaches it as one, so that it stops as it would on its own.
func abBench(ctx context.Context, s abSide, url, workload string, pass []string, jsonPath string, stderr io.Writer) (*weirbench.Report, map[string]any, error) {
	args := append([]string{"bench", "--database-url", url, "--schema", s.schema, "--rounds", "1",
		"--workloads", workload, "--json", jsonPath}, pass...)
	cmd := exec.CommandContext(ctx, s.bin, args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = time.Minute
	cmd.Stdout, cmd.Stderr = io.Discard, stderr
	if err := cmd.Run(); err != nil {
		return nil, nil, fmt.Errorf("--ab: %s's weir bench --workloads %s: %w", s.name, workload, err)
	}
	data, err := os.ReadFile(jsonPath)
	if err != nil {
		return nil, nil, fmt.Errorf("--ab: %s's report: %w", s.name, err)
	}
	var rep weirbench.Report
	var raw struct {
		Options map[string]any `json:"options"`
	}
	if err := errors.Join(json.Unmarshal(data, &rep), json.Unmarshal(data, &raw)); err != nil {
		return nil, nil, fmt.Errorf("--ab: %s's report: %w", s.name, err)
	}
	if len(rep.Systems) != 1 {
		return nil, nil, fmt.Errorf("--ab: %s's report has %d systems, want 1", s.name, len(rep.Systems))
	}
	return &rep, raw.Options, nil
}

var (
	helpFlag      = regexp.MustCompile(`(?m)^\s+--?([A-Za-z0-9][A-Za-z0-9_.-]*)`)
	helpWorkloads = regexp.MustCompile(`workloads to run: ([a-z0-9, -]+)`)
)

// abCheckHelp checks, from the help of a side's `weir bench`, that it takes
// every flag that --ab passes it and knows each workload, and names the first
// that it does not.
func abCheckHelp(side, help string, pass, workloads []string) error {
	known := map[string]bool{}
	for _, m := range helpFlag.FindAllStringSubmatch(help, -1) {
		known[m[1]] = true
	}
	for _, f := range []string{"database-url", "schema", "rounds", "workloads", "json"} {
		if !known[f] {
			return fmt.Errorf("--ab: %s has no `weir bench` that takes --%s", side, f)
		}
	}
	for _, p := range pass {
		name, _, _ := strings.Cut(strings.TrimPrefix(p, "--"), "=")
		if !known[name] {
			return fmt.Errorf("--ab: %s's weir bench has no flag --%s: leave it out to compare with that revision", side, name)
		}
	}
	if m := helpWorkloads.FindStringSubmatch(help); m != nil {
		var has []string
		for w := range strings.SplitSeq(m[1], ",") {
			has = append(has, strings.TrimSpace(w))
		}
		for _, w := range workloads {
			if !slices.Contains(has, w) {
				return fmt.Errorf("--ab: %s's weir bench has no workload %q (it has %s)", side, w, strings.Join(has, ", "))
			}
		}
	}
	return nil
}

// abMerge merges the runs' reports into one, B's system first and A's second,
// so that the table's ratio is B/A; each figure's values are the side's
// rounds in order. The header is B's first run's, the options c's. Its notes
// say which options A's and B's first runs both had and set differently (a
// default that changed between them).
func abMerge(runs []abRun, c abConfig, names [2]string) (*weirbench.Report, []string) {
	o := c.options
	o.Title = names[1] + " vs " + names[0] + " (A/B)"
	o.Command, o.Args = "cd bench && go run ./cmd/compare", c.args
	o.Rounds, o.Workloads = c.rounds, c.workloads
	rep := &weirbench.Report{Date: time.Now().UTC().Format(time.RFC3339), Options: o}
	// B before A within each pair, so that the figures come in B's order
	// (A's may lack some); each side's rounds stay in order.
	ordered := slices.Clone(runs)
	slices.SortStableFunc(ordered, func(x, y abRun) int {
		wx, wy := slices.Index(c.workloads, x.Workload), slices.Index(c.workloads, y.Workload)
		return cmp.Or(cmp.Compare(wx, wy), cmp.Compare(x.Round, y.Round), cmp.Compare(y.Side, x.Side))
	})
	var first [2]*abRun
	for i, r := range ordered {
		if first[r.Side] == nil {
			first[r.Side] = &ordered[i]
		}
		sys := r.rep.Systems[0].Name
		for _, f := range r.rep.Figures {
			i := slices.IndexFunc(rep.Figures, func(g *weirbench.Figure) bool { return g.Name == f.Name })
			if i < 0 {
				g := *f
				g.Values = map[string][]float64{}
				rep.Figures = append(rep.Figures, &g)
				i = len(rep.Figures) - 1
			}
			rep.Figures[i].Values[names[r.Side]] = append(rep.Figures[i].Values[names[r.Side]], f.Values[sys]...)
		}
	}
	for _, side := range []int{1, 0} {
		if r := first[side]; r != nil {
			info := r.rep.Systems[0]
			info.Name = names[side]
			rep.Systems = append(rep.Systems, info)
		}
	}
	if r := first[1]; r != nil {
		rep.CPUs, rep.GOMAXPROCS, rep.PostgreSQL = r.rep.CPUs, r.rep.GOMAXPROCS, r.rep.PostgreSQL
	}
	var notes []string
	if first[0] != nil && first[1] != nil {
		a, b := first[0].options, first[1].options
		for _, k := range slices.Sorted(maps.Keys(a)) {
			switch k {
			case "title", "command", "args", "workloads", "rounds", "ceiling_schema":
				continue // what ran and where, not how
			}
			if vb, ok := b[k]; ok && !reflect.DeepEqual(a[k], vb) {
				notes = append(notes, fmt.Sprintf("%s ran with %s %v, %s with %v (their defaults differ; give the flag to run both alike)",
					names[0], k, a[k], names[1], vb))
			}
		}
	}
	return rep, notes
}

// abPair is a figure's ratios B/A, by round; nil where a side has no value.
type abPair struct {
	Figure string     `json:"figure"`
	Ratios []*float64 `json:"ratios"`
}

// abPairs pairs, for each figure that has a better direction, B's value of
// each round with A's; a figure that no round has on both sides is left out.
func abPairs(rep *weirbench.Report, runs []abRun) []abPair {
	rounds := 0
	for _, r := range runs {
		rounds = max(rounds, r.Round)
	}
	var out []abPair
	for _, f := range rep.Figures {
		if f.Better == "" {
			continue
		}
		p := abPair{Figure: f.Name, Ratios: make([]*float64, rounds)}
		var v [2][]float64 // by side, by round; NaN: none
		for s := range v {
			v[s] = slices.Repeat([]float64{math.NaN()}, rounds)
		}
		for _, r := range runs {
			for _, g := range r.rep.Figures {
				if g.Name == f.Name {
					if vs := g.Values[r.rep.Systems[0].Name]; len(vs) > 0 {
						v[r.Side][r.Round-1] = vs[0]
					}
				}
			}
		}
		paired := false
		for i := range rounds {
			if a, b := v[0][i], v[1][i]; !math.IsNaN(a) && !math.IsNaN(b) && a != 0 {
				q := b / a
				p.Ratios[i], paired = &q, true
			}
		}
		if paired {
			out = append(out, p)
		}
	}
	return out
}

// abReport is the merged report with what the A/B run adds: the base, the
// order of the runs and the pairs. Its JSON holds the Report's fields as they
// are, so that --replot reads it.
type abReport struct {
	*weirbench.Report
	AB abInfo `json:"ab"`
}

type abInfo struct {
	Base  string   `json:"base"` // A's commit
	A     string   `json:"a"`
	B     string   `json:"b"`
	Runs  []abRun  `json:"runs"` // in the order they ran
	Pairs []abPair `json:"pairs"`
}

// MarshalJSON of abRun names its side and says whether it ran first.
func (r abRun) MarshalJSON() ([]byte, error) {
	side := "a"
	if r.Side == 1 {
		side = "b"
	}
	return json.Marshal(struct {
		Workload string `json:"workload"`
		Round    int    `json:"round"`
		Side     string `json:"side"`
		First    bool   `json:"first"`
	}{r.Workload, r.Round, side, r.First})
}

func (r *abReport) writeJSON(w io.Writer) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(data, '\n'))
	return err
}

// writePairs writes the pairs' ratios B/A, a column per round saying which
// side ran first.
func (r *abReport) writePairs(w io.Writer) error {
	if len(r.AB.Pairs) == 0 {
		return nil
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "\nB/A pair by pair (A %s, B %s), round by round:\n\n", r.AB.A, r.AB.B)
	tw := tabwriter.NewWriter(&b, 0, 0, 3, ' ', 0)
	header := []string{"figure"}
	for i := range r.AB.Pairs[0].Ratios {
		first := "A"
		if abOrder(i + 1)[0] == 1 {
			first = "B"
		}
		header = append(header, fmt.Sprintf("%d (%s first)", i+1, first))
	}
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, p := range r.AB.Pairs {
		row := []string{p.Figure}
		for _, q := range p.Ratios {
			if q == nil {
				row = append(row, "–")
			} else {
				row = append(row, strconv.FormatFloat(*q, 'f', 2, 64))
			}
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	tw.Flush()
	_, err := w.Write(b.Bytes())
	return err
}

// gitOut runs git in dir (the working directory when empty) and returns its
// output, trimmed.
func gitOut(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// redact returns args with url replaced by URL, for the report's command
// line.
func redact(args []string, url string) []string {
	out := slices.Clone(args)
	for i, a := range out {
		if url != "" {
			out[i] = strings.ReplaceAll(a, url, "URL")
		}
	}
	return out
}
