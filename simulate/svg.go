package simulate

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
)

// The SVG's geometry, in pixels.
const (
	svgWidth   = 1000
	labelWidth = 250 // left column holding the lane names and counts
	rightPad   = 24
	plotWidth  = svgWidth - labelWidth - rightPad
	plotTop    = 92
	laneHeight = 100
	upRoom     = 50 // tallest bar above a lane's baseline
	downRoom   = 36 // deepest bar below it
	axisHeight = 56
	minGap     = 4 // closest two window boundaries may be drawn
	maxLabels  = 10
)

// The colours of the three kinds of request.
const (
	colourAdmitted = "#2f6fb0"
	colourQueued   = "#e69f00"
	colourRejected = "#c8322f"
)

// WriteSVG writes a self-contained SVG timeline of rs, whose lanes were
// counted in tl: one lane per algorithm, in the order of rs. Above a lane's
// baseline, a bar per time slice shows the requests that reached the
// upstream in it, those let through at once and those that waited in the
// queue stacked in two colours; below it, the requests rejected in it. All
// bars share one scale, so lanes compare. Dashed lines mark window
// boundaries, a legend names the colours, and the time axis is labelled in
// offsets from the origin, or in clock times for a replayed log. Its size is
// bounded whatever the number of requests.
func WriteSVG(w io.Writer, p Params, tl *Timeline, rs []Result) error {
	if err := p.Validate(); err != nil {
		return err
	}
	tb, err := p.policy(ratelimit.TokenBucket)
	if err != nil {
		return err
	}
	lb, err := p.policy(ratelimit.LeakyBucket)
	if err != nil {
		return err
	}
	span := tl.End() - tl.Start
	x := func(t time.Duration) float64 {
		return labelWidth + float64(t-tl.Start)/float64(span)*plotWidth
	}
	// One scale for every bar, fitting the tallest above and the deepest
	// below a baseline.
	mostUp, mostDown := 0, 0
	for _, r := range rs {
		for _, s := range r.Lane {
			mostUp = max(mostUp, s.Admitted+s.Queued)
			mostDown = max(mostDown, s.Rejected)
		}
	}
	scale := math.Inf(1)
	if mostUp > 0 {
		scale = float64(upRoom) / float64(mostUp)
	}
	if mostDown > 0 {
		scale = math.Min(scale, float64(downRoom)/float64(mostDown))
	}
	// Even a single request gets a visible bar.
	height := func(n int) float64 {
		if n == 0 {
			return 0
		}
		return math.Max(2, float64(n)*scale)
	}

	plotBottom := plotTop + laneHeight*len(rs)
	total := plotBottom + axisHeight
	var b bytes.Buffer
	fmt.Fprintf(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n")
	fmt.Fprintf(&b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"13\">\n", svgWidth, total, svgWidth, total)
	title := fmt.Sprintf("sluice simulate: limit %d per %s (token_bucket burst %d; leaky_bucket queue %d, max_wait %s)",
		p.Limit, shortDuration(p.Window), tb.Burst, lb.Queue, shortDuration(lb.MaxWait))
	fmt.Fprintf(&b, "<title>%s</title>\n", escape(title))
	fmt.Fprintf(&b, "<rect width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", svgWidth, total)
	fmt.Fprintf(&b, "<text x=\"12\" y=\"24\" font-size=\"15\" font-weight=\"bold\">%s</text>\n", escape(title))
	boundaries := "dashed lines: window boundaries every " + shortDuration(p.Window)
	drawBoundaries := float64(p.Window)/float64(span)*plotWidth >= minGap
	if !drawBoundaries {
		boundaries = "window boundaries (every " + shortDuration(p.Window) + ") too close together to draw"
	}
	fmt.Fprintf(&b, "<text x=\"12\" y=\"44\" font-size=\"11\" fill=\"#555555\">%s</text>\n", escape(fmt.Sprintf(
		"one bar per %s slice, all on one scale (tallest: %d up, %d down); %s",
		shortDuration(tl.Slice), mostUp, mostDown, boundaries)))

	// The legend names the colours.
	fmt.Fprintf(&b, "<g class=\"legend\" font-size=\"12\">\n")
	lx := 12
	for _, item := range []struct{ colour, text string }{
		{colourAdmitted, "reached the upstream at once"},
		{colourQueued, "reached the upstream after waiting in the queue"},
		{colourRejected, "rejected (429), drawn below the line"},
	} {
		fmt.Fprintf(&b, "<g class=\"legend-item\"><rect x=\"%d\" y=\"58\" width=\"14\" height=\"14\" fill=\"%s\"/><text x=\"%d\" y=\"70\">%s</text></g>\n",
			lx, item.colour, lx+20, escape(item.text))
		lx += 20 + 7*len(item.text) + 28
	}
	fmt.Fprintf(&b, "</g>\n")

	// Lane backgrounds go first so boundaries and bars are drawn over them.
	fmt.Fprintf(&b, "<g class=\"backgrounds\">\n")
	for i := range rs {
		fill := "#f4f6f8"
		if i%2 == 1 {
			fill = "#ffffff"
		}
		fmt.Fprintf(&b, "<rect x=\"0\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\"/>\n", plotTop+i*laneHeight, svgWidth, laneHeight, fill)
	}
	fmt.Fprintf(&b, "</g>\n")

	fmt.Fprintf(&b, "<g class=\"boundaries\" stroke=\"#9aa5b1\" stroke-width=\"1\">\n")
	if drawBoundaries {
		for t := (tl.Start + p.Window - 1) / p.Window * p.Window; t <= tl.End(); t += p.Window {
			bx := x(t)
			fmt.Fprintf(&b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke-dasharray=\"4 3\"/>\n", bx, plotTop, bx, plotBottom)
		}
	}
	fmt.Fprintf(&b, "</g>\n")

	every := tl.labelEvery()
	fmt.Fprintf(&b, "<g class=\"axis\">\n")
	fmt.Fprintf(&b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333333\"/>\n", labelWidth, plotBottom, labelWidth+plotWidth, plotBottom)
	for t := (tl.Start + every - 1) / every * every; t <= tl.End(); t += every {
		bx := x(t)
		fmt.Fprintf(&b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#333333\"/>\n", bx, plotBottom, bx, plotBottom+5)
		fmt.Fprintf(&b, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" font-size=\"11\">%s</text>\n", bx, plotBottom+18, escape(tl.label(t, every)))
	}
	caption := "time since the origin (a window boundary)"
	if tl.Clock {
		caption = "time (UTC) on " + tl.Origin.Add(tl.Start).UTC().Format("2006-01-02")
	}
	fmt.Fprintf(&b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-size=\"11\" fill=\"#555555\">%s</text>\n", labelWidth+plotWidth/2, plotBottom+40, escape(caption))
	fmt.Fprintf(&b, "</g>\n")

	sw := float64(plotWidth) / float64(tl.Slices)
	bw := sw
	if sw >= 3 {
		bw = sw - 1 // a gap between neighbours
	}
	for i, r := range rs {
		top := plotTop + i*laneHeight
		base := float64(top + 8 + upRoom)
		fmt.Fprintf(&b, "<g class=\"lane\" id=\"lane-%s\">\n", escape(r.Algorithm))
		fmt.Fprintf(&b, "<text x=\"12\" y=\"%d\" font-weight=\"bold\">%s</text>\n", top+28, escape(r.Algorithm))
		fmt.Fprintf(&b, "<text x=\"12\" y=\"%d\" font-size=\"11\" fill=\"#555555\">%d accepted (%d queued), %d rejected</text>\n",
			top+46, r.Accepted, r.Queued, r.Rejected)
		more := fmt.Sprintf("peak %d per %s", r.Peak, shortDuration(p.Window))
		if r.ConsumersLimited > 0 || r.MostLimited != nil {
			more += ", " + plural(r.ConsumersLimited, "consumer") + " limited"
		}
		fmt.Fprintf(&b, "<text x=\"12\" y=\"%d\" font-size=\"11\" fill=\"#555555\">%s</text>\n", top+62, escape(more))
		fmt.Fprintf(&b, "<line x1=\"%d\" y1=\"%.0f\" x2=\"%d\" y2=\"%.0f\" stroke=\"#8a96a3\"/>\n", labelWidth, base, labelWidth+plotWidth, base)
		for k, s := range r.Lane {
			if s == (Slice{}) {
				continue
			}
			bx := labelWidth + float64(k)*sw
			from := tl.Start + time.Duration(k)*tl.Slice
			when := tl.label(from, tl.Slice) + " to " + tl.label(from+tl.Slice, tl.Slice)
			tip := fmt.Sprintf("%s: %d at once, %d after waiting, %d rejected", when, s.Admitted, s.Queued, s.Rejected)
			up := base
			for _, part := range []struct {
				n      int
				colour string
			}{{s.Admitted, colourAdmitted}, {s.Queued, colourQueued}} {
				if part.n == 0 {
					continue
				}
				h := height(part.n)
				up -= h
				fmt.Fprintf(&b, "<rect class=\"bar\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"><title>%s</title></rect>\n",
					bx, up, bw, h, part.colour, escape(tip))
			}
			if s.Rejected > 0 {
				fmt.Fprintf(&b, "<rect class=\"bar\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"><title>%s</title></rect>\n",
					bx, base+1, bw, height(s.Rejected), colourRejected, escape(tip))
			}
		}
		fmt.Fprintf(&b, "</g>\n")
	}
	fmt.Fprintf(&b, "</svg>\n")
	if _, err := w.Write(b.Bytes()); err != nil {
		return fmt.Errorf("writing svg: %w", err)
	}
	return nil
}

// label names the instant at offset t on an axis whose marks stand every
// apart: an offset such as "1m30s", or for a replayed log a UTC clock time
// with the precision the spacing needs.
func (t *Timeline) label(at, apart time.Duration) string {
	if !t.Clock {
		return shortDuration(at)
	}
	c := t.Origin.Add(at).UTC()
	switch {
	case apart%time.Minute == 0:
		return c.Format("15:04")
	case apart%time.Second == 0:
		return c.Format("15:04:05")
	}
	return c.Format("15:04:05.000")
}

// niceSteps are the label spacings that read well on a time axis.
var niceSteps = []time.Duration{
	time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond,
	20 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond,
	250 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour,
	24 * time.Hour, 48 * time.Hour, 7 * 24 * time.Hour,
}

// shortDuration formats d like time.Duration.String without the zero
// trailing units: "1m" rather than "1m0s", "2h" rather than "2h0m0s".
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func escape(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}
