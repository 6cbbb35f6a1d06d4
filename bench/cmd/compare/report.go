package main

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// print writes the report's table to stdout.
func (r *report) print(o options, systems []system) {
	fmt.Printf("weir vs River, %s; %d round(s), median (min–max)\n", r.Date, o.rounds)
	fmt.Printf("command (in bench/): %s\n", strings.Join(r.Command, " "))
	var sets []string
	for _, name := range serverSettings {
		sets = append(sets, name+"="+r.Settings[name])
	}
	fmt.Printf("PostgreSQL: %s\n", strings.Join(sets, " "))
	fmt.Printf("machine: %d CPUs, GOMAXPROCS %d; each client has a pool of %d connections\n",
		r.CPUs, runtime.GOMAXPROCS(0), o.maxConns)
	fmt.Printf("W1 settings: weir MaxWorkers %d, Prefetch %d; River MaxWorkers 2000, FetchCooldown 2ms, FetchPollInterval 20ms\n",
		o.weirMaxWorkers, o.weirPrefetch)
	fmt.Printf("W1 jobs %d; W4 bulk jobs %d in batches of %d; single inserts %s per run\n\n",
		o.drainJobs, o.insertJobs, o.batch, o.insertDuration)

	w := tabwriter.NewWriter(os.Stdout, 0, 0, 3, ' ', 0)
	header := []string{"figure"}
	for _, sys := range systems {
		header = append(header, sys.Name())
	}
	fmt.Fprintln(w, strings.Join(append(header, "weir/river"), "\t"))
	for _, m := range metricOrder {
		bySys, ok := r.Results[m]
		if !ok {
			continue
		}
		row := []string{m}
		var medians []float64
		for _, sys := range systems {
			vs := bySys[sys.Name()]
			med := median(vs)
			medians = append(medians, med)
			row = append(row, fmt.Sprintf("%s (%s–%s)", format(m, med), format(m, slices.Min(vs)), format(m, slices.Max(vs))))
		}
		ratio := "–"
		if medians[1] != 0 {
			ratio = strconv.FormatFloat(medians[0]/medians[1], 'f', 2, 64)
		}
		fmt.Fprintln(w, strings.Join(append(row, ratio), "\t"))
	}
	w.Flush()
}

func median(vs []float64) float64 {
	s := slices.Sorted(slices.Values(vs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// format prints rates and byte counts whole with thousands separators, and
// per-job counts with two decimals.
func format(metric string, v float64) string {
	if strings.HasSuffix(metric, "per job") {
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	s := strconv.FormatFloat(v, 'f', 0, 64)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
