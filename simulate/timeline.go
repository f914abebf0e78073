package simulate

import (
	"time"

	"github.com/sluicehq/sluice/ratelimit"
)

// maxSlices bounds the time slices of a timeline: enough to see the shape
// of a day, few enough that each slice is a readable bar.
const maxSlices = 120

// Timeline cuts the time the traffic covers into equal slices, for the
// SVG. It spans from the first arrival to the last departure the
// leaky_bucket queue allows, with one empty slice either side, so it zooms
// to where the traffic is.
type Timeline struct {
	// Start is the offset where slice 0 begins; Slice the width of one.
	Start  time.Duration
	Slice  time.Duration
	Slices int
	// Origin and Clock are the traffic's: with Clock, times are shown as
	// clock times (UTC) from Origin, otherwise as offsets.
	Origin time.Time
	Clock  bool
}

// End is the offset where the last slice ends.
func (t *Timeline) End() time.Duration { return t.Start + time.Duration(t.Slices)*t.Slice }

func (t *Timeline) index(at time.Duration) int {
	return min(max(int((at-t.Start)/t.Slice), 0), t.Slices-1)
}

// NewTimeline returns the timeline that fits tr, whose requests are sorted,
// under p's settings.
func NewTimeline(p Params, tr *Traffic) *Timeline {
	var first, last time.Duration
	if n := len(tr.Requests); n > 0 {
		first, last = tr.Requests[0].At, tr.Requests[n-1].At
	}
	if lb, err := p.policy(ratelimit.LeakyBucket); err == nil {
		// Nothing leaves later than its arrival plus the longest wait.
		last += min(time.Duration(lb.Queue)*lb.Interval(), lb.MaxWait)
	}
	// Traffic in one instant still gets a slice wide enough to draw.
	last = max(last, first+p.Window/100)
	t := &Timeline{Origin: tr.Origin, Clock: tr.Clock}
	for _, d := range sliceSteps() {
		start := max(first/d*d-d, 0)
		end := (last/d+1)*d + d
		if n := (end - start) / d; n <= maxSlices || d >= maxStep {
			t.Start, t.Slice, t.Slices = start, d, int(n)
			break
		}
	}
	return t
}

// week is a slice width that weeks and years of them read well in.
const week = 7 * 24 * time.Hour

// maxStep is the widest slice, 520 weeks, about ten years: the longest
// timeline, 100 years of offsets and 100 years of queueing after them,
// takes 20 of them. One longer would get more than maxSlices.
const maxStep = 520 * week

// sliceSteps are the slice widths that read well: niceSteps, then whole
// weeks up to maxStep (4 weeks, a quarter, a year of 52, then years).
func sliceSteps() []time.Duration {
	return append(niceSteps[:len(niceSteps):len(niceSteps)], 2*week, 4*week, 13*week, 52*week, 104*week, 260*week, maxStep)
}

// labelEvery returns how far apart the axis labels stand: the narrowest
// round duration that is a multiple of the slice and leaves at most
// maxLabels intervals.
func (t *Timeline) labelEvery() time.Duration {
	span := t.End() - t.Start
	for _, d := range sliceSteps() {
		if d%t.Slice == 0 && span/d <= maxLabels {
			return d
		}
	}
	return maxStep
}
