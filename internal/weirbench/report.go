package weirbench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Report is what Run measured.
type Report struct {
	Date       string            `json:"date"`
	Options    Options           `json:"options"`
	CPUs       int               `json:"cpus"`
	GOMAXPROCS int               `json:"gomaxprocs"`
	PostgreSQL map[string]string `json:"postgresql"` // settings by name
	Systems    []SystemInfo      `json:"systems"`
	Figures    []*Figure         `json:"figures"` // in the order the workloads ran
}

// SystemInfo names a system and what its settings were.
type SystemInfo struct {
	Name     string            `json:"name"`
	Settings map[string]string `json:"settings"` // Settings.String() → description
}

// Figure is one measured quantity, with one value per round for each system.
type Figure struct {
	// Name is the figure's row in the table: "W1 drain, jobs/s".
	Name string `json:"name"`
	// Short labels its panel in the plot: "W1 drain".
	Short string `json:"short"`
	// Unit is what the values count: jobs/s, ms, bytes/job, per job, jobs, MiB.
	Unit string `json:"unit"`
	// Better is "higher", "lower" or "" (the figure only explains others).
	Better string `json:"better"`
	// Plot is the plot row that shows it: "throughput", "latency", "cost", or ""
	// for none.
	Plot string `json:"plot"`
	// Series and At place a figure in a series over time, which WriteSeriesSVG
	// plots as a line per system: the series' name ("W7 snapshot held pickup
	// p99") and the seconds into the run at which the figure was taken.
	Series string  `json:"series,omitempty"`
	At     float64 `json:"at,omitempty"`
	// Values holds each system's values, one per round, by system name.
	Values map[string][]float64 `json:"values"`
}

// result is one figure's value in one run.
type result struct {
	fig *Figure // its description; Values unused
	v   float64
}

func fig(name, short, unit, better, plot string) *Figure {
	return &Figure{Name: name + ", " + unit, Short: short, Unit: unit, Better: better, Plot: plot}
}

func (r *Report) add(sys string, res result) {
	i := slices.IndexFunc(r.Figures, func(f *Figure) bool { return f.Name == res.fig.Name })
	if i < 0 {
		f := *res.fig
		f.Values = map[string][]float64{}
		r.Figures = append(r.Figures, &f)
		i = len(r.Figures) - 1
	}
	r.Figures[i].Values[sys] = append(r.Figures[i].Values[sys], res.v)
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(data, '\n'))
	return err
}

// WriteTable writes the report's header and its table: each figure's median
// and range per system, and with two systems or more the ratio of the first's
// median to the second's.
func (r *Report) WriteTable(w io.Writer) error {
	o := r.Options
	var b strings.Builder
	fmt.Fprintf(&b, "%s, %s; %d round(s), median (min–max)\n", o.Title, r.Date, o.Rounds)
	if cmd := o.commandLine(); cmd != "" {
		fmt.Fprintf(&b, "command: %s\n", cmd)
	}
	var sets []string
	for _, name := range serverSettings {
		sets = append(sets, name+"="+r.PostgreSQL[name])
	}
	fmt.Fprintf(&b, "PostgreSQL: %s\n", strings.Join(sets, " "))
	fmt.Fprintf(&b, "machine: %d CPUs, GOMAXPROCS %d; each client has a pool of %d connections\n",
		r.CPUs, r.GOMAXPROCS, o.MaxConns)
	for _, s := range r.Systems {
		var parts []string
		for _, set := range []Settings{Throughput, Latency, Defaults} {
			parts = append(parts, set.String()+": "+s.Settings[set.String()])
		}
		fmt.Fprintf(&b, "%s settings: %s\n", s.Name, strings.Join(parts, "; "))
	}
	fmt.Fprintf(&b, "sizes: %s\n\n", sizes(o))

	tw := tabwriter.NewWriter(&b, 0, 0, 3, ' ', 0)
	header := []string{"figure"}
	for _, s := range r.Systems {
		header = append(header, s.Name)
	}
	if len(r.Systems) > 1 {
		header = append(header, r.Systems[0].Name+"/"+r.Systems[1].Name)
	}
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, f := range r.Figures {
		row := []string{f.Name}
		var medians []float64
		for _, s := range r.Systems {
			vs := f.Values[s.Name]
			if len(vs) == 0 {
				row = append(row, "–")
				medians = append(medians, math.NaN())
				continue
			}
			med := median(vs)
			medians = append(medians, med)
			if len(vs) == 1 {
				row = append(row, format(f.Unit, med))
			} else {
				row = append(row, fmt.Sprintf("%s (%s–%s)", format(f.Unit, med), format(f.Unit, slices.Min(vs)), format(f.Unit, slices.Max(vs))))
			}
		}
		if len(r.Systems) > 1 {
			row = append(row, ratio(medians[0], medians[1]))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	tw.Flush()
	_, err := io.WriteString(w, b.String())
	return err
}

// sizes says how big each workload that ran was.
func sizes(o Options) string {
	var rates []string
	for _, r := range o.MixedRates {
		rates = append(rates, group(int64(r)))
	}
	var parts []string
	add := func(workloads []string, format string, args ...any) {
		for _, w := range workloads {
			if slices.Contains(o.Workloads, w) {
				parts = append(parts, fmt.Sprintf(format, args...))
				return
			}
		}
	}
	if o.DrainCeiling {
		add([]string{"drain"}, "W1 %s jobs; the ceiling: a raw SQL loop on %d connections claiming %s jobs at a time", group(int64(o.DrainJobs)), sqlDrainConns, group(sqlDrainBatch))
	} else {
		add([]string{"drain"}, "W1 %s jobs", group(int64(o.DrainJobs)))
	}
	add([]string{"mixed"}, "W2 %s jobs/s for %s each, bulk inserts every %s", strings.Join(rates, "/"), o.MixedDuration, mixedTick)
	add([]string{"latency", "latency-defaults"}, "W3 %s jobs/s for %s, single inserts from %d goroutines",
		group(int64(o.LatencyRate)), o.LatencyDuration, latencyInserters)
	add([]string{"bulk"}, "W4 %s jobs in batches of %s", group(int64(o.InsertJobs)), group(int64(o.Batch)))
	add([]string{"single1", "single8"}, "W4 single inserts for %s; the ceiling: pgbench's single-row INSERT into the same table for as long", o.InsertDuration)
	add([]string{"rss"}, "W5 %s jobs, %s handlers", group(int64(o.RSSJobs)), group(int64(o.RSSWorkers)))
	add([]string{"scale"}, "W8 %s jobs by %s processes, %s handlers among them", group(int64(o.ScaleJobs)),
		strings.Trim(strings.Join(strings.Fields(fmt.Sprint(o.ScaleProcs)), "/"), "[]"), group(int64(o.ScaleWorkers)))
	add([]string{"scale-mixed"}, "W8 %s jobs/s for %s by %d processes", group(int64(o.ScaleRate)), o.ScaleDuration, o.ScaleMixedProcs)
	add([]string{"limit"}, "W6 %s jobs by %d processes, %s handlers among them, global limit %s, %s per key of %s", group(int64(o.LimitJobs)),
		o.LimitProcs, group(int64(o.ScaleWorkers)), group(int64(o.GlobalLimit)), group(int64(o.KeyLimit)), group(int64(o.LimitKeys)))
	add([]string{"pressure", "pressure-clean"}, "W7 %s jobs/s for %s, bulk inserts every %s", group(int64(o.PressureRate)), o.PressureDuration, mixedTick)
	return strings.Join(parts, "; ")
}

// shellQuote writes args as a shell needs them: an argument that is empty or
// holds anything but letters, digits and -_=/.,:@%+ is single-quoted.
func shellQuote(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		plain := a != ""
		for _, r := range a {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_=/.,:@%+", r)) {
				plain = false
			}
		}
		if plain {
			out[i] = a
		} else {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(out, " ")
}

// ratio writes a/b with two decimals, or two significant digits below 0.1.
func ratio(a, b float64) string {
	if math.IsNaN(a) || math.IsNaN(b) || b == 0 {
		return "–"
	}
	r := a / b
	if r > 0 && r < 0.095 {
		return strconv.FormatFloat(r, 'f', 1-int(math.Floor(math.Log10(r))), 64)
	}
	return strconv.FormatFloat(r, 'f', 2, 64)
}

func median(vs []float64) float64 {
	s := slices.Sorted(slices.Values(vs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// format prints a value of unit: counts and rates whole with thousands
// separators, per-job counts with two decimals, MiB with one, milliseconds with
// three significant digits.
func format(unit string, v float64) string {
	switch unit {
	case "per job", "ratio":
		return strconv.FormatFloat(v, 'f', 2, 64)
	case "MiB":
		return strconv.FormatFloat(v, 'f', 1, 64)
	case "ms":
		switch {
		case v < 10:
			return strconv.FormatFloat(v, 'f', 2, 64)
		case v < 100:
			return strconv.FormatFloat(v, 'f', 1, 64)
		}
	}
	return group(int64(math.Round(v)))
}

// group writes n with thousands separators.
func group(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// compact writes a rate briefly for the plot: 2000 → "2k", 1500 → "1.5k".
func compact(n int) string {
	if n >= 1000 && n%100 == 0 {
		return strconv.FormatFloat(float64(n)/1000, 'f', -1, 64) + "k"
	}
	return strconv.Itoa(n)
}

// percentile returns the p-th quantile (0..1) of sorted by nearest rank.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// commandLine is the command that reproduces the run.
func (o *Options) commandLine() string {
	if len(o.Args) == 0 {
		return o.Command
	}
	return o.Command + " " + shellQuote(o.Args)
}

// WriteFile creates path (and its directory) and writes it with write, for
// WriteTable, WriteJSON and WriteSVG.
func WriteFile(path string, write func(io.Writer) error) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}
