package ratelimit

import (
	"math/rand/v2"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)

// TestNoMoreThanExact runs a greedy client, which retries the very
// nanosecond RetryAfter names, against rates whose interval is not a whole
// number of nanoseconds: rounding the interval must never let through more
// than the exact rate does.
func TestNoMoreThanExact(t *testing.T) {
	t.Parallel()
	second := t0.UnixNano() + int64(time.Second)
	t.Run("token_bucket 3/s burst 3", func(t *testing.T) {
		t.Parallel()
		p := MustPolicy(Policy{Name: "tb", Algorithm: TokenBucket, Limit: 3, Window: time.Second, Burst: 3})
		var s TokenBucketState
		admitted := 0
		for now := t0.UnixNano(); now < second; {
			var d Decision
			s, d = StepTokenBucket(p, s, now, 1)
			if d.Allowed {
				admitted++
				continue
			}
			now += int64(d.RetryAfter)
		}
		// 3 at once, then one at 1/3 s and one at 2/3 s; the next is due
		// at 1 s, outside [0, 1 s).
		if admitted != 5 {
			t.Errorf("got %d admitted in [0, 1s), want 5", admitted)
		}
	})
	t.Run("leaky_bucket 3/s", func(t *testing.T) {
		t.Parallel()
		p := MustPolicy(Policy{Name: "lb", Algorithm: LeakyBucket, Limit: 3, Window: time.Second, Queue: 100})
		var s LeakyBucketState
		departed := 0
		for now := t0.UnixNano(); now < second; now += int64(time.Millisecond) {
			var d Decision
			s, d = StepLeakyBucket(p, s, now, 1)
			if d.Allowed && now+int64(d.Delay) < second {
				departed++
			}
		}
		if departed != 3 {
			t.Errorf("got %d departures in [0, 1s), want 3 (one per 1/3 s)", departed)
		}
	})
}

// TestLeakyToleranceMatchesQueueModel checks the fold of SPEC's two rules
// into one tolerance: a request is rejected when `queue` requests already
// wait (the one leaving now not counted) or its wait would exceed max_wait.
// The model keeps every departure and counts the waiting ones directly.
func TestLeakyToleranceMatchesQueueModel(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		queue := rng.Int64N(6)
		interval := time.Duration(1+rng.IntN(5)) * 10 * time.Millisecond
		var maxWait time.Duration
		if rng.IntN(2) == 0 {
			maxWait = time.Duration(rng.Int64N(int64(queue+1)*int64(interval))) + time.Microsecond
		}
		p := MustPolicy(Policy{Name: "lb", Algorithm: LeakyBucket, Limit: 10, Window: 10 * interval, Queue: queue, MaxWait: maxWait})
		var s LeakyBucketState
		var deps []int64
		now := t0.UnixNano()
		for i := range 300 {
			// Bursts of simultaneous arrivals, steps below and above interval.
			switch rng.IntN(3) {
			case 0:
			case 1:
				now += rng.Int64N(int64(interval))
			default:
				now += rng.Int64N(3 * int64(interval))
			}
			waiting := int64(0)
			for _, d := range deps {
				if d > now {
					waiting++
				}
			}
			dep := now
			if len(deps) > 0 {
				dep = max(dep, deps[len(deps)-1]+int64(p.Interval()))
			}
			// A free outflow takes it at once; otherwise it must find a
			// queue place and a short enough wait.
			wantAllowed := dep == now || (waiting < queue && dep-now <= int64(p.MaxWait.Truncate(time.Microsecond)))
			var d Decision
			s, d = StepLeakyBucket(p, s, now, 1)
			if d.Allowed != wantAllowed {
				t.Fatalf("trial %d request %d (queue %d, max_wait %v, %d waiting, wait %v): got Allowed %v, want %v",
					trial, i, queue, p.MaxWait, waiting, time.Duration(dep-now), d.Allowed, wantAllowed)
			}
			if d.Allowed {
				if got, want := d.Delay, time.Duration(dep-now); got != want {
					t.Fatalf("trial %d request %d: got Delay %v, want %v", trial, i, got, want)
				}
				deps = append(deps, dep)
			}
		}
	}
}

// TestLeakyDeparturesSpaced checks that admitted requests leave in arrival
// order, one interval apart while the queue is busy, never closer.
func TestLeakyDeparturesSpaced(t *testing.T) {
	t.Parallel()
	p := MustPolicy(Policy{Name: "lb", Algorithm: LeakyBucket, Limit: 10, Window: time.Second, Queue: 5})
	rng := rand.New(rand.NewPCG(3, 4))
	var s LeakyBucketState
	now := t0.UnixNano()
	last := int64(0)
	admitted := 0
	for i := range 10_000 {
		now += rng.Int64N(int64(150 * time.Millisecond))
		var d Decision
		s, d = StepLeakyBucket(p, s, now, 1)
		if !d.Allowed {
			continue
		}
		admitted++
		dep := now + int64(d.Delay)
		want := now
		if last != 0 {
			want = max(now, last+int64(p.Interval()))
		}
		if dep != want {
			t.Fatalf("request %d at +%v: got departure +%v, want +%v (previous +%v)", i,
				time.Duration(now-t0.UnixNano()), time.Duration(dep-t0.UnixNano()), time.Duration(want-t0.UnixNano()), time.Duration(last-t0.UnixNano()))
		}
		last = dep
	}
	if admitted < 5000 {
		t.Errorf("got %d admitted, want most of 10000 arrivals at about the outflow rate", admitted)
	}
}

// TestTokenBucketLongRunRate checks that over many refill intervals of
// random arrivals faster than the refill, the admitted rate is limit/window
// within 1%. A full bucket wastes refill until the next arrival, so a small
// burst needs arrivals much denser than the rate.
func TestTokenBucketLongRunRate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		limit     int64
		window    time.Duration
		burst     int64
		intervals int64   // how long the run is, in refill intervals
		density   float64 // arrivals per refill interval, on average
	}{
		{100, time.Minute, 0, 20_000, 4},
		{7, time.Second, 50, 20_000, 4},
		{1, 3 * time.Second, 1, 2_000, 1000},
	} {
		p := MustPolicy(Policy{Name: "tb", Algorithm: TokenBucket, Limit: tc.limit, Window: tc.window, Burst: tc.burst})
		rng := rand.New(rand.NewPCG(5, uint64(tc.limit)))
		var s TokenBucketState
		start := t0.UnixNano()
		span := tc.intervals * int64(p.Interval())
		mean := float64(p.Interval()) / tc.density
		admitted := 0
		for now := start; now < start+span; now += int64(rng.ExpFloat64()*mean) + 1 {
			var d Decision
			if s, d = StepTokenBucket(p, s, now, 1); d.Allowed {
				admitted++
			}
		}
		got := float64(admitted) / (float64(span) / float64(time.Second))
		want := float64(tc.limit) / tc.window.Seconds()
		if got < want*0.99 || got > want*1.01 {
			t.Errorf("limit %d per %v burst %d: got %.4f admitted/s, want %.4f within 1%%", tc.limit, tc.window, p.Burst, got, want)
		}
	}
}

// TestStepEdges covers the corners that the conformance sequences do not.
func TestStepEdges(t *testing.T) {
	t.Parallel()
	t.Run("fixed window before the epoch aligns down", func(t *testing.T) {
		t.Parallel()
		if got, want := windowStart(-1, 10), int64(-10); got != want {
			t.Errorf("windowStart(-1, 10): got %d, want %d", got, want)
		}
		if got, want := windowStart(-10, 10), int64(-10); got != want {
			t.Errorf("windowStart(-10, 10): got %d, want %d", got, want)
		}
	})
	t.Run("fixed window clock stepping back keeps counting", func(t *testing.T) {
		t.Parallel()
		p := MustPolicy(Policy{Name: "fw", Algorithm: FixedWindow, Limit: 2, Window: time.Minute})
		var s FixedWindowState
		now := t0.UnixNano()
		s, _ = StepFixedWindow(p, s, now+int64(time.Minute), 1)
		s, _ = StepFixedWindow(p, s, now, 1)
		if _, d := StepFixedWindow(p, s, now, 1); d.Allowed {
			t.Errorf("third request after the clock stepped back: got allowed, want rejected")
		}
	})
	t.Run("token bucket refills continuously", func(t *testing.T) {
		t.Parallel()
		p := MustPolicy(Policy{Name: "tb", Algorithm: TokenBucket, Limit: 4, Window: time.Second, Burst: 1})
		var s TokenBucketState
		now := t0.UnixNano()
		s, _ = StepTokenBucket(p, s, now, 1)
		for _, at := range []time.Duration{100 * time.Millisecond, 249 * time.Millisecond} {
			if _, d := StepTokenBucket(p, s, now+int64(at), 1); d.Allowed {
				t.Errorf("at +%v: got allowed, want rejected (a token takes 250ms)", at)
			}
		}
		if _, d := StepTokenBucket(p, s, now+int64(250*time.Millisecond), 1); !d.Allowed {
			t.Errorf("at +250ms: got rejected, want allowed")
		}
	})
	t.Run("sliding counter retry lands on admission", func(t *testing.T) {
		t.Parallel()
		// Whatever the counts, a retry at now+RetryAfter is admitted and
		// one a microsecond earlier is not.
		p := MustPolicy(Policy{Name: "swc", Algorithm: SlidingWindowCounter, Limit: 7, Window: 3 * time.Second})
		rng := rand.New(rand.NewPCG(7, 8))
		var s SlidingWindowCounterState
		now := t0.UnixNano()
		checked := 0
		for range 5000 {
			now += rng.Int64N(int64(time.Second)) / 1000 * 1000
			var d Decision
			if s, d = StepSlidingWindowCounter(p, s, now, 1); d.Allowed {
				continue
			}
			checked++
			if _, r := StepSlidingWindowCounter(p, s, now+int64(d.RetryAfter), 1); !r.Allowed {
				t.Fatalf("retry at +%v: got rejected, want allowed", d.RetryAfter)
			}
			if d.RetryAfter > time.Microsecond {
				if _, r := StepSlidingWindowCounter(p, s, now+int64(d.RetryAfter-time.Microsecond), 1); r.Allowed {
					t.Fatalf("retry at +%v, a microsecond early: got allowed, want rejected", d.RetryAfter-time.Microsecond)
				}
			}
		}
		if checked == 0 {
			t.Fatal("no rejection was checked")
		}
	})
}

// TestRetryAfterAdmits checks every algorithm's rejections: a retry at
// now+RetryAfter is admitted, one a microsecond earlier is not (the
// sliding_window_counter case above rounds to the microsecond; here the
// step is whole microseconds too).
func TestRetryAfterAdmits(t *testing.T) {
	t.Parallel()
	for _, a := range Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			t.Parallel()
			pol := Policy{Name: "p", Algorithm: a, Limit: 5, Window: time.Second}
			if a == LeakyBucket {
				pol.Queue = 2
			}
			if a == TokenBucket {
				pol.Burst = 3
			}
			p := MustPolicy(pol)
			rng := rand.New(rand.NewPCG(9, uint64(a)))
			st := newStepper(p)
			now := t0.UnixNano()
			checked := 0
			for range 3000 {
				now += rng.Int64N(int64(300*time.Millisecond)) / 1000 * 1000
				d := st.take(now)
				if d.Allowed {
					continue
				}
				checked++
				if r := st.try(now + int64(d.RetryAfter)); !r.Allowed {
					t.Fatalf("retry at +%v: got rejected, want allowed", d.RetryAfter)
				}
				if r := st.try(now + int64(d.RetryAfter-time.Microsecond)); r.Allowed {
					t.Fatalf("retry at +%v, a microsecond early: got allowed, want rejected", d.RetryAfter-time.Microsecond)
				}
			}
			if checked < 100 {
				t.Fatalf("got %d rejections checked, want at least 100", checked)
			}
		})
	}
}

// stepper applies a policy's step to its own state through a memory-store
// entry, with a way to try a request without keeping its effect.
type stepper struct {
	p *Policy
	e *entry
}

func newStepper(p *Policy) *stepper {
	e := &entry{pol: p}
	if p.Algorithm == SlidingWindowLog {
		e.ext = new(entryExt)
	}
	return &stepper{p, e}
}

// take decides one request at now.
func (s *stepper) take(now int64) Decision { return s.e.decideLocked(s.p, now) }

// try decides one request at now and then restores the state.
func (s *stepper) try(now int64) Decision {
	saved := *s.e
	if s.e.ext != nil {
		x := *s.e.ext
		x.log.ring = append([]int64(nil), x.log.ring...)
		saved.ext = &x
	}
	d := s.e.decideLocked(s.p, now)
	*s.e = saved
	return d
}

// TestSlidingLogCostAboveLimit checks that a cost the log can never admit
// is rejected, also on an empty log.
func TestSlidingLogCostAboveLimit(t *testing.T) {
	t.Parallel()
	p := MustPolicy(Policy{Name: "log", Algorithm: SlidingWindowLog, Limit: 2, Window: time.Second})
	var l SlidingLogState
	if d := StepSlidingWindowLog(p, &l, t0.UnixNano(), 3); d.Allowed || l.Len() != 0 {
		t.Errorf("cost 3 on an empty log of limit 2: got Allowed %v and %d logged, want rejected and 0", d.Allowed, l.Len())
	}
	if d := StepSlidingWindowLog(p, &l, t0.UnixNano(), 2); !d.Allowed || l.Len() != 2 {
		t.Errorf("cost 2: got Allowed %v and %d logged, want allowed and 2", d.Allowed, l.Len())
	}
}
