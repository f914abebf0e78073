package ratelimit

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// spendPolicy is a policy of algorithm a with a budget of five an hour.
func spendPolicy(name string, a Algorithm) *Policy {
	p := Policy{Name: name, Algorithm: a, Limit: 5, Window: time.Hour}
	if a == LeakyBucket {
		p.Queue = 4 // one leaves at once, four wait: five in all
	}
	return MustPolicy(p)
}

// spend takes the whole budget of key's bucket at now and checks that the
// next request is rejected.
func spend(t *testing.T, m *MemoryStore, p *Policy, now time.Time, key string) {
	t.Helper()
	out := make([]Decision, 1)
	r := []Request{{Policy: p, Key: key}}
	for i := range p.Capacity() {
		if err := m.Decide(context.Background(), now, r, out); err != nil {
			t.Fatal(err)
		}
		if !out[0].Allowed {
			t.Fatalf("spending %s: request %d got rejected, want allowed", key, i+1)
		}
	}
	if m.Decide(context.Background(), now, r, out); out[0].Allowed {
		t.Fatalf("spent %s: got allowed, want rejected", key)
	}
}

// TestSpentBudgetSurvivesFlood spends a bucket of every algorithm, floods
// the store with new keys, on another policy and on the bucket's own, and
// checks that the budget is still spent: the flood on another policy
// evicts nothing of it, and on its own policy it evicts the bucket, which
// comes back no fuller than it left. Against a store that saw no flood,
// it admits no more at any later time until both are whole again, and
// token_bucket and leaky_bucket come back exactly as they left.
func TestSpentBudgetSurvivesFlood(t *testing.T) {
	t.Parallel()
	for _, a := range Algorithms {
		for _, flood := range []string{"other policy", "same policy"} {
			t.Run(a.String()+"/"+flood, func(t *testing.T) {
				t.Parallel()
				m := NewMemoryStore(MemoryOptions{MaxKeys: 2000, SweepInterval: -1})
				defer m.Close()
				ref := NewMemoryStore(MemoryOptions{SweepInterval: -1})
				defer ref.Close()
				p := spendPolicy("otp", a)
				spend(t, m, p, t0, "victim")
				spend(t, ref, p, t0, "victim")

				junk := p
				if flood == "other policy" {
					junk = spendPolicy("junk", FixedWindow)
				}
				ctx := context.Background()
				out := make([]Decision, 1)
				// Which bucket the clock hand takes depends on the
				// per-process hash seed: a flood on the same policy goes
				// on until the victim is gone.
				for i := 0; i < 5000 || flood == "same policy" && i < 50000 && tracked(m, p, "victim"); i++ {
					now := t0.Add(time.Second + time.Duration(i)*time.Millisecond)
					m.Decide(ctx, now, []Request{{Policy: junk, Key: "junk-" + strconv.Itoa(i)}}, out)
				}
				switch kept := tracked(m, p, "victim"); {
				case flood == "other policy" && !kept:
					t.Fatal("victim: got evicted by a flood on another policy, want kept")
				case flood == "same policy" && kept:
					t.Fatal("victim: got kept, want evicted by the flood (the case under test)")
				}

				after := t0.Add(time.Minute)
				for _, at := range []time.Duration{0, 11 * time.Minute, 30 * time.Minute, 59 * time.Minute, 61 * time.Minute, 119 * time.Minute, 121 * time.Minute} {
					now := after.Add(at)
					r := Request{Policy: p, Key: "victim"}
					got, _ := m.Peek(ctx, now, r)
					want, _ := ref.Peek(ctx, now, r)
					if got.Remaining > want.Remaining {
						t.Errorf("at t0+%v: got %d remaining, want at most %d (the bucket as it left)", now.Sub(t0), got.Remaining, want.Remaining)
					}
					if (a == TokenBucket || a == LeakyBucket) && got != want {
						t.Errorf("at t0+%v: got %+v, want %+v (exactly as it left)", now.Sub(t0), got, want)
					}
				}
				if m.Decide(ctx, after, []Request{{Policy: p, Key: "victim"}}, out); out[0].Allowed {
					t.Errorf("at t0+1m after the flood: got allowed, want rejected (budget spent)")
				}
				// Whole again once the evicted bucket would have been idle.
				if m.Decide(ctx, t0.Add(3*time.Hour), []Request{{Policy: p, Key: "victim"}}, out); !out[0].Allowed {
					t.Errorf("at t0+3h: got rejected, want allowed")
				}
				checkKeys(t, m)
			})
		}
	}
}

// checkKeys checks that Keys counts, for every policy, the buckets its
// tables hold.
func checkKeys(t *testing.T, m *MemoryStore) {
	t.Helper()
	keys := m.Keys()
	for name, pt := range *m.tables.Load() {
		held := 0
		for i := range pt.shards {
			s := &pt.shards[i]
			s.mu.Lock()
			for j := range s.tab.Load().marks {
				if s.tab.Load().marks[j] != 0 {
					held++
				}
			}
			s.mu.Unlock()
		}
		if got := keys[name]; got != int64(held) {
			t.Errorf("%s: got Keys %d, want %d (buckets in its tables)", name, got, held)
		}
	}
}

// TestEvictionTakesIdleFirst fills a shard with live buckets and then with
// idle ones, more recently used: new keys take the idle buckets' room,
// not the least recently used live ones.
func TestEvictionTakesIdleFirst(t *testing.T) {
	t.Parallel()
	m := NewMemoryStore(MemoryOptions{MaxKeys: 64, SweepInterval: -1})
	defer m.Close()
	// Five tokens an hour: one taken is back after 12 minutes, all five
	// after an hour.
	p := MustPolicy(Policy{Name: "tb", Algorithm: TokenBucket, Limit: 5, Window: time.Hour})
	for i := range 32 {
		for range 5 {
			fill(t, m, p, t0, "live"+strconv.Itoa(i))
		}
	}
	for i := range 32 {
		fill(t, m, p, t0.Add(time.Minute), "idle"+strconv.Itoa(i))
	}
	later := t0.Add(20 * time.Minute)
	for i := range 32 {
		fill(t, m, p, later, "new"+strconv.Itoa(i))
	}
	for i := range 32 {
		if k := "live" + strconv.Itoa(i); !tracked(m, p, k) {
			t.Errorf("%s: got evicted, want kept while idle buckets could go", k)
		}
	}
	if got, want := m.Len(), 64; got != want {
		t.Errorf("got Len %d, want %d", got, want)
	}
}

// TestEvictedRecordNeverForgetsEarly notes many more evicted buckets than
// a small record has ways: whatever collides, every bucket's entry lasts
// at least until its own time, and a bucket the record never saw in a
// set without collisions is not taken for one.
func TestEvictedRecordNeverForgetsEarly(t *testing.T) {
	t.Parallel()
	p := spendPolicy("otp", SlidingWindowLog)
	rng := rand.New(rand.NewPCG(5, 6))
	const now = int64(1_000_000)
	r := newEvictedRecord(64)
	noted := map[uint64]int64{}
	for range 1000 {
		h := rng.Uint64()&hashMask | hashSet
		until := now + 1 + rng.Int64N(1000)
		r.note(p, h, until, now)
		noted[h] = max(noted[h], until)
	}
	for h, until := range noted {
		for _, at := range []int64{now, until - 1} {
			if got := r.take(p, h, at, false); got < until {
				t.Fatalf("hash %x at %d: got until %d, want at least %d", h, at, got, until)
			}
		}
	}

	// A set with room keeps hashes apart.
	r = newEvictedRecord(4)
	r.note(p, 8|hashSet, now+10, now)
	if got := r.take(p, 16|hashSet, now, false); got != 0 {
		t.Errorf("another hash: got until %d, want 0", got)
	}
	if got := r.take(p, 8|hashSet, now, true); got != now+10 {
		t.Errorf("noted hash: got until %d, want %d", got, now+10)
	}
	if got := r.take(p, 8|hashSet, now, false); got != 0 {
		t.Errorf("after take with forget: got until %d, want 0", got)
	}
	// Past its time an entry is gone, and its way free again.
	r.note(p, 8|hashSet, now+10, now)
	if got := r.take(p, 8|hashSet, now+10, false); got != 0 {
		t.Errorf("at its time: got until %d, want 0", got)
	}
	// Entries noted under other settings no longer count.
	r.note(p, 8|hashSet, now+10, now)
	q := spendPolicy("otp", FixedWindow)
	if got := r.take(q, 8|hashSet, now, false); got != 0 {
		t.Errorf("after a settings change: got until %d, want 0", got)
	}
}

// TestRestoredBucketNoFuller evicts buckets of every algorithm in random
// states and checks each against the same bucket kept in a store without
// a bound: at every later time it admits no more.
func TestRestoredBucketNoFuller(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, a := range Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			t.Parallel()
			p := MustPolicy(Policy{Name: "p", Algorithm: a, Limit: 4, Window: time.Minute, Queue: map[bool]int64{true: 3}[a == LeakyBucket]})
			rng := rand.New(rand.NewPCG(uint64(a), 7))
			for round := range 50 {
				m := NewMemoryStore(MemoryOptions{MaxKeys: 8, SweepInterval: -1})
				ref := NewMemoryStore(MemoryOptions{SweepInterval: -1})
				r := []Request{{Policy: p, Key: "k"}}
				out := make([]Decision, 1)
				now := t0.Add(time.Duration(rng.Int64N(int64(time.Minute))))
				for range rng.IntN(8) {
					now = now.Add(time.Duration(rng.Int64N(int64(20 * time.Second))))
					m.Decide(ctx, now, r, out)
					ref.Decide(ctx, now, r, out)
				}
				// Many more keys than the bound: the hand gets to "k".
				for i := range 64 {
					m.Decide(ctx, now.Add(time.Duration(i)*time.Millisecond), []Request{{Policy: p, Key: "f" + strconv.Itoa(i)}}, out)
				}
				if tracked(m, p, "k") {
					t.Fatalf("round %d: got k kept, want evicted", round)
				}
				for at := now; at.Before(now.Add(3 * time.Minute)); at = at.Add(time.Duration(rng.Int64N(int64(10 * time.Second)))) {
					got, _ := m.Peek(ctx, at, r[0])
					want, _ := ref.Peek(ctx, at, r[0])
					if got.Remaining > want.Remaining {
						t.Fatalf("round %d, %v after: got %d remaining, want at most %d", round, at.Sub(now), got.Remaining, want.Remaining)
					}
				}
				m.Close()
				ref.Close()
			}
		})
	}
}

// TestFloodOnOnePolicyLeavesAnother floods one policy with new keys,
// some of them on a route that names a second policy too, while another
// goroutine decides on the second policy: none of its buckets is evicted,
// not even those left alone since they were made.
func TestFloodOnOnePolicyLeavesAnother(t *testing.T) {
	t.Parallel()
	m := NewMemoryStore(MemoryOptions{MaxKeys: 256, SweepInterval: -1})
	defer m.Close()
	p := MustPolicy(Policy{Name: "per-ip", Algorithm: FixedWindow, Limit: 1 << 20, Window: time.Hour})
	junk := MustPolicy(Policy{Name: "junk", Algorithm: FixedWindow, Limit: 5, Window: time.Hour})
	ctx := context.Background()
	fill(t, m, p, t0, "ip0", "ip1", "ip2")
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		out := make([]Decision, 2)
		for i := range 5000 {
			reqs := []Request{{Policy: junk, Key: "j" + strconv.Itoa(i)}, {Policy: p, Key: "ip0"}}
			if i%10 != 0 {
				reqs = reqs[:1]
			}
			m.Decide(ctx, t0, reqs, out[:len(reqs)])
		}
	}()
	for range 1000 {
		fill(t, m, p, t0, "ip0")
	}
	<-finished
	for _, k := range []string{"ip0", "ip1", "ip2"} {
		if !tracked(m, p, k) {
			t.Errorf("%s: got evicted by a flood on another policy, want kept", k)
		}
	}
	if got := m.Keys()["junk"]; got > 256 {
		t.Errorf("junk: got %d buckets, want at most 256", got)
	}
	checkKeys(t, m)
}

// TestBlockedBucketComesBackBlocked evicts a bucket whose block runs past
// the time its budget would be whole: it comes back blocked to the end.
func TestBlockedBucketComesBackBlocked(t *testing.T) {
	t.Parallel()
	m := NewMemoryStore(MemoryOptions{MaxKeys: 2000, SweepInterval: -1})
	defer m.Close()
	p := MustPolicy(Policy{Name: "login", Algorithm: TokenBucket, Limit: 5, Window: time.Hour, Block: 2 * time.Hour})
	spend(t, m, p, t0, "victim") // the rejection starts the block, to t0+2h
	ctx := context.Background()
	out := make([]Decision, 1)
	// Which bucket the clock hand takes depends on the per-process hash
	// seed: flood on until the victim is gone (after 5,000 it nearly always is).
	for i := 0; i < 5000 || i < 50000 && tracked(m, p, "victim"); i++ {
		m.Decide(ctx, t0.Add(time.Second+time.Duration(i)*time.Millisecond), []Request{{Policy: p, Key: "junk-" + strconv.Itoa(i)}}, out)
	}
	if tracked(m, p, "victim") {
		t.Fatal("victim: got kept, want evicted by the flood (the case under test)")
	}
	// By its budget alone the bucket would admit again from t0+1h12m.
	r := []Request{{Policy: p, Key: "victim"}}
	if m.Decide(ctx, t0.Add(90*time.Minute), r, out); out[0].Allowed {
		t.Errorf("at t0+90m, blocked to t0+2h: got allowed, want rejected")
	}
	if m.Decide(ctx, t0.Add(2*time.Hour+time.Second), r, out); !out[0].Allowed {
		t.Errorf("after the block: got rejected, want allowed")
	}
}

// TestResetClearsEvictedBucket resets a spent bucket that a flood evicted:
// it starts fresh, not as the record of evicted buckets would bring it back.
func TestResetClearsEvictedBucket(t *testing.T) {
	t.Parallel()
	m := NewMemoryStore(MemoryOptions{MaxKeys: 2000, SweepInterval: -1, Clock: func() time.Time { return t0.Add(time.Minute) }})
	defer m.Close()
	p := spendPolicy("otp", FixedWindow)
	spend(t, m, p, t0, "victim")
	ctx := context.Background()
	out := make([]Decision, 1)
	// Flood on until the victim is gone; see TestBlockedBucketComesBackBlocked.
	for i := 0; i < 5000 || i < 50000 && tracked(m, p, "victim"); i++ {
		m.Decide(ctx, t0.Add(time.Second), []Request{{Policy: p, Key: "junk-" + strconv.Itoa(i)}}, out)
	}
	r := Request{Policy: p, Key: "victim"}
	if tracked(m, p, "victim") || !used(t, m, p, t0.Add(time.Minute), "victim") {
		t.Fatal("victim: got kept, or evicted without its record entry, want evicted and recorded")
	}
	if err := m.Reset(ctx, r); err != nil {
		t.Fatal(err)
	}
	if d, _ := m.Peek(ctx, t0.Add(time.Minute), r); d.Remaining != p.Capacity() {
		t.Errorf("after Reset: got %d remaining, want %d", d.Remaining, p.Capacity())
	}
	checkKeys(t, m)
}
