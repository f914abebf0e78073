package simulate

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
)

// svgShape is what TestWriteSVG checks in a drawing.
type svgShape struct {
	lanes      []string // ids of the lane groups, in order
	bars       int      // bar rects in all lanes
	boundaries int      // lines in the boundaries group
	labels     []string // axis texts
}

// walkSVG decodes the whole document, failing on malformed XML.
func walkSVG(t *testing.T, doc string) svgShape {
	t.Helper()
	var s svgShape
	var stack []string // class of each open element
	d := xml.NewDecoder(strings.NewReader(doc))
	sawRoot := false
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
			class, id := "", ""
			for _, a := range el.Attr {
				switch a.Name.Local {
				case "class":
					class = a.Value
				case "id":
					id = a.Value
				}
			}
			parent := ""
			if len(stack) > 0 {
				parent = stack[len(stack)-1]
			}
			switch {
			case el.Name.Local == "g" && class == "lane":
				s.lanes = append(s.lanes, id)
			case el.Name.Local == "rect" && class == "bar":
				s.bars++
			case el.Name.Local == "line" && parent == "boundaries":
				s.boundaries++
			}
			stack = append(stack, class)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) > 0 && stack[len(stack)-1] == "" && slices.Contains(stack, "axis") {
				if txt := strings.TrimSpace(string(el)); txt != "" {
					s.labels = append(s.labels, txt)
				}
			}
		}
	}
	if !sawRoot {
		t.Fatal("got no root element, want svg")
	}
	return s
}

func TestWriteSVG(t *testing.T) {
	t.Parallel()
	var wantLanes []string
	for _, a := range ratelimit.Algorithms {
		wantLanes = append(wantLanes, "lane-"+a.String())
	}
	tests := []struct {
		name           string
		p              Params
		at             []Arrival
		wantBars       int
		wantBoundaries int
		wantLabels     []string
	}{
		{
			name: "spec example",
			p:    Params{Limit: 100, Window: time.Minute},
			at:   specExample,
			// Two instants in each lane but sliding_window_log's (58s only).
			wantBars:       9,
			wantBoundaries: 3,
			wantLabels:     []string{"0s", "1m", "2m", "time since the origin (a window boundary)"},
		},
		{
			name: "queued departures spread out",
			p:    Params{Limit: 10, Window: time.Second, Queue: 5},
			at:   []Arrival{{20, 0}},
			// leaky_bucket: 6 departures 100ms apart, 6 slices; the others 1.
			wantBars:       10,
			wantBoundaries: 2,
			wantLabels:     []string{"0s", "1s", "time since the origin (a window boundary)"},
		},
		{
			name: "many windows draw only the labelled boundaries",
			p:    Params{Limit: 1, Window: time.Second},
			at:   []Arrival{{1, 0}, {1, time.Hour}},
			// Slices at both ends of the hour in every lane.
			wantBars: 10,
			// 3601 windows, too close to draw: every 10 minutes, up to the
			// first one after the hour.
			wantBoundaries: 8,
			wantLabels: []string{"0s", "10m", "20m", "30m", "40m", "50m", "1h", "1h10m",
				"time since the origin (a window boundary)"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rs, err := Run(tc.p, tc.at)
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			if err := WriteSVG(&b, tc.p, rs); err != nil {
				t.Fatalf("got error %v, want none", err)
			}
			s := walkSVG(t, b.String())
			if !slices.Equal(s.lanes, wantLanes) {
				t.Errorf("got lanes %v, want %v", s.lanes, wantLanes)
			}
			if s.bars != tc.wantBars {
				t.Errorf("got %d bars, want %d", s.bars, tc.wantBars)
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

func TestLabelStep(t *testing.T) {
	t.Parallel()
	tests := []struct {
		window  time.Duration
		windows int64
		want    int64
	}{
		{time.Minute, 2, 1},
		{time.Minute, 10, 1},
		{time.Minute, 11, 2},
		{time.Second, 3601, 600},                       // 10m
		{100 * time.Millisecond, 25, 5},                // 500ms
		{7 * time.Second, 9, 1},                        // no round duration is 7s
		{7 * time.Second, 300, 50},                     // nor a small multiple of it
		{time.Minute, 60 * 24 * 30, 7 * 24 * 60},       // a week
		{time.Nanosecond, 1e15, int64(48 * time.Hour)}, // 1e14 needed
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s×%d", tc.window, tc.windows), func(t *testing.T) {
			t.Parallel()
			if got := labelStep(tc.window, tc.windows); got != tc.want {
				t.Errorf("got %d, want %d", got, tc.want)
			}
		})
	}
}

func TestWriteSVGBoundedSize(t *testing.T) {
	t.Parallel()
	p := Params{Limit: 1000, Window: time.Second, Queue: 1000}
	rs, err := Run(p, []Arrival{{100_000, 0}})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := WriteSVG(&b, p, rs); err != nil {
		t.Fatalf("got error %v, want none", err)
	}
	s := walkSVG(t, b.String())
	if max := len(ratelimit.Algorithms) * bins; s.bars > max {
		t.Errorf("got %d bars, want at most %d", s.bars, max)
	}
	if b.Len() > 1<<20 {
		t.Errorf("got %d bytes of svg, want at most 1 MiB", b.Len())
	}
}

func TestWriteSVGInvalidParams(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	if err := WriteSVG(&b, Params{Limit: 1}, nil); err == nil || err.Error() != "window: must be > 0" {
		t.Errorf("got error %v, want window: must be > 0", err)
	}
	if b.Len() != 0 {
		t.Errorf("got %d bytes written, want 0", b.Len())
	}
}
