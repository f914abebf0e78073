package simulate

import (
	"encoding/xml"
	"errors"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
)

// svgShape is what the SVG tests check in a drawing.
type svgShape struct {
	lanes      []string                  // ids of the lane groups, in order
	bars       map[string]map[string]int // lane id -> fill -> bar rects
	legend     []string                  // texts of the legend items
	swatches   []string                  // fills of the legend items
	boundaries int                       // lines in the boundaries group
	labels     []string                  // axis texts
}

// walkSVG decodes the whole document, failing on malformed XML.
func walkSVG(t *testing.T, doc string) svgShape {
	t.Helper()
	s := svgShape{bars: map[string]map[string]int{}}
	type open struct{ class, id string }
	var stack []open
	d := xml.NewDecoder(strings.NewReader(doc))
	sawRoot := false
	lane := ""
	inside := func(class string) bool {
		return slices.ContainsFunc(stack, func(o open) bool { return o.class == class })
	}
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("decoding svg: got error %v, want none", err)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			if !sawRoot {
				sawRoot = true
				if el.Name.Local != "svg" || el.Name.Space != "http://www.w3.org/2000/svg" {
					t.Fatalf("got root %v, want svg in the SVG namespace", el.Name)
				}
			}
			var o open
			fill := ""
			for _, a := range el.Attr {
				switch a.Name.Local {
				case "class":
					o.class = a.Value
				case "id":
					o.id = a.Value
				case "fill":
					fill = a.Value
				}
			}
			switch {
			case el.Name.Local == "g" && o.class == "lane":
				lane = o.id
				s.lanes = append(s.lanes, o.id)
				s.bars[lane] = map[string]int{}
			case el.Name.Local == "rect" && o.class == "bar":
				if !inside("lane") {
					t.Errorf("got a bar outside any lane")
				}
				s.bars[lane][fill]++
			case el.Name.Local == "rect" && inside("legend-item"):
				s.swatches = append(s.swatches, fill)
			case el.Name.Local == "line" && len(stack) > 0 && stack[len(stack)-1].class == "boundaries":
				s.boundaries++
			}
			stack = append(stack, o)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			txt := strings.TrimSpace(string(el))
			switch {
			case txt == "":
			case inside("legend-item"):
				s.legend = append(s.legend, txt)
			case inside("axis"):
				s.labels = append(s.labels, txt)
			}
		}
	}
	if !sawRoot {
		t.Fatal("got no root element, want svg")
	}
	return s
}

var (
	wantLegend   = []string{"reached the upstream at once", "reached the upstream after waiting in the queue", "rejected (429), drawn below the line"}
	wantSwatches = []string{colourAdmitted, colourQueued, colourRejected}
)

func laneIDs(algs []ratelimit.Algorithm) []string {
	var ids []string
	for _, a := range algs {
		ids = append(ids, "lane-"+a.String())
	}
	return ids
}

// render simulates tr under p and draws it.
func render(t *testing.T, p Params, tr *Traffic) (svgShape, string) {
	t.Helper()
	tl := NewTimeline(p, tr)
	rs, err := Simulate(p, tr, Options{Timeline: tl, Consumers: true})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := WriteSVG(&b, p, tl, rs); err != nil {
		t.Fatalf("got error %v, want none", err)
	}
	return walkSVG(t, b.String()), b.String()
}

func TestWriteSVG(t *testing.T) {
	t.Parallel()
	a := func(f string) string { return "lane-" + f }
	tests := []struct {
		name           string
		p              Params
		at             []Arrival
		wantBars       map[string]map[string]int
		wantBoundaries int
		wantLabels     []string
	}{
		{
			name: "spec example zooms to the two bursts",
			p:    Params{Limit: 100, Window: time.Minute},
			at:   specExample,
			// A slice at 58s and one at 61s; rejections below them.
			wantBars: map[string]map[string]int{
				a("token_bucket"):           {colourAdmitted: 2, colourRejected: 1},
				a("leaky_bucket"):           {colourAdmitted: 2, colourRejected: 2},
				a("fixed_window"):           {colourAdmitted: 2},
				a("sliding_window_log"):     {colourAdmitted: 1, colourRejected: 1},
				a("sliding_window_counter"): {colourAdmitted: 2, colourRejected: 1},
			},
			wantBoundaries: 1, // at 1m
			wantLabels:     []string{"58s", "58.5s", "59s", "59.5s", "1m", "1m0.5s", "1m1s", "time since the origin (a window boundary)"},
		},
		{
			name: "queued requests leave in their own colour",
			p:    Params{Limit: 10, Window: time.Second, Queue: 5},
			at:   []Arrival{{20, 0}},
			// leaky_bucket: one at once, five leaving 100ms apart over
			// 5ms slices, 14 rejected; the others take 10 at once.
			wantBars: map[string]map[string]int{
				a("token_bucket"):           {colourAdmitted: 1, colourRejected: 1},
				a("leaky_bucket"):           {colourAdmitted: 1, colourQueued: 5, colourRejected: 1},
				a("fixed_window"):           {colourAdmitted: 1, colourRejected: 1},
				a("sliding_window_log"):     {colourAdmitted: 1, colourRejected: 1},
				a("sliding_window_counter"): {colourAdmitted: 1, colourRejected: 1},
			},
			wantBoundaries: 1, // at 0s
			wantLabels: []string{"0s", "50ms", "100ms", "150ms", "200ms", "250ms", "300ms", "350ms", "400ms", "450ms", "500ms",
				"time since the origin (a window boundary)"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr, err := FromArrivals(tc.p.Window, tc.at)
			if err != nil {
				t.Fatal(err)
			}
			s, _ := render(t, tc.p, tr)
			if want := laneIDs(ratelimit.Algorithms); !slices.Equal(s.lanes, want) {
				t.Errorf("got lanes %v, want %v", s.lanes, want)
			}
			if !slices.Equal(s.legend, wantLegend) || !slices.Equal(s.swatches, wantSwatches) {
				t.Errorf("got legend %q in %q, want %q in %q", s.legend, s.swatches, wantLegend, wantSwatches)
			}
			for lane, want := range tc.wantBars {
				if got := s.bars[lane]; !maps.Equal(got, want) {
					t.Errorf("%s: got bars %v, want %v", lane, got, want)
				}
			}
			if s.boundaries != tc.wantBoundaries {
				t.Errorf("got %d window boundaries, want %d", s.boundaries, tc.wantBoundaries)
			}
			if !slices.Equal(s.labels, tc.wantLabels) {
				t.Errorf("got axis labels %q, want %q", s.labels, tc.wantLabels)
			}
		})
	}
}

// TestWriteSVGDayReplay draws a day of traffic from many consumers: it is
// cut into at most maxSlices slices, labelled in clock times, and stays
// small.
func TestWriteSVGDayReplay(t *testing.T) {
	t.Parallel()
	p := Params{Limit: 20, Window: time.Minute, Queue: 5}
	day, err := Pattern{Shape: "poisson", Rate: 0.5, Duration: 24 * time.Hour, Consumers: 3, Seed: 7}.Traffic(p.Window)
	if err != nil {
		t.Fatal(err)
	}
	day.Clock = true
	day.Origin = time.Date(2026, time.March, 9, 0, 0, 0, 0, time.UTC)
	s, doc := render(t, p, day)
	if want := laneIDs(ratelimit.Algorithms); !slices.Equal(s.lanes, want) {
		t.Errorf("got lanes %v, want %v", s.lanes, want)
	}
	for lane, bars := range s.bars {
		n := 0
		for _, c := range bars {
			n += c
		}
		if n == 0 || n > 3*maxSlices {
			t.Errorf("%s: got %d bars, want 1 to %d", lane, n, 3*maxSlices)
		}
	}
	wantLabels := []string{"00:00", "03:00", "06:00", "09:00", "12:00", "15:00", "18:00", "21:00", "00:00", "time (UTC) on 2026-03-09"}
	if !slices.Equal(s.labels, wantLabels) {
		t.Errorf("got axis labels %q, want %q", s.labels, wantLabels)
	}
	if s.boundaries != 0 {
		t.Errorf("got %d window boundaries drawn, want none: 1440 would be too close", s.boundaries)
	}
	if len(doc) > 256<<10 {
		t.Errorf("got %d bytes of svg, want at most 256 KiB", len(doc))
	}
}

func TestNewTimeline(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		p           Params
		at          []time.Duration // arrivals
		start, step time.Duration
		slices      int
	}{
		{"one instant", Params{Limit: 1, Window: time.Second}, []time.Duration{5 * time.Second}, 5*time.Second - time.Millisecond, time.Millisecond, 13},
		{"queue widens the span", Params{Limit: 10, Window: time.Second, Queue: 50}, []time.Duration{0}, 0, 50 * time.Millisecond, 102},
		{"an hour", Params{Limit: 1, Window: time.Second}, []time.Duration{0, time.Hour}, 0, time.Minute, 62},
		{"a day from noon", Params{Limit: 1, Window: time.Minute}, []time.Duration{12 * time.Hour, 36 * time.Hour}, 11*time.Hour + 45*time.Minute, 15 * time.Minute, 99},
		{"a year", Params{Limit: 1, Window: time.Minute}, []time.Duration{0, 365 * 24 * time.Hour}, 0, 7 * 24 * time.Hour, 54},
		// Past 120 slices of 4 weeks (9 years), slices of 4 weeks got
		// more than 120, and the axis a label on each, drawn over each
		// other: 1,304 for -at 1@0s,1@876000h.
		{"a century", Params{Limit: 1, Window: time.Minute}, []time.Duration{0, MaxOffset}, 0, 52 * 7 * 24 * time.Hour, 102},
		{"a queue of 27 years", Params{Limit: 1, Window: 24 * time.Hour, Queue: 10000}, []time.Duration{0}, 0, 13 * 7 * 24 * time.Hour, 111},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr := &Traffic{Keys: []string{"k"}}
			for _, at := range tc.at {
				tr.Requests = append(tr.Requests, Request{At: at})
			}
			tl := NewTimeline(tc.p, tr)
			if tl.Start != tc.start || tl.Slice != tc.step || tl.Slices != tc.slices {
				t.Errorf("got start %s, slice %s, %d slices; want %s, %s, %d", tl.Start, tl.Slice, tl.Slices, tc.start, tc.step, tc.slices)
			}
			if tl.Slices > maxSlices {
				t.Errorf("got %d slices, want at most %d", tl.Slices, maxSlices)
			}
			if first, last := tc.at[0], tc.at[len(tc.at)-1]; first < tl.Start || last >= tl.End() {
				t.Errorf("got [%s, %s), want it to hold %s to %s", tl.Start, tl.End(), first, last)
			}
		})
	}
}

func TestWriteSVGInvalidParams(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	if err := WriteSVG(&b, Params{Limit: 1}, NewTimeline(Params{Limit: 1}, &Traffic{}), nil); err == nil || err.Error() != "window: must be > 0" {
		t.Errorf("got error %v, want window: must be > 0", err)
	}
	if b.Len() != 0 {
		t.Errorf("got %d bytes written, want 0", b.Len())
	}
}
