package crashdemo

import (
	"fmt"
	"math"
	"strings"
)

// chart draws the run's throughput as an SVG line chart: confirmed,
// first-delivered, redelivered messages and publish errors per second,
// the crashes and restarts as vertical markers, the time each broker was
// down shaded.
func chart(s Summary) string {
	const (
		width, height            = 960.0, 460.0
		left, right, top, bottom = 70.0, 24.0, 92.0, 52.0
		plotW, plotH             = width - left - right, height - top - bottom
	)
	// The x range: the whole seconds of traffic (a partial first or last
	// second would show a dip that did not happen).
	x0 := math.Ceil(s.TrafficFrom)
	x1 := math.Floor(s.TrafficTo)
	if x1 <= x0 {
		x1 = x0 + 1
	}
	yMax := float64(s.Settings.Rate)
	for _, sec := range s.Seconds {
		if float64(sec.At) >= x0 && float64(sec.At+1) <= x1 {
			yMax = math.Max(yMax, float64(max(sec.Confirmed, sec.Delivered, sec.Redelivered, sec.PublishErrs)))
		}
	}
	yStep := niceStep(yMax*1.1, 6)
	yTop := math.Ceil(yMax*1.1/yStep) * yStep
	xStep := niceStep(x1-x0, 12)
	px := func(x float64) float64 { return left + (x-x0)/(x1-x0)*plotW }
	py := func(y float64) float64 { return top + plotH - y/yTop*plotH }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%g" height="%g" fill="#ffffff"/>`+"\n", width, height)
	t := s.Totals
	fmt.Fprintf(&b, `<text x="%g" y="24" font-size="16" font-weight="bold">%s</text>`+"\n", left,
		esc(fmt.Sprintf("Crash demo: %d publishes/s with confirms through the public broker, consumed all the while", s.Settings.Rate)))
	delivered := fmt.Sprint(t.Delivered)
	if t.DeliveredUnconfirmed > 0 {
		delivered += fmt.Sprintf(" (%d of them without a confirm)", t.DeliveredUnconfirmed)
	}
	fmt.Fprintf(&b, `<text x="%g" y="44" fill="#333">%s</text>`+"\n", left,
		esc(fmt.Sprintf("confirmed %d · delivered %s · lost %d · duplicates %d · publish errors %d · client dials to private brokers %d",
			t.Confirmed, delivered, t.Lost, t.Duplicates, t.PublishErrors, t.DialsPrivate)))

	// Down time, shaded.
	var downFrom *Event
	for i := range s.Events {
		e := &s.Events[i]
		if strings.HasSuffix(e.Label, "killed") {
			downFrom = e
			continue
		}
		if downFrom != nil && e.Node == downFrom.Node {
			fmt.Fprintf(&b, `<rect x="%.1f" y="%g" width="%.1f" height="%g" fill="#f6dede" opacity="0.6"/>`+"\n",
				px(downFrom.At), top, px(e.At)-px(downFrom.At), plotH)
			downFrom = nil
		}
	}
	// Grid and axes.
	for y := 0.0; y <= yTop+yStep/2; y += yStep {
		fmt.Fprintf(&b, `<line x1="%g" x2="%g" y1="%.1f" y2="%.1f" stroke="#e4e4e4"/>`+"\n", left, left+plotW, py(y), py(y))
		fmt.Fprintf(&b, `<text x="%g" y="%.1f" text-anchor="end" fill="#444">%g</text>`+"\n", left-6, py(y)+4, y)
	}
	for x := math.Ceil(x0/xStep) * xStep; x <= x1+1e-9; x += xStep {
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%g" y2="%g" stroke="#bbb"/>`+"\n", px(x), px(x), top+plotH, top+plotH+5)
		fmt.Fprintf(&b, `<text x="%.1f" y="%g" text-anchor="middle" fill="#444">%g s</text>`+"\n", px(x), top+plotH+19, x)
	}
	fmt.Fprintf(&b, `<rect x="%g" y="%g" width="%g" height="%g" fill="none" stroke="#888"/>`+"\n", left, top, plotW, plotH)
	fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="middle" fill="#444">time since the demo started</text>`+"\n", left+plotW/2, height-10)
	fmt.Fprintf(&b, `<text transform="translate(16 %g) rotate(-90)" text-anchor="middle" fill="#444">messages per second</text>`+"\n", top+plotH/2)

	// The series, one point per second at its middle.
	series := []struct {
		name, color, dash string
		width             float64
		value             func(Second) int
	}{
		{"confirmed/s", "#1f5fbf", "", 2, func(s Second) int { return s.Confirmed }},
		{"delivered/s (first delivery)", "#2e9e44", "6 3", 2, func(s Second) int { return s.Delivered }},
		{"delivered again/s", "#e08a00", "", 1.5, func(s Second) int { return s.Redelivered }},
		{"publish errors/s", "#c62828", "", 1.5, func(s Second) int { return s.PublishErrs }},
	}
	for _, se := range series {
		var pts []string
		for _, sec := range s.Seconds {
			if float64(sec.At) < x0 || float64(sec.At+1) > x1 {
				continue
			}
			x := float64(sec.At) + 0.5
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(x), py(float64(se.value(sec)))))
		}
		dash := ""
		if se.dash != "" {
			dash = fmt.Sprintf(` stroke-dasharray="%s"`, se.dash)
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="%g"%s stroke-linejoin="round" points="%s"/>`+"\n",
			se.color, se.width, dash, strings.Join(pts, " "))
	}
	// Legend, above the plot on the right.
	widths := make([]float64, len(series))
	total := 0.0
	for i, se := range series {
		widths[i] = 27 + 6.3*float64(len([]rune(se.name))) + 18
		total += widths[i]
	}
	x := left + plotW - total
	for i, se := range series {
		if i > 0 {
			x += widths[i-1]
		}
		dash := ""
		if se.dash != "" {
			dash = fmt.Sprintf(` stroke-dasharray="%s"`, se.dash)
		}
		fmt.Fprintf(&b, `<line x1="%g" x2="%g" y1="66" y2="66" stroke="%s" stroke-width="%g"%s/>`+"\n", x, x+22, se.color, se.width+0.5, dash)
		fmt.Fprintf(&b, `<text x="%g" y="70" font-size="11">%s</text>`+"\n", x+27, esc(se.name))
	}
	// Crash and restart markers, their labels in two staggered rows.
	for i, e := range s.Events {
		color := "#555555"
		if strings.HasSuffix(e.Label, "killed") {
			color = "#b71c1c"
		}
		x := px(e.At)
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%g" y2="%g" stroke="%s" stroke-width="1.5" stroke-dasharray="5 3"/>`+"\n", x, x, top, top+plotH, color)
		y := top + 16 + float64(i%2)*17
		label := esc(e.Label)
		w := 6.6 * float64(len([]rune(e.Label)))
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="15" fill="#ffffff" opacity="0.85"/>`+"\n", x+3, y-12, w+4)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="%s" font-weight="bold" font-size="11.5">%s</text>`+"\n", x+5, y, color, label)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// niceStep is a round step (1, 2 or 5 times a power of ten) that cuts span
// into at most n intervals.
func niceStep(span float64, n int) float64 {
	if span <= 0 {
		return 1
	}
	raw := span / float64(n)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
