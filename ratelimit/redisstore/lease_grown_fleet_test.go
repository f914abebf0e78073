package redisstore

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// TestLeaseRefillAfterFleetGrew: an instance that built up a batch while
// alone holds more than its share once others join (N grows). Its next
// refill has nothing to ask for; it must not make a round trip for
// nothing, and every round trip a leased policy makes is counted in
// sluice_ratelimit_lease_requests_total (OnLease).
func TestLeaseRefillAfterFleetGrew(t *testing.T) {
	srv := redistest.Start(t)
	var trips, counted atomic.Int64
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, CallerTime: true, Timeout: time.Second,
		Observe: func(time.Duration, error) { trips.Add(1) },
		OnLease: func(string, string) { counted.Add(1) }})
	s.RetireLeases() // no heartbeats: N is set below
	s.seen.Store(1)
	r := ratelimit.Request{Policy: leasePolicy(t, "grown", ratelimit.FixedWindow, 1000, time.Hour), Key: "k"}
	t0 := time.Unix(1_700_000_000, 0)
	i := 0
	decide := func(n int) {
		for range n {
			if !decide1(t, s, t0.Add(time.Duration(i)*time.Millisecond), r)[0].Allowed {
				t.Fatalf("request %d rejected far below the limit", i)
			}
			s.refills.Wait()
			i++
		}
	}
	decide(300) // 1000 a second: batches of about 40, within 1000/10
	s.seen.Store(10)
	before, beforeCounted := trips.Load(), counted.Load()
	decide(20)
	got, gotCounted := trips.Load()-before, counted.Load()-beforeCounted
	if got != gotCounted {
		t.Errorf("after N grew: %d Redis round trips, %d counted as lease requests, want every one counted", got, gotCounted)
	}
	if got > 2 {
		t.Errorf("after N grew: %d Redis round trips for 20 requests, want at most 2", got)
	}
}
