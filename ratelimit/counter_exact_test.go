package ratelimit

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"
)

// TestSlidingWindowCounterExactBoundary decides sliding_window_counter
// requests where cur + prev*(1-f) equals the limit exactly, with windows
// long enough that the counts times the window do not fit a float64's
// mantissa: each must be rejected.
func TestSlidingWindowCounterExactBoundary(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		limit  int64
		window time.Duration
	}{
		{"100 years, 751", 751, MaxSpan},
		{"365 days, 18719", 18719, 365 * 24 * time.Hour},
		{"30 days, 455477", 455477, 30 * 24 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := MustPolicy(Policy{Name: "swc", Algorithm: SlidingWindowCounter, Limit: tc.limit, Window: tc.window})
			w := int64(tc.window)
			// The previous window admitted the limit; at the first instant
			// of the next, prev*(1-0) is the limit.
			s := SlidingWindowCounterState{Start: 0, Cur: tc.limit}
			now := w
			if _, d := StepSlidingWindowCounter(p, s, now, 0); d.Remaining != 0 {
				t.Errorf("look: got %d remaining, want 0", d.Remaining)
			}
			if _, d := StepSlidingWindowCounter(p, s, now, 1); d.Allowed {
				t.Errorf("got allowed, want rejected: 0 + %d x (1 - 0) is not below %d", tc.limit, tc.limit)
			}
		})
	}
}

// TestSlidingWindowCounterMatchesExact decides random states at random
// times, for windows up to MaxSpan and limits up to 2^40, against the
// rule computed in exact rationals: admitted when cur + prev*(w-e)/w <
// limit, Remaining the ceiling of what is left, and a retry at
// now+RetryAfter admitted while one a microsecond earlier is not.
func TestSlidingWindowCounterMatchesExact(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(9, 10))
	us := int64(time.Microsecond)
	for i := range 200000 {
		w := (rng.Int64N(int64(MaxSpan)/us) + 1) * us
		if i%2 == 0 {
			w = (rng.Int64N(1<<20) + 1) * us
		}
		limit := rng.Int64N(1<<rng.IntN(41)) + 1
		p := MustPolicy(Policy{Name: "swc", Algorithm: SlidingWindowCounter, Limit: limit, Window: time.Duration(w)})
		cur := rng.Int64N(limit + 1)
		prev := rng.Int64N(limit + 1)
		s := SlidingWindowCounterState{Cur: cur, Prev: prev} // the window at 0
		e := rng.Int64N(w/us) * us
		if i%3 == 0 {
			// Near the boundary: prev*(w-e) close to (limit-cur)*w.
			if prev > 0 && limit-cur <= prev {
				x := new(big.Int).Mul(big.NewInt(limit-cur), big.NewInt(w/us))
				x.Quo(x, big.NewInt(prev))
				e = w - x.Int64()*us + (rng.Int64N(3)-1)*us
				e = min(max(e, 0), w-us)
			}
		}
		now := e
		// used = cur*w + prev*(w-e), in units of 1/w of a request.
		used := new(big.Int).Mul(big.NewInt(cur), big.NewInt(w))
		used.Add(used, new(big.Int).Mul(big.NewInt(prev), big.NewInt(w-e)))
		room := new(big.Int).Sub(new(big.Int).Mul(big.NewInt(limit), big.NewInt(w)), used)
		want := room.Sign() > 0
		_, d := StepSlidingWindowCounter(p, s, now, 1)
		if d.Allowed != want {
			t.Fatalf("w=%v limit=%d cur=%d prev=%d e=%v: got allowed %v, want %v", time.Duration(w), limit, cur, prev, time.Duration(e), d.Allowed, want)
		}
		_, look := StepSlidingWindowCounter(p, s, now, 0)
		wantRem := int64(0)
		if want {
			q, r := new(big.Int).QuoRem(room, big.NewInt(w), new(big.Int))
			wantRem = q.Int64()
			if r.Sign() != 0 {
				wantRem++
			}
		}
		if look.Remaining != wantRem {
			t.Fatalf("w=%v limit=%d cur=%d prev=%d e=%v: got %d remaining, want %d", time.Duration(w), limit, cur, prev, time.Duration(e), look.Remaining, wantRem)
		}
		if d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > time.Duration(math.MaxInt64-now) {
			continue
		}
		if _, r := StepSlidingWindowCounter(p, s, now+int64(d.RetryAfter), 1); !r.Allowed {
			t.Fatalf("w=%v limit=%d cur=%d prev=%d e=%v: retry at +%v got rejected, want allowed", time.Duration(w), limit, cur, prev, time.Duration(e), d.RetryAfter)
		}
		if d.RetryAfter > time.Microsecond {
			if _, r := StepSlidingWindowCounter(p, s, now+int64(d.RetryAfter)-us, 1); r.Allowed {
				t.Fatalf("w=%v limit=%d cur=%d prev=%d e=%v: retry at +%v, a microsecond early, got allowed", time.Duration(w), limit, cur, prev, time.Duration(e), d.RetryAfter-time.Microsecond)
			}
		}
	}
}
