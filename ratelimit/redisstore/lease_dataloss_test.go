package redisstore

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// TestLeaseFixedWindowRedisDataLoss: Redis loses its data mid-window
// (FLUSHALL, as a restart without persistence or a failover to a replica
// behind). The bucket comes back fresh, as without leases; what leases
// add in that window is only the units they held at the loss, each spent
// or given back once: at most the unspent bound, max(N, limit / 10). The
// next window is exact again.
func TestLeaseFixedWindowRedisDataLoss(t *testing.T) {
	srv := redistest.Start(t)
	f := newLeaseFleet(t, srv, 3)
	rng := seeded(t)
	p := leasePolicy(t, "fw-loss", ratelimit.FixedWindow, 1000, time.Second)
	r := ratelimit.Request{Policy: p, Key: "k"}
	t0 := time.Unix(1_700_000_000, 0)

	before := len(replayLease(t, f, rng, r, arrivals(rng, t0, 400*time.Millisecond, 600), nil))
	for _, s := range f.stores {
		s.refills.Wait()
	}
	held := f.held(r, t0.Add(400*time.Millisecond))
	srv.Do("FLUSHALL")
	after := len(replayLease(t, f, rng, r, arrivals(rng, t0.Add(400*time.Millisecond), 600*time.Millisecond, 2000), nil))
	t.Logf("admitted %d before the loss (leases holding %d), %d after", before, held, after)
	if bound := heldBound(p, 3); held > bound {
		t.Errorf("leases held %d units at the loss, want at most %d", held, bound)
	}
	if want := 1000 + held; int64(after) > want {
		t.Errorf("admitted %d after the loss in its window, want at most a fresh budget and what leases held, %d", after, want)
	}
	if after < 900 {
		t.Errorf("admitted %d after the loss in its window, want at least 900 of the fresh budget", after)
	}
	next := len(replayLease(t, f, rng, r, arrivals(rng, t0.Add(time.Second), time.Second, 2000), nil))
	if next > 1000 || next < 900 {
		t.Errorf("admitted %d in the window after the loss, want 900 to 1000", next)
	}
}
