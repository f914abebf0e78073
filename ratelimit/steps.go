package ratelimit

import (
	"math/bits"
	"time"
)

// The steps below are the algorithms. Each takes the bucket's state, the
// decision time in Unix nanoseconds and a cost n (1 to take a request, 0 to
// look without taking), and returns the next state with the Decision. They
// touch nothing else, so every store and every Redis script mirrors them.

// TokenBucketState is the state of a token bucket kept as its theoretical
// arrival time (GCRA): the bucket is full once now reaches TAT. The zero
// value is a full bucket.
//
// Held counts tokens taken by requests of a Hold policy whose outcome is
// not known yet (see SettleTokenBucket). A held token does not refill: the
// bucket never rises above Burst - Held, as if TAT were at least now +
// Held x Interval. That is what makes a give-back exact.
type TokenBucketState struct {
	TAT  int64 // Unix ns
	Held int64
}

// StepTokenBucket takes n tokens from a bucket of capacity Burst refilled at
// Limit per Window. Under a Hold policy the tokens it takes are held.
func StepTokenBucket(p *Policy, s TokenBucketState, now, n int64) (TokenBucketState, Decision) {
	t := p.interval
	capacity := p.Burst * t // the bucket's depth in nanoseconds of refill
	tat := max(s.TAT, now+s.Held*t)
	newTAT := tat + n*t
	d := Decision{Limit: p.Limit}
	if newTAT-now > capacity {
		// Not enough tokens: the retry succeeds once the bucket has drained
		// down to capacity - n tokens' worth.
		d.RetryAfter = time.Duration(newTAT - capacity - now)
		d.Reset = time.Duration(tat - now)
		d.Remaining = max((capacity-(tat-now))/t, 0)
		return s, d
	}
	d.Allowed = true
	used := newTAT - now
	d.Remaining = (capacity - used) / t
	d.Reset = time.Duration(used)
	if used > 0 {
		// The next whole token arrives when the partial one fills.
		if r := used % t; r != 0 {
			d.RetryAfter = time.Duration(r)
		} else {
			d.RetryAfter = time.Duration(t)
		}
	}
	s.TAT = newTAT
	if p.Hold {
		s.Held += n
	}
	return s, d
}

// LeakyBucketState is the state of a leaky bucket kept as a virtual FIFO:
// Next is the earliest time the next request may leave. The zero value is an
// idle bucket.
type LeakyBucketState struct {
	Next int64 // Unix ns
}

// StepLeakyBucket schedules n requests to leave one per Interval in arrival
// order. A request that would wait longer than the queue or MaxWait allows
// is rejected. The admitted request leaves after Decision.Delay.
func StepLeakyBucket(p *Policy, s LeakyBucketState, now, n int64) (LeakyBucketState, Decision) {
	t := p.interval
	depart := max(s.Next, now)
	wait := depart - now
	d := Decision{Limit: p.Limit}
	// A request leaving at depart is acceptable iff its wait fits both the
	// queue (queue requests ahead of it at most) and MaxWait; tolerance is
	// the smaller of the two.
	// The budget is whole, every place free, once the last departure
	// scheduled lies no more than tolerance%t away: then even the last
	// place waits no longer than tolerance. That is the outflow going
	// idle when tolerance is a multiple of t, sooner otherwise.
	slack := p.tolerance % t
	if n > 0 && wait > p.tolerance {
		d.RetryAfter = time.Duration(wait - p.tolerance)
		d.Reset = time.Duration(wait - slack)
		return s, d
	}
	next := depart + n*t
	d.Allowed = true
	if n > 0 {
		d.Delay = time.Duration(wait)
	}
	// How many more would be accepted right now, queue places included:
	// the k-th more would wait next-now+(k-1)*t, which must fit tolerance.
	d.Reset = time.Duration(max(next-now-slack, 0))
	free := p.tolerance - (next - now)
	switch {
	case free < 0:
		d.RetryAfter = time.Duration(-free)
	case next > now:
		d.Remaining = free/t + 1
		// The budget grows by one each time free reaches the next multiple
		// of t; the last step comes no later than the bucket going idle.
		d.RetryAfter = time.Duration(t - free%t)
		if d.Remaining >= p.Capacity() {
			// Every place is free while the outflow is still busy (a
			// tolerance that is no multiple of t): the budget is
			// whole, as Reset says, and RetryAfter says so too.
			d.RetryAfter = 0
		}
	default:
		d.Remaining = p.Capacity()
	}
	return LeakyBucketState{Next: next}, d
}

// FixedWindowState counts the requests of the window that starts at Start.
// Windows are aligned to multiples of Window since the Unix epoch. The zero
// value is an empty window.
type FixedWindowState struct {
	Start int64 // Unix ns
	Count int64
}

// windowStart is the aligned window that holds now.
func windowStart(now, window int64) int64 {
	s := now - now%window
	if now < 0 && now%window != 0 {
		s -= window
	}
	return s
}

// StepFixedWindow admits at most Limit requests per aligned window.
func StepFixedWindow(p *Policy, s FixedWindowState, now, n int64) (FixedWindowState, Decision) {
	start := windowStart(now, p.window)
	if start > s.Start {
		s = FixedWindowState{Start: start}
	}
	// A clock that steps back keeps counting into the newest window.
	end := s.Start + p.window
	d := Decision{Limit: p.Limit, Reset: time.Duration(end - now), RetryAfter: time.Duration(end - now)}
	if s.Count+n > p.Limit {
		return s, d
	}
	s.Count += n
	d.Allowed = true
	d.Remaining = p.Limit - s.Count
	if s.Count == 0 {
		d.Reset, d.RetryAfter = 0, 0
	}
	return s, d
}

// SlidingWindowCounterState holds the counts of the current aligned window,
// which starts at Start, and of the one before it. The zero value is empty.
type SlidingWindowCounterState struct {
	Start int64 // Unix ns
	Cur   int64
	Prev  int64
}

// StepSlidingWindowCounter admits a request when cur + prev*(1-f) < Limit,
// f being the elapsed fraction of the current window, and counts it in cur.
// It decides in integers, exactly: with w the window and e the time
// elapsed in it, prev*(1-f) is prev*(w-e)/w.
func StepSlidingWindowCounter(p *Policy, s SlidingWindowCounterState, now, n int64) (SlidingWindowCounterState, Decision) {
	w := p.window
	start := windowStart(now, w)
	switch {
	case start == s.Start+w:
		s = SlidingWindowCounterState{Start: start, Prev: s.Cur}
	case start > s.Start:
		s = SlidingWindowCounterState{Start: start}
	}
	elapsed := min(max(now-s.Start, 0), w-1)
	room := counterRoom(p.Limit, s.Cur, s.Prev, w, elapsed)
	d := Decision{Limit: p.Limit}
	if n > 0 && room == 0 {
		d.RetryAfter = counterRetry(s, elapsed, w, p.Limit)
		d.Reset = counterReset(s, elapsed, w)
		return s, d
	}
	s.Cur += n
	d.Allowed = true
	if d.Remaining = max(room-n, 0); d.Remaining > 0 {
		// The budget grows once cur + prev*(1-f) drops below
		// limit - remaining; at limit - remaining = 0 it is whole.
		d.RetryAfter = counterRetry(s, elapsed, w, p.Limit-d.Remaining)
	} else {
		d.RetryAfter = counterRetry(s, elapsed, w, p.Limit)
	}
	d.Reset = counterReset(s, elapsed, w)
	if d.Remaining == p.Limit {
		// prev weighs less than one request: the budget is whole,
		// though prev has not aged out yet.
		d.Reset = 0
	}
	return s, d
}

// counterRoom is how many requests fit below limit at once:
// ceil(limit - cur - prev*(w-elapsed)/w), or 0 when that is not positive,
// which is when a request is rejected. Since prev*(w-elapsed)/w is x, a
// fraction, limit - cur - x rounds up to limit - cur - floor(x); the
// product takes 128 bits, the quotient at most prev.
func counterRoom(limit, cur, prev, w, elapsed int64) int64 {
	if cur >= limit {
		return 0
	}
	hi, lo := bits.Mul64(uint64(prev), uint64(w-elapsed))
	x, _ := bits.Div64(hi, lo, uint64(w))
	return max(limit-cur-int64(x), 0)
}

// ceilMulDiv is ceil(a*b/c) for a, b >= 0 and c > 0 with a quotient below
// 2^63 (the caller sees to it), exactly.
func ceilMulDiv(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	q, r := bits.Div64(hi, lo, uint64(c))
	if r != 0 {
		q++
	}
	return int64(q)
}

// counterRetry is how long until cur + prev*(1-f) drops below target, 0
// when target is 0 and nothing counts. The comparison is strict, so the
// exact answer lies just past a boundary; it is rounded up to a whole
// microsecond, which keeps stores that compute in microseconds (Redis
// scripts) in agreement with this one. It is computed exactly, as the
// decision is.
func counterRetry(s SlidingWindowCounterState, elapsed, w, target int64) time.Duration {
	toEnd := w - elapsed
	var wait int64
	switch {
	case target <= 0:
		return 0
	case s.Cur >= target:
		// Only the next window helps: there cur becomes prev, and
		// cur*(w-e') < target*w needs e' > w - target*w/cur.
		wait = toEnd + w - ceilMulDiv(target, w, s.Cur) + 1
	case target-s.Cur >= s.Prev:
		// prev*(w-e)/w < target-cur at every e > 0.
		wait = 1
	default:
		// prev*(w-e)/w < target-cur  <=>  e > w - (target-cur)*w/prev
		e := w - ceilMulDiv(target-s.Cur, w, s.Prev)
		wait = min(max(e+1-elapsed, 1), toEnd)
	}
	return time.Duration(ceilMicro(wait))
}

// ceilMicro rounds ns up to a whole microsecond.
func ceilMicro(ns int64) int64 {
	const us = int64(time.Microsecond)
	return (ns + us - 1) / us * us
}

// counterReset is how long until the budget is whole again: until
// cur + prev*(1-f) < 1, when not even part of a request counts and every
// one of Limit fits. That comes before both counts have aged out: a
// previous window weighs less than one request once f > 1 - 1/prev. 0
// when the budget is whole now.
func counterReset(s SlidingWindowCounterState, elapsed, w int64) time.Duration {
	if s.Cur == 0 && counterRoom(1, 0, s.Prev, w, elapsed) == 1 {
		return 0
	}
	return counterRetry(s, elapsed, w, 1)
}
