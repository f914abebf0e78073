package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// TestRefundAndBlockAcrossInstances runs on the server's clock with two
// stores on one Redis: a unit one gives back, the other can take, and a
// block one starts, the other sees, until a reset on either lifts it.
func TestRefundAndBlockAcrossInstances(t *testing.T) {
	srv := redistest.Start(t)
	a := newStore(t, Options{Addresses: []string{srv.Addr()}})
	b := newStore(t, Options{Addresses: []string{srv.Addr()}})
	ctx := context.Background()
	decide := func(s *Store, r ratelimit.Request) ratelimit.Decision {
		t.Helper()
		out := make([]ratelimit.Decision, 1)
		if err := s.Decide(ctx, time.Now(), []ratelimit.Request{r}, out); err != nil {
			t.Fatal(err)
		}
		return out[0]
	}
	for _, tc := range []struct {
		name string
		pol  ratelimit.Policy
	}{
		{"sliding_window_log", ratelimit.Policy{Algorithm: ratelimit.SlidingWindowLog, Limit: 3, Window: time.Hour}},
		{"fixed_window", ratelimit.Policy{Algorithm: ratelimit.FixedWindow, Limit: 3, Window: 24 * time.Hour}},
		{"token_bucket", ratelimit.Policy{Algorithm: ratelimit.TokenBucket, Limit: 3, Window: time.Hour}},
		{"sliding_window_counter", ratelimit.Policy{Algorithm: ratelimit.SlidingWindowCounter, Limit: 3, Window: 24 * time.Hour}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.pol.Name = "brute-" + tc.name
			tc.pol.Block = time.Hour
			r := ratelimit.Request{Policy: ratelimit.MustPolicy(tc.pol), Key: "alice"}
			var first ratelimit.Decision
			for i := range 3 {
				d := decide(a, r)
				if !d.Allowed {
					t.Fatalf("request %d: got rejected, want allowed", i)
				}
				if i == 0 {
					first = d
				}
			}
			if err := a.Refund(ctx, time.Now(), []ratelimit.Request{r}, []ratelimit.Decision{first}); err != nil {
				t.Fatalf("refunding: %v", err)
			}
			if d := decide(b, r); !d.Allowed {
				t.Fatalf("after the refund, other instance: got %+v, want allowed", d)
			}
			if d := decide(b, r); d.Allowed || d.Blocked || d.RetryAfter < time.Hour-time.Minute {
				t.Fatalf("over the limit: got %+v, want a rejection that starts an hour's block", d)
			}
			if d := decide(a, r); !d.Blocked {
				t.Fatalf("first instance during the block: got %+v, want Blocked", d)
			}
			if err := b.Reset(ctx, r); err != nil {
				t.Fatalf("resetting: %v", err)
			}
			if d := decide(a, r); !d.Allowed {
				t.Fatalf("after reset: got %+v, want allowed", d)
			}
		})
	}
}

// TestRefundFollowsWhoDecided gives back a unit that the fallback took
// while Redis was down to the fallback, and reports a unit Redis took as
// unavailable while Redis is.
func TestRefundFollowsWhoDecided(t *testing.T) {
	srv := redistest.Start(t)
	addr := srv.Addr()
	up := newStore(t, Options{Addresses: []string{addr}})
	p := policyOf(t, "refund-who", ratelimit.FixedWindow, 1, 24*time.Hour)
	r := []ratelimit.Request{{Policy: p, Key: "k"}}
	ctx := context.Background()
	out := make([]ratelimit.Decision, 1)
	if err := up.Decide(ctx, time.Now(), r, out); err != nil || !out[0].Allowed {
		t.Fatalf("deciding with Redis up: %+v, %v", out[0], err)
	}
	inRedis := out[0]
	srv.Kill()

	down, err := New(ctx, Options{Addresses: []string{addr}, Timeout: faultTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	for i := range 3 {
		if err := down.Decide(ctx, time.Now(), r, out); err != nil || !out[0].Allowed {
			t.Fatalf("fallback decision %d: %+v, %v; want allowed", i, out[0], err)
		}
		if err := down.Refund(ctx, time.Now(), r, out); err != nil {
			t.Fatalf("refunding to the fallback: %v", err)
		}
	}
	if err := down.Refund(ctx, time.Now(), r, []ratelimit.Decision{inRedis}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("refunding a Redis unit while Redis is down: got %v, want ErrUnavailable", err)
	}
}

// TestWaitInFallback checks that a request the fallback queued waits in
// the fallback's own queue: when one ahead of it gives up, it moves up,
// and so does the next departure. A request that only slept beside the
// fallback's queue would leave a hole of one interval instead.
func TestWaitInFallback(t *testing.T) {
	srv := redistest.Start(t)
	addr := srv.Addr()
	srv.Kill()
	fb := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{SweepInterval: -1})
	defer fb.Close()
	s, err := New(context.Background(), Options{Addresses: []string{addr}, Timeout: faultTimeout, Fallback: fb})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p := ratelimit.MustPolicy(ratelimit.Policy{Name: "fallback-queue", Algorithm: ratelimit.LeakyBucket, Limit: 1, Window: time.Second, Queue: 5})
	r := []ratelimit.Request{{Policy: p, Key: "k"}}
	now := time.Now()
	decide := func() ratelimit.Decision {
		t.Helper()
		out := make([]ratelimit.Decision, 1)
		if err := s.Decide(context.Background(), now, r, out); err != nil || !out[0].Allowed {
			t.Fatalf("deciding: %+v, %v", out[0], err)
		}
		return out[0]
	}
	decide()
	d2, d3 := decide(), decide()
	ctx3, stop3 := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Wait(ctx3, r[0], d3) }()
	time.Sleep(100 * time.Millisecond) // let the third reach its queue; it leaves in 2s
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Wait(gone, r[0], d2); !errors.Is(err, context.Canceled) {
		t.Fatalf("second giving up: got %v, want context.Canceled", err)
	}
	if d4 := decide(); d4.Delay != 2*time.Second {
		t.Errorf("after the second gave up: got Delay %v, want 2s (the queue moved up)", d4.Delay)
	}
	stop3()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("third: got %v, want context.Canceled", err)
	}
}

// TestFallbackKeepsRedisBlock: a key this instance saw blocked in Redis
// stays blocked when the local fallback decides instead (Redis went
// away, or a saturated gateway missed the timeout, as a client's own load
// can make it): a fresh fallback bucket would hand a blocked guesser the
// whole limit again.
func TestFallbackKeepsRedisBlock(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: testTimeout})
	p := ratelimit.MustPolicy(ratelimit.Policy{Name: "login", Algorithm: ratelimit.SlidingWindowLog, Limit: 3, Window: time.Hour, Block: time.Hour})
	r := []ratelimit.Request{{Policy: p, Key: "alice"}}
	other := []ratelimit.Request{{Policy: p, Key: "bob"}}
	ctx := context.Background()
	out := make([]ratelimit.Decision, 1)
	for i := range 4 {
		if err := s.Decide(ctx, time.Now(), r, out); err != nil {
			t.Fatal(err)
		}
		if want := i < 3; out[0].Allowed != want {
			t.Fatalf("guess %d: allowed %v, want %v", i+1, out[0].Allowed, want)
		}
	}
	srv.Kill()
	for i := range 3 {
		if err := s.Decide(ctx, time.Now(), r, out); err != nil {
			t.Fatal(err)
		}
		if out[0].Allowed || out[0].RetryAfter < 59*time.Minute {
			t.Errorf("guess %d with Redis gone: got %+v, want rejected until the block's end, about 1h away", i+5, out[0])
		}
	}
	if err := s.Decide(ctx, time.Now(), other, out); err != nil || !out[0].Allowed {
		t.Errorf("another key with Redis gone: got %+v, %v, want the fallback's budget", out[0], err)
	}
}
