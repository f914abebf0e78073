package ratelimit

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestNoDecisionLostWhileTablesChange decides on a few buckets from several
// goroutines, without the shard lock, while another fills the same tables
// with short-lived buckets and sweeps them away, so that the tables grow,
// shrink and shift buckets under the decisions. Every decision must land in
// the one bucket of its key: a decision on a stale copy would be lost, and
// the bucket's count would come out short.
func TestNoDecisionLostWhileTablesChange(t *testing.T) {
	t.Parallel()
	// 16 shards of up to 64 buckets: room for every bucket below, so
	// none is evicted.
	m := NewMemoryStore(MemoryOptions{MaxKeys: 1024, SweepInterval: -1})
	defer m.Close()
	count := MustPolicy(Policy{Name: "count", Algorithm: FixedWindow, Limit: 1 << 40, Window: time.Hour})
	churn := MustPolicy(Policy{Name: "churn", Algorithm: FixedWindow, Limit: 5, Window: time.Millisecond})
	const (
		keys     = 16
		deciders = 4
		rounds   = 20  // of growing the tables and sweeping them empty
		churned  = 400 // buckets a round
	)
	var made [keys]atomic.Int64
	var wg sync.WaitGroup
	var done atomic.Bool
	ctx := context.Background()
	for g := range deciders {
		wg.Go(func() {
			out := make([]Decision, 2)
			for i := 0; !done.Load() && i < 1_000_000; i++ {
				k := (g + i) % keys
				reqs := []Request{{Policy: count, Key: "k" + strconv.Itoa(k)}}
				if i%10 == 0 {
					// Now and then two limits at once, under the shard locks.
					reqs = append(reqs, Request{Policy: count, Key: "k" + strconv.Itoa((k+1)%keys)})
				}
				if err := m.Decide(ctx, t0, reqs, out[:len(reqs)]); err != nil {
					t.Error(err)
					return
				}
				for j, r := range reqs {
					if !out[j].Allowed {
						t.Errorf("%s: got rejected, want allowed", r.Key)
						return
					}
					k, _ := strconv.Atoi(r.Key[1:])
					made[k].Add(1)
				}
			}
		})
	}
	out := make([]Decision, 1)
	for range rounds {
		for i := range churned {
			m.Decide(ctx, t0, []Request{{Policy: churn, Key: "c" + strconv.Itoa(i)}}, out)
		}
		if got := m.Sweep(t0.Add(time.Second)); got != churned { // every churn bucket, none of count's
			t.Errorf("sweep: got %d removed, want %d", got, churned)
		}
	}
	done.Store(true)
	wg.Wait()
	for k := range keys {
		d, err := m.Peek(ctx, t0, Request{Policy: count, Key: "k" + strconv.Itoa(k)})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := count.Limit-d.Remaining, made[k].Load(); got != want {
			t.Errorf("k%d: got %d counted, want %d decided", k, got, want)
		}
	}
}

// TestFightMakesShardBusyUntilSweep holds a bucket while another goroutine
// decides on it: the shard turns busy, its decisions then queue on the
// shard's mutex, and a sweep ends that.
func TestFightMakesShardBusyUntilSweep(t *testing.T) {
	t.Parallel()
	m := NewMemoryStore(MemoryOptions{MaxKeys: 64, SweepInterval: -1})
	defer m.Close()
	p := MustPolicy(Policy{Name: "fw", Algorithm: FixedWindow, Limit: 5, Window: time.Hour})
	fill(t, m, p, t0, "a")
	h := m.hash(p, "a")
	s := m.shardOf(p, h)
	e := s.tryFind(h, p, "a")
	if e == nil {
		t.Fatal("tryFind on an idle shard: got nil, want the bucket")
	}
	decided := make(chan error)
	go func() {
		decided <- m.Decide(context.Background(), t0, []Request{{Policy: p, Key: "a"}}, make([]Decision, 1))
	}()
	deadline := time.Now().Add(5 * time.Second)
	for !s.busy.Load() && time.Now().Before(deadline) {
		time.Sleep(100 * time.Microsecond) // until the other goroutine waits for the bucket
	}
	e.unlock(false)
	if err := <-decided; err != nil {
		t.Fatal(err)
	}
	if !s.busy.Load() {
		t.Fatal("after a decision waited for a held bucket: got shard not busy, want busy")
	}
	if got, want := p.Limit-mustPeek(t, m, p, "a").Remaining, int64(2); got != want {
		t.Errorf("got %d counted, want %d", got, want)
	}
	m.Sweep(t0)
	if s.busy.Load() {
		t.Error("after a sweep: got shard busy, want not")
	}
}

func mustPeek(t *testing.T, m *MemoryStore, p *Policy, key string) Decision {
	t.Helper()
	d, err := m.Peek(context.Background(), t0, Request{Policy: p, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	return d
}
