package ratelimit

import (
	"context"
	"testing"
	"time"
)

// decideOne decides one request of key under p at now.
func decideOne(t *testing.T, m *MemoryStore, now time.Time, p *Policy, key string) Decision {
	t.Helper()
	out := make([]Decision, 1)
	if err := m.Decide(context.Background(), now, []Request{{Policy: p, Key: key}}, out); err != nil {
		t.Fatal(err)
	}
	return out[0]
}

// admitOne is decideOne for a request that must be admitted.
func admitOne(t *testing.T, m *MemoryStore, now time.Time, p *Policy, key string) Decision {
	t.Helper()
	d := decideOne(t, m, now, p, key)
	if !d.Allowed {
		t.Fatalf("rejected: %+v", d)
	}
	return d
}

// TestOldPolicyUnitSettles: a count_status request routed before a
// reload that changed its policy's settings, but decided after requests
// of the new configuration, takes its unit under its own policy; settled
// with that policy, its held token must be released, or the bucket stays a
// token short, and pinned, for good.
func TestOldPolicyUnitSettles(t *testing.T) {
	t.Parallel()
	for _, refund := range []bool{false, true} {
		m := NewMemoryStore(MemoryOptions{SweepInterval: -1})
		defer m.Close()
		old := MustPolicy(Policy{Name: "login", Algorithm: TokenBucket, Limit: 3, Window: time.Minute, Hold: true})
		cur := MustPolicy(Policy{Name: "login", Algorithm: TokenBucket, Limit: 2, Window: time.Minute, Hold: true})
		at := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
		decide := func(p *Policy) Decision { return decideOne(t, m, at, p, "u") }
		d := decide(cur) // the new configuration's first request
		m.Keep(context.Background(), at, []Request{{Policy: cur, Key: "u"}}, []Decision{d})
		d = decide(old) // routed before the reload, decided after it
		if !d.Allowed || d.Ticket.Hold == 0 {
			t.Fatalf("old request: got %+v, want a held unit", d)
		}
		settle := m.Keep
		if refund {
			settle = m.Refund
		}
		settle(context.Background(), at, []Request{{Policy: old, Key: "u"}}, []Decision{d})
		at = at.Add(24 * time.Hour)
		if p, _ := m.Peek(context.Background(), at, Request{Policy: cur, Key: "u"}); p.Remaining != 2 {
			t.Errorf("refund %v: a day after the old request was settled: got remaining %d, want the whole burst, 2 (its held token was never released)", refund, p.Remaining)
		}
		if n := m.Sweep(at); n != 1 {
			t.Errorf("refund %v: a day later the sweep removed %d buckets, want 1 (the bucket stays pinned by the held token)", refund, n)
		}
	}
}

// TestHeldUnitOfUntouchedBucketSettles: a held unit taken under the
// old settings, in a bucket that no request of the new configuration has
// touched (so it still counts the unit), must be released even though
// the new configuration decided other keys: otherwise the bucket is
// pinned with a held token until the key is seen again, which for a
// one-off key is never.
func TestHeldUnitOfUntouchedBucketSettles(t *testing.T) {
	t.Parallel()
	m := NewMemoryStore(MemoryOptions{SweepInterval: -1})
	defer m.Close()
	old := MustPolicy(Policy{Name: "login", Algorithm: TokenBucket, Limit: 3, Window: time.Minute, Hold: true})
	cur := MustPolicy(Policy{Name: "login", Algorithm: TokenBucket, Limit: 2, Window: time.Minute, Hold: true})
	at := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	decide := func(p *Policy, key string) Decision { return decideOne(t, m, at, p, key) }
	dy := decide(old, "y") // in flight at the reload
	dx := decide(cur, "x") // the table sees the new configuration
	m.Keep(context.Background(), at, []Request{{Policy: cur, Key: "x"}}, []Decision{dx})
	m.Keep(context.Background(), at, []Request{{Policy: old, Key: "y"}}, []Decision{dy})
	at = at.Add(24 * time.Hour)
	m.Sweep(at)
	if n := m.Len(); n != 0 {
		t.Errorf("a day after every unit was settled: got %d buckets left, want 0 (y's held token was never released, so it stays pinned)", n)
	}
}

// TestGiveUpAfterReloadKeepsSpacing: a leaky_bucket request decided
// under the old settings whose Wait starts after the table saw new ones
// must not give its slot back as if it were of the new schedule: two
// departures of the new schedule would coincide.
func TestGiveUpAfterReloadKeepsSpacing(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	m := NewMemoryStore(MemoryOptions{SweepInterval: -1, Clock: func() time.Time { return t0 }})
	defer m.Close()
	old := MustPolicy(Policy{Name: "q", Algorithm: LeakyBucket, Limit: 1, Window: 10 * time.Second, Queue: 5})
	cur := MustPolicy(Policy{Name: "q", Algorithm: LeakyBucket, Limit: 1, Window: time.Second, Queue: 20})
	decide := func(p *Policy) Decision { return admitOne(t, m, t0, p, "k") }
	decide(old)
	w := decide(old) // departs at t0+10s under the old schedule
	var last Decision
	for range 11 { // the new schedule: t0, t0+1s, ..., t0+10s
		last = decide(cur)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	m.Wait(ctx, Request{Policy: old, Key: "k"}, w) // gives up at once
	next := decide(cur)
	if gap := next.Departure.Sub(last.Departure); gap < time.Second {
		t.Errorf("after an old request gave up: next departure %v after the one before it, want at least the interval, 1s", gap)
	}
}

// TestUnitAfterChangeAndBackSettles: A -> B -> A. A request routed
// under the first A and decided after the second takes its unit from the
// bucket as the second A has it, and must settle there.
func TestUnitAfterChangeAndBackSettles(t *testing.T) {
	t.Parallel()
	m := NewMemoryStore(MemoryOptions{SweepInterval: -1})
	defer m.Close()
	a1 := MustPolicy(Policy{Name: "login", Algorithm: TokenBucket, Limit: 2, Window: time.Minute, Hold: true})
	b2 := MustPolicy(Policy{Name: "login", Algorithm: TokenBucket, Limit: 5, Window: time.Minute, Hold: true})
	a3 := MustPolicy(Policy{Name: "login", Algorithm: TokenBucket, Limit: 2, Window: time.Minute, Hold: true})
	at := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	for _, p := range []*Policy{b2, a3} { // each reload's first request, settled
		out := make([]Decision, 1)
		m.Decide(context.Background(), at, []Request{{Policy: p, Key: "u"}}, out)
		m.Refund(context.Background(), at, []Request{{Policy: p, Key: "u"}}, out)
	}
	out := make([]Decision, 1)
	m.Decide(context.Background(), at, []Request{{Policy: a1, Key: "u"}}, out)
	if !out[0].Allowed || out[0].Ticket.Hold == 0 {
		t.Fatalf("first-A request: got %+v, want a held unit", out[0])
	}
	m.Refund(context.Background(), at, []Request{{Policy: a1, Key: "u"}}, out)
	if p, _ := m.Peek(context.Background(), at, Request{Policy: a3, Key: "u"}); p.Remaining != 2 {
		t.Errorf("after the refund: got remaining %d, want 2 (the refund of a unit taken from this bucket was dropped)", p.Remaining)
	}
}

// TestHeldUnitSettlesAcrossTwoReloads: a held unit of a request routed
// before two reloads, the second leaving the settings as they are, must
// not leave its bucket a token short for good.
func TestHeldUnitSettlesAcrossTwoReloads(t *testing.T) {
	t.Parallel()
	m := NewMemoryStore(MemoryOptions{SweepInterval: -1})
	defer m.Close()
	v1 := MustPolicy(Policy{Name: "login", Algorithm: TokenBucket, Limit: 5, Window: time.Hour, Hold: true})
	v2 := MustPolicy(Policy{Name: "login", Algorithm: TokenBucket, Limit: 3, Window: time.Hour, Hold: true})
	v3 := MustPolicy(Policy{Name: "login", Algorithm: TokenBucket, Limit: 3, Window: time.Hour, Hold: true})
	at := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	decide := func(p *Policy) Decision { return decideOne(t, m, at, p, "u") }
	// The table sees the first reload.
	m.Refund(context.Background(), at, []Request{{Policy: v2, Key: "u"}}, []Decision{decide(v2)})
	held := decide(v1) // routed before it, decided after: with v2
	if held.Ticket.Hold == 0 {
		t.Fatal("the late request's unit is not held")
	}
	// The second reload, settings unchanged.
	m.Refund(context.Background(), at, []Request{{Policy: v3, Key: "u"}}, []Decision{decide(v3)})
	if err := m.Keep(context.Background(), at, []Request{{Policy: v1, Key: "u"}}, []Decision{held}); err != nil {
		t.Fatal(err)
	}
	at = at.Add(24 * time.Hour)
	if d, _ := m.Peek(context.Background(), at, Request{Policy: v3, Key: "u"}); d.Remaining != 3 {
		t.Errorf("a day later: got remaining %d, want the whole burst, 3: the hold was never ended", d.Remaining)
	}
}

// TestRefundAfterChangeAndBackGivesNothing: A -> B -> A. A unit taken
// under the first A and given back after the bucket was made afresh for B
// and again for the second A gives nothing to that fresh bucket, which
// never counted it: its window would admit limit + 1.
func TestRefundAfterChangeAndBackGivesNothing(t *testing.T) {
	t.Parallel()
	for _, alg := range []Algorithm{FixedWindow, SlidingWindowCounter, SlidingWindowLog, TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			a1 := MustPolicy(Policy{Name: "login", Algorithm: alg, Limit: 2, Window: time.Hour, Hold: true})
			b := MustPolicy(Policy{Name: "login", Algorithm: alg, Limit: 3, Window: time.Hour, Hold: true})
			a2 := MustPolicy(Policy{Name: "login", Algorithm: alg, Limit: 2, Window: time.Hour, Hold: true})
			m := NewMemoryStore(MemoryOptions{SweepInterval: -1})
			defer m.Close()
			inflight := admitOne(t, m, t0, a1, "alice") // its answer not yet known
			admitOne(t, m, t0.Add(time.Second), b, "alice")
			admitted := 0
			if decideOne(t, m, t0.Add(2*time.Second), a2, "alice").Allowed {
				admitted++
			}
			// The in-flight request is answered, not counted: given back.
			m.Refund(context.Background(), t0.Add(2*time.Second), []Request{{Policy: a1, Key: "alice"}}, []Decision{inflight})
			for range 3 {
				if decideOne(t, m, t0.Add(2*time.Second), a2, "alice").Allowed {
					admitted++
				}
			}
			if admitted > 2 {
				t.Errorf("under the second A (limit 2 per hour): got %d admitted, want at most 2", admitted)
			}
		})
	}
}

// TestRefundAfterUnchangedReloadGivesBack: a reload that keeps the
// settings keeps the bucket, so a unit taken before it is still given
// back, however many such reloads came between.
func TestRefundAfterUnchangedReloadGivesBack(t *testing.T) {
	t.Parallel()
	for _, alg := range []Algorithm{FixedWindow, SlidingWindowCounter, SlidingWindowLog, TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			v1 := MustPolicy(Policy{Name: "login", Algorithm: alg, Limit: 2, Window: time.Hour, Hold: true})
			v2 := MustPolicy(Policy{Name: "login", Algorithm: alg, Limit: 2, Window: time.Hour, Hold: true})
			v3 := MustPolicy(Policy{Name: "login", Algorithm: alg, Limit: 2, Window: time.Hour, Hold: true})
			m := NewMemoryStore(MemoryOptions{SweepInterval: -1})
			defer m.Close()
			inflight := admitOne(t, m, t0, v1, "alice")
			kept := admitOne(t, m, t0, v2, "alice")
			m.Keep(context.Background(), t0, []Request{{Policy: v2, Key: "alice"}}, []Decision{kept})
			m.Refund(context.Background(), t0, []Request{{Policy: v1, Key: "alice"}}, []Decision{inflight})
			if d, _ := m.Peek(context.Background(), t0, Request{Policy: v3, Key: "alice"}); d.Remaining != 1 {
				t.Errorf("after the refund: got remaining %d, want 1 (the unit of before the reloads was not given back)", d.Remaining)
			}
		})
	}
}
