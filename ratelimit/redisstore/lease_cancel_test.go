package redisstore

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// TestLeaseClientGoneIsNoFallback: a client that goes away while its
// request waits for a lease refill is not Redis failing (the store does
// not count it against the breaker either), so the leased policy is not
// reported in fallback: no "lease fallback" line and no
// sluice_ratelimit_lease_fallback 1 with Redis healthy. README
// "Leases"/"Redis down" and the metric's doc: 1 "while a leased policy
// decides locally with limit / N because Redis is unreachable".
func TestLeaseClientGoneIsNoFallback(t *testing.T) {
	srv := redistest.Start(t)
	var logs syncBuffer
	var mu sync.Mutex
	var states []bool
	s := newStore(t, Options{
		Addresses: []string{srv.Addr()}, Timeout: time.Second,
		Logger:          slog.New(slog.NewTextHandler(&logs, nil)),
		OnLeaseFallback: func(_ string, on bool) { mu.Lock(); states = append(states, on); mu.Unlock() },
	})
	p := leasePolicy(t, "gone", ratelimit.FixedWindow, 1000, time.Hour)
	r := ratelimit.Request{Policy: p, Key: "k"}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the client went away while its request waited for the lease
	out := make([]ratelimit.Decision, 1)
	if err := s.Decide(ctx, time.Now(), []ratelimit.Request{r}, out); err != nil {
		t.Fatal(err)
	}
	if !s.Healthy() {
		t.Fatalf("store unhealthy after a cancelled request: %v", s.LastError())
	}
	mu.Lock()
	defer mu.Unlock()
	if got := logs.count("lease fallback"); got != 0 || len(states) != 0 {
		t.Errorf("Redis healthy, client gone: got %d \"lease fallback\" lines and OnLeaseFallback calls %v, want 0 and none\n%s", got, states, logs.b.String())
	}
}
