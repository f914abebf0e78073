package redisstore

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// TestLeaseSlowTrafficOneCallPerRequest holds the README's promise that a
// lease whose traffic is too slow to batch costs a call per request, as a
// per-request decision does. A token_bucket lease spends its unit of one
// and goes idle; its holding in Redis runs out after a second, so the
// idle sweep has nothing left to report, and must not make a second call
// for it.
func TestLeaseSlowTrafficOneCallPerRequest(t *testing.T) {
	srv := redistest.Start(t)
	for _, a := range []ratelimit.Algorithm{ratelimit.FixedWindow, ratelimit.TokenBucket, ratelimit.SlidingWindowCounter} {
		t.Run(a.String(), func(t *testing.T) {
			var trips atomic.Int64 // the lease's round trips (no heartbeats, no pings)
			s := newStore(t, Options{Addresses: []string{srv.Addr()}, KeyPrefix: a.String() + ":", Timeout: time.Second,
				OnLease: func(string, string) { trips.Add(1) }})
			r := ratelimit.Request{Policy: leasePolicy(t, "slow", a, 1000, time.Hour), Key: "k"}
			const requests = 2
			before := trips.Load()
			for i := range requests {
				if !decide1(t, s, time.Now(), r)[0].Allowed {
					t.Fatalf("request %d rejected far below the limit", i)
				}
				s.refills.Wait()
				// Past the holding's second (on a loaded machine
				// perhaps longer, never shorter), then idle.
				time.Sleep(leaseTTL + 50*time.Millisecond)
				s.sweepLeases(context.Background(), *s.client.Load(), time.Now().Add(time.Hour))
			}
			if got := trips.Load() - before; got > requests {
				t.Errorf("got %d Redis round trips for %d slow requests, want one each", got, requests)
			}
		})
	}
}
