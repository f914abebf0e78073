package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// TestSwitchBackAdmitsAtMostTwiceTheLimit: README "When Redis fails",
// on_error local: "in the window where Redis fails the fleet may admit
// N + 1 times the limit (one instance alone twice it)". One instance
// decides without a pause while Redis stalls (SIGSTOP) past the breaker
// and answers again, its data kept: the decisions that missed the
// timeout ran in Redis once it got to them, and the breaker closes while
// the fallback decides. Across the whole window the instance admits at
// most twice the limit, and once the fallback's budget is spent and Redis
// answers again, Redis has its own budget to give and no more.
func TestSwitchBackAdmitsAtMostTwiceTheLimit(t *testing.T) {
	srv := redistest.Start(t)
	const limit = 40
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: faultTimeout})
	p := policyOf(t, "switch-back", ratelimit.FixedWindow, limit, time.Hour)
	reqs := []ratelimit.Request{{Policy: p, Key: "k"}}
	ctx := context.Background()
	if _, ok := waitFor(10*time.Second, func() bool { return s.ping(time.Second) == nil }); !ok {
		t.Fatalf("redis does not answer: %v", s.LastError())
	}
	// The window must not end during the test.
	if w := time.Now().Truncate(time.Hour).Add(time.Hour); time.Until(w) < time.Minute {
		t.Skip("too close to the window's end")
	}
	var admitted atomic.Int64
	decide := func() {
		out := make([]ratelimit.Decision, 1)
		if err := s.Decide(ctx, time.Now(), reqs, out); err != nil {
			t.Error(err)
		}
		if out[0].Allowed {
			admitted.Add(1)
		}
	}
	// Half the budget spent on Redis.
	for admitted.Load() < limit/2 {
		decide()
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				decide()
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	srv.Pause()
	if _, ok := waitFor(5*time.Second, func() bool { return s.br.open.Load() }); !ok {
		t.Fatal("stalled redis: the breaker did not open in 5s")
	}
	time.Sleep(100 * time.Millisecond)
	srv.Resume()
	if _, ok := waitFor(5*time.Second, func() bool { return !s.br.open.Load() && s.Healthy() }); !ok {
		t.Fatalf("resumed: the breaker did not close in 5s: %v", s.LastError())
	}
	// Decisions go on on Redis, until what the late replies took is
	// given back and Redis's half of the budget is spent.
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	got := admitted.Load()
	t.Logf("admitted %d across the stall, limit %d", got, limit)
	if got > 2*limit {
		t.Errorf("one instance admitted %d across a stall of Redis, want at most twice the limit, %d", got, 2*limit)
	}
	d, err := s.Peek(ctx, time.Now(), reqs[0])
	if err != nil {
		t.Fatal(err)
	}
	if d.Remaining != 0 {
		t.Errorf("after a second of traffic on Redis again: remaining %d, want 0", d.Remaining)
	}
}
