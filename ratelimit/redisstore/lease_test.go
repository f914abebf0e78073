package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// leasePolicy compiles a leased policy.
func leasePolicy(t testing.TB, name string, a ratelimit.Algorithm, limit int64, window time.Duration) *ratelimit.Policy {
	t.Helper()
	p, err := ratelimit.NewPolicy(ratelimit.Policy{Name: name, Algorithm: a, Limit: limit, Window: window, Sync: ratelimit.SyncLease})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// decide1 decides one request of r at now and fails the test on error.
func decide1(t testing.TB, s *Store, now time.Time, reqs ...ratelimit.Request) []ratelimit.Decision {
	t.Helper()
	out := make([]ratelimit.Decision, len(reqs))
	if err := s.Decide(context.Background(), now, reqs, out); err != nil {
		t.Fatalf("Decide: %v", err)
	}
	return out
}

// TestLeaseFixedWindowOneInstance admits exactly limit per window from one
// store, in far fewer Redis calls than decisions.
func TestLeaseFixedWindowOneInstance(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, CallerTime: true})
	p := leasePolicy(t, "fw-lease", ratelimit.FixedWindow, 1000, time.Second)
	r := ratelimit.Request{Policy: p, Key: "k"}
	t0 := time.Unix(1_700_000_000, 0)
	for w := range 3 {
		admitted := 0
		for i := range 2000 {
			now := t0.Add(time.Duration(w)*time.Second + time.Duration(i)*400*time.Microsecond)
			if decide1(t, s, now, r)[0].Allowed {
				admitted++
			}
		}
		if admitted != 1000 {
			t.Errorf("window %d: admitted %d, want 1000", w, admitted)
		}
	}
	if got := s.calls.Load(); got > 6000/5 {
		t.Errorf("got %d Redis calls for 6000 decisions, want at most 1200", got)
	}
	t.Logf("%d Redis calls for 6000 decisions", s.calls.Load())
}
