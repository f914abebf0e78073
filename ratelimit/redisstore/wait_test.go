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
	t.Run("queue", func(t *testing.T) {
		waitGiveBack(t, srv, ratelimit.MustPolicy(ratelimit.Policy{Name: "wait", Algorithm: ratelimit.LeakyBucket, Limit: 2, Window: time.Second, Queue: 5}))
	})
	// A max_wait that is no multiple of the interval makes the budget
	// whole, and Reset 0, a quarter interval before the outflow is idle:
	// the give-back finds the departure it wrote all the same.
	t.Run("max_wait", func(t *testing.T) {
		waitGiveBack(t, srv, ratelimit.MustPolicy(ratelimit.Policy{Name: "wait-max", Algorithm: ratelimit.LeakyBucket, Limit: 2, Window: time.Second, Queue: 5, MaxWait: 2250 * time.Millisecond}))
	})
}

func waitGiveBack(t *testing.T, srv *redistest.Server, p *ratelimit.Policy) {
	a := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: time.Second})
	b := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: time.Second})
	r := ratelimit.Request{Policy: p, Key: "k"}
	// first and firstDone bracket the first decision, made on the server
	// at some time between them: the script schedules the k-th place k
	// intervals after that. A Decision's Departure counts its delay from
	// the reply (see afterRoundTrip), so it lies at or after its slot and
	// at most the decision's own round trip plus the first's after it.
	// These bounds come from the round trips that actually took place, so
	// a loaded machine widens them only by what it delayed; the places
	// tested are a whole interval, 500ms, apart, and the give-ups reach
	// the server long before the departures they give up.
	var first, firstDone time.Time
	decide := func(s *Store) (ratelimit.Decision, time.Duration) {
		t.Helper()
		out := make([]ratelimit.Decision, 1)
		now := time.Now()
		if err := s.Decide(context.Background(), now, []ratelimit.Request{r}, out); err != nil {
			t.Fatal(err)
		}
		trip := time.Since(now)
		if !out[0].Allowed {
			t.Fatalf("got rejected: %+v", out[0])
		}
		if first.IsZero() {
			first, firstDone = now, now.Add(trip)
		}
		return out[0], trip
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	giveUp := func(s *Store, d ratelimit.Decision) {
		t.Helper()
		if err := s.Wait(cancelled, r, d); !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait: got %v, want context.Canceled", err)
		}
	}
	// place checks that d leaves at the k-th place of the schedule. The
	// store counts Departure from the now it was given, a moment before
	// its round trip began, so it may lie up to that moment before the
	// slot: trip bounds it.
	place := func(what string, d ratelimit.Decision, trip time.Duration, k int) {
		t.Helper()
		slot := time.Duration(k) * p.Interval()
		lo := first.Add(slot - trip)
		hi := firstDone.Add(slot + trip + time.Microsecond)
		if d.Departure.Before(lo) || d.Departure.After(hi) {
			t.Fatalf("%s: leaves %v after the first decision began, want place %d: between %v and %v",
				what, d.Departure.Sub(first), k, slot, hi.Sub(first))
		}
	}

	decide(a)           // leaves at once
	d2, _ := decide(b)  // place 1
	d3, t3 := decide(a) // place 2, the tail
	place("third", d3, t3, 2)
	giveUp(b, d2) // not the tail: keeps the schedule
	d4, t4 := decide(b)
	place("after a non-tail gave up", d4, t4, 3)
	giveUp(b, d4) // the tail: its slot comes back
	d5, t5 := decide(a)
	place("after the tail gave up", d5, t5, 3)
	giveUp(a, d5)
	d6, t6 := decide(b)
	place("after the tail gave up again", d6, t6, 3)

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
