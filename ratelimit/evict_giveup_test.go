package ratelimit

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestEvictionTakesBucketIdledByGiveUp: README (The memory store): "a live
// bucket never goes while the shard holds an idle one", save after what
// gives budget back (a refund, DELETE, a reload). A leaky_bucket whose
// waiter gave up, whose place moved its next departure earlier, is idle
// once that departure passes; eviction must take it before a live bucket.
func TestEvictionTakesBucketIdledByGiveUp(t *testing.T) {
	p := MustPolicy(Policy{Name: "p", Algorithm: LeakyBucket, Limit: 1, Window: time.Minute, Queue: 2, MaxKeys: 8})
	var clock atomic.Int64
	clock.Store(t0.UnixNano())
	m := NewMemoryStore(MemoryOptions{SweepInterval: -1, Clock: func() time.Time { return time.Unix(0, clock.Load()) }})
	defer m.Close()
	if n := len(m.table(p).shards); n != 1 {
		t.Fatalf("got %d shards, want 1", n)
	}
	r := Request{Policy: p, Key: "a"}
	admitOne(t, m, t0, p, "a") // leaves at once; next departure t0+60s
	d := admitOne(t, m, t0, p, "a")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Wait(ctx, r, d) }()
	waitFor(t, m, r, 1)

	// At t0+30s fill the shard with live buckets, past its bound.
	at := t0.Add(30 * time.Second)
	clock.Store(at.UnixNano())
	for i := range 8 {
		decideOne(t, m, at, p, "k"+strconv.Itoa(i))
	}
	// a's waiter gives up before its departure: a's next departure moves
	// back to t0+60s, and nothing waits on it.
	cancel()
	<-done
	waitFor(t, m, r, 0)

	// At t0+61s a is idle; every k is live until t0+90s.
	at = t0.Add(61 * time.Second)
	clock.Store(at.UnixNano())
	keys := func() map[string]bool {
		s := &m.table(p).shards[0]
		s.mu.Lock()
		defer s.mu.Unlock()
		got := map[string]bool{}
		for i := range s.tab.Load().slots {
			if s.tab.Load().marks[i] != 0 {
				got[s.tab.Load().slots[i].key] = true
			}
		}
		return got
	}
	before := keys()
	if !before["a"] {
		t.Fatal("a was evicted before it was idle")
	}
	decideOne(t, m, at, p, "new")
	after := keys()
	for k := range before {
		if !after[k] && k != "a" {
			t.Errorf("live bucket %s evicted while a (idle since t0+60s) stayed", k)
		}
	}
}

// TestSweepKeepsLeakyBucketWithWaiters has requests wait in a leaky
// bucket whose departures have all passed by the time the store sweeps
// and a new key floods its policy: the bucket looks idle, but requests
// still wait on it, so neither the sweep nor the eviction takes it, and
// their give-ups afterwards find it and let it go.
func TestSweepKeepsLeakyBucketWithWaiters(t *testing.T) {
	t.Parallel()
	var clock atomic.Int64
	clock.Store(t0.UnixNano())
	m := NewMemoryStore(MemoryOptions{MaxKeys: 1, SweepInterval: -1, Clock: func() time.Time { return time.Unix(0, clock.Load()) }})
	defer m.Close()
	p := MustPolicy(Policy{Name: "lb", Algorithm: LeakyBucket, Limit: 1, Window: time.Hour, Queue: 2})
	r := Request{Policy: p, Key: "waited"}
	decideOne(t, m, t0, p, r.Key) // leaves at once
	var wg sync.WaitGroup
	cancels := make([]context.CancelFunc, 2)
	errs := make([]error, 2)
	for i := range cancels {
		d := admitOne(t, m, t0, p, r.Key)
		ctx, cancel := context.WithCancel(context.Background())
		cancels[i] = cancel
		wg.Go(func() { errs[i] = m.Wait(ctx, r, d) })
	}
	s := m.shardOf(p, m.hash(p, r.Key))
	waiting := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		e := s.find(m.hash(p, r.Key), p, r.Key)
		if e == nil {
			return -1
		}
		defer e.unlock(false)
		n := 0
		if e.ext != nil {
			for w := e.ext.wq.head; w != nil; w = w.next {
				n++
			}
		}
		return n
	}
	for waiting() != 2 {
		runtime.Gosched()
	}
	// Every departure is hours past: the bucket's state is a fresh one's.
	later := t0.Add(5 * time.Hour)
	clock.Store(later.UnixNano())
	if got := m.Sweep(later); got != 0 {
		t.Errorf("sweep: got %d removed, want 0", got)
	}
	decideOne(t, m, later, p, "flood")
	if got := waiting(); got != 2 {
		t.Fatalf("after the sweep and a new key: got %d waiting in the bucket, want 2 (-1: bucket gone)", got)
	}
	for i := range cancels {
		cancels[i]()
	}
	wg.Wait()
	for i, err := range errs {
		if err != context.Canceled {
			t.Errorf("waiter %d: got %v, want %v", i, err, context.Canceled)
		}
	}
	if got := waiting(); got != 0 {
		t.Errorf("after the give-ups: got %d waiting, want 0 in a bucket still there", got)
	}
	if got := m.Sweep(later); got != 1 {
		t.Errorf("sweep after the give-ups: got %d removed, want 1 (flood's is live)", got)
	}
}
