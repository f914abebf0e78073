package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// waiting returns the departures of r's bucket's waiters, in queue order.
func waiting(m *MemoryStore, r Request) []time.Duration {
	h := m.hash(r.Policy, r.Key)
	s := m.shardOf(r.Policy, h)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.find(h, r.Policy, r.Key)
	if e == nil {
		return nil
	}
	defer e.unlock(false)
	if !e.waitedLocked() {
		return nil
	}
	var out []time.Duration
	for w := e.ext.wq.head; w != nil; w = w.next {
		out = append(out, time.Duration(w.dep))
	}
	return out
}

// waitFor polls until r's bucket has n waiters. Registration happens on
// the waiters' goroutines; this only waits for them to get there.
func waitFor(t *testing.T, m *MemoryStore, r Request, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(waiting(m, r)) != n {
		if time.Now().After(deadline) {
			t.Fatalf("got %d waiters, want %d", len(waiting(m, r)), n)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// TestWaitGiveUpMovesTheQueue queues five requests behind a sixth that
// leaves at once; the second waiter gives up, and the three behind it each
// leave one interval earlier than planned, in order, still spaced.
func TestWaitGiveUpMovesTheQueue(t *testing.T) {
	t.Parallel()
	const interval = 20 * time.Millisecond
	m := NewMemoryStore(MemoryOptions{SweepInterval: -1})
	defer m.Close()
	p := MustPolicy(Policy{Name: "lb", Algorithm: LeakyBucket, Limit: 50, Window: time.Second, Queue: 5})
	r := Request{Policy: p, Key: "k"}
	// The queue starts 200ms out, time enough for every waiter to be in
	// Wait before the first leaves even on a loaded machine.
	now := time.Now().Add(200 * time.Millisecond)
	out := make([]Decision, 1)
	m.Decide(context.Background(), now, []Request{r}, out) // leaves first, without waiting
	ds := make([]Decision, 5)
	for i := range ds {
		m.Decide(context.Background(), now, []Request{r}, out)
		ds[i] = out[0]
		if want := time.Duration(i+1) * interval; ds[i].Delay != want {
			t.Fatalf("waiter %d: got Delay %v, want %v", i+1, ds[i].Delay, want)
		}
	}
	ctxs := make([]context.Context, 5)
	cancels := make([]context.CancelFunc, 5)
	for i := range ctxs {
		ctxs[i], cancels[i] = context.WithCancel(context.Background())
		defer cancels[i]()
	}
	type result struct {
		err  error
		left time.Time
	}
	results := make([]result, 5)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range ds {
		wg.Go(func() {
			err := m.Wait(ctxs[i], r, ds[i])
			mu.Lock()
			results[i] = result{err, time.Now()}
			mu.Unlock()
		})
	}
	waitFor(t, m, r, 5)
	cancels[1]()
	waitFor(t, m, r, 4)
	cancelled := time.Now()

	// The queue moved at once: the exact departures are in the store.
	got := waiting(m, r)
	base := time.Duration(now.UnixNano())
	want := []time.Duration{base + interval, base + 2*interval, base + 3*interval, base + 4*interval}
	for i := range want {
		if i >= len(got) || got[i] != want[i] {
			t.Fatalf("departures after the give-up: got %v, want %v (offsets from the decision)", offsets(got, base), offsets(want, base))
		}
	}
	// The bucket's next departure moved too: a new request takes the
	// place the last waiter left, not one behind it.
	m.Decide(context.Background(), now, []Request{r}, out)
	if got, want := out[0].Delay, 5*interval; got != want {
		t.Errorf("new request after the give-up: got Delay %v, want %v", got, want)
	}
	wg.Wait()

	if !errors.Is(results[1].err, context.Canceled) {
		t.Errorf("cancelled waiter: got %v, want %v", results[1].err, context.Canceled)
	}
	// Promptly: well before its own departure, with room for a loaded
	// machine's scheduling.
	if took := results[1].left.Sub(cancelled); took > 5*interval {
		t.Errorf("cancelled waiter returned %v after its cancel, want promptly", took)
	}
	for _, i := range []int{0, 2, 3, 4} {
		if results[i].err != nil {
			t.Errorf("waiter %d: got %v, want nil", i+1, results[i].err)
		}
		// Timers never fire early; the moved ones leave one interval
		// before their original plan.
		planned := ds[i].Departure
		if i > 1 {
			planned = planned.Add(-interval)
		}
		if early := planned.Sub(results[i].left); early > time.Millisecond {
			t.Errorf("waiter %d left %v before its departure, want at or after it", i+1, early)
		}
	}
	// Order preserved and spacing kept. Timers never fire early but may
	// fire late on a loaded machine: a waiter that left L late can be
	// followed by the next one interval-L later, and only one left less
	// than an interval late is sure to leave first.
	planned := func(i int) time.Time {
		if i > 1 {
			return ds[i].Departure.Add(-interval)
		}
		return ds[i].Departure
	}
	for _, pair := range [][2]int{{0, 2}, {2, 3}, {3, 4}} {
		a, b := pair[0], pair[1]
		late := results[a].left.Sub(planned(a))
		gap := results[b].left.Sub(results[a].left)
		if late < interval && gap < 0 {
			t.Errorf("waiter %d left %v before waiter %d, want after", b+1, -gap, a+1)
		}
		if least := interval - late - time.Millisecond; gap < least {
			t.Errorf("waiters %d and %d left %v apart (the first %v late), want at least %v", a+1, b+1, gap, late, least)
		}
	}
}

func offsets(ds []time.Duration, base time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d - base
	}
	return out
}

// TestWaitUsesClock checks that Wait arms its timer from the store's
// clock, not the machine's: a clock running ahead lets it leave at once.
func TestWaitUsesClock(t *testing.T) {
	t.Parallel()
	m := NewMemoryStore(MemoryOptions{SweepInterval: -1, Clock: func() time.Time { return t0.Add(time.Hour) }})
	defer m.Close()
	p := MustPolicy(Policy{Name: "lb", Algorithm: LeakyBucket, Limit: 1, Window: time.Minute, Queue: 1})
	r := Request{Policy: p, Key: "k"}
	out := make([]Decision, 1)
	m.Decide(context.Background(), t0, []Request{r}, out)
	m.Decide(context.Background(), t0, []Request{r}, out)
	if out[0].Delay != time.Minute {
		t.Fatalf("got Delay %v, want 1m", out[0].Delay)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.Wait(ctx, r, out[0]); err != nil {
		t.Errorf("Wait with the clock an hour past the departure: got %v, want nil", err)
	}
	if got := waiting(m, r); got != nil {
		t.Errorf("after Wait: got waiters %v, want none (the list exists only while requests wait)", got)
	}
}

// TestWaitGiveUpAfterReset checks that a waiter whose bucket was reset by
// a settings change leaves the new schedule alone when it gives up.
func TestWaitGiveUpAfterReset(t *testing.T) {
	t.Parallel()
	m := NewMemoryStore(MemoryOptions{SweepInterval: -1})
	defer m.Close()
	p := MustPolicy(Policy{Name: "lb", Algorithm: LeakyBucket, Limit: 1, Window: time.Minute, Queue: 2})
	r := Request{Policy: p, Key: "k"}
	now := time.Now()
	out := make([]Decision, 1)
	m.Decide(context.Background(), now, []Request{r}, out)
	m.Decide(context.Background(), now, []Request{r}, out)
	d := out[0]
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Wait(ctx, r, d) }()
	waitFor(t, m, r, 1)
	q := MustPolicy(Policy{Name: "lb", Algorithm: LeakyBucket, Limit: 2, Window: time.Minute, Queue: 4})
	// The new schedule starts an interval after the waiter: now+90s.
	m.Decide(context.Background(), now, []Request{{Policy: q, Key: "k"}}, out)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want %v", err, context.Canceled)
	}
	m.Decide(context.Background(), now, []Request{{Policy: q, Key: "k"}}, out)
	if got, want := out[0].Delay, 120*time.Second; got != want {
		t.Errorf("second request under the new settings: got Delay %v, want %v", got, want)
	}
}

// TestWaitGiveUpLeavesHoleForUnseen checks the moment between Decide and
// Wait: a request admitted but not yet in Wait holds a departure the queue
// cannot see, so a give-up ahead of it moves nothing and the next request
// is scheduled after it, not on top of it.
func TestWaitGiveUpLeavesHoleForUnseen(t *testing.T) {
	t.Parallel()
	m := NewMemoryStore(MemoryOptions{SweepInterval: -1})
	defer m.Close()
	p := MustPolicy(Policy{Name: "lb", Algorithm: LeakyBucket, Limit: 1, Window: time.Minute, Queue: 5})
	r := Request{Policy: p, Key: "k"}
	now := time.Now()
	out := make([]Decision, 1)
	m.Decide(context.Background(), now, []Request{r}, out) // leaves at once
	m.Decide(context.Background(), now, []Request{r}, out)
	a := out[0] // waits 1m, and gives up
	m.Decide(context.Background(), now, []Request{r}, out)
	b := out[0] // waits 2m, not yet in Wait
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := m.Wait(ctx, r, a); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want %v", err, context.Canceled)
	}
	m.Decide(context.Background(), now, []Request{r}, out)
	if out[0].Delay <= b.Delay {
		t.Errorf("request after the give-up: got Delay %v, want after %v (the unseen request's)", out[0].Delay, b.Delay)
	}
}

// TestWaitMassGiveUp cancels fifty waiters at once, in whatever order their
// goroutines get the lock: every place goes back, so the next request
// leaves right after the one that never waited.
func TestWaitMassGiveUp(t *testing.T) {
	t.Parallel()
	const n = 50
	m := NewMemoryStore(MemoryOptions{SweepInterval: -1})
	defer m.Close()
	p := MustPolicy(Policy{Name: "lb", Algorithm: LeakyBucket, Limit: 1, Window: time.Minute, Queue: n})
	r := Request{Policy: p, Key: "k"}
	now := time.Now()
	out := make([]Decision, 1)
	m.Decide(context.Background(), now, []Request{r}, out) // leaves at once
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		m.Decide(context.Background(), now, []Request{r}, out)
		d := out[0]
		wg.Go(func() { errs[i] = m.Wait(ctx, r, d) })
	}
	waitFor(t, m, r, n)
	cancel()
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("waiter %d: got %v, want %v", i, err, context.Canceled)
		}
	}
	m.Decide(context.Background(), now, []Request{r}, out)
	if got, want := out[0].Delay, time.Minute; got != want {
		t.Errorf("request after every waiter gave up: got Delay %v, want %v", got, want)
	}
}

// TestWaitLateGiveUpKeepsTheSchedule holds the shard's lock while a waiter
// gives up and the one behind it reaches its departure, then lets both
// through, the give-up first. The freed slot has passed by then, and the
// one behind has left on time: handing the slot down would move the
// bucket's next departure onto the one that just left, and the next
// request would leave with it.
func TestWaitLateGiveUpKeepsTheSchedule(t *testing.T) {
	t.Parallel()
	const interval = 20 * time.Millisecond
	var clock atomic.Int64 // Unix ns, moved by hand; timers still run on real time
	clock.Store(t0.UnixNano())
	m := NewMemoryStore(MemoryOptions{SweepInterval: -1, Clock: func() time.Time { return time.Unix(0, clock.Load()) }})
	defer m.Close()
	p := MustPolicy(Policy{Name: "lb", Algorithm: LeakyBucket, Limit: 50, Window: time.Second, Queue: 5})
	r := Request{Policy: p, Key: "k"}
	decide := func(at time.Duration) Decision {
		out := make([]Decision, 1)
		m.Decide(context.Background(), t0.Add(at), []Request{r}, out)
		return out[0]
	}
	decide(0) // leaves at once
	a, b := decide(0), decide(0)
	if a.Delay != interval || b.Delay != 2*interval {
		t.Fatalf("got delays %v and %v, want %v and %v", a.Delay, b.Delay, interval, 2*interval)
	}
	ctxA, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	var wg sync.WaitGroup
	wg.Go(func() { m.Wait(ctxA, r, a) })
	wg.Go(func() { m.Wait(context.Background(), r, b) })
	waitFor(t, m, r, 2)

	h := m.hash(p, r.Key)
	s := m.shardOf(p, h)
	s.mu.Lock()
	e := s.find(h, p, r.Key)
	wa, wb := e.ext.wq.head, e.ext.wq.head.next
	e.unlock(false)
	cancelA()
	// Past b's departure; b's timer fires on real time, about 40ms on.
	clock.Store(t0.Add(2*interval + 10*time.Millisecond).UnixNano())
	deadline := time.Now().Add(5 * time.Second)
	for !wa.leaving.Load() || !wb.leaving.Load() {
		if time.Now().After(deadline) {
			s.mu.Unlock()
			t.Fatal("the waiters did not stop waiting")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(5 * time.Millisecond) // both queue on the lock, a first
	s.mu.Unlock()
	wg.Wait()

	// b's departure, 2 intervals in, was kept; the next leaves one
	// interval after it, not at once.
	if got, want := decide(2*interval+10*time.Millisecond).Delay, 10*time.Millisecond; got != want {
		t.Errorf("next request 50ms in: got Delay %v, want %v (to leave at 60ms, one interval after the last to leave)", got, want)
	}
}

// TestWaitLeavesInArrivalOrder: when two departures are both past by the
// time their goroutines run (a stalled process wakes up), the one behind
// does not overtake the one ahead, whose goroutine has not left yet; it
// leaves once that one has. So too after a reset has ended the schedule
// both were decided on: the requests already queued on it still leave in
// arrival order (SPEC §3).
func TestWaitLeavesInArrivalOrder(t *testing.T) {
	t.Parallel()
	for _, reset := range []bool{false, true} {
		t.Run(fmt.Sprintf("reset %v", reset), func(t *testing.T) {
			t.Parallel()
			var clock atomic.Int64 // offset from t0
			m := NewMemoryStore(MemoryOptions{SweepInterval: -1, Clock: func() time.Time { return t0.Add(time.Duration(clock.Load())) }})
			defer m.Close()
			p := MustPolicy(Policy{Name: "lb", Algorithm: LeakyBucket, Limit: 1, Window: time.Minute, Queue: 2})
			r := Request{Policy: p, Key: "k"}
			ds := make([]Decision, 3)
			for i := range ds {
				out := make([]Decision, 1)
				m.Decide(context.Background(), t0, []Request{r}, out)
				ds[i] = out[0]
			}
			// The first waiter's timer is armed a minute out: its
			// goroutine is the late one. The clock then runs past both
			// departures, so the second's timer fires at once.
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			first := make(chan error, 1)
			go func() { first <- m.Wait(ctx, r, ds[1]) }()
			waitFor(t, m, r, 1)
			if reset {
				if err := m.Reset(context.Background(), r); err != nil {
					t.Fatal(err)
				}
			}
			clock.Store(int64(time.Hour))
			second := make(chan error, 1)
			go func() { second <- m.Wait(context.Background(), r, ds[2]) }()
			select {
			case err := <-second:
				t.Fatalf("the second waiter left (%v) while the first, ahead of it, still waited", err)
			case <-time.After(200 * time.Millisecond):
			}
			// The first gives up: the second, due, leaves now.
			cancel()
			if err := <-first; !errors.Is(err, context.Canceled) {
				t.Fatalf("first waiter: got %v, want %v", err, context.Canceled)
			}
			select {
			case err := <-second:
				if err != nil {
					t.Errorf("second waiter: got %v, want nil", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the second waiter did not leave within 5s of the first leaving")
			}
			if got := waiting(m, r); got != nil {
				t.Errorf("after both left: got waiters %v, want none", got)
			}
		})
	}
}

// TestWaitCurrentDoesNotWaitForALaterOldOne: a request decided before a
// reset but waiting only after it keeps its departure on the old schedule,
// which may lie past the current schedule's once give-ups move that one
// earlier. A current waiter then due does not wait for that old one
// listed ahead of it, whose departure is later; it does wait for an old
// one with an earlier departure, and leaves once that one has.
func TestWaitCurrentDoesNotWaitForALaterOldOne(t *testing.T) {
	t.Parallel()
	var clock atomic.Int64 // offset from t0
	m := NewMemoryStore(MemoryOptions{SweepInterval: -1, Clock: func() time.Time { return t0.Add(time.Duration(clock.Load())) }})
	defer m.Close()
	p := MustPolicy(Policy{Name: "lb", Algorithm: LeakyBucket, Limit: 1, Window: time.Minute, Queue: 4})
	r := Request{Policy: p, Key: "k"}
	decide := func() Decision {
		out := make([]Decision, 1)
		m.Decide(context.Background(), t0, []Request{r}, out)
		return out[0]
	}
	decide() // leaves at once
	d1, _, d3 := decide(), decide(), decide()
	bg := context.Background()
	ctx1, cancel1 := context.WithCancel(bg)
	defer cancel1()
	first := make(chan error, 1)
	go func() { first <- m.Wait(ctx1, r, d1) }() // +1m, old once reset
	waitFor(t, m, r, 1)
	if err := m.Reset(bg, r); err != nil {
		t.Fatal(err)
	}
	x, y, z := decide(), decide(), decide() // the current schedule: +2m, +3m, +4m
	ctxX, cancelX := context.WithCancel(bg)
	ctxY, cancelY := context.WithCancel(bg)
	defer cancelX()
	defer cancelY()
	done := make(chan error, 3)
	go func() { done <- m.Wait(ctxX, r, x) }()
	go func() { done <- m.Wait(ctxY, r, y) }()
	last := make(chan error, 1)
	go func() { last <- m.Wait(bg, r, z) }()
	waitFor(t, m, r, 4)
	old := make(chan error, 1)
	ctxO, cancelO := context.WithCancel(bg)
	defer cancelO()
	go func() { old <- m.Wait(ctxO, r, d3) }() // +3m, old: decided before the reset
	waitFor(t, m, r, 5)
	// Just before +2m, X and Y give up: Z moves to +2m, ahead of the
	// late old one at +3m, and its timer fires in a millisecond.
	clock.Store(int64(2*time.Minute - time.Millisecond))
	cancelX()
	<-done
	cancelY()
	<-done
	select {
	case err := <-last:
		t.Fatalf("the current waiter left (%v) while the old one ahead of it, due earlier, still waited", err)
	case <-time.After(200 * time.Millisecond):
	}
	clock.Store(int64(2 * time.Minute))
	cancel1()
	<-first
	select {
	case err := <-last:
		if err != nil {
			t.Errorf("current waiter: got %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the current waiter, due, still waits for the old one due after it")
	}
	cancelO()
	<-old
}
