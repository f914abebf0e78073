package redisstore

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
)

func TestMaxBatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		p         ratelimit.Policy
		instances int
		want      int64
	}{
		{"a tenth for one", ratelimit.Policy{Algorithm: ratelimit.FixedWindow, Limit: 1000, Window: time.Second}, 1, 100},
		{"shared by three", ratelimit.Policy{Algorithm: ratelimit.FixedWindow, Limit: 1000, Window: time.Second}, 3, 33},
		{"burst for a token bucket", ratelimit.Policy{Algorithm: ratelimit.TokenBucket, Limit: 1000, Window: time.Second, Burst: 300}, 3, 10},
		{"at least one", ratelimit.Policy{Algorithm: ratelimit.SlidingWindowCounter, Limit: 5, Window: time.Second}, 3, 1},
		{"unknown N counts as one", ratelimit.Policy{Algorithm: ratelimit.FixedWindow, Limit: 1000, Window: time.Second}, 0, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.p.Name = "p"
			p := ratelimit.MustPolicy(tc.p)
			got := maxBatch(p, tc.instances)
			if got != tc.want {
				t.Errorf("got %d, want %d", got, tc.want)
			}
			// All instances together stay within the README's bound.
			if n := int64(max(tc.instances, 1)); got*n > heldBound(p, int(n)) {
				t.Errorf("%d instances x %d = %d, over the bound %d", n, got, got*n, heldBound(p, int(n)))
			}
		})
	}
}

func TestFallbackPolicy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		p      ratelimit.Policy
		n      int
		limit  int64
		burst  int64
		window time.Duration
	}{
		{"limit over N", ratelimit.Policy{Algorithm: ratelimit.FixedWindow, Limit: 300, Window: time.Minute}, 3, 100, 0, time.Minute},
		{"rounded down", ratelimit.Policy{Algorithm: ratelimit.SlidingWindowCounter, Limit: 100, Window: time.Minute}, 3, 33, 0, time.Minute},
		{"at least one", ratelimit.Policy{Algorithm: ratelimit.FixedWindow, Limit: 2, Window: time.Minute}, 5, 1, 0, time.Minute},
		{"burst over N too", ratelimit.Policy{Algorithm: ratelimit.TokenBucket, Limit: 600, Window: time.Minute, Burst: 90}, 3, 200, 30, time.Minute},
		// 1s / 333,333 is no whole number of microseconds, closely
		// enough: the window stretches instead, the burst still divided.
		{"window stretched when the rate cannot be counted", ratelimit.Policy{Algorithm: ratelimit.TokenBucket, Limit: 1_000_000, Window: time.Second}, 3, 1_000_000, 333_333, 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.p.Name, tc.p.Sync = "p", ratelimit.SyncLease
			q := fallbackPolicy(ratelimit.MustPolicy(tc.p), tc.n)
			if q.Limit != tc.limit || q.Burst != tc.burst || q.Window != tc.window || q.Sync != ratelimit.SyncPerRequest {
				t.Errorf("got limit %d burst %d window %v sync %v, want %d %d %v request", q.Limit, q.Burst, q.Window, q.Sync, tc.limit, tc.burst, tc.window)
			}
		})
	}
}

// TestLeaseWant checks the batch asked for: the decayed arrival rate times
// the horizon, at least leaseSteadyBatch once the traffic is steady,
// within 1 and maxBatch.
func TestLeaseWant(t *testing.T) {
	t.Parallel()
	p := ratelimit.MustPolicy(ratelimit.Policy{Name: "p", Algorithm: ratelimit.FixedWindow, Limit: 1_000_000, Window: time.Second, Sync: ratelimit.SyncLease})
	t0 := time.Unix(1_700_000_000, 0)
	for _, tc := range []struct {
		name     string
		rate     int // arrivals per second, for 10s
		min, max int64
	}{
		{"idle asks for one", 1, 1, 1},
		{"steady 5/s asks for the steady batch", 5, leaseSteadyBatch, leaseSteadyBatch},
		{"100/s asks for about 20", 100, 18, 21},
		{"10,000/s asks for about 2,000", 10_000, 1900, 2010},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := &lease{req: ratelimit.Request{Policy: p}}
			step := time.Second / time.Duration(tc.rate)
			for i := range 10 * tc.rate {
				l.arriveLocked(t0.Add(time.Duration(i) * step))
			}
			if got := l.wantLocked(1); got < tc.min || got > tc.max {
				t.Errorf("got %d, want %d to %d", got, tc.min, tc.max)
			}
		})
	}
	// Two thirds of maxBatch caps it.
	small := ratelimit.MustPolicy(ratelimit.Policy{Name: "s", Algorithm: ratelimit.FixedWindow, Limit: 300, Window: time.Second, Sync: ratelimit.SyncLease})
	l := &lease{req: ratelimit.Request{Policy: small}}
	for i := range 10_000 {
		l.arriveLocked(t0.Add(time.Duration(i) * 100 * time.Microsecond))
	}
	if got := l.wantLocked(3); got != 6 {
		t.Errorf("capped by two thirds of maxBatch (10): got %d, want 6", got)
	}
}

// TestLeaseIdleOutlastsGap checks that a lease whose requests come a
// little slower than leaseIdle apart is not swept between two of them:
// forgotten, it would lose the rate it learnt and ask for one unit a call
// for ever.
func TestLeaseIdleOutlastsGap(t *testing.T) {
	t.Parallel()
	p := ratelimit.MustPolicy(ratelimit.Policy{Name: "p", Algorithm: ratelimit.FixedWindow, Limit: 100_000, Window: time.Minute, Sync: ratelimit.SyncLease})
	t0 := time.Unix(1_700_000_000, 0)
	for _, gap := range []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second} {
		l := &lease{req: ratelimit.Request{Policy: p}}
		for i := range 20 {
			l.arriveLocked(t0.Add(time.Duration(i) * gap))
			if got := l.idleLocked(); got <= gap {
				t.Errorf("gap %v, arrival %d: idle after %v, want more than the gap", gap, i, got)
			}
		}
	}
}
