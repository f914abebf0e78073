package ratelimit

import (
	"context"
	"testing"
	"time"
)

// TestRetainDropsRetiredTables: each policy name has a table of its own,
// made at its first decision. A configuration that no longer names a
// policy (a renamed policy or route, an override's numbers changed) must
// not leave its table behind for good, or every such reload keeps tens
// of kilobytes for the life of the process. A retired name's table goes
// once the sweeper finds it empty; until then it keeps its buckets, so a
// policy that comes back before they are idle finds them as they were.
func TestRetainDropsRetiredTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	policy := func(name string) *Policy {
		return MustPolicy(Policy{Name: name, Algorithm: FixedWindow, Limit: 1, Window: time.Minute})
	}
	decide := func(m *MemoryStore, p *Policy, now time.Time) bool {
		out := make([]Decision, 1)
		if err := m.Decide(ctx, now, []Request{{Policy: p, Key: "k"}}, out); err != nil {
			t.Fatal(err)
		}
		return out[0].Allowed
	}
	tables := func(m *MemoryStore) map[string]bool {
		got := map[string]bool{}
		for name := range *m.tables.Load() {
			got[name] = true
		}
		return got
	}

	t.Run("an empty retired table goes", func(t *testing.T) {
		t.Parallel()
		m := NewMemoryStore(MemoryOptions{SweepInterval: -1})
		defer m.Close()
		old, kept := policy("old"), policy("kept")
		decide(m, old, t0)
		decide(m, kept, t0)
		m.Retain([]string{"kept"})
		m.Sweep(t0.Add(time.Hour)) // both buckets idle and removed
		if got := tables(m); got["old"] || !got["kept"] {
			t.Errorf("tables after the sweep: got %v, want kept's alone", got)
		}
	})

	t.Run("a retired table with a live bucket stays", func(t *testing.T) {
		t.Parallel()
		m := NewMemoryStore(MemoryOptions{SweepInterval: -1})
		defer m.Close()
		old := policy("old")
		decide(m, old, t0)
		m.Retain(nil)
		m.Sweep(t0.Add(time.Second)) // the window still counts the request
		if !tables(m)["old"] {
			t.Fatal("a table whose bucket is still spent was dropped")
		}
		m.Retain([]string{"old"})
		if decide(m, old, t0.Add(2*time.Second)) {
			t.Error("a policy back before its bucket was idle: got a fresh budget, want the spent one")
		}
	})

	t.Run("a retired table that remembers an evicted live bucket stays", func(t *testing.T) {
		t.Parallel()
		m := NewMemoryStore(MemoryOptions{SweepInterval: -1})
		defer m.Close()
		// One bucket at most: b's evicts a, blocked for an hour, and
		// the record of evicted buckets is all that keeps a's block.
		p := MustPolicy(Policy{Name: "guard", Algorithm: FixedWindow, Limit: 1, Window: time.Second, Block: time.Hour, MaxKeys: 1})
		out := make([]Decision, 1)
		at := func(key string, now time.Time) bool {
			if err := m.Decide(ctx, now, []Request{{Policy: p, Key: key}}, out); err != nil {
				t.Fatal(err)
			}
			return out[0].Allowed
		}
		at("a", t0)
		if at("a", t0) {
			t.Fatal("a's second request in its window: allowed, want rejected")
		}
		at("b", t0) // evicts a, live
		m.Retain(nil)
		m.Sweep(t0.Add(2 * time.Second)) // b is idle and goes: the table holds no bucket
		m.Retain([]string{"guard"})
		if at("a", t0.Add(3*time.Second)) {
			t.Error("a, blocked when its table was retired: got admitted, want still blocked")
		}
	})

	t.Run("tables made after a drop lock in their own order", func(t *testing.T) {
		t.Parallel()
		m := NewMemoryStore(MemoryOptions{SweepInterval: -1})
		defer m.Close()
		decide(m, policy("a"), t0)
		decide(m, policy("b"), t0)
		m.Retain([]string{"b"})
		m.Sweep(t0.Add(time.Hour))
		decide(m, policy("c"), t0.Add(time.Hour))
		ids := map[int]string{}
		for name, pt := range *m.tables.Load() {
			if other, dup := ids[pt.id]; dup {
				t.Errorf("tables %s and %s share lock order %d: a decision over both would lock one shard only", name, other, pt.id)
			}
			ids[pt.id] = name
		}
	})
}
