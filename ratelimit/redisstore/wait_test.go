package redisstore

import (
	"context"
	"errors"
	"strconv"
	"strings"
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
	// Delays count from before the round trip and include it.
	near := func(got, want time.Duration) bool {
		return got > want-20*time.Millisecond && got <= want+10*time.Millisecond
	}

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

// TestDepartureAfterRoundTrip holds the server for 150ms while a queued
// request is decided: the script schedules it one interval after the
// request ahead, on the server's clock, and the request must not leave
// before that however long the round trip took.
func TestDepartureAfterRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addresses: []string{srv.Addr()}})
	// The interval is long beside the pause, so that a loaded machine
	// cannot stretch the second decision past the first one's slot.
	const interval = time.Second
	p := ratelimit.MustPolicy(ratelimit.Policy{Name: "trip", Algorithm: ratelimit.LeakyBucket, Limit: 1, Window: interval, Queue: 3})
	reqs := []ratelimit.Request{{Policy: p, Key: "k"}}
	out := make([]ratelimit.Decision, 1)
	before := time.Now()
	if err := s.Decide(context.Background(), before, reqs, out); err != nil || !out[0].Allowed || out[0].Delay != 0 {
		t.Fatalf("first request: got %+v, %v; want allowed to leave at once", out[0], err)
	}
	srv.Pause()
	resumed := make(chan struct{})
	go func() {
		defer close(resumed)
		time.Sleep(150 * time.Millisecond)
		srv.Resume()
	}()
	err := s.Decide(context.Background(), time.Now(), reqs, out)
	<-resumed
	if err != nil || !out[0].Allowed || out[0].Delay == 0 {
		t.Fatalf("second request: got %+v, %v; want queued", out[0], err)
	}
	// The first left no earlier than before; the second's slot is one
	// interval after it.
	if got := out[0].Departure.Sub(before); got < interval-time.Millisecond {
		t.Errorf("second request leaves %v after the first was decided, want at least %v", got, interval)
	}
	// Delay holds the round trip, and the request, the tail, still finds
	// its slot to give back when it gives up.
	next := func() int64 {
		v, _, _ := strings.Cut(srv.Do("GET", Key(s.prefix, reqs[0])), " ")
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("reading the bucket: %v", err)
		}
		return n
	}
	held := next()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Wait(cancelled, reqs[0], out[0]); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait: got %v, want context.Canceled", err)
	}
	if got, want := next(), held-interval.Microseconds(); got != want {
		t.Errorf("next departure after the tail gave up: got %d, want %d (one interval back)", got, want)
	}
}
