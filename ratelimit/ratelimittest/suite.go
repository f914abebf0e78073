// Package ratelimittest is the conformance suite every ratelimit.Store
// passes: the same sequences of decisions, checked field by field, whatever
// keeps the state.
//
// Every time and duration the suite uses is a whole number of microseconds,
// so a store that computes in microseconds (a Redis script working in Lua
// doubles) must agree exactly with one that computes in nanoseconds. The
// decision times are virtual (fixed instants in 2026); only the Wait cases
// touch real time, and place every departure they must not reach an hour
// out, so that a loaded machine only makes them slower.
package ratelimittest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
)

// T0 is the suite's origin, aligned to every window the suite uses.
var T0 = time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)

// Run runs every case against a fresh store from newStore and closes that
// store when the case ends. The store must take the decision time from
// Decide's now argument (for a Redis store: its caller-time mode).
func Run(t *testing.T, newStore func(t *testing.T) ratelimit.Store) {
	t.Helper()
	open := closing(newStore)
	t.Run("Sequences", func(t *testing.T) { runSequences(t, open) })
	t.Run("Atomicity", func(t *testing.T) { runAtomicity(t, open) })
	t.Run("Shadow", func(t *testing.T) { runShadow(t, open) })
	t.Run("Peek", func(t *testing.T) { runPeek(t, open) })
	t.Run("PeekWhole", func(t *testing.T) { runPeekWhole(t, open) })
	t.Run("ResetWhole", func(t *testing.T) { runResetWhole(t, open) })
	t.Run("Isolation", func(t *testing.T) { runIsolation(t, open) })
	t.Run("Settings", func(t *testing.T) { runSettings(t, open) })
	t.Run("Wait", func(t *testing.T) { runWait(t, open) })
	t.Run("Refund", func(t *testing.T) { runRefund(t, open) })
	t.Run("Hold", func(t *testing.T) { runHold(t, open) })
	t.Run("Block", func(t *testing.T) { runBlock(t, open) })
	t.Run("Reset", func(t *testing.T) { runReset(t, open) })
	t.Run("Stress", func(t *testing.T) { runStress(t, open) })
}

// closing is newStore with the store closed when the case ends.
func closing(newStore func(t *testing.T) ratelimit.Store) func(t *testing.T) ratelimit.Store {
	return func(t *testing.T) ratelimit.Store {
		s := newStore(t)
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Errorf("closing store: %v", err)
			}
		})
		return s
	}
}

// step is one request at T0+at and the decision it must get. Departure is
// checked as now+Delay and need not be filled in.
type step struct {
	at   time.Duration
	want ratelimit.Decision
}

// allow and deny build expected decisions tersely: remaining, retry after,
// reset.
func allow(limit, remaining int64, retry, reset time.Duration) ratelimit.Decision {
	return ratelimit.Decision{Allowed: true, Limit: limit, Remaining: remaining, RetryAfter: retry, Reset: reset}
}

func deny(limit, remaining int64, retry, reset time.Duration) ratelimit.Decision {
	return ratelimit.Decision{Limit: limit, Remaining: remaining, RetryAfter: retry, Reset: reset}
}

func queued(limit, remaining int64, retry, reset, delay time.Duration) ratelimit.Decision {
	d := allow(limit, remaining, retry, reset)
	d.Delay = delay
	return d
}

func repeat(n int, s step) []step {
	out := make([]step, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func seq(parts ...[]step) []step {
	var out []step
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

const (
	third = 333334 * time.Microsecond // 1/3 s rounded up to a whole microsecond
	us    = time.Microsecond
	ms    = time.Millisecond
	sec   = time.Second
)

var sequences = []struct {
	name  string
	pol   ratelimit.Policy
	steps []step
}{
	{
		name: "token_bucket",
		pol:  ratelimit.Policy{Algorithm: ratelimit.TokenBucket, Limit: 10, Window: sec},
		steps: seq(
			[]step{{0, allow(10, 9, 100*ms, 100*ms)}},
			repeat(8, step{0, ratelimit.Decision{}}), // checked below only for Allowed
			[]step{
				{0, allow(10, 0, 100*ms, sec)},
				{0, deny(10, 0, 100*ms, sec)},
				{250 * ms, allow(10, 1, 50*ms, 850*ms)},
				{250 * ms, allow(10, 0, 50*ms, 950*ms)},
				{250 * ms, deny(10, 0, 50*ms, 950*ms)},
				{300 * ms, allow(10, 0, 100*ms, sec)},
				{5 * sec, allow(10, 9, 100*ms, 100*ms)},
			},
		),
	},
	{
		name: "token_bucket burst above limit",
		pol:  ratelimit.Policy{Algorithm: ratelimit.TokenBucket, Limit: 5, Window: 10 * time.Minute, Burst: 8},
		steps: seq(
			[]step{{0, allow(5, 7, 2*time.Minute, 2*time.Minute)}},
			repeat(6, step{0, ratelimit.Decision{}}),
			[]step{
				{0, allow(5, 0, 2*time.Minute, 16*time.Minute)},
				{0, deny(5, 0, 2*time.Minute, 16*time.Minute)},
				{3 * time.Minute, allow(5, 0, time.Minute, 15*time.Minute)},
				{3 * time.Minute, deny(5, 0, time.Minute, 15*time.Minute)},
			},
		),
	},
	{
		name: "leaky_bucket",
		pol:  ratelimit.Policy{Algorithm: ratelimit.LeakyBucket, Limit: 10, Window: sec, Queue: 2},
		steps: []step{
			{0, queued(10, 2, 100*ms, 100*ms, 0)},
			{0, queued(10, 1, 100*ms, 200*ms, 100*ms)},
			{0, queued(10, 0, 100*ms, 300*ms, 200*ms)},
			{0, deny(10, 0, 100*ms, 300*ms)},
			// One left at 100ms and the next leaves now: one waits.
			{150 * ms, queued(10, 0, 50*ms, 250*ms, 150*ms)},
			// #3 leaves now and only #5 waits: there is room.
			{200 * ms, queued(10, 0, 100*ms, 300*ms, 200*ms)},
			{sec, queued(10, 2, 100*ms, 100*ms, 0)},
		},
	},
	{
		// The one leaving now is not counted among those waiting.
		name: "leaky_bucket queue 1",
		pol:  ratelimit.Policy{Algorithm: ratelimit.LeakyBucket, Limit: 10, Window: sec, Queue: 1},
		steps: []step{
			{0, queued(10, 1, 100*ms, 100*ms, 0)},
			{0, queued(10, 0, 100*ms, 200*ms, 100*ms)},
			{0, deny(10, 0, 100*ms, 200*ms)},
			{100 * ms, queued(10, 0, 100*ms, 200*ms, 100*ms)},
			{150 * ms, deny(10, 0, 50*ms, 150*ms)},
		},
	},
	{
		name: "leaky_bucket queue 0",
		pol:  ratelimit.Policy{Algorithm: ratelimit.LeakyBucket, Limit: 5, Window: 10 * time.Minute},
		steps: []step{
			{0, queued(5, 0, 2*time.Minute, 2*time.Minute, 0)},
			{0, deny(5, 0, 2*time.Minute, 2*time.Minute)},
			{time.Minute, deny(5, 0, time.Minute, time.Minute)},
			{2 * time.Minute, queued(5, 0, 2*time.Minute, 2*time.Minute, 0)},
		},
	},
	{
		// max_wait below queue x interval is the tighter bound.
		name: "leaky_bucket max_wait",
		pol:  ratelimit.Policy{Algorithm: ratelimit.LeakyBucket, Limit: 10, Window: sec, Queue: 5, MaxWait: 250 * ms},
		steps: []step{
			// Reset: whole once the last departure is no more than
			// 250ms mod 100ms away.
			{0, queued(10, 2, 50*ms, 50*ms, 0)},
			{0, queued(10, 1, 50*ms, 150*ms, 100*ms)},
			{0, queued(10, 0, 50*ms, 250*ms, 200*ms)},
			{0, deny(10, 0, 50*ms, 250*ms)},
			{50 * ms, queued(10, 0, 100*ms, 300*ms, 250*ms)},
		},
	},
	{
		name: "fixed_window",
		pol:  ratelimit.Policy{Algorithm: ratelimit.FixedWindow, Limit: 3, Window: time.Minute},
		steps: []step{
			{10 * sec, allow(3, 2, 50*sec, 50*sec)},
			{20 * sec, allow(3, 1, 40*sec, 40*sec)},
			{30 * sec, allow(3, 0, 30*sec, 30*sec)},
			{40 * sec, deny(3, 0, 20*sec, 20*sec)},
			{59*sec + 999999*us, deny(3, 0, us, us)},
			{time.Minute, allow(3, 2, time.Minute, time.Minute)},
		},
	},
	{
		name: "sliding_window_log",
		pol:  ratelimit.Policy{Algorithm: ratelimit.SlidingWindowLog, Limit: 3, Window: 10 * sec},
		steps: []step{
			{0, allow(3, 2, 10*sec, 10*sec)},
			{2 * sec, allow(3, 1, 8*sec, 10*sec)},
			{4 * sec, allow(3, 0, 6*sec, 10*sec)},
			{5 * sec, deny(3, 0, 5*sec, 9*sec)},
			{10*sec - us, deny(3, 0, us, 4*sec+us)},
			// (now-window, now] is half open: the request at 0 left at 10s.
			{10 * sec, allow(3, 0, 2*sec, 10*sec)},
			{11 * sec, deny(3, 0, sec, 9*sec)},
			{30 * sec, allow(3, 2, 10*sec, 10*sec)},
		},
	},
	{
		name: "sliding_window_counter",
		pol:  ratelimit.Policy{Algorithm: ratelimit.SlidingWindowCounter, Limit: 10, Window: 10 * sec},
		steps: seq(
			[]step{{5 * sec, allow(10, 9, 5*sec+us, 5*sec+us)}},
			repeat(8, step{5 * sec, ratelimit.Decision{}}),
			[]step{
				// Whole once 10 x (1-f) < 1 in the next window.
				{5 * sec, allow(10, 0, 5*sec+us, 14*sec+us)},
				{5 * sec, deny(10, 0, 5*sec+us, 14*sec+us)},
				// prev = 10 weighs 10 x 8/10 = 8 at 12s.
				{12 * sec, allow(10, 1, us, 8*sec+us)},
				{12 * sec, allow(10, 0, us, 13*sec+us)},
				{12 * sec, deny(10, 0, us, 13*sec+us)},
				// cur = 3 weighs below one past 20s + 10s x 2/3.
				{14 * sec, allow(10, 1, us, 12666667*us)},
				// Two windows later both counts have aged out.
				{30 * sec, allow(10, 9, 10*sec+us, 10*sec+us)},
			},
		),
	},
	{
		// The interval, 1/3 s, is rounded up to a whole microsecond,
		// 333334 µs, in every store: the refill due at 1 s comes 2 µs
		// late, never early, so [0, 1 s) admits 5 as the exact rate does.
		name: "token_bucket 3 per second",
		pol:  ratelimit.Policy{Algorithm: ratelimit.TokenBucket, Limit: 3, Window: sec, Burst: 3},
		steps: []step{
			{0, allow(3, 2, third, third)},
			{0, allow(3, 1, third, 2*third)},
			{0, allow(3, 0, third, 3*third)},
			{0, deny(3, 0, third, 3*third)},
			{third, allow(3, 0, third, 3*third)},
			{2 * third, allow(3, 0, third, 3*third)},
			{sec - us, deny(3, 0, 3*us, 5*third-sec+us)},
			{sec, deny(3, 0, 2*us, 5*third-sec)},
			{3 * third, allow(3, 0, third, 3*third)},
		},
	},
	{
		// Departures 333334 µs apart: three leave in [0, 1 s), the
		// fourth at 1.000002 s.
		name: "leaky_bucket 3 per second",
		pol:  ratelimit.Policy{Algorithm: ratelimit.LeakyBucket, Limit: 3, Window: sec, Queue: 3},
		steps: []step{
			{0, queued(3, 3, third, third, 0)},
			{0, queued(3, 2, third, 2*third, third)},
			{0, queued(3, 1, third, 3*third, 2*third)},
			{0, queued(3, 0, third, 4*third, 3*third)},
			{0, deny(3, 0, third, 4*third)},
			// Three have left and the fourth leaves at 1.000002 s: a place
			// is free again.
			{sec - us, queued(3, 1, 3*us, 5*third-sec+us, 4*third-sec+us)},
		},
	},
	{
		// A max_wait that is no whole number of microseconds counts as
		// the whole microseconds in it.
		name: "leaky_bucket max_wait between microseconds",
		pol:  ratelimit.Policy{Algorithm: ratelimit.LeakyBucket, Limit: 10, Window: sec, Queue: 5, MaxWait: 200*ms + 999},
		steps: []step{
			{0, queued(10, 2, 100*ms, 100*ms, 0)},
			{0, queued(10, 1, 100*ms, 200*ms, 100*ms)},
			{0, queued(10, 0, 100*ms, 300*ms, 200*ms)},
			{0, deny(10, 0, 100*ms, 300*ms)},
			{us, deny(10, 0, 100*ms-us, 300*ms-us)},
		},
	},
	{
		name: "limit 1 window 1ms",
		pol:  ratelimit.Policy{Algorithm: ratelimit.FixedWindow, Limit: 1, Window: ms},
		steps: []step{
			{0, allow(1, 0, ms, ms)},
			{999 * us, deny(1, 0, us, us)},
			{ms, allow(1, 0, ms, ms)},
		},
	},
	{
		name: "token_bucket limit 1 window 1ms",
		pol:  ratelimit.Policy{Algorithm: ratelimit.TokenBucket, Limit: 1, Window: ms},
		steps: []step{
			{0, allow(1, 0, ms, ms)},
			{999 * us, deny(1, 0, us, us)},
			{ms, allow(1, 0, ms, ms)},
		},
	},
	{
		name: "sliding_window_log limit 1 window 1ms",
		pol:  ratelimit.Policy{Algorithm: ratelimit.SlidingWindowLog, Limit: 1, Window: ms},
		steps: []step{
			{0, allow(1, 0, ms, ms)},
			{999 * us, deny(1, 0, us, us)},
			{ms, allow(1, 0, ms, ms)},
		},
	},
}

func runSequences(t *testing.T, open func(*testing.T) ratelimit.Store) {
	for i, tc := range sequences {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			pol := tc.pol
			pol.Name = fmt.Sprintf("seq-%d", i)
			p := mustPolicy(t, pol)
			reqs := []ratelimit.Request{{Policy: p, Key: "k"}}
			for j, st := range tc.steps {
				d := decide(t, s, T0.Add(st.at), reqs)[0]
				if st.want == (ratelimit.Decision{}) {
					if !d.Allowed {
						t.Fatalf("request %d at +%v: got rejected, want allowed", j, st.at)
					}
					continue
				}
				checkDecision(t, fmt.Sprintf("request %d at +%v", j, st.at), T0.Add(st.at), d, st.want)
			}
		})
	}
}

// checkDecision compares every field, Departure as now+Delay.
func checkDecision(t *testing.T, what string, now time.Time, got, want ratelimit.Decision) {
	t.Helper()
	if want.Delay > 0 {
		want.Departure = now.Add(want.Delay)
	}
	if !got.Departure.Equal(want.Departure) {
		t.Errorf("%s: got Departure %v, want %v", what, got.Departure, want.Departure)
	}
	got.Departure, want.Departure = time.Time{}, time.Time{}
	got.Ticket = ratelimit.Ticket{} // each store's own
	if got != want {
		t.Errorf("%s:\ngot  %+v\nwant %+v", what, got, want)
	}
}

func mustPolicy(t *testing.T, p ratelimit.Policy) *ratelimit.Policy {
	t.Helper()
	c, err := ratelimit.NewPolicy(p)
	if err != nil {
		t.Fatalf("compiling policy %s: %v", p.Name, err)
	}
	return c
}

func decide(t *testing.T, s ratelimit.Store, now time.Time, reqs []ratelimit.Request) []ratelimit.Decision {
	t.Helper()
	out := make([]ratelimit.Decision, len(reqs))
	if err := s.Decide(context.Background(), now, reqs, out); err != nil {
		t.Fatalf("deciding at %v: %v", now, err)
	}
	return out
}

func peek(t *testing.T, s ratelimit.Store, now time.Time, r ratelimit.Request) ratelimit.Decision {
	t.Helper()
	d, err := s.Peek(context.Background(), now, r)
	if err != nil {
		t.Fatalf("peeking %s/%s at %v: %v", r.Policy.Name, r.Key, now, err)
	}
	return d
}

// policies returns one policy of every algorithm with a small budget: 2
// requests at once from an idle bucket. Names carry prefix.
func policies(t *testing.T, prefix string) []*ratelimit.Policy {
	t.Helper()
	var out []*ratelimit.Policy
	for _, a := range ratelimit.Algorithms {
		p := ratelimit.Policy{Name: prefix + a.String(), Algorithm: a, Limit: 2, Window: 10 * sec}
		if a == ratelimit.LeakyBucket {
			p.Queue = 1
		}
		out = append(out, mustPolicy(t, p))
	}
	return out
}

// runAtomicity checks that a request rejected by one limit consumes
// nothing from the others, for every algorithm in either role.
func runAtomicity(t *testing.T, open func(*testing.T) ratelimit.Store) {
	for _, a := range ratelimit.Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			t.Parallel()
			s := open(t)
			// gate admits one request; every other limit would admit two.
			gate := mustPolicy(t, ratelimit.Policy{Name: "gate", Algorithm: ratelimit.FixedWindow, Limit: 1, Window: time.Minute})
			other := policies(t, "atom-")[indexOf(a)]
			reqs := []ratelimit.Request{{Policy: other, Key: "k"}, {Policy: gate, Key: "k"}}
			if a == ratelimit.LeakyBucket {
				// A route decides its leaky_bucket limit last.
				reqs[0], reqs[1] = reqs[1], reqs[0]
			}
			now := T0
			if ds := decide(t, s, now, reqs); !ratelimit.Admitted(reqs, ds) {
				t.Fatalf("first request: got rejected (%+v), want admitted", ds)
			}
			before := peek(t, s, now, ratelimit.Request{Policy: other, Key: "k"})
			for i := range 3 {
				ds := decide(t, s, now, reqs)
				if ratelimit.Admitted(reqs, ds) {
					t.Fatalf("request %d: got admitted, want rejected by the gate", i+2)
				}
				for j, r := range reqs {
					if r.Policy == other && !ds[j].Allowed {
						t.Errorf("request %d: %s got rejected, want allowed (only the gate rejects)", i+2, a)
					}
					if r.Policy == other && ds[j].Delay != 0 {
						t.Errorf("request %d: %s got Delay %v, want 0 (the request never queues)", i+2, a, ds[j].Delay)
					}
					if r.Policy == other && ds[j] != before {
						t.Errorf("request %d: %s got %+v, want the unchanged budget %+v", i+2, a, ds[j], before)
					}
				}
			}
			after := peek(t, s, now, ratelimit.Request{Policy: other, Key: "k"})
			if after != before {
				t.Errorf("after rejections: got %+v, want %+v (nothing consumed)", after, before)
			}
			// The budget the rejections did not use is still there.
			alone := []ratelimit.Request{{Policy: other, Key: "k"}}
			if d := decide(t, s, now, alone)[0]; !d.Allowed {
				t.Errorf("%s alone after the rejections: got rejected, want allowed", a)
			}
		})
	}
}

func indexOf(a ratelimit.Algorithm) int {
	for i, b := range ratelimit.Algorithms {
		if a == b {
			return i
		}
	}
	return -1
}

// runShadow checks that a shadow limit that rejects blocks nothing, and
// that a shadow limit is not charged when a real limit rejects.
func runShadow(t *testing.T, open func(*testing.T) ratelimit.Store) {
	t.Run("rejecting shadow blocks nothing", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		shadow := mustPolicy(t, ratelimit.Policy{Name: "shadow-1", Algorithm: ratelimit.FixedWindow, Limit: 1, Window: time.Minute, Shadow: true})
		real := mustPolicy(t, ratelimit.Policy{Name: "real-5", Algorithm: ratelimit.FixedWindow, Limit: 5, Window: time.Minute})
		reqs := []ratelimit.Request{{Policy: shadow, Key: "k"}, {Policy: real, Key: "k"}}
		for i := range 5 {
			ds := decide(t, s, T0, reqs)
			if !ratelimit.Admitted(reqs, ds) {
				t.Fatalf("request %d: got rejected, want admitted (only the shadow rejects)", i+1)
			}
			if got, want := ds[0].Allowed, i == 0; got != want {
				t.Errorf("request %d: shadow got Allowed %v, want %v", i+1, got, want)
			}
			if got, want := ds[1].Remaining, int64(4-i); got != want {
				t.Errorf("request %d: real limit got Remaining %d, want %d", i+1, got, want)
			}
		}
		if ds := decide(t, s, T0, reqs); ratelimit.Admitted(reqs, ds) {
			t.Errorf("request 6: got admitted, want rejected by the real limit")
		}
	})
	t.Run("shadow not charged when a real limit rejects", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		for _, shadow := range policies(t, "shadow-") {
			sp := *shadow
			sp.Shadow = true
			shadow := mustPolicy(t, sp)
			real := mustPolicy(t, ratelimit.Policy{Name: "gate-" + shadow.Name, Algorithm: ratelimit.SlidingWindowLog, Limit: 1, Window: time.Minute})
			reqs := []ratelimit.Request{{Policy: real, Key: "k"}, {Policy: shadow, Key: "k"}}
			decide(t, s, T0, reqs)
			before := peek(t, s, T0, ratelimit.Request{Policy: shadow, Key: "k"})
			ds := decide(t, s, T0, reqs)
			if ratelimit.Admitted(reqs, ds) {
				t.Fatalf("%s: got admitted, want rejected by the real limit", shadow.Algorithm)
			}
			if after := peek(t, s, T0, ratelimit.Request{Policy: shadow, Key: "k"}); after != before {
				t.Errorf("%s shadow after the rejection: got %+v, want %+v", shadow.Algorithm, after, before)
			}
		}
	})
}

// runPeek checks that Peek reports what a decision would, without taking.
func runPeek(t *testing.T, open func(*testing.T) ratelimit.Store) {
	cases := []struct {
		pol   ratelimit.Policy
		fresh ratelimit.Decision // Peek of an untouched bucket
		after ratelimit.Decision // Peek after one request at T0
	}{
		{ratelimit.Policy{Algorithm: ratelimit.TokenBucket, Limit: 10, Window: sec},
			allow(10, 10, 0, 0), allow(10, 9, 100*ms, 100*ms)},
		{ratelimit.Policy{Algorithm: ratelimit.LeakyBucket, Limit: 10, Window: sec, Queue: 2},
			allow(10, 3, 0, 0), allow(10, 2, 100*ms, 100*ms)},
		{ratelimit.Policy{Algorithm: ratelimit.FixedWindow, Limit: 3, Window: 3 * sec},
			allow(3, 3, 0, 0), allow(3, 2, 3*sec, 3*sec)},
		{ratelimit.Policy{Algorithm: ratelimit.SlidingWindowLog, Limit: 3, Window: 3 * sec},
			allow(3, 3, 0, 0), allow(3, 2, 3*sec, 3*sec)},
		{ratelimit.Policy{Algorithm: ratelimit.SlidingWindowCounter, Limit: 3, Window: 3 * sec},
			allow(3, 3, 0, 0), allow(3, 2, 3*sec+us, 3*sec+us)},
	}
	for i, tc := range cases {
		t.Run(tc.pol.Algorithm.String(), func(t *testing.T) {
			t.Parallel()
			s := open(t)
			pol := tc.pol
			pol.Name = fmt.Sprintf("peek-%d", i)
			r := ratelimit.Request{Policy: mustPolicy(t, pol), Key: "k"}
			for range 3 {
				checkDecision(t, "peek of a fresh bucket", T0, peek(t, s, T0, r), tc.fresh)
			}
			decide(t, s, T0, []ratelimit.Request{r})
			for range 3 {
				checkDecision(t, "peek after one request", T0, peek(t, s, T0, r), tc.after)
			}
		})
	}
}

// runPeekWhole checks that a bucket whose budget is whole again reports
// it with Reset 0, as it does RetryAfter, even while some of its state has
// not aged out: a sliding_window_counter whose previous window weighs less
// than one request, and a leaky_bucket whose max_wait is no multiple of
// its interval, whose outflow is still busy while every place is free.
func runPeekWhole(t *testing.T, open func(*testing.T) ratelimit.Store) {
	cases := []struct {
		pol  ratelimit.Policy
		at   time.Duration // after one request at T0
		want ratelimit.Decision
	}{
		// prev = 1 weighs 1/3 at 5s: ceil(3 - 1/3) = 3 remain.
		{ratelimit.Policy{Algorithm: ratelimit.SlidingWindowCounter, Limit: 3, Window: 3 * sec},
			5 * sec, allow(3, 3, 0, 0)},
		// The next departure is 50ms away, within max_wait's 250ms less
		// two intervals: 1 + 2 places, all of them.
		{ratelimit.Policy{Algorithm: ratelimit.LeakyBucket, Limit: 10, Window: sec, Queue: 5, MaxWait: 250 * ms},
			50 * ms, allow(10, 3, 0, 0)},
	}
	for i, tc := range cases {
		t.Run(tc.pol.Algorithm.String(), func(t *testing.T) {
			t.Parallel()
			s := open(t)
			pol := tc.pol
			pol.Name = fmt.Sprintf("whole-%d", i)
			r := ratelimit.Request{Policy: mustPolicy(t, pol), Key: "k"}
			decide(t, s, T0, []ratelimit.Request{r})
			checkDecision(t, fmt.Sprintf("peek at +%v", tc.at), T0.Add(tc.at), peek(t, s, T0.Add(tc.at), r), tc.want)
		})
	}
}

// runIsolation checks bucket identity: (policy name, key).
func runIsolation(t *testing.T, open func(*testing.T) ratelimit.Store) {
	t.Run("keys", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		for _, p := range policies(t, "iso-key-") {
			for _, key := range []string{"a", "b", "", "a|b", "a:b"} {
				r := []ratelimit.Request{{Policy: p, Key: key}}
				if d := decide(t, s, T0, r)[0]; !d.Allowed || d.Remaining != 1 {
					t.Errorf("%s key %q: got %+v, want allowed with Remaining 1 (a bucket of its own)", p.Algorithm, key, d)
				}
			}
		}
	})
	t.Run("same key under two policies", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		ps := policies(t, "iso-a-")
		qs := policies(t, "iso-b-")
		for i := range ps {
			for _, p := range []*ratelimit.Policy{ps[i], qs[i]} {
				r := []ratelimit.Request{{Policy: p, Key: "k"}}
				if d := decide(t, s, T0, r)[0]; !d.Allowed || d.Remaining != 1 {
					t.Errorf("%s: got %+v, want allowed with Remaining 1 (a bucket of its own)", p.Name, d)
				}
			}
		}
	})
	t.Run("routes sharing one policy share its budget", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		shared := mustPolicy(t, ratelimit.Policy{Name: "iso-shared", Algorithm: ratelimit.FixedWindow, Limit: 2, Window: time.Minute})
		own := mustPolicy(t, ratelimit.Policy{Name: "iso-own", Algorithm: ratelimit.TokenBucket, Limit: 100, Window: time.Minute})
		routeA := []ratelimit.Request{{Policy: shared, Key: "k"}}
		routeB := []ratelimit.Request{{Policy: own, Key: "k"}, {Policy: shared, Key: "k"}}
		decide(t, s, T0, routeA)
		if ds := decide(t, s, T0, routeB); !ratelimit.Admitted(routeB, ds) || ds[1].Remaining != 0 {
			t.Errorf("route B: got %+v, want admitted with shared Remaining 0", ds)
		}
		if d := decide(t, s, T0, routeA)[0]; d.Allowed {
			t.Errorf("route A third request: got allowed, want rejected (the budget is shared)")
		}
	})
}

// runSettings checks reload semantics: a policy with the same name and the
// same settings keeps the bucket; different settings start it afresh.
func runSettings(t *testing.T, open func(*testing.T) ratelimit.Store) {
	for _, a := range ratelimit.Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			t.Parallel()
			s := open(t)
			base := ratelimit.Policy{Name: "settings-" + a.String(), Algorithm: a, Limit: 2, Window: 10 * sec}
			if a == ratelimit.LeakyBucket {
				base.Queue = 1
			}
			old := mustPolicy(t, base)
			for range 2 {
				decide(t, s, T0, []ratelimit.Request{{Policy: old, Key: "k"}})
			}
			same := mustPolicy(t, base)
			if d := decide(t, s, T0, []ratelimit.Request{{Policy: same, Key: "k"}})[0]; d.Allowed {
				t.Errorf("same settings, new *Policy: got allowed, want rejected (state kept)")
			}
			changed := base
			changed.Limit = 4
			if a == ratelimit.LeakyBucket {
				changed.Queue = 2
			}
			fresh := mustPolicy(t, changed)
			d := decide(t, s, T0, []ratelimit.Request{{Policy: fresh, Key: "k"}})[0]
			if want := fresh.Capacity() - 1; !d.Allowed || d.Remaining != want || d.Delay != 0 {
				t.Errorf("changed settings: got %+v, want allowed with Remaining %d and no delay (a fresh bucket)", d, want)
			}
		})
	}
}

// runWait checks leaky-bucket waiting: a request whose context ends returns
// ctx.Err() and gives its place back; an admitted one returns nil no
// earlier than its departure.
func runWait(t *testing.T, open func(*testing.T) ratelimit.Store) {
	t.Run("no delay", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		p := mustPolicy(t, ratelimit.Policy{Name: "wait-none", Algorithm: ratelimit.LeakyBucket, Limit: 10, Window: sec, Queue: 2})
		r := ratelimit.Request{Policy: p, Key: "k"}
		d := decide(t, s, T0, []ratelimit.Request{r})[0]
		if err := s.Wait(context.Background(), r, d); err != nil {
			t.Errorf("Wait with Delay 0: got %v, want nil", err)
		}
	})
	t.Run("cancelled gives its place back", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		// A store hands back only a place still ahead on its own clock
		// (a later one may have been left by the request behind), so
		// this case decides at the real time, with a place an hour out:
		// no pause of a loaded machine puts it behind.
		now := time.Now().Truncate(time.Microsecond)
		p := mustPolicy(t, ratelimit.Policy{Name: "wait-cancel", Algorithm: ratelimit.LeakyBucket, Limit: 10, Window: 10 * time.Hour, Queue: 2})
		r := ratelimit.Request{Policy: p, Key: "k"}
		reqs := []ratelimit.Request{r}
		decide(t, s, now, reqs)
		d2 := decide(t, s, now, reqs)[0]
		if d2.Delay != time.Hour {
			t.Fatalf("second request: got Delay %v, want 1h", d2.Delay)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := returnsSoon(t, "cancelled Wait", func() error { return s.Wait(ctx, r, d2) }); !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait with a cancelled context: got %v, want %v", err, context.Canceled)
		}
		// The freed place goes to the next request, at the same delay.
		d3 := decide(t, s, now, reqs)[0]
		checkDecision(t, "request after the cancelled one", now, d3, queued(10, 1, time.Hour, 2*time.Hour, time.Hour))
	})
	t.Run("waits until departure", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		p := mustPolicy(t, ratelimit.Policy{Name: "wait-real", Algorithm: ratelimit.LeakyBucket, Limit: 100, Window: sec, Queue: 2})
		r := ratelimit.Request{Policy: p, Key: "k"}
		now := time.Now().Truncate(time.Microsecond)
		reqs := []ratelimit.Request{r}
		decide(t, s, now, reqs)
		d := decide(t, s, now, reqs)[0]
		if d.Delay != 10*ms {
			t.Fatalf("second request: got Delay %v, want 10ms", d.Delay)
		}
		if err := s.Wait(context.Background(), r, d); err != nil {
			t.Fatalf("Wait: got %v, want nil", err)
		}
		// Timers never fire early; allow for clock granularity.
		if left := time.Since(d.Departure); left < -time.Millisecond {
			t.Errorf("Wait returned %v before the departure, want at or after it", -left)
		}
	})
	t.Run("drain cuts only departures after the deadline", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		// 1 per hour, decided an hour less 200ms ago: the waiters leave
		// 200ms and an hour and 200ms after now. A shutdown whose
		// deadline lies a minute out lets the first leave and answers the
		// second at once, whose place goes back. However late a loaded
		// machine runs the rest, the second's departure stays after the
		// deadline and ahead of every store's clock.
		now := time.Now().Truncate(time.Microsecond)
		at := now.Add(200*ms - time.Hour)
		p := mustPolicy(t, ratelimit.Policy{Name: "wait-drain", Algorithm: ratelimit.LeakyBucket, Limit: 1, Window: time.Hour, Queue: 5})
		r := ratelimit.Request{Policy: p, Key: "k"}
		reqs := []ratelimit.Request{r}
		decide(t, s, at, reqs)
		d1 := decide(t, s, at, reqs)[0]
		d2 := decide(t, s, at, reqs)[0]
		if d1.Delay != time.Hour || d2.Delay != 2*time.Hour {
			t.Fatalf("waiters: got Delay %v and %v, want 1h and 2h", d1.Delay, d2.Delay)
		}
		done := make(chan struct{})
		deadline := now.Add(time.Minute)
		ctx := ratelimit.WithDrain(context.Background(), &ratelimit.Drain{Done: done, Deadline: func() time.Time { return deadline }})
		first := make(chan error, 1)
		go func() { first <- s.Wait(ctx, r, d1) }()
		close(done)
		if err := returnsSoon(t, "drained Wait", func() error { return s.Wait(ctx, r, d2) }); !errors.Is(err, ratelimit.ErrDrained) {
			t.Errorf("Wait of a departure after the deadline: got %v, want %v", err, ratelimit.ErrDrained)
		}
		if err := returnsSoon(t, "Wait of a departure before the deadline", func() error { return <-first }); err != nil {
			t.Errorf("Wait of a departure before the deadline: got %v, want nil", err)
		}
		if left := time.Since(d1.Departure); left < -time.Millisecond {
			t.Errorf("the first waiter left %v before its departure, want at or after it", -left)
		}
		// The second's place went back: the next request, decided at
		// the same time, is given it.
		d3 := decide(t, s, at, reqs)[0]
		if d3.Delay != 2*time.Hour {
			t.Errorf("request after the drained one: got Delay %v, want 2h (its place)", d3.Delay)
		}
	})
}

// patience is how long returnsSoon waits: far beyond any pause a loaded
// machine makes, and a moment beside the hour a Wait that sleeps to its
// departure would take.
const patience = 30 * time.Second

// returnsSoon runs f, a Wait that must not sleep to its departure (an
// hour or more away), and returns its error; it fails t when f has not
// returned within patience.
func returnsSoon(t *testing.T, what string, f func() error) error {
	t.Helper()
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	select {
	case err := <-ch:
		return err
	case <-time.After(patience):
		t.Fatalf("%s has not returned after %v, want it prompt", what, patience)
		return nil
	}
}
