package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
)

// TestFallbackCopyFollowsInstances: the local fallback of a leased policy
// decides with limit / N for the N seen now. Every copy of one
// configuration has the same name; the memory store must decide with the
// copy for the N of the decision, not with the first it saw. Here the
// first fallback ran while this instance saw itself alone (N=1, limit 10);
// later N=5 (limit 2), and the store must admit 2 per window, not 10.
func TestFallbackCopyFollowsInstances(t *testing.T) {
	t.Parallel()
	p := ratelimit.MustPolicy(ratelimit.Policy{Name: "api", Algorithm: ratelimit.FixedWindow, Limit: 10, Window: time.Minute, Sync: ratelimit.SyncLease})
	m := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{SweepInterval: -1})
	defer m.Close()
	var f leaseFallbacks
	at := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	decide := func(q *ratelimit.Policy, key string) bool {
		out := make([]ratelimit.Decision, 1)
		if err := m.Decide(context.Background(), at, []ratelimit.Request{{Policy: q, Key: key}}, out); err != nil {
			t.Fatal(err)
		}
		return out[0].Allowed
	}
	decide(f.local(p, 1), "a") // an earlier outage, N=1
	q := f.local(p, 5)
	if q.Limit != 2 {
		t.Fatalf("fallback copy for 5 instances: got limit %d, want 2", q.Limit)
	}
	admitted := 0
	for range 10 {
		if decide(q, "b") {
			admitted++
		}
	}
	if admitted != 2 {
		t.Errorf("fallback with 5 instances, limit 10: got %d admitted for one key, want 2 (limit / N)", admitted)
	}
}
