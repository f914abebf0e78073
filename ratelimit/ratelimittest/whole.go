package ratelimittest

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
)

// runResetWhole checks that Reset is exactly how long until the budget is
// whole again (X-RateLimit-Reset, /v1/limits' reset_seconds): a Peek at
// the decision time plus Reset finds the bucket as full as a fresh one,
// and a Peek one microsecond sooner does not. A Reset that waits for all
// state to age out, past the moment the budget is whole, tells clients to
// wait longer than they must.
func runResetWhole(t *testing.T, open func(*testing.T) ratelimit.Store) {
	cases := []struct {
		name string
		pol  ratelimit.Policy
		at   []time.Duration // one request at each, in order
		want time.Duration   // the last decision's Reset, computed by hand
	}{
		{"token_bucket", ratelimit.Policy{Algorithm: ratelimit.TokenBucket, Limit: 10, Window: sec, Burst: 4},
			[]time.Duration{0, 0, 0, 0, 0, 50 * ms}, 350 * ms},
		{"leaky_bucket", ratelimit.Policy{Algorithm: ratelimit.LeakyBucket, Limit: 10, Window: sec, Queue: 3},
			[]time.Duration{0, 0, 0, 0, 0}, 400 * ms},
		// max_wait no multiple of the interval: every place is free
		// while the outflow is still busy.
		{"leaky_bucket max_wait", ratelimit.Policy{Algorithm: ratelimit.LeakyBucket, Limit: 10, Window: sec, Queue: 5, MaxWait: 250 * ms},
			[]time.Duration{0, 0}, 150 * ms}, // next departure at 200ms, less 250ms % 100ms
		{"fixed_window", ratelimit.Policy{Algorithm: ratelimit.FixedWindow, Limit: 3, Window: 10 * sec},
			[]time.Duration{2 * sec, 3 * sec, 4 * sec, 5 * sec}, 5 * sec},
		{"sliding_window_log", ratelimit.Policy{Algorithm: ratelimit.SlidingWindowLog, Limit: 3, Window: 10 * sec},
			[]time.Duration{2 * sec, 3 * sec, 4 * sec, 5 * sec}, 9 * sec},
		// cur = 1: the budget is whole just after the next window
		// starts, where that request weighs less than one.
		{"sliding_window_counter one", ratelimit.Policy{Algorithm: ratelimit.SlidingWindowCounter, Limit: 10, Window: 10 * sec},
			[]time.Duration{5 * sec}, 5*sec + us},
		// cur = 10 (and one rejected): whole once 10 x (1-f) < 1 in
		// the next window, at f > 0.9.
		{"sliding_window_counter full", ratelimit.Policy{Algorithm: ratelimit.SlidingWindowCounter, Limit: 10, Window: 10 * sec},
			repeat11(5 * sec), 14*sec + us},
		// prev = 10 and cur = 3 at 14s: cur weighs in the window after.
		{"sliding_window_counter both", ratelimit.Policy{Algorithm: ratelimit.SlidingWindowCounter, Limit: 10, Window: 10 * sec},
			append(repeat11(5 * sec)[:10], 12*sec, 12*sec, 14*sec), 12666667 * us},
		// prev = 3 and cur = 1 at 11s.
		{"sliding_window_counter prev and cur", ratelimit.Policy{Algorithm: ratelimit.SlidingWindowCounter, Limit: 3, Window: 10 * sec},
			[]time.Duration{5 * sec, 5 * sec, 5 * sec, 5 * sec, 11 * sec}, 9*sec + us},
		// Weights in sevenths and thirds, whose moments fall between
		// microseconds: each store rounds up to the first whole one.
		// cur = 7 at 300ms: whole once 7 x (1-f) < 1, 1.857142857s in.
		{"sliding_window_counter sevenths", ratelimit.Policy{Algorithm: ratelimit.SlidingWindowCounter, Limit: 7, Window: sec},
			[]time.Duration{300 * ms, 300 * ms, 300 * ms, 300 * ms, 300 * ms, 300 * ms, 300 * ms, 300 * ms}, 1557143 * us},
		// prev = 3, cur = 0, rejected at the window's start: whole once
		// 3 x (1-f) < 1, 666666667ns in.
		{"sliding_window_counter thirds of prev", ratelimit.Policy{Algorithm: ratelimit.SlidingWindowCounter, Limit: 3, Window: sec},
			[]time.Duration{100 * ms, 100 * ms, 100 * ms, sec}, 666667 * us},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			pol := tc.pol
			pol.Name = fmt.Sprintf("whole-reset-%d", i)
			r := ratelimit.Request{Policy: mustPolicy(t, pol), Key: "k"}
			whole := peek(t, s, T0, r).Remaining
			var d ratelimit.Decision
			for _, at := range tc.at {
				d = decide(t, s, T0.Add(at), []ratelimit.Request{r})[0]
			}
			last := T0.Add(tc.at[len(tc.at)-1])
			if d.Reset <= 0 {
				t.Fatalf("last decision at %v: got Reset %v, want > 0", last, d.Reset)
			}
			if d.Reset != tc.want {
				t.Errorf("last decision at %v: got Reset %v, want %v", last, d.Reset, tc.want)
			}
			if got := peek(t, s, last.Add(d.Reset-us), r); got.Remaining >= whole {
				t.Errorf("peek at Reset %v less 1µs: got remaining %d (reset %v), want below %d: Reset is late", d.Reset, got.Remaining, got.Reset, whole)
			}
			if got := peek(t, s, last.Add(d.Reset), r); got.Remaining != whole || got.Reset != 0 {
				t.Errorf("peek at Reset %v: got remaining %d, reset %v, want %d, 0", d.Reset, got.Remaining, got.Reset, whole)
			}
		})
	}
}

// repeat11 is 11 requests at once: 10 that a limit of 10 admits, one it
// rejects.
func repeat11(at time.Duration) []time.Duration {
	out := make([]time.Duration, 11)
	for i := range out {
		out[i] = at
	}
	return out
}
