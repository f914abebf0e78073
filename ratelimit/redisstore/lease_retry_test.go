package redisstore

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// TestLeaseRejectRetryAfterNotEarly: once a leased bucket is spent, a
// rejection must not point earlier than the next unit can be free (SPEC
// §4: `t` is the seconds until more budget; README "Leases": the instance
// rejects locally "until a unit may be free (the window's end, the next
// tokens)"), also when the last refill was a partial grant. The same
// bucket decided per request says when.
func TestLeaseRejectRetryAfterNotEarly(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, CallerTime: true})
	t0 := time.Unix(1_700_000_000, 0)
	for _, a := range []ratelimit.Algorithm{ratelimit.TokenBucket, ratelimit.SlidingWindowCounter, ratelimit.FixedWindow} {
		t.Run(a.String(), func(t *testing.T) {
			leased := ratelimit.Request{Policy: leasePolicy(t, "ra-lease-"+a.String(), a, 100, time.Hour), Key: "k"}
			perReq := ratelimit.Request{Policy: policyOf(t, "ra-req-"+a.String(), a, 100, time.Hour), Key: "k"}
			first := func(r ratelimit.Request) (int, ratelimit.Decision) {
				for i := range 300 {
					now := t0.Add(time.Duration(i) * time.Millisecond)
					if d := decide1(t, s, now, r)[0]; !d.Allowed {
						return i, d
					}
				}
				t.Fatal("never rejected")
				return 0, ratelimit.Decision{}
			}
			_, want := first(perReq)
			n, got := first(leased)
			t.Logf("leased: first rejection after %d admissions", n)
			if got.RetryAfter < want.RetryAfter-time.Second {
				t.Errorf("first rejection: RetryAfter got %v, want about %v (as per request)", got.RetryAfter, want.RetryAfter)
			}
		})
	}
}
