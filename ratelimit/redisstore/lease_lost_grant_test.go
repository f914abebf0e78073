package redisstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// TestLeaseTokenBucketLostGrantRunsOut: a refill whose reply is lost (the
// timeout passed, the script ran all the same) leaves Redis counting the
// batch it granted as the instance's, though the instance never got it.
// Those units must run out with that grant; were they renewed with the
// instance's later grants, a lease under steady traffic would keep them
// counted for as long as its traffic lasts, and the refill, capped below
// every holding, would leave the bucket short of its burst for good (each
// lost reply shrinking it further).
func TestLeaseTokenBucketLostGrantRunsOut(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, CallerTime: true, Timeout: 100 * time.Millisecond})
	s.startHeartbeat()
	// 10 tokens a second, a burst of 600: one instance holds at most 60.
	p, err := ratelimit.NewPolicy(ratelimit.Policy{Name: "tb-ghost", Algorithm: ratelimit.TokenBucket, Limit: 600, Window: time.Minute, Burst: 600, Sync: ratelimit.SyncLease})
	if err != nil {
		t.Fatal(err)
	}
	r := ratelimit.Request{Policy: p, Key: "k"}
	key := Key("", r)
	l := func() *lease {
		s.leases.mu.Lock()
		defer s.leases.mu.Unlock()
		return s.leases.m[key]
	}
	redisHolds := func() int64 {
		var mine, expiry int64
		if v := srv.Do("HGET", key, s.leaseField(l())); v != "" {
			if _, err := fmt.Sscan(v, &mine, &expiry); err != nil {
				t.Fatalf("holding %q: %v", v, err)
			}
		}
		return mine
	}
	localHolds := func() int64 {
		x := l()
		x.mu.Lock()
		defer x.mu.Unlock()
		return x.units + x.held + x.spent
	}

	// Five requests a second: the lease is steady.
	t0 := time.Unix(1_700_000_000, 0)
	at := t0
	step := func() {
		decide1(t, s, at, r)
		s.refills.Wait()
		at = at.Add(200 * time.Millisecond)
	}
	for range 20 {
		step()
	}

	// Redis stalls while a refill is on its way: its reply is lost.
	before := srv.Do("HGET", key, s.leaseField(l()))
	srv.Pause()
	for range 100 {
		decide1(t, s, at, r)
		x := l()
		x.mu.Lock()
		inflight := x.inflight != nil
		x.mu.Unlock()
		at = at.Add(200 * time.Millisecond)
		if inflight {
			break
		}
	}
	s.refills.Wait()
	srv.Resume()
	if _, ok := waitFor(5*time.Second, func() bool { return srv.Do("HGET", key, s.leaseField(l())) != before }); !ok {
		t.Fatal("the refill whose reply was lost never ran")
	}
	t.Logf("after the lost reply: Redis counts %d as the instance's, the instance holds %d", redisHolds(), localHolds())

	// Steady traffic for longer than any grant may be spent (10s).
	for range 100 {
		step()
	}
	if got, want := redisHolds(), localHolds(); got > want {
		t.Errorf("after 20s of steady traffic Redis counts %d units as the instance's, want at most the %d it holds or has not reported spent: the lost grant is still counted", got, want)
	}
}

// leaseFieldOf is the token_bucket field of s's lease of r.
func leaseFieldOf(t *testing.T, s *Store, r ratelimit.Request) string {
	t.Helper()
	s.leases.mu.Lock()
	l := s.leases.m[Key(s.prefix, r)]
	s.leases.mu.Unlock()
	if l == nil {
		t.Fatalf("no lease of %s|%s", r.Policy.Name, r.Key)
	}
	return s.leaseField(l)
}
