package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// TestRefundLeavesSlidingLogAsMemoryDoes: STYLE "each Redis Lua
// script mirrors one step"; README "What is exact": the Redis and memory
// stores decide alike for the same (now, request) sequence. A count_status
// give-back through Redis (decide.lua mode 'r') also runs a look on every
// limit, which drops the sliding log's entries that left the window and
// moves its settled time; the memory store's Refund drops nothing. A
// request that then arrives late (behind the refund, as racing requests
// do) is decided differently.
func TestRefundLeavesSlidingLogAsMemoryDoes(t *testing.T) {
	srv := redistest.Start(t)
	rs := newStore(t, Options{Addresses: []string{srv.Addr()}, CallerTime: true, KeyPrefix: "refund-mirror:"})
	ms := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{SweepInterval: -1})
	defer ms.Close()
	p := ratelimit.MustPolicy(ratelimit.Policy{Name: "otp", Algorithm: ratelimit.SlidingWindowLog, Limit: 2, Window: 100 * time.Millisecond, Hold: true})
	r := []ratelimit.Request{{Policy: p, Key: "k"}}
	ctx := context.Background()
	both := func(at time.Duration) (got, want ratelimit.Decision) {
		t.Helper()
		g, w := make([]ratelimit.Decision, 1), make([]ratelimit.Decision, 1)
		if err := rs.Decide(ctx, t0.Add(at), r, g); err != nil {
			t.Fatal(err)
		}
		if err := ms.Decide(ctx, t0.Add(at), r, w); err != nil {
			t.Fatal(err)
		}
		return g[0], w[0]
	}
	both(0)                               // logged at 0
	g2, w2 := both(50 * time.Millisecond) // logged at 50ms
	// The request at 50ms is given back at 120ms (its answer was a success).
	if err := rs.Refund(ctx, t0.Add(120*time.Millisecond), r, []ratelimit.Decision{g2}); err != nil {
		t.Fatal(err)
	}
	if err := ms.Refund(ctx, t0.Add(120*time.Millisecond), r, []ratelimit.Decision{w2}); err != nil {
		t.Fatal(err)
	}
	// A request that arrived at 90ms reaches the stores now.
	got, want := both(90 * time.Millisecond)
	if !sameDecision(got, want) {
		t.Errorf("late request at +90ms after a give-back at +120ms: got %+v, want %+v (memory store)", got, want)
	}
}
