package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// TestWaitGiveBackOnServerTime checks, on the server's clock, that a
// waiting request that gives up returns its slot only while it is the last
// in the queue, and that an admitted one waits out its delay.
func TestWaitGiveBackOnServerTime(t *testing.T) {
	srv := redistest.Start(t)
	a := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: time.Second})
	b := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: time.Second})
	p := ratelimit.MustPolicy(ratelimit.Policy{Name: "wait", Algorithm: ratelimit.LeakyBucket, Limit: 10, Window: time.Second, Queue: 5})
	r := ratelimit.Request{Policy: p, Key: "k"}
	decide := func(s *Store) ratelimit.Decision {
		t.Helper()
		out := make([]ratelimit.Decision, 1)
		if err := s.Decide(context.Background(), time.Now(), []ratelimit.Request{r}, out); err != nil {
			t.Fatal(err)
		}
		if !out[0].Allowed {
			t.Fatalf("got rejected: %+v", out[0])
		}
		return out[0]
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	giveUp := func(s *Store, d ratelimit.Decision) {
		t.Helper()
		if err := s.Wait(cancelled, r, d); !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait: got %v, want context.Canceled", err)
		}
	}
	near := func(got, want time.Duration) bool { return got > want-20*time.Millisecond && got <= want }

	decide(a)       // leaves at once
	d2 := decide(b) // ~100ms
	d3 := decide(a) // ~200ms, the tail
	if !near(d3.Delay, 200*time.Millisecond) {
		t.Fatalf("third: got Delay %v, want about 200ms", d3.Delay)
	}
	giveUp(b, d2) // not the tail: keeps the schedule
	d4 := decide(b)
	if !near(d4.Delay, 300*time.Millisecond) {
		t.Fatalf("after a non-tail gave up: got Delay %v, want about 300ms", d4.Delay)
	}
	giveUp(b, d4) // the tail: its slot comes back
	d5 := decide(a)
	if !near(d5.Delay, 300*time.Millisecond) {
		t.Fatalf("after the tail gave up: got Delay %v, want about 300ms again", d5.Delay)
	}
	giveUp(a, d5)
	if d6 := decide(b); !near(d6.Delay, 300*time.Millisecond) {
		t.Fatalf("after the tail gave up again: got Delay %v, want about 300ms", d6.Delay)
	}

	start := time.Now()
	if err := a.Wait(context.Background(), r, d3); err != nil {
		t.Fatalf("Wait: got %v, want nil", err)
	}
	if time.Now().Before(d3.Departure) {
		t.Errorf("Wait returned %v after start, before the departure %v", time.Since(start), d3.Departure.Sub(start))
	}
}
