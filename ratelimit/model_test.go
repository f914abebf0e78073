package ratelimit

import (
	"context"
	"fmt"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"
)

// modelBucket decides as SPEC §3 words each algorithm, with nothing but
// the rounded interval in common with the steps: a list of accepted times
// for the windows, a token count in nanoseconds of refill for the bucket,
// and exact rational arithmetic for the counter's weight.
type modelBucket struct {
	p        *Policy
	accepted []int64 // Unix ns, in order
	// close is set when the counter's weight lay within float64 rounding
	// of the limit, where the step, which computes it in floats as the
	// Redis scripts do, may decide either way.
	close   bool
	level   int64 // token_bucket: tokens x interval, up to burst x interval
	last    int64 // token_bucket: time of level
	started bool
}

func (b *modelBucket) decide(now int64) bool { return b.admit(now, true) }

// admit reports whether the model admits a request at now, and when it
// does and take is set, counts it.
func (b *modelBucket) admit(now int64, take bool) bool {
	p := b.p
	w := int64(p.Window)
	count := func(from, to int64) (n int64) { // accepted in [from, to)
		for _, a := range b.accepted {
			if a >= from && a < to {
				n++
			}
		}
		return n
	}
	// Nothing older than two windows counts; times only go forward.
	drop := 0
	for drop < len(b.accepted)-1 && b.accepted[drop] <= now-2*w {
		drop++
	}
	b.accepted = b.accepted[drop:]
	ok := false
	switch p.Algorithm {
	case TokenBucket:
		iv, capacity := int64(p.Interval()), p.Burst*int64(p.Interval())
		if !b.started {
			b.level, b.started = capacity, true
		} else if now > b.last {
			b.level = min(capacity, b.level+min(now-b.last, capacity))
		}
		b.last = max(b.last, now)
		if ok = b.level >= iv; ok && take {
			b.level -= iv
		}
		return ok
	case LeakyBucket:
		// accepted holds departures; the next leaves an interval after
		// the last one, and may wait no longer than the tolerance.
		dep := now
		if n := len(b.accepted); n > 0 {
			dep = max(dep, b.accepted[n-1]+int64(p.Interval()))
		}
		if ok = dep-now <= int64(p.Tolerance()); ok && take {
			b.accepted = append(b.accepted, dep)
		}
		return ok
	case FixedWindow:
		start := windowStart(now, w)
		ok = count(start, start+w) < p.Limit
	case SlidingWindowLog:
		ok = count(now-w+1, now+1) < p.Limit
	case SlidingWindowCounter:
		start := windowStart(now, w)
		cur, prev := count(start, start+w), count(start-w, start)
		// cur + prev x (1 - f) < limit, f = (now - start) / w, times w.
		lhs := new(big.Int).Mul(big.NewInt(cur), big.NewInt(w))
		lhs.Add(lhs, new(big.Int).Mul(big.NewInt(prev), big.NewInt(w-(now-start))))
		rhs := new(big.Int).Mul(big.NewInt(p.Limit), big.NewInt(w))
		ok = lhs.Cmp(rhs) < 0
		slack := new(big.Int).Abs(new(big.Int).Sub(rhs, lhs))
		b.close = slack.Lsh(slack, 50).Cmp(rhs) <= 0
	}
	if ok && take {
		b.accepted = append(b.accepted, now)
	}
	return ok
}

// TestMemoryStoreMatchesModel decides random request times, bunched at
// window edges and spread over idle gaps of years, through the memory
// store and through the model of SPEC §3, for policies at the edges the
// validation allows: limits of 1 and 2^40, windows of 1µs and 100 years,
// bursts far above the limit.
func TestMemoryStoreMatchesModel(t *testing.T) {
	t.Parallel()
	const us, year = time.Microsecond, 365 * 24 * time.Hour
	type pol struct {
		a      Algorithm
		limit  int64
		window time.Duration
		burst  int64
		queue  int64
		wait   time.Duration
	}
	var cases []pol
	for _, a := range []Algorithm{FixedWindow, SlidingWindowLog, SlidingWindowCounter} {
		cases = append(cases,
			pol{a: a, limit: 1, window: us}, pol{a: a, limit: 2, window: 3 * us}, pol{a: a, limit: 1, window: time.Second},
			pol{a: a, limit: 3, window: 10 * us}, pol{a: a, limit: 5, window: time.Hour}, pol{a: a, limit: 3, window: 100 * year},
			pol{a: a, limit: 7, window: 99*year + 7*us})
	}
	cases = append(cases,
		pol{a: SlidingWindowCounter, limit: 1 << 40, window: 100 * year},
		pol{a: SlidingWindowCounter, limit: 1 << 20, window: 100 * year},
		pol{a: SlidingWindowCounter, limit: 3, window: 3 * year},
		pol{a: FixedWindow, limit: 1 << 40, window: 100 * year},
		pol{a: TokenBucket, limit: 1, window: us}, pol{a: TokenBucket, limit: 1, window: us, burst: 1000},
		pol{a: TokenBucket, limit: 3, window: time.Second, burst: 3}, pol{a: TokenBucket, limit: 1, window: time.Second, burst: 1 << 20},
		pol{a: TokenBucket, limit: 1, window: 100 * year, burst: 1}, pol{a: TokenBucket, limit: 1000, window: year, burst: 100_000},
		pol{a: TokenBucket, limit: 1 << 40, window: 50 * year},
		pol{a: LeakyBucket, limit: 1, window: us}, pol{a: LeakyBucket, limit: 1, window: us, queue: 1000},
		pol{a: LeakyBucket, limit: 3, window: time.Second, queue: 5, wait: 400 * time.Millisecond},
		pol{a: LeakyBucket, limit: 1, window: 100 * year}, pol{a: LeakyBucket, limit: 2, window: 100 * year, queue: 1},
		pol{a: LeakyBucket, limit: 1 << 20, window: year, queue: 1 << 30, wait: 3 * us},
	)
	for i, c := range cases {
		name := fmt.Sprintf("%v/limit=%d/window=%v/burst=%d/queue=%d/max_wait=%v", c.a, c.limit, c.window, c.burst, c.queue, c.wait)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := MustPolicy(Policy{Name: "model", Algorithm: c.a, Limit: c.limit, Window: c.window, Burst: c.burst, Queue: c.queue, MaxWait: c.wait})
			m := NewMemoryStore(MemoryOptions{SweepInterval: -1})
			defer m.Close()
			rng := rand.New(rand.NewPCG(uint64(i), 11))
			w := int64(c.window)
			iv := int64(p.Interval())
			b := &modelBucket{p: p}
			now := t0.UnixNano()
			out := make([]Decision, 1)
			req := []Request{{Policy: p, Key: "k"}}
			admitted := 0
			for n := range 3000 {
				before := now
				switch rng.IntN(8) {
				case 0: // same instant
				case 1: // the next window edge, or a nanosecond either side
					now = windowStart(now, w) + w + rng.Int64N(3) - 1
				case 2: // a window after a logged request: its edge
					if len(b.accepted) > 0 {
						now = max(now, b.accepted[rng.IntN(len(b.accepted))]+w+rng.Int64N(3)-1)
					}
				case 3: // a refill interval, or a nanosecond either side
					now += iv + rng.Int64N(3) - 1
				case 4: // a long idle gap
					now += rng.Int64N(int64(year))
				case 5:
					now += rng.Int64N(max(w/4, 1))
				default:
					now += rng.Int64N(max(iv/2, 2))
				}
				if now > t0.UnixNano()+int64(130*year) {
					now = before // times and spans stay clear of 2262
				}
				if err := m.Decide(context.Background(), time.Unix(0, now), req, out); err != nil {
					t.Fatal(err)
				}
				want := b.decide(now)
				if b.close && out[0].Allowed != want {
					// Undecidable in floats: follow the store from here.
					if want {
						b.accepted = b.accepted[:len(b.accepted)-1]
					} else {
						b.accepted = append(b.accepted, now)
					}
					want = out[0].Allowed
				}
				if out[0].Allowed != want {
					t.Fatalf("request %d at %d (+%v): got Allowed %v, want %v", n, now, time.Duration(now-t0.UnixNano()), out[0].Allowed, want)
				}
				if want {
					admitted++
				}
			}
			if admitted == 0 {
				t.Fatal("nothing admitted")
			}
		})
	}
}
