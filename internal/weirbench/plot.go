package weirbench

import (
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strings"
)

// The plot's rows, in order, with their titles.
var plotRows = []struct{ key, title string }{
	{"throughput", "Throughput, jobs/s (higher is better)"},
	{"latency", "Pickup latency, ms (lower is better)"},
	{"cost", "Costs (lower is better)"},
}

// systemColors colour the systems' bars in the order of Report.Systems.
var systemColors = []string{"#2b6cb0", "#dd6b20", "#38a169", "#805ad5"}

// Plot geometry, in pixels.
const (
	plotMargin  = 20
	panelWidth  = 150
	panelHeight = 190
	plotColumns = 7 // panels per line
	plotHeader  = 92
	rowTitle    = 26
)

// WriteSVG writes a plot of the report's figures that have a Plot row: one
// small panel per figure, each with its own scale, one bar per system at the
// median of its rounds and a whisker from the minimum to the maximum.
func (r *Report) WriteSVG(w io.Writer) error {
	type row struct {
		title   string
		figures []*Figure
	}
	var rows []row
	for _, pr := range plotRows {
		var figs []*Figure
		for _, f := range r.Figures {
			if f.Plot == pr.key {
				figs = append(figs, f)
			}
		}
		if len(figs) > 0 {
			rows = append(rows, row{pr.title, figs})
		}
	}
	width := 2*plotMargin + plotColumns*panelWidth
	height := plotHeader
	for _, rw := range rows {
		height += rowTitle + (len(rw.figures)+plotColumns-1)/plotColumns*panelHeight
	}
	height += plotMargin

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="DejaVu Sans, Helvetica, Arial, sans-serif">`+"\n",
		width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	text := func(x, y float64, size int, anchor, fill, weight, s string) {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="%d" text-anchor="%s" fill="%s" font-weight="%s">%s</text>`+"\n",
			x, y, size, anchor, fill, weight, html.EscapeString(s))
	}
	// The header: title, legend, what ran where.
	// Characters of 10-pixel text that fit across.
	fit := func(s string) string {
		if n := (width - 2*plotMargin) * 10 / 58; len([]rune(s)) > n {
			return string([]rune(s)[:n-1]) + "…"
		}
		return s
	}
	text(plotMargin, 28, 16, "start", "#111", "bold", r.Options.Title)
	text(float64(width-plotMargin), 28, 11, "end", "#555", "normal",
		fmt.Sprintf("%s; median of %d round(s), whiskers min–max", r.Date, r.Options.Rounds))
	x := float64(plotMargin)
	for i, s := range r.Systems {
		fmt.Fprintf(&b, `<rect x="%.1f" y="38" width="12" height="12" fill="%s"/>`+"\n", x, color(i))
		text(x+16, 49, 12, "start", "#111", "normal", s.Name)
		x += 24 + 8*float64(len(s.Name))
	}
	var sets []string
	for _, name := range serverSettings {
		sets = append(sets, name+"="+r.PostgreSQL[name])
	}
	text(plotMargin, 68, 10, "start", "#555", "normal", fit(fmt.Sprintf("PostgreSQL %s; %d CPUs", strings.Join(sets, " "), r.CPUs)))
	if cmd := r.Options.commandLine(); cmd != "" {
		text(plotMargin, 82, 10, "start", "#555", "normal", fit(cmd))
	}

	y := float64(plotHeader)
	for _, rw := range rows {
		text(plotMargin, y+18, 13, "start", "#111", "bold", rw.title)
		y += rowTitle
		for i, f := range rw.figures {
			px := float64(plotMargin + i%plotColumns*panelWidth)
			py := y + float64(i/plotColumns*panelHeight)
			r.panel(&b, text, f, px, py)
		}
		y += float64((len(rw.figures) + plotColumns - 1) / plotColumns * panelHeight)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// panel draws figure f in the panel whose top left corner is (x0, y0).
func (r *Report) panel(b *strings.Builder, text func(x, y float64, size int, anchor, fill, weight, s string), f *Figure, x0, y0 float64) {
	const (
		inset  = 14.0
		top    = 48.0 // below the titles and the value labels' room
		bottom = 36.0 // room for the ratio
	)
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%d" height="%d" fill="#f7f7f7" stroke="#ddd"/>`+"\n",
		x0+3, y0+3, panelWidth-6, panelHeight-6)
	short := f.Short
	if short == "" {
		short = f.Name
	}
	text(x0+panelWidth/2, y0+20, 12, "middle", "#111", "bold", short)
	text(x0+panelWidth/2, y0+34, 10, "middle", "#555", "normal", f.Unit)

	ymax := 0.0
	for _, s := range r.Systems {
		if vs := f.Values[s.Name]; len(vs) > 0 {
			ymax = max(ymax, slices.Max(vs))
		}
	}
	if ymax <= 0 {
		ymax = 1
	}
	ymax *= 1.05
	base := y0 + panelHeight - bottom
	plotH := panelHeight - top - bottom
	scale := func(v float64) float64 { return base - v/ymax*plotH }
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#888"/>`+"\n", x0+inset, base, x0+panelWidth-inset, base)

	slot := (panelWidth - 2*inset) / float64(max(len(r.Systems), 1))
	barW := min(36, slot*0.6)
	var medians []float64
	for i, s := range r.Systems {
		vs := f.Values[s.Name]
		if len(vs) == 0 {
			medians = append(medians, math.NaN())
			continue
		}
		med, lo, hi := median(vs), slices.Min(vs), slices.Max(vs)
		medians = append(medians, med)
		cx := x0 + inset + slot*(float64(i)+0.5)
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n",
			cx-barW/2, scale(med), barW, base-scale(med), color(i))
		if hi > lo {
			fmt.Fprintf(b, `<path d="M%.1f %.1fH%.1fM%.1f %.1fV%.1fM%.1f %.1fH%.1f" stroke="#222" fill="none"/>`+"\n",
				cx-6, scale(lo), cx+6, cx, scale(lo), scale(hi), cx-6, scale(hi), cx+6)
		}
		text(cx, scale(hi)-4, 10, "middle", "#111", "normal", format(f.Unit, med))
	}
	if len(r.Systems) > 1 {
		text(x0+panelWidth/2, base+18, 10, "middle", "#333", "normal",
			r.Systems[0].Name+"/"+r.Systems[1].Name+" "+ratio(medians[0], medians[1]))
	}
}

func color(i int) string { return systemColors[i%len(systemColors)] }
