package redisstore

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// TestLeaseTokenBucketRedisDataLoss: README "Redis data loss": a leased
// bucket comes back fresh "while the units leases held at the loss are
// still spent where they are (or given back into the fresh count): in
// that window (for token_bucket, until those leases end) the fleet admits
// a fresh budget plus at most what leases held". Replayed through one
// token bucket whose burst is the policy's plus what leases held at the
// loss, the admissions after it all conform; no decision reports a
// Remaining outside [0, burst] or a negative Reset or Retry-After, and no
// lease holds past its share.
func TestLeaseTokenBucketRedisDataLoss(t *testing.T) {
	srv := redistest.Start(t)
	f := newLeaseFleet(t, srv, 3)
	rng := seeded(t)
	p, err := ratelimit.NewPolicy(ratelimit.Policy{Name: "tb-loss", Algorithm: ratelimit.TokenBucket, Limit: 300, Window: time.Second, Burst: 600, Sync: ratelimit.SyncLease})
	if err != nil {
		t.Fatal(err)
	}
	r := ratelimit.Request{Policy: p, Key: "k"}
	t0 := time.Unix(1_700_000_000, 0)
	check := func(now time.Time) {
		for i, s := range f.stores {
			s.leases.mu.Lock()
			l := s.leases.m[Key(s.prefix, r)]
			s.leases.mu.Unlock()
			if l == nil {
				continue
			}
			l.mu.Lock()
			units, share := l.units, maxBatch(p, s.instances())
			l.mu.Unlock()
			if units > share {
				t.Errorf("at %v: instance %d's lease holds %d, past its share %d", now.Sub(t0), i, units, share)
			}
		}
	}
	// Twice the rate: the bucket runs dry, leases refill from its rate.
	replayLease(t, f, rng, r, arrivals(rng, t0, 2*time.Second, 1200), check)
	for _, s := range f.stores {
		s.refills.Wait()
	}
	loss := t0.Add(2 * time.Second)
	held := f.held(r, loss)
	srv.Do("FLUSHALL")
	var after []time.Time
	var bad []ratelimit.Decision
	ts := arrivals(rng, loss, 3*time.Second, 3000)
	out := make([]ratelimit.Decision, 1)
	for _, at := range ts {
		s := f.stores[skewed(rng)]
		out = decide1(t, s, at, r)
		if out[0].Allowed {
			after = append(after, at)
		}
		if out[0].Remaining < 0 || out[0].Remaining > p.Capacity() || out[0].Reset < 0 || out[0].RetryAfter < 0 || (!out[0].Allowed && out[0].RetryAfter == 0) {
			bad = append(bad, out[0])
		}
		check(at)
	}
	if len(bad) > 0 {
		t.Errorf("%d decisions after the loss report nonsense, first %+v", len(bad), bad[0])
	}
	if bound := heldBound(p, 3); held > bound {
		t.Errorf("leases held %d units at the loss, want at most %d", held, bound)
	}
	q, err := ratelimit.NewPolicy(ratelimit.Policy{Name: "tb-loss-bound", Algorithm: ratelimit.TokenBucket, Limit: 300, Window: time.Second, Burst: 600 + held})
	if err != nil {
		t.Fatal(err)
	}
	var st ratelimit.TokenBucketState
	for i, at := range after {
		var d ratelimit.Decision
		if st, d = ratelimit.StepTokenBucket(q, st, at.UnixNano(), 1); !d.Allowed {
			t.Fatalf("admission %d after the loss, at %v: a fresh bucket plus the %d units leases held rejects it: the fleet admitted more", i, at.Sub(loss), held)
		}
	}
	// 600 fresh and 300 a second for 3s, less what leases leave unspent.
	t.Logf("leases held %d at the loss; admitted %d of %d arrivals in the 3s after it", held, len(after), len(ts))
	if len(after) < 1300 {
		t.Errorf("admitted %d in the 3s after the loss, want at least 1300 of the fresh bucket's 1500", len(after))
	}
}
