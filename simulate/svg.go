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
	labelWidth = 280 // left column holding the lane names and counts
	rightPad   = 24
	plotWidth  = svgWidth - labelWidth - rightPad
	plotTop    = 64
	laneHeight = 56
	barMax     = laneHeight - 16
	binPixels  = 2 // width of one time slice; the bar count is bounded by it
	bins       = plotWidth / binPixels
	axisHeight = 56
	minGap     = 4 // closest two window boundaries may be drawn
	maxLabels  = 10
)

// WriteSVG writes a self-contained SVG timeline of rs: one lane per
// algorithm, in the order of rs, with a bar per time slice whose height is
// the number of requests that left for the upstream in it (scaled alike in
// every lane, so lanes compare), dashed lines at window boundaries and a time
// axis labelled in offsets from the origin. Its size is bounded whatever the
// number of requests.
func WriteSVG(w io.Writer, p Params, rs []Result) error {
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

	// The timeline ends at a labelled window boundary after the last
	// departure, so every bar stands inside it.
	var last time.Duration
	for _, r := range rs {
		if n := len(r.Departures); n > 0 {
			last = max(last, r.Departures[n-1])
		}
	}
	windows := int64(last/p.Window) + 1
	step := labelStep(p.Window, windows)
	windows = (windows + step - 1) / step * step
	span := time.Duration(windows) * p.Window
	if span/p.Window != time.Duration(windows) || span <= 0 {
		return fmt.Errorf("drawing timeline: %s after the origin is out of range", last)
	}
	x := func(t time.Duration) float64 {
		return labelWidth + float64(t)/float64(span)*plotWidth
	}

	type bin struct {
		n           int
		first, last time.Duration
	}
	lanes := make([][]bin, len(rs))
	most := 0
	for i, r := range rs {
		lanes[i] = make([]bin, bins)
		for _, t := range r.Departures {
			k := min(int(float64(t)/float64(span)*bins), bins-1)
			b := &lanes[i][k]
			if b.n == 0 {
				b.first = t
			}
			b.n++
			b.last = t
			most = max(most, b.n)
		}
	}

	plotBottom := plotTop + laneHeight*len(rs)
	height := plotBottom + axisHeight
	var b bytes.Buffer
	fmt.Fprintf(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n")
	fmt.Fprintf(&b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"13\">\n", svgWidth, height, svgWidth, height)
	title := fmt.Sprintf("sluice simulate: limit %d per %s (token_bucket burst %d; leaky_bucket queue %d, max_wait %s)",
		p.Limit, shortDuration(p.Window), tb.Burst, lb.Queue, shortDuration(lb.MaxWait))
	fmt.Fprintf(&b, "<title>%s</title>\n", escape(title))
	fmt.Fprintf(&b, "<rect width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", svgWidth, height)
	fmt.Fprintf(&b, "<text x=\"12\" y=\"24\" font-size=\"15\" font-weight=\"bold\">%s</text>\n", escape(title))
	// Window boundaries are all drawn when they are far enough apart to tell
	// apart, else only the labelled ones.
	drawAll := float64(plotWidth)/float64(windows) >= minGap
	boundaries := "window boundaries every " + shortDuration(p.Window)
	if !drawAll {
		boundaries = fmt.Sprintf("one window boundary in %d (every %s)", step, shortDuration(time.Duration(step)*p.Window))
	}
	fmt.Fprintf(&b, "<text x=\"12\" y=\"44\" font-size=\"11\" fill=\"#555555\">%s</text>\n", escape(fmt.Sprintf(
		"bar height: requests reaching the upstream per %s slice (tallest: %d); dashed lines: %s",
		shortDuration(approx(span/bins)), most, boundaries)))

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

	// Axis labels stand on every step-th boundary.
	fmt.Fprintf(&b, "<g class=\"boundaries\" stroke=\"#9aa5b1\" stroke-width=\"1\">\n")
	for k := int64(0); k <= windows; k++ {
		if !drawAll && k%step != 0 {
			continue
		}
		bx := x(time.Duration(k) * p.Window)
		fmt.Fprintf(&b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke-dasharray=\"4 3\"/>\n", bx, plotTop, bx, plotBottom)
	}
	fmt.Fprintf(&b, "</g>\n")
	fmt.Fprintf(&b, "<g class=\"axis\">\n")
	fmt.Fprintf(&b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333333\"/>\n", labelWidth, plotBottom, labelWidth+plotWidth, plotBottom)
	for k := int64(0); k <= windows; k += step {
		bx := x(time.Duration(k) * p.Window)
		fmt.Fprintf(&b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#333333\"/>\n", bx, plotBottom, bx, plotBottom+5)
		fmt.Fprintf(&b, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" font-size=\"11\">%s</text>\n", bx, plotBottom+18, escape(shortDuration(time.Duration(k)*p.Window)))
	}
	fmt.Fprintf(&b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-size=\"11\" fill=\"#555555\">time since the origin (a window boundary)</text>\n", labelWidth+plotWidth/2, plotBottom+40)
	fmt.Fprintf(&b, "</g>\n")

	for i, r := range rs {
		top := plotTop + i*laneHeight
		base := top + laneHeight - 6
		fmt.Fprintf(&b, "<g class=\"lane\" id=\"lane-%s\">\n", escape(r.Algorithm))
		fmt.Fprintf(&b, "<text x=\"12\" y=\"%d\" font-weight=\"bold\">%s</text>\n", top+24, escape(r.Algorithm))
		fmt.Fprintf(&b, "<text x=\"12\" y=\"%d\" font-size=\"11\" fill=\"#555555\">%d accepted, %d rejected, %d queued, peak %d</text>\n",
			top+42, r.Accepted, r.Rejected, r.Queued, r.Peak)
		fmt.Fprintf(&b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#c8d0d8\"/>\n", labelWidth, base, labelWidth+plotWidth, base)
		for k, bn := range lanes[i] {
			if bn.n == 0 {
				continue
			}
			// Even a single request gets a visible bar.
			h := math.Max(2, barMax*float64(bn.n)/float64(most))
			when := "at " + shortDuration(bn.first)
			if bn.last != bn.first {
				when = "from " + shortDuration(bn.first) + " to " + shortDuration(bn.last)
			}
			fmt.Fprintf(&b, "<rect class=\"bar\" x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%.1f\" fill=\"#2f6fb0\"><title>%d left %s</title></rect>\n",
				labelWidth+k*binPixels, float64(base)-h, binPixels, h, bn.n, escape(when))
		}
		fmt.Fprintf(&b, "</g>\n")
	}
	fmt.Fprintf(&b, "</svg>\n")
	if _, err := w.Write(b.Bytes()); err != nil {
		return fmt.Errorf("writing svg: %w", err)
	}
	return nil
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

// labelStep returns how many windows apart the axis labels stand so that at
// most maxLabels intervals span the given windows: a round duration when one
// is a multiple of window and not much wider than needed, else 1, 2 or 5
// times a power of ten windows.
func labelStep(window time.Duration, windows int64) int64 {
	need := max((windows+maxLabels-1)/maxLabels, 1)
	for _, d := range niceSteps {
		if d%window != 0 {
			continue
		}
		if k := int64(d / window); k >= need {
			if k <= 3*need {
				return k
			}
			break
		}
	}
	for k := int64(1); ; k *= 10 {
		for _, m := range []int64{1, 2, 5} {
			if k*m >= need {
				return k * m
			}
		}
	}
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

// approx rounds d to three significant digits, for a legend.
func approx(d time.Duration) time.Duration {
	unit := time.Duration(1)
	for d/unit >= 1000 {
		unit *= 10
	}
	return d.Round(unit)
}

func escape(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}
