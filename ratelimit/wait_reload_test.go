package ratelimit

import (
	"context"
	"testing"
	"time"
)

// TestGiveUpAfterResetKeepsSpacing: a leaky_bucket request decided
// before a Reset gives up after it. Its slot belongs to the wiped
// schedule; handed to the new one, two departures would coincide.
func TestGiveUpAfterResetKeepsSpacing(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	m := NewMemoryStore(MemoryOptions{SweepInterval: -1, Clock: func() time.Time { return t0 }})
	defer m.Close()
	p := MustPolicy(Policy{Name: "q", Algorithm: LeakyBucket, Limit: 1, Window: time.Second, Queue: 5})
	r := Request{Policy: p, Key: "k"}
	decide := func() Decision { return admitOne(t, m, t0, p, "k") }
	decide()
	w := decide() // t0+1s
	if err := m.Reset(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	decide()         // t0
	last := decide() // t0+1s, admitted, not in Wait yet
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	m.Wait(ctx, r, w) // gives up at once
	next := decide()
	if gap := next.Departure.Sub(last.Departure); gap < time.Second {
		t.Errorf("after a request of before the reset gave up: next departure %v after the one before it, want at least the interval, 1s", gap)
	}
}

// TestOlderNonLeakyPolicyGetsNoDelay: a reload turns a token_bucket into
// a leaky_bucket. A request routed before it (its route waits on no
// leaky_bucket limit) must be decided with its own policy, never handed a
// Delay it would not wait out.
func TestOlderNonLeakyPolicyGetsNoDelay(t *testing.T) {
	t.Parallel()
	m := NewMemoryStore(MemoryOptions{SweepInterval: -1})
	defer m.Close()
	old := MustPolicy(Policy{Name: "api", Algorithm: TokenBucket, Limit: 10, Window: time.Second})
	cur := MustPolicy(Policy{Name: "api", Algorithm: LeakyBucket, Limit: 1, Window: time.Second, Queue: 5})
	at := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	out := make([]Decision, 1)
	m.Decide(context.Background(), at, []Request{{Policy: cur, Key: "k"}}, out) // departs at once
	m.Decide(context.Background(), at, []Request{{Policy: old, Key: "k"}}, out)
	if out[0].Allowed && out[0].Delay > 0 {
		t.Errorf("request of a token_bucket policy: got Delay %v, which its route never waits out (a slot of the queue taken, the request sent at once)", out[0].Delay)
	}
}

// TestOldWaiterNotCountedInNewSchedule: a settings change keeps the
// requests waiting under the old settings. A new-schedule request gives up
// with an old waiter behind it (one that reached Wait only after the
// reload, so the new schedule did not start after it) and an admitted
// new-schedule request not yet in Wait; were the old waiter counted as a
// departure of the new schedule, the line would move, and the next
// departure would land on the unseen request's.
func TestOldWaiterNotCountedInNewSchedule(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	m := NewMemoryStore(MemoryOptions{SweepInterval: -1, Clock: func() time.Time { return t0 }})
	defer m.Close()
	a := MustPolicy(Policy{Name: "q", Algorithm: LeakyBucket, Limit: 2, Window: 13 * time.Second, Queue: 5})
	b := MustPolicy(Policy{Name: "q", Algorithm: LeakyBucket, Limit: 1, Window: time.Second, Queue: 10})
	decide := func(p *Policy) Decision { return admitOne(t, m, t0, p, "k") }
	ra := Request{Policy: a, Key: "k"}
	decide(a)
	aw := decide(a) // t0+6.5s under the old settings, not in Wait yet
	var w, x Decision
	for i := range 7 { // the new schedule: t0 .. t0+6s
		d := decide(b)
		switch i {
		case 0: // the reload is seen; now aw waits
			actx, acancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- m.Wait(actx, ra, aw) }()
			defer func() { acancel(); <-done }()
			waitFor(t, m, ra, 1)
		case 5:
			w = d // t0+5s: gives up
		case 6:
			x = d // t0+6s: admitted, not in Wait yet
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	m.Wait(ctx, Request{Policy: b, Key: "k"}, w)
	next := decide(b)
	if gap := next.Departure.Sub(x.Departure); gap < time.Second {
		t.Errorf("after a give-up with an old-settings waiter behind it: next departure %v after the unseen request's, want at least the interval, 1s", gap)
	}
}

// TestNewScheduleStartsAfterOldWaiters: SPEC §3, leaky_bucket requests
// leave at most one per interval, in arrival order. Three requests wait
// when a reload changes the policy, or an admin resets the bucket; a
// request decided after it must leave after all three, an interval of
// the new settings after the last, not at once beside them.
func TestNewScheduleStartsAfterOldWaiters(t *testing.T) {
	t.Parallel()
	a := MustPolicy(Policy{Name: "q", Algorithm: LeakyBucket, Limit: 1, Window: 10 * time.Second, Queue: 5})
	b := MustPolicy(Policy{Name: "q", Algorithm: LeakyBucket, Limit: 1, Window: 20 * time.Second, Queue: 5})
	for _, tc := range []struct {
		name  string
		after *Policy // the policy of the requests after the change
		// change reloads (nothing to do: deciding with b is the
		// reload) or resets the bucket.
		change func(m *MemoryStore) error
	}{
		{"reload", b, func(*MemoryStore) error { return nil }},
		{"reset", a, func(m *MemoryStore) error { return m.Reset(context.Background(), Request{Policy: a, Key: "k"}) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The clock stands still: the waiters' timers, seconds
			// away, never fire during the test.
			m := NewMemoryStore(MemoryOptions{SweepInterval: -1, Clock: func() time.Time { return t0 }})
			defer m.Close()
			r := Request{Policy: a, Key: "k"}
			admitOne(t, m, t0, a, "k") // leaves at once
			ctx, cancel := context.WithCancel(context.Background())
			var done []chan error
			defer func() {
				cancel()
				for _, c := range done {
					<-c
				}
			}()
			var last Decision
			for i := range 3 { // t0+10s, t0+20s, t0+30s
				last = admitOne(t, m, t0, a, "k")
				c := make(chan error, 1)
				done = append(done, c)
				go func() { c <- m.Wait(ctx, r, last) }()
				waitFor(t, m, r, i+1)
			}
			if err := tc.change(m); err != nil {
				t.Fatal(err)
			}
			next := admitOne(t, m, t0, tc.after, "k")
			if got, want := t0.Add(next.Delay), last.Departure.Add(tc.after.Interval()); got.Before(want) {
				t.Errorf("first request after the %s: got departure t0+%v, want no earlier than t0+%v (an interval after the last waiting request's, t0+%v)",
					tc.name, got.Sub(t0), want.Sub(t0), last.Departure.Sub(t0))
			}
		})
	}
}

// TestWaiterOfChangedAndRevertedSettingsIsOld: a request decided before
// a reload that changes its leaky_bucket policy and one that changes it
// back, which starts waiting only after both, belongs to neither new
// schedule though its settings equal the last one's: its give-up hands
// its place to no one, or the next request would leave together with one
// already admitted.
func TestWaiterOfChangedAndRevertedSettingsIsOld(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	m := NewMemoryStore(MemoryOptions{SweepInterval: -1, Clock: func() time.Time { return t0 }})
	defer m.Close()
	a := MustPolicy(Policy{Name: "q", Algorithm: LeakyBucket, Limit: 1, Window: 10 * time.Second, Queue: 5})
	b := MustPolicy(Policy{Name: "q", Algorithm: LeakyBucket, Limit: 1, Window: 20 * time.Second, Queue: 5})
	back := MustPolicy(Policy{Name: "q", Algorithm: LeakyBucket, Limit: 1, Window: 10 * time.Second, Queue: 5})
	decide := func(p *Policy) Decision { return admitOne(t, m, t0, p, "k") }
	decide(a)
	aw := decide(a) // t0+10s, not in Wait yet
	decide(b)       // the first reload
	decide(back)    // and back: a fresh schedule, leaving at t0
	x := decide(back)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	m.Wait(ctx, Request{Policy: a, Key: "k"}, aw)
	next := decide(back)
	if gap := next.Departure.Sub(x.Departure); gap < 10*time.Second {
		t.Errorf("after the give-up of a request of the first schedule: next departure %v after the one before, want the interval, 10s", gap)
	}
}
