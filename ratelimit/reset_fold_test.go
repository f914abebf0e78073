package ratelimit

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// foldVictim makes the record of evicted buckets of p's one shard (p has
// MaxKeys 1) hold the spent bucket of key only in a folded entry: key's
// bucket is evicted live, then so are four others, the last of them with
// a hash that differs from key's in one bit, so that the record, full,
// folds the two. It returns with key's bucket gone and one crafted bucket
// in the table.
func foldVictim(t *testing.T, m *MemoryStore, p *Policy, now time.Time, key string) {
	t.Helper()
	spend(t, m, p, now, key)
	pt := m.table(p)
	if len(pt.shards) != 1 {
		t.Fatalf("got %d shards, want 1", len(pt.shards))
	}
	s := &pt.shards[0]
	h := m.hash(p, key)
	hashes := []uint64{0x1111_0000_aaaa_0002, 0x2222_ffff_5555_0004, 0x3333_0f0f_f0f0_0008, h ^ 1<<20, 0x4444_3c3c_c3c3_0010}
	t1 := now.UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, c := range hashes {
		c = c&hashMask | hashSet
		e := s.getLocked(Request{Policy: p, Key: "crafted-" + strconv.Itoa(i)}, c, t1, m.perShard(pt, p), nil)
		for range p.Capacity() + 1 {
			e.decideLocked(p, t1)
		}
		e.unlock(true)
	}
	for _, w := range s.evicted.set(h) {
		if w.end() > t1 && w.holds(h) && w.mask == ^uint64(0) {
			t.Fatalf("record for %s: got its own entry, want only a folded one", key)
		}
	}
	if s.evicted.take(p, h, t1, false).end() <= t1 {
		t.Fatalf("record for %s: got nothing, want a folded entry", key)
	}
}

// TestResetOutlastsFoldedRecord resets a spent (and, with block, blocked)
// bucket that the record of evicted buckets holds in a folded entry, with
// the bucket gone and with it brought back: the reset makes it fresh, and
// it stays fresh once the sweeper has removed the fresh bucket.
func TestResetOutlastsFoldedRecord(t *testing.T) {
	t.Parallel()
	pols := map[string]Policy{
		"fixed_window":       {Name: "fw", Algorithm: FixedWindow, Limit: 5, Window: time.Hour, MaxKeys: 1},
		"token_bucket/block": {Name: "tb", Algorithm: TokenBucket, Limit: 5, Window: time.Hour, Block: 2 * time.Hour, MaxKeys: 1},
		"sliding_window_log": {Name: "swl", Algorithm: SlidingWindowLog, Limit: 5, Window: time.Hour, MaxKeys: 1},
		"sliding_log/block":  {Name: "swlb", Algorithm: SlidingWindowLog, Limit: 5, Window: time.Hour, Block: 2 * time.Hour, MaxKeys: 1},
		"window_counter":     {Name: "swc", Algorithm: SlidingWindowCounter, Limit: 5, Window: time.Hour, MaxKeys: 1},
		"leaky_bucket":       {Name: "lb", Algorithm: LeakyBucket, Limit: 5, Window: time.Hour, Queue: 4, MaxKeys: 1},
	}
	for name, pol := range pols {
		for _, back := range []bool{false, true} {
			t.Run(name+"/back="+strconv.FormatBool(back), func(t *testing.T) {
				t.Parallel()
				later := t0.Add(time.Minute)
				m := NewMemoryStore(MemoryOptions{SweepInterval: -1, Clock: func() time.Time { return later }})
				defer m.Close()
				p := MustPolicy(pol)
				foldVictim(t, m, p, t0, "victim")
				ctx := context.Background()
				r := Request{Policy: p, Key: "victim"}
				if back {
					if d := decideOne(t, m, later, p, "victim"); d.Allowed {
						t.Fatalf("brought back: got allowed, want rejected (spent as it left)")
					}
				}
				if err := m.Reset(ctx, r); err != nil {
					t.Fatal(err)
				}
				check := func(when string) {
					t.Helper()
					if d, _ := m.Peek(ctx, later, r); d.Remaining != p.Capacity() || d.Blocked {
						t.Errorf("%s: got %d remaining, blocked %v, want %d, not blocked", when, d.Remaining, d.Blocked, p.Capacity())
					}
				}
				check("after Reset")
				m.Sweep(later)
				if tracked(m, p, "victim") {
					t.Fatal("victim: got tracked after the sweep, want its fresh bucket removed")
				}
				check("after a sweep")
				if d := decideOne(t, m, later, p, "victim"); !d.Allowed {
					t.Errorf("after a sweep: got rejected (blocked %v, retry %v), want allowed", d.Blocked, d.RetryAfter)
				}

				// Spent and evicted live again, it comes back spent, its
				// new entry folded into the old one or not.
				for range p.Capacity() {
					decideOne(t, m, later, p, "victim")
				}
				pt := m.table(p)
				s := &pt.shards[0]
				s.mu.Lock()
				s.getLocked(Request{Policy: p, Key: "crafted-after"}, 0x5555_aaaa_0f0f_0020|hashSet, later.UnixNano(), m.perShard(pt, p), nil).unlock(true)
				s.mu.Unlock()
				if tracked(m, p, "victim") {
					t.Fatal("victim: got kept, want evicted")
				}
				if d, _ := m.Peek(ctx, later, r); d.Remaining != 0 {
					t.Errorf("evicted live after the Reset: got %d remaining, want 0 (spent as it left)", d.Remaining)
				}
			})
		}
	}
}

// TestResetOfEvictedBucketEvictsNoOther resets a spent bucket that was
// evicted live, its own entry in the record: it comes back fresh, and the
// reset takes no room from the bucket that holds the shard's one place.
func TestResetOfEvictedBucketEvictsNoOther(t *testing.T) {
	t.Parallel()
	later := t0.Add(time.Minute)
	m := NewMemoryStore(MemoryOptions{SweepInterval: -1, Clock: func() time.Time { return later }})
	defer m.Close()
	p := MustPolicy(Policy{Name: "fw", Algorithm: FixedWindow, Limit: 5, Window: time.Hour, Block: time.Hour, MaxKeys: 1})
	spend(t, m, p, t0, "victim")
	evictKey(t, m, p, t0.Add(time.Second), "victim")
	var other string
	for i := 0; other == ""; i++ {
		if k := "junk-" + strconv.Itoa(i); tracked(m, p, k) {
			other = k
		}
	}
	r := Request{Policy: p, Key: "victim"}
	if err := m.Reset(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if !tracked(m, p, other) {
		t.Errorf("%s: got evicted by the Reset of another key, want kept", other)
	}
	if d, _ := m.Peek(context.Background(), later, r); d.Remaining != p.Capacity() || d.Blocked {
		t.Errorf("after Reset: got %d remaining, blocked %v, want %d, not blocked", d.Remaining, d.Blocked, p.Capacity())
	}
	if d := decideOne(t, m, later, p, "victim"); !d.Allowed {
		t.Errorf("after Reset: got rejected (blocked %v), want allowed", d.Blocked)
	}
}
