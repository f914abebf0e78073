package ratelimit

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The measurements below fill a million buckets or park ten thousand
// goroutines, so they run only when asked:
//
//	SLUICE_MEASURE=1 go test -run Measure -v ./ratelimit
func needMeasure(t *testing.T) {
	if os.Getenv("SLUICE_MEASURE") == "" {
		t.Skip("set SLUICE_MEASURE=1 to measure memory")
	}
}

func heapInUse() uint64 {
	h, s := heapAndStack()
	return h + s
}

func heapAndStack() (heap, stack uint64) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, ms.StackInuse
}

// TestMeasureBytesPerKey reports the store's bytes per tracked bucket at
// 1,000,000 buckets for every algorithm: the entry with its share of the
// table's empty slots, and algorithm state. The key strings are built beforehand and not counted
// (a gateway's keys cost their own length on top).
func TestMeasureBytesPerKey(t *testing.T) {
	needMeasure(t)
	const n = 1_000_000
	keys := benchKeys(n)
	ctx := context.Background()
	for _, a := range Algorithms {
		for _, perKey := range []int{1, 100} {
			if perKey > 1 && a != SlidingWindowLog {
				continue
			}
			nk := n
			pol := Policy{Name: "mem", Algorithm: a, Limit: 100, Window: time.Hour}
			if a == LeakyBucket {
				pol.Queue = 10
			}
			p := MustPolicy(pol)
			before := heapInUse()
			// Twice the room: per-shard bounds would evict a few before n.
			m := NewMemoryStore(MemoryOptions{MaxKeys: 2 * n, SweepInterval: -1})
			reqs := []Request{{Policy: p}}
			out := make([]Decision, 1)
			for i := range nk {
				reqs[0].Key = keys[i]
				for j := range perKey {
					m.Decide(ctx, t0.Add(time.Duration(j)*time.Millisecond), reqs, out)
				}
			}
			after := heapInUse()
			if got := m.Len(); got != nk {
				t.Fatalf("%s: got Len %d, want %d", a, got, nk)
			}
			t.Logf("%-22s %3d logged/key  %7d keys: %6.1f bytes/key", a, perKey, nk, float64(after-before)/float64(nk))
			runtime.KeepAlive(m)
		}
	}
	runtime.KeepAlive(keys)
}

// TestMeasureBytesPerWaiter reports the memory of 10,000 requests waiting
// in one leaky bucket: the goroutine each request has anyway (measured
// alone first, parked on a channel), and what Wait adds to it (timer,
// waiter, the select).
func TestMeasureBytesPerWaiter(t *testing.T) {
	needMeasure(t)
	const n = 10_000
	// Bare goroutines, for comparison.
	h0, s0 := heapAndStack()
	release := make(chan struct{})
	var wg sync.WaitGroup
	started := make(chan struct{}, n)
	for range n {
		wg.Go(func() {
			started <- struct{}{}
			<-release
		})
	}
	for range n {
		<-started
	}
	h1, s1 := heapAndStack()
	close(release)
	wg.Wait()

	m := NewMemoryStore(MemoryOptions{SweepInterval: -1})
	defer m.Close()
	// One departure every 10s: nobody leaves while measured.
	p := MustPolicy(Policy{Name: "lb", Algorithm: LeakyBucket, Limit: 1, Window: 10 * time.Second, Queue: n})
	r := Request{Policy: p, Key: "k"}
	now := time.Now()
	out := make([]Decision, 1)
	m.Decide(context.Background(), now, []Request{r}, out)
	ds := make([]Decision, n)
	for i := range ds {
		m.Decide(context.Background(), now, []Request{r}, out)
		ds[i] = out[0]
	}
	cancels := make([]context.CancelFunc, n)
	ctxs := make([]context.Context, n)
	for i := range ctxs {
		ctxs[i], cancels[i] = context.WithCancel(context.Background())
	}
	h2, s2 := heapAndStack()
	for i := range ds {
		wg.Go(func() { m.Wait(ctxs[i], r, ds[i]) })
	}
	waitFor(t, m, r, n)
	h3, s3 := heapAndStack()
	t.Logf("%d parked goroutines: heap %d + stack %d bytes each", n, (h1-h0)/n, (s1-s0)/n)
	t.Logf("%d in Wait, a goroutine each: heap %d + stack %d bytes each", n, (h3-h2)/n, (s3-s2)/n)
	start := time.Now()
	// Last first: each give-up then moves nobody.
	for i := n - 1; i >= 0; i-- {
		cancels[i]()
	}
	wg.Wait()
	t.Logf("%d give-ups, last first: %v", n, time.Since(start))

	// First first: each give-up moves everyone behind. A bucket of its own.
	r = Request{Policy: p, Key: "k2"}
	now = time.Now()
	m.Decide(context.Background(), now, []Request{r}, out)
	for i := range ds {
		m.Decide(context.Background(), now, []Request{r}, out)
		ds[i] = out[0]
		ctxs[i], cancels[i] = context.WithCancel(context.Background())
	}
	for i := range ds {
		wg.Go(func() { m.Wait(ctxs[i], r, ds[i]) })
	}
	waitFor(t, m, r, n)
	start = time.Now()
	for i := range n {
		cancels[i]()
	}
	wg.Wait()
	t.Logf("%d give-ups, first first: %v", n, time.Since(start))
}

// TestMeasureHostileFlood reports the memory of a policy flooded with
// 2,000,000 new keys, one request each, against max_keys 1,000,000: the
// table at its bound, every shard evicting live buckets into its record of
// evicted ones. Unlike TestMeasureBytesPerKey it counts the key strings the
// buckets hold (15 to 16 bytes each, "hostile-" and a number), since a
// flood brings its own.
func TestMeasureHostileFlood(t *testing.T) {
	needMeasure(t)
	const (
		bound = 1_000_000
		flood = 2 * bound
	)
	ctx := context.Background()
	// Keys of 15 to 16 bytes, and of 256, the longest a gateway keeps
	// (routes.MaxKeyLen; longer ones become a digest of 71).
	for _, pad := range []int{0, 256} {
		for _, a := range []Algorithm{TokenBucket, SlidingWindowLog} {
			p := MustPolicy(Policy{Name: "otp", Algorithm: a, Limit: 5, Window: 10 * time.Minute})
			before := heapInUse()
			m := NewMemoryStore(MemoryOptions{MaxKeys: bound, SweepInterval: -1})
			reqs := []Request{{Policy: p}}
			out := make([]Decision, 1)
			for i := range flood {
				k := "hostile-" + strconv.Itoa(i)
				if pad > len(k) {
					k += strings.Repeat("x", pad-len(k))
				}
				reqs[0].Key = k
				m.Decide(ctx, t0.Add(time.Duration(i)*time.Microsecond), reqs, out)
			}
			after := heapInUse()
			if got := m.Len(); got > bound || got < bound*9/10 {
				t.Fatalf("%s: got Len %d, want at most %d and close to it", a, got, bound)
			}
			t.Logf("%-18s keys of %3d bytes: %d flooded, %d tracked: %.1f MiB, %.1f bytes per tracked bucket", a, max(pad, 16), flood, m.Len(), float64(after-before)/(1<<20), float64(after-before)/float64(m.Len()))
			runtime.KeepAlive(m)
		}
	}
}
