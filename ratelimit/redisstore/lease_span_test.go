package redisstore

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// TestLeaseDurationsOverLongSpans: a leased bucket's RetryAfter and Reset
// are whole microseconds, as the memory store's are, for windows past the
// 104 days beyond which a double no longer holds every nanosecond count.
func TestLeaseDurationsOverLongSpans(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, CallerTime: true})
	// The first request a little past a whole second, so that the time to
	// the window's end has digits a double drops in nanoseconds.
	now := time.Unix(1_700_000_000, 123_457_000)
	for _, alg := range []ratelimit.Algorithm{ratelimit.FixedWindow, ratelimit.SlidingWindowCounter, ratelimit.TokenBucket} {
		p := leasePolicy(t, "span-"+alg.String(), alg, 1, 10*365*24*time.Hour)
		r := ratelimit.Request{Policy: p, Key: "k"}
		first := decide1(t, s, now, r)[0]
		s.refills.Wait()
		second := decide1(t, s, now, r)[0]
		if !first.Allowed || second.Allowed {
			t.Fatalf("%s: got %v then %v, want the first admitted and the second refused", alg, first.Allowed, second.Allowed)
		}
		for _, d := range []struct {
			name string
			v    time.Duration
		}{{"RetryAfter", second.RetryAfter}, {"Reset", second.Reset}} {
			if d.v <= 0 || d.v%time.Microsecond != 0 {
				t.Errorf("%s: %s %v (%d ns), want a positive whole number of microseconds", alg, d.name, d.v, int64(d.v))
			}
		}
	}
}
