package ratelimit

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// TestDecisionReportsWhatHappens checks, for policies at the validated
// edges, that what each decision reports comes true: Remaining more
// requests are admitted at the same instant and the next is not; a
// rejected request's retry is admitted at RetryAfter and not a moment
// before; an admitted one's budget grows at RetryAfter and not before;
// and the budget is whole at Reset and not before.
func TestDecisionReportsWhatHappens(t *testing.T) {
	t.Parallel()
	const us, year = time.Microsecond, 365 * 24 * time.Hour
	for i, pol := range []Policy{
		{Algorithm: TokenBucket, Limit: 1, Window: us},
		{Algorithm: TokenBucket, Limit: 3, Window: time.Second, Burst: 40},
		{Algorithm: TokenBucket, Limit: 1, Window: 100 * year},
		{Algorithm: TokenBucket, Limit: 1000, Window: year, Burst: 100},
		{Algorithm: LeakyBucket, Limit: 1, Window: us, Queue: 3},
		{Algorithm: LeakyBucket, Limit: 3, Window: time.Second, Queue: 5, MaxWait: 700 * time.Millisecond},
		{Algorithm: LeakyBucket, Limit: 2, Window: 100 * year, Queue: 1},
		{Algorithm: FixedWindow, Limit: 1, Window: us},
		{Algorithm: FixedWindow, Limit: 4, Window: time.Second},
		{Algorithm: FixedWindow, Limit: 3, Window: 100 * year},
		{Algorithm: SlidingWindowLog, Limit: 1, Window: us},
		{Algorithm: SlidingWindowLog, Limit: 4, Window: time.Second},
		{Algorithm: SlidingWindowLog, Limit: 3, Window: 100 * year},
		{Algorithm: SlidingWindowCounter, Limit: 1, Window: 10 * us},
		{Algorithm: SlidingWindowCounter, Limit: 4, Window: time.Second},
		{Algorithm: SlidingWindowCounter, Limit: 7, Window: time.Hour},
	} {
		pol.Name = "r"
		t.Run(fmt.Sprintf("%v/limit=%d/window=%v", pol.Algorithm, pol.Limit, pol.Window), func(t *testing.T) {
			t.Parallel()
			p := MustPolicy(pol)
			st := newStepper(p)
			rng := rand.New(rand.NewPCG(uint64(i), 13))
			w, iv := int64(p.Window), int64(p.Interval())
			now := t0.UnixNano()
			// tick is how close a time the check looks at: the counter
			// rounds its RetryAfter up to a whole microsecond.
			tick := int64(1)
			if p.Algorithm == SlidingWindowCounter {
				tick = int64(us)
			}
			remaining := func(at int64) int64 { // how many are admitted at once at at
				saved := st.save()
				defer st.restore(saved)
				n := int64(0)
				for ; n <= p.Capacity(); n++ {
					if !st.take(at).Allowed {
						break
					}
				}
				return n
			}
			for n := range 1500 {
				before := now
				switch rng.IntN(4) {
				case 0:
				case 1:
					now += rng.Int64N(max(iv, 2))
				case 2:
					now = windowStart(now, w) + w + rng.Int64N(3) - 1
				default:
					now += rng.Int64N(max(w/3, 2))
				}
				if now > t0.UnixNano()+int64(30*year) {
					now = before // times and spans stay clear of 2262
				}
				d := st.take(now)
				what := fmt.Sprintf("request %d at +%v (%+v)", n, time.Duration(now-t0.UnixNano()), d)
				if got := remaining(now); got != d.Remaining {
					t.Fatalf("%s: got %d admitted at once, want Remaining %d", what, got, d.Remaining)
				}
				retry, reset := now+int64(d.RetryAfter), now+int64(d.Reset)
				switch {
				case !d.Allowed:
					if !st.try(retry).Allowed {
						t.Fatalf("%s: retry at RetryAfter: got rejected, want allowed", what)
					}
					if d.RetryAfter > 0 && st.try(retry-tick).Allowed {
						t.Fatalf("%s: retry just before RetryAfter: got allowed, want rejected", what)
					}
				case d.RetryAfter > 0:
					if got := remaining(retry); got <= d.Remaining {
						t.Fatalf("%s: at RetryAfter got %d admitted at once, want more than %d", what, got, d.Remaining)
					}
					if got := remaining(retry - tick); got > d.Remaining {
						t.Fatalf("%s: just before RetryAfter got %d admitted at once, want %d", what, got, d.Remaining)
					}
				}
				if got := remaining(reset); got != p.Capacity() {
					t.Fatalf("%s: at Reset got %d admitted at once, want the whole %d", what, got, p.Capacity())
				}
				// A leaky_bucket's Reset is when the next request leaves at
				// once, which may come after max_wait makes room for all.
				if d.Reset > 0 && p.Algorithm != SlidingWindowCounter && p.Algorithm != LeakyBucket {
					if got := remaining(reset - 1); got == p.Capacity() {
						t.Fatalf("%s: just before Reset got the whole %d admitted at once, want fewer", what, got)
					}
				}
			}
		})
	}
}

// save copies the stepper's bucket, log included.
func (s *stepper) save() entry {
	saved := *s.e
	if s.e.ext != nil {
		x := *s.e.ext
		x.log.ring = append([]int64(nil), x.log.ring...)
		saved.ext = &x
	}
	return saved
}

func (s *stepper) restore(saved entry) { *s.e = saved }
