package weirbench

import (
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strings"
)

// Series plot geometry, in pixels.
const (
	seriesWidth  = 480
	seriesHeight = 260
	seriesLeft   = 64
	seriesBottom = 40
	seriesTop    = 40
)

// WriteSeriesSVG writes a line plot of each series the report holds (figures
// with a Series name, such as W7's pickup p99 by minute): one panel per series,
// one line per system through the median of its rounds at each point. A report
// without series writes an empty plot.
func (r *Report) WriteSeriesSVG(w io.Writer) error {
	var names []string
	for _, f := range r.Figures {
		if f.Series != "" && !slices.Contains(names, f.Series) {
			names = append(names, f.Series)
		}
	}
	cols := 2
	rows := (len(names) + cols - 1) / cols
	width := 2*plotMargin + cols*seriesWidth
	height := plotHeader + rows*seriesHeight + plotMargin
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="DejaVu Sans, Helvetica, Arial, sans-serif">`+"\n",
		width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	text := func(x, y float64, size int, anchor, fill, s string) {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="%d" text-anchor="%s" fill="%s">%s</text>`+"\n",
			x, y, size, anchor, fill, html.EscapeString(s))
	}
	text(plotMargin, 28, 16, "start", "#111", r.Options.Title+": over time")
	text(float64(width-plotMargin), 28, 11, "end", "#555",
		fmt.Sprintf("%s; median of %d round(s) at each point", r.Date, r.Options.Rounds))
	x := float64(plotMargin)
	for i, s := range r.Systems {
		fmt.Fprintf(&b, `<rect x="%.1f" y="38" width="12" height="12" fill="%s"/>`+"\n", x, color(i))
		text(x+16, 49, 12, "start", "#111", s.Name)
		x += 24 + 8*float64(len(s.Name))
	}
	if cmd := r.Options.commandLine(); cmd != "" {
		text(plotMargin, 70, 10, "start", "#555", cmd)
	}
	for i, name := range names {
		x0 := float64(plotMargin + i%cols*seriesWidth)
		y0 := float64(plotHeader + i/cols*seriesHeight)
		r.seriesPanel(&b, text, name, x0, y0)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// seriesPanel draws series name in the panel whose top left corner is (x0, y0).
func (r *Report) seriesPanel(b *strings.Builder, text func(x, y float64, size int, anchor, fill, s string), name string, x0, y0 float64) {
	var points []*Figure
	for _, f := range r.Figures {
		if f.Series == name {
			points = append(points, f)
		}
	}
	slices.SortFunc(points, func(a, b *Figure) int { return int(math.Copysign(1, a.At-b.At)) })
	unit := points[0].Unit
	xmax, ymax := points[len(points)-1].At, 0.0
	for _, f := range points {
		for _, vs := range f.Values {
			ymax = max(ymax, median(vs))
		}
	}
	if ymax <= 0 {
		ymax = 1
	}
	ymax *= 1.1
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%d" height="%d" fill="#f7f7f7" stroke="#ddd"/>`+"\n",
		x0+3, y0+3, seriesWidth-6, seriesHeight-6)
	text(x0+seriesWidth/2, y0+22, 12, "middle", "#111", name+", "+unit)
	left, right := x0+seriesLeft, x0+seriesWidth-20
	top, base := y0+seriesTop, y0+seriesHeight-seriesBottom
	sx := func(at float64) float64 { return left + at/xmax*(right-left) }
	sy := func(v float64) float64 { return base - v/ymax*(base-top) }
	fmt.Fprintf(b, `<path d="M%.1f %.1fV%.1fH%.1f" stroke="#888" fill="none"/>`+"\n", left, top, base, right)
	for _, v := range []float64{0, ymax / 2.2, ymax / 1.1} {
		text(left-6, sy(v)+4, 10, "end", "#555", format(unit, v))
	}
	text(left, base+16, 10, "middle", "#555", "0")
	text(right, base+16, 10, "middle", "#555", fmt.Sprintf("%.0f s", xmax))
	for i, s := range r.Systems {
		var d strings.Builder
		for _, f := range points {
			vs := f.Values[s.Name]
			if len(vs) == 0 {
				continue
			}
			cmd := "L"
			if d.Len() == 0 {
				cmd = "M"
			}
			fmt.Fprintf(&d, "%s%.1f %.1f", cmd, sx(f.At), sy(median(vs)))
		}
		if d.Len() > 0 {
			fmt.Fprintf(b, `<path d="%s" stroke="%s" stroke-width="2" fill="none"/>`+"\n", d.String(), color(i))
		}
	}
}
