package bench

import (
	"fmt"
	"html"
	"io"
	"math"
	"strconv"
	"strings"
)

var colors = map[string]string{Bare: "#9e9e9e", Idempotent: "#d9822b", Gapless: "#2b7bd9"}

// panel is one chart: its handlers (one bar colour each) and how to read a case's value.
type panel struct {
	title    string
	handlers []string
	value    func(CaseResult) float64
	format   func(float64) string
}

// WriteSVG draws the headline figures at ParallelizationFactor pf as grouped bars on log scales:
// DynamoDB requests (HTTP round trips, parallel or not) per batch, write units per record, and records per second through the
// handler, by batch size.
func (r *Results) WriteSVG(w io.Writer, pf int) error {
	sizes, _ := r.grid()
	panels := []panel{
		{"DynamoDB requests per batch", []string{Idempotent, Gapless},
			func(c CaseResult) float64 { return c.DDBAttemptsPerBatch }, func(v float64) string { return num3(v) }},
		{"DynamoDB write units per record", []string{Idempotent, Gapless},
			func(c CaseResult) float64 { return c.WriteUnitsPerRecord }, func(v float64) string { return num3(v) }},
		{"records per second through the handler", []string{Bare, Idempotent, Gapless},
			func(c CaseResult) float64 { return c.RecordsPerSec }, func(v float64) string { return fmt.Sprintf("%.0f", v) }},
	}
	const pw, ph, top, bottom, left = 330.0, 300.0, 48.0, 46.0, 14.0
	width := pw * float64(len(panels))
	height := ph + 40
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="11">`+"\n",
		width, height, width, height)
	p(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	for i, pn := range panels {
		x0 := float64(i) * pw
		p(`<text x="%.1f" y="18" font-size="13" font-weight="bold">%s</text>`+"\n", x0+left, html.EscapeString(pn.title))
		p(`<text x="%.1f" y="33" fill="#555">ParallelizationFactor %d, log scale</text>`+"\n", x0+left, pf)
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, bs := range sizes {
			for _, h := range pn.handlers {
				if c, ok := r.find(h, bs, pf); ok && pn.value(c) > 0 {
					lo, hi = math.Min(lo, pn.value(c)), math.Max(hi, pn.value(c))
				}
			}
		}
		if math.IsInf(lo, 1) {
			continue
		}
		l0, l1 := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
		if l1 <= l0 {
			l1 = l0 + 1
		}
		plotH := ph - top - bottom
		y := func(v float64) float64 { return top + plotH - (math.Log10(v)-l0)/(l1-l0)*plotH }
		for e := l0; e <= l1; e++ {
			yy := y(math.Pow(10, e))
			p(`<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#e4e4e4"/>`+"\n", x0+left+34, x0+pw-10, yy, yy)
			p(`<text x="%.1f" y="%.1f" text-anchor="end" fill="#777">%s</text>`+"\n", x0+left+30, yy+4, strconv.FormatFloat(math.Pow(10, e), 'f', -1, 64))
		}
		groupW := (pw - left - 44) / float64(len(sizes))
		barW := math.Min(22, (groupW-8)/float64(len(pn.handlers)))
		for gi, bs := range sizes {
			gx := x0 + left + 38 + float64(gi)*groupW
			for hi, h := range pn.handlers {
				c, ok := r.find(h, bs, pf)
				if !ok || pn.value(c) <= 0 {
					continue
				}
				v := pn.value(c)
				bx := gx + float64(hi)*barW
				by := y(v)
				p(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s batch %d: %s</title></rect>`+"\n",
					bx, by, barW-2, top+plotH-by, colors[h], h, bs, pn.format(v))
			}
			p(`<text x="%.1f" y="%.1f" text-anchor="middle">%d</text>`+"\n", gx+barW*float64(len(pn.handlers))/2, top+plotH+14, bs)
		}
		p(`<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555">batch size</text>`+"\n", x0+pw/2, top+plotH+30)
	}
	// The legend names the handlers the panels draw (the SQS bridge's handlers are in the tables
	// only), each with its bars' colour.
	lx := left
	for _, h := range Handlers {
		if colors[h] == "" {
			continue
		}
		p(`<rect x="%.1f" y="%.1f" width="12" height="12" fill="%s"/><text x="%.1f" y="%.1f">%s</text>`+"\n",
			lx, height-22, colors[h], lx+16, height-12, map[string]string{Bare: "(a) bare", Idempotent: "(b) record-level idempotency", Gapless: "(c) gapless"}[h])
		lx += 200
	}
	p("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}
