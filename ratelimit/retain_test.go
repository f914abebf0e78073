package ratelimit

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
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

// TestRetainUndoneDuringSweepKeepsTable: a reload that drops a policy and
// one that brings it back may both fall within one sweep of its table.
// The sweeper, which read the names before the second Retain and found
// the table empty, must not drop it once a request after that Retain has
// made a bucket there: the bucket's spent budget, or the block its next
// request starts, would be gone, and the one after admitted afresh.
//
// The sweeper runs on its own goroutine; whether a given round falls in
// that moment depends on scheduling, so the test repeats it many times
// and wants no round to lose its bucket (with the sweeper reading the
// names again too early, a few percent did).
func TestRetainUndoneDuringSweepKeepsTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := MustPolicy(Policy{Name: "guard", Algorithm: FixedWindow, Limit: 1, Window: time.Minute, Block: time.Hour, MaxKeys: 100_000})
	m := NewMemoryStore(MemoryOptions{SweepInterval: -1})
	defer m.Close()
	var now atomic.Int64 // the round's time, as ns after t0
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			m.Sweep(t0.Add(time.Duration(now.Load())))
		}
	}()
	const rounds = 20_000
	lost := 0
	var spin atomic.Int64
	out := make([]Decision, 1)
	for i := range rounds {
		// Two hours on: the last round's bucket is idle, so the sweeper
		// empties the table and, while the policy is retired, drops it.
		at := t0.Add(time.Duration(i) * 2 * time.Hour)
		now.Store(int64(at.Sub(t0)))
		m.Retain(nil)
		for range i % 64 * 20 { // vary how long the policy stays retired
			spin.Add(1)
		}
		m.Retain([]string{"guard"})
		r := []Request{{Policy: p, Key: "k" + strconv.Itoa(i)}}
		if err := m.Decide(ctx, at, r, out); err != nil {
			t.Fatal(err)
		}
		if m.Decide(ctx, at, r, out); out[0].Allowed {
			lost++
		}
	}
	stop.Store(true)
	wg.Wait()
	if lost > 0 {
		t.Errorf("second request of a spent budget: got admitted in %d of %d rounds, want none", lost, rounds)
	}
}
