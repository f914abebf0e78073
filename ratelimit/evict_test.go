package ratelimit

import (
	"context"
	"math/rand/v2"
	"slices"
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
// a small record has ways: whatever collides, every bucket's entry keeps
// at least its own budget's and block's times until both are past, and a
// bucket the record never saw in a set without collisions is not taken
// for one.
func TestEvictedRecordNeverForgetsEarly(t *testing.T) {
	t.Parallel()
	p := spendPolicy("otp", SlidingWindowLog)
	rng := rand.New(rand.NewPCG(5, 6))
	const now = int64(1_000_000)
	r := newEvictedRecord(64)
	noted := map[uint64]evictedTimes{}
	for range 1000 {
		h := rng.Uint64()&hashMask | hashSet
		v := evictedTimes{until: now - 500 + rng.Int64N(1500)}
		if rng.IntN(2) == 0 {
			v.block = now + 1 + rng.Int64N(1000)
		} else {
			v.until = max(v.until, now+1)
		}
		r.note(p, h, v, now)
		noted[h] = noted[h].fold(v)
	}
	for h, v := range noted {
		for _, at := range []int64{now, v.end() - 1} {
			if got := r.take(p, h, at, false); got.until < v.until || got.block < v.block {
				t.Fatalf("hash %x at %d: got %+v, want at least %+v", h, at, got, v)
			}
		}
	}

	// A set with room keeps hashes apart.
	r = newEvictedRecord(4)
	v := evictedTimes{until: now + 10, block: now + 5}
	r.note(p, 8|hashSet, v, now)
	if got := r.take(p, 16|hashSet, now, false); got != (evictedTimes{}) {
		t.Errorf("another hash: got %+v, want none", got)
	}
	if got := r.take(p, 8|hashSet, now, true); got != v {
		t.Errorf("noted hash: got %+v, want %+v", got, v)
	}
	if got := r.take(p, 8|hashSet, now, false); got != (evictedTimes{}) {
		t.Errorf("after take with forget: got %+v, want none", got)
	}
	// Past both its times an entry still tells them, for requests
	// decided before them, but its way is free again: a note takes it
	// and hands the entry back, for goneTimes to keep. A block that
	// outlasts the budget keeps the entry.
	r.note(p, 8|hashSet, v, now)
	if got := r.take(p, 8|hashSet, now+10, false); got != v {
		t.Errorf("at its time: got %+v, want %+v", got, v)
	}
	if got := r.note(p, 16|hashSet, v, now+10); got.h != 8|hashSet || got.evictedTimes != v {
		t.Errorf("noting another bucket at its time: got %+v handed back, want hash %x with %+v", got, 8|hashSet, v)
	}
	if got := r.take(p, 8|hashSet, now+10, false); got != (evictedTimes{}) {
		t.Errorf("once its way was taken: got %+v, want none", got)
	}
	b := evictedTimes{until: now + 5, block: now + 10}
	r.note(p, 24|hashSet, b, now)
	if got := r.take(p, 24|hashSet, now+7, false); got != b {
		t.Errorf("within the block, past the budget: got %+v, want %+v", got, b)
	}
	// Entries noted under other settings no longer count.
	r.note(p, 8|hashSet, v, now)
	q := spendPolicy("otp", FixedWindow)
	if got := r.take(q, 8|hashSet, now, false); got != (evictedTimes{}) {
		t.Errorf("after a settings change: got %+v, want none", got)
	}
}

// TestRestoredBucketNoFuller evicts buckets of every algorithm in random
// states, blocked or not, and checks each against the same bucket kept in
// a store without a bound: at every later time it admits no more, under
// its policy and under the policy reloaded without its block. (Its record
// entry may fold with the flood's: exactly as it left is
// TestSpentBudgetSurvivesFlood's.)
func TestRestoredBucketNoFuller(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, a := range Algorithms {
		for _, block := range []time.Duration{0, 30 * time.Second} {
			t.Run(a.String()+"/block="+block.String(), func(t *testing.T) {
				t.Parallel()
				pol := Policy{Name: "p", Algorithm: a, Limit: 4, Window: time.Minute, Queue: map[bool]int64{true: 3}[a == LeakyBucket], Block: block}
				p := MustPolicy(pol)
				pol.Block = 0
				noBlock := MustPolicy(pol)
				rng := rand.New(rand.NewPCG(uint64(a), uint64(7+block)))
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
						for _, q := range []*Policy{p, noBlock} {
							r := Request{Policy: q, Key: "k"}
							got, _ := m.Peek(ctx, at, r)
							want, _ := ref.Peek(ctx, at, r)
							if got.Remaining > want.Remaining || got.Allowed && !want.Allowed {
								t.Fatalf("round %d, %v after, block %v: got %+v, want no fuller than %+v", round, at.Sub(now), q.Block, got, want)
							}
						}
					}
					m.Close()
					ref.Close()
				}
			})
		}
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

// evictKey floods p's table with new keys at now until key's bucket is
// gone: evicted live, so noted in the record of evicted buckets.
func evictKey(t *testing.T, m *MemoryStore, p *Policy, now time.Time, key string) {
	t.Helper()
	out := make([]Decision, 1)
	for i := 0; tracked(m, p, key); i++ {
		if i > 1000 {
			t.Fatalf("%s: still tracked after %d new keys", key, i)
		}
		m.Decide(context.Background(), now, []Request{{Policy: p, Key: "junk-" + strconv.Itoa(i)}}, out)
	}
}

// TestEvictedBlockedTokenBucketBlockedToBlockEnd evicts a token_bucket
// during its block: it comes back blocked only to the block's end, and
// then as it left, not blocked until its budget would be whole.
func TestEvictedBlockedTokenBucketBlockedToBlockEnd(t *testing.T) {
	t.Parallel()
	p := MustPolicy(Policy{Name: "tb-block", Algorithm: TokenBucket, Limit: 10, Window: 10 * time.Minute, Block: time.Minute, MaxKeys: 1})
	for _, evict := range []bool{false, true} {
		m := NewMemoryStore(MemoryOptions{SweepInterval: -1})
		for range 10 {
			admitOne(t, m, t0, p, "alice")
		}
		if d := decideOne(t, m, t0, p, "alice"); d.Allowed || d.RetryAfter != time.Minute {
			t.Fatalf("11th: got %+v, want a rejection starting a 1m block", d)
		}
		if evict {
			evictKey(t, m, p, t0.Add(time.Second), "alice")
		}
		if d := decideOne(t, m, t0.Add(30*time.Second), p, "alice"); d.Allowed || !d.Blocked {
			t.Errorf("evicted=%v: at +30s, blocked to +1m: got %+v, want blocked", evict, d)
		}
		// Block over at +1m; two tokens have refilled by +2m.
		if d := decideOne(t, m, t0.Add(2*time.Minute), p, "alice"); !d.Allowed {
			t.Errorf("evicted=%v: at +2m (block ended at +1m, 2 tokens refilled): got rejected (Blocked=%v, RetryAfter=%v), want allowed", evict, d.Blocked, d.RetryAfter)
		}
		m.Close()
	}
}

// TestEvictedBlockedCounterNoFullerWithoutBlock evicts a
// sliding_window_counter bucket during its block; a reload then removes
// block, which leaves the settings, and so the record, as they were. The
// bucket comes back on its window grid: in the next window its previous
// count still weighs, as the kept bucket's does.
func TestEvictedBlockedCounterNoFullerWithoutBlock(t *testing.T) {
	t.Parallel()
	p := MustPolicy(Policy{Name: "swc", Algorithm: SlidingWindowCounter, Limit: 10, Window: time.Minute, Block: 30 * time.Second, MaxKeys: 1})
	noBlock := MustPolicy(Policy{Name: "swc", Algorithm: SlidingWindowCounter, Limit: 10, Window: time.Minute, MaxKeys: 1})
	for _, evict := range []bool{false, true} {
		m := NewMemoryStore(MemoryOptions{SweepInterval: -1})
		for range 10 {
			admitOne(t, m, t0.Add(10*time.Second), p, "alice")
		}
		if d := decideOne(t, m, t0.Add(10*time.Second), p, "alice"); d.Allowed {
			t.Fatal("11th: got allowed")
		}
		if evict {
			evictKey(t, m, p, t0.Add(20*time.Second), "alice")
		}
		// At +61s the previous window's 10 weigh 10 x 59/60: one fits.
		admitted := 0
		for range 10 {
			if decideOne(t, m, t0.Add(61*time.Second), noBlock, "alice").Allowed {
				admitted++
			}
		}
		if admitted > 1 {
			t.Errorf("evicted=%v: at +61s admitted %d, want at most 1 (the previous window's 10 weigh 9.83)", evict, admitted)
		}
		m.Close()
	}
}

// TestEvictionTakesIdleBeforeLiveBetweenPasses: between the passes that
// remove every idle bucket, a new key still takes an idle bucket's room
// while the shard has one, not a live bucket's.
func TestEvictionTakesIdleBeforeLiveBetweenPasses(t *testing.T) {
	t.Parallel()
	p := MustPolicy(Policy{Name: "log", Algorithm: SlidingWindowLog, Limit: 5, Window: time.Minute, MaxKeys: 64})
	m := NewMemoryStore(MemoryOptions{SweepInterval: -1})
	defer m.Close()
	for i := range 16 {
		decideOne(t, m, t0, p, "idle-"+strconv.Itoa(i)) // idle from t0+1m
	}
	for i := range 48 {
		decideOne(t, m, t0.Add(30*time.Second), p, "live-"+strconv.Itoa(i)) // live until t0+1m30s
	}
	decideOne(t, m, t0.Add(30*time.Second), p, "new-0") // the shard is full: one goes (nothing idle yet)
	var goneBefore []string
	for i := range 48 {
		if k := "live-" + strconv.Itoa(i); !tracked(m, p, k) {
			goneBefore = append(goneBefore, k)
		}
	}
	now := t0.Add(61 * time.Second) // the 16 idle-* buckets are idle now
	for i := 1; i <= 7; i++ {
		decideOne(t, m, now, p, "new-"+strconv.Itoa(i))
	}
	idleLeft := 0
	for i := range 16 {
		if tracked(m, p, "idle-"+strconv.Itoa(i)) {
			idleLeft++
		}
	}
	var evictedLive []string
	for i := range 48 {
		k := "live-" + strconv.Itoa(i)
		if !tracked(m, p, k) && !slices.Contains(goneBefore, k) {
			evictedLive = append(evictedLive, k)
		}
	}
	if len(evictedLive) > 0 {
		d := decideOne(t, m, now.Add(time.Second), p, evictedLive[0])
		t.Errorf("at +61s: %d live buckets evicted while %d idle ones were still tracked, want 0 live evicted; %s (1 of 5 used) now: Allowed=%v RetryAfter=%v, want allowed",
			len(evictedLive), idleLeft, evictedLive[0], d.Allowed, d.RetryAfter)
	}
}

// TestEvictionNeverTakesLiveWhileIdleHeld decides on random keys, old and
// new, at random times on a one-shard policy at its bound, with a queue of
// idle buckets small enough to run out and overflow: whenever a decision
// evicts a live bucket, no bucket of the shard was idle.
func TestEvictionNeverTakesLiveWhileIdleHeld(t *testing.T) {
	t.Parallel()
	for _, a := range Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			t.Parallel()
			p := MustPolicy(Policy{Name: "p", Algorithm: a, Limit: 3, Window: time.Minute, Queue: map[bool]int64{true: 2}[a == LeakyBucket], MaxKeys: 100})
			m := NewMemoryStore(MemoryOptions{SweepInterval: -1})
			defer m.Close()
			rng := rand.New(rand.NewPCG(uint64(a), 11))
			s := &m.table(p).shards[0]
			if len(m.table(p).shards) != 1 {
				t.Fatalf("got %d shards, want 1", len(m.table(p).shards))
			}
			// idleAt reports, for every bucket of the shard, whether it is
			// idle at now.
			idleAt := func(now int64) map[string]bool {
				s.mu.Lock()
				defer s.mu.Unlock()
				got := map[string]bool{}
				for i := range s.tab.Load().slots {
					if s.tab.Load().marks[i] != 0 {
						e := &s.tab.Load().slots[i]
						e.lock()
						got[e.key] = e.idleAt() <= now && !e.pinnedLocked()
						e.unlock(false)
					}
				}
				return got
			}
			now := t0
			next, liveEvicted := 0, 0
			for step := range 3000 {
				now = now.Add(time.Duration(rng.Int64N(int64(400 * time.Millisecond))))
				var key string
				if rng.IntN(2) == 0 || next == 0 {
					key = "k" + strconv.Itoa(next)
					next++
				} else {
					key = "k" + strconv.Itoa(max(next-1-rng.IntN(150), 0))
				}
				before := idleAt(now.UnixNano())
				anyIdle := ""
				for k, idle := range before {
					if idle && k != key {
						anyIdle = k
						break
					}
				}
				decideOne(t, m, now, p, key)
				after := idleAt(now.UnixNano())
				for k, idle := range before {
					if _, kept := after[k]; kept || idle {
						continue
					}
					liveEvicted++
					if anyIdle != "" {
						t.Fatalf("step %d at %v: live %s evicted while %s was idle", step, now.Sub(t0), k, anyIdle)
					}
				}
			}
			if liveEvicted == 0 {
				t.Error("no live bucket evicted: the case under test never came")
			}
		})
	}
}

// TestReturningBucketNotFoldedIntoItsEviction brings back an evicted
// token bucket into a shard at its bound whose record is full. Making it
// evicts another live bucket, whose hash agrees with its own on all bits
// but one: had that eviction been noted before the returning bucket's own
// entry was read, the two would fold, and the bucket would come back with
// the other's later time, emptier than it left and than Peek showed.
func TestReturningBucketNotFoldedIntoItsEviction(t *testing.T) {
	t.Parallel()
	m := NewMemoryStore(MemoryOptions{SweepInterval: -1})
	defer m.Close()
	// One token an hour, two at most: a bucket that took one at t0 has
	// one left; one that took two has none until t0+1h.
	p := MustPolicy(Policy{Name: "tb", Algorithm: TokenBucket, Limit: 2, Window: 2 * time.Hour, MaxKeys: 1})
	pt := m.table(p)
	s := &pt.shards[0]
	now := t0.UnixNano()
	const a = 0x5a5a_5a5a_0000_0001 | hashSet
	hashes := []uint64{a, 0x1111_0000_aaaa_0002 | hashSet, 0x2222_ffff_5555_0004 | hashSet,
		0x3333_0f0f_f0f0_0008 | hashSet, a ^ 1<<20}
	s.mu.Lock()
	for i, h := range hashes {
		// Each bucket made evicts the one before, live: the record ends
		// up full, holding the first four, and the fifth is in the table.
		e := s.getLocked(Request{Policy: p, Key: strconv.Itoa(i)}, h, now, m.perShard(pt, p), nil)
		takes := 2
		if h == a {
			takes = 1
		}
		for range takes {
			if d := e.decideLocked(p, now); !d.Allowed {
				t.Fatalf("bucket %d: got rejected, want allowed", i)
			}
		}
		e.unlock(true)
	}
	later := now + int64(time.Minute)
	peeked := entry{pol: p}
	peeked.restoreLocked(p, s.evicted.take(p, a, later, false), later)
	e := s.getLocked(Request{Policy: p, Key: "0"}, a, later, m.perShard(pt, p), nil)
	back := e.s[0]
	d := e.decideLocked(p, later)
	e.unlock(true)
	s.mu.Unlock()
	if want := now + int64(p.Interval()); back != want || !d.Allowed {
		t.Errorf("bucket brought back: got TAT %d and Allowed %v, want TAT %d as it left and allowed", back, d.Allowed, want)
	}
	if peeked.s[0] != back {
		t.Errorf("got TAT %d made, but %d as the record showed it just before", back, peeked.s[0])
	}
}
