package ratelimit

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// maxInWindow returns the most of the sorted times ts in any half-open
// interval (t - w, t]. The maximum is reached with t at one of the times.
func maxInWindow(ts []int64, w int64) int {
	best, lo := 0, 0
	for hi, t := range ts {
		for ts[lo] <= t-w {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}

// TestSlidingLogExact compares the log with a model that keeps every
// admitted time: in order, a request is admitted exactly when fewer than
// limit admitted requests lie in (now - window, now].
func TestSlidingLogExact(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(11, 12))
	for trial := range 100 {
		limit := 1 + rng.Int64N(8)
		w := time.Duration(1+rng.IntN(20)) * time.Millisecond
		p := MustPolicy(Policy{Name: "log", Algorithm: SlidingWindowLog, Limit: limit, Window: w})
		var l SlidingLogState
		var admitted []int64
		now := t0.UnixNano()
		for i := range 500 {
			if rng.IntN(3) > 0 {
				now += rng.Int64N(int64(w) / limit * 2)
			}
			in := 0
			for _, a := range admitted {
				if a > now-int64(w) {
					in++
				}
			}
			d := StepSlidingWindowLog(p, &l, now, 1)
			if want := int64(in) < limit; d.Allowed != want {
				t.Fatalf("trial %d request %d: %d of limit %d in the window: got Allowed %v, want %v", trial, i, in, limit, d.Allowed, want)
			}
			if d.Allowed {
				admitted = append(admitted, now)
				in++
			}
			if got, want := d.Remaining, limit-int64(in); d.Allowed && got != want {
				t.Fatalf("trial %d request %d: got Remaining %d, want %d", trial, i, got, want)
			}
		}
		if got := maxInWindow(admitted, int64(w)); int64(got) > limit {
			t.Fatalf("trial %d: got %d admitted in one window, want at most %d", trial, got, limit)
		}
	}
}

// TestSlidingLogLateArrivals feeds the log requests slightly out of order,
// as racing callers do, and checks the limit in every window of the
// callers' own times.
func TestSlidingLogLateArrivals(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(13, 14))
	for trial := range 200 {
		limit := 1 + rng.Int64N(5)
		w := int64(time.Duration(1+rng.IntN(10)) * time.Millisecond)
		p := MustPolicy(Policy{Name: "log", Algorithm: SlidingWindowLog, Limit: limit, Window: time.Duration(w)})
		times := make([]int64, 400)
		now := t0.UnixNano()
		for i := range times {
			now += rng.Int64N(w / limit * 2)
			times[i] = now
		}
		// Swap neighbours within a few places, and now and then hold one
		// back by more than a window.
		for i := range times {
			j := min(i+rng.IntN(4), len(times)-1)
			if rng.IntN(50) == 0 {
				j = min(i+rng.IntN(200), len(times)-1)
			}
			times[i], times[j] = times[j], times[i]
		}
		var l SlidingLogState
		var admitted []int64
		for _, at := range times {
			if StepSlidingWindowLog(p, &l, at, 1).Allowed {
				admitted = append(admitted, at)
			}
		}
		slices.Sort(admitted)
		if got := maxInWindow(admitted, w); int64(got) > limit {
			t.Fatalf("trial %d: got %d admitted in one window, want at most %d", trial, got, limit)
		}
		if len(admitted) == 0 {
			t.Fatalf("trial %d: nothing admitted", trial)
		}
	}
}

// TestSlidingLogConcurrent runs 64 goroutines against a few keys. Each takes
// its time from one shared virtual clock and then decides, so decisions
// reach the store slightly out of order; afterwards no window of any key
// holds more than limit admitted times.
func TestSlidingLogConcurrent(t *testing.T) {
	t.Parallel()
	const (
		goroutines = 64
		perG       = 300
		limit      = 10
		window     = 100 * time.Microsecond
	)
	p := MustPolicy(Policy{Name: "log", Algorithm: SlidingWindowLog, Limit: limit, Window: window})
	m := NewMemoryStore(MemoryOptions{SweepInterval: -1})
	defer m.Close()
	keys := []string{"a", "b", "c", "d"}
	var clock atomic.Int64
	clock.Store(t0.UnixNano())
	var mu sync.Mutex
	admitted := make(map[string][]int64)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			reqs := []Request{{Policy: p}}
			out := make([]Decision, 1)
			var mine [][2]int64
			for i := range perG {
				k := (g + i) % len(keys)
				reqs[0].Key = keys[k]
				now := clock.Add(int64(time.Microsecond))
				m.Decide(context.Background(), time.Unix(0, now), reqs, out)
				if out[0].Allowed {
					mine = append(mine, [2]int64{int64(k), now})
				}
			}
			mu.Lock()
			for _, a := range mine {
				admitted[keys[a[0]]] = append(admitted[keys[a[0]]], a[1])
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	total := 0
	for _, k := range keys {
		ts := admitted[k]
		slices.Sort(ts)
		total += len(ts)
		if got := maxInWindow(ts, int64(window)); got > limit {
			t.Errorf("key %s: got %d admitted in one window, want at most %d", k, got, limit)
		}
	}
	// 19,200 requests over 19.2ms of virtual time, 192 windows a key: a
	// working limiter admits a good share of 4 x 192 x 10.
	if total < 2000 {
		t.Errorf("got %d admitted in all, want at least 2000", total)
	}
}
