package ratelimit

import (
	"context"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// benchPolicy is a policy per algorithm sized so that a benchmark's virtual
// clock, stepping one interval per call on one key, keeps admitting.
func benchPolicy(a Algorithm) *Policy {
	p := Policy{Name: "bench-" + a.String(), Algorithm: a, Limit: 100, Window: time.Second}
	if a == LeakyBucket {
		p.Queue = 10
	}
	return MustPolicy(p)
}

func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "consumer-" + strconv.Itoa(i)
	}
	return keys
}

// BenchmarkDecide measures one single-limit decision per operation, on one
// hot key and spread over 100,000 keys, serially and in parallel. Serial
// calls over many keys visit them in the order their keys were made, which
// lets the processor fetch each key's bytes ahead (the buckets lie in hash
// order, so each is a miss); scattered calls visit them in no order, with
// keys that share no bytes with the stored ones, as a gateway's requests
// do. The clock is virtual: each call advances it by
// a fixed step.
func BenchmarkDecide(b *testing.B) {
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	for _, a := range Algorithms {
		p := benchPolicy(a)
		for _, nkeys := range []int{1, 100_000} {
			keys := benchKeys(nkeys)
			name := a.String() + "/keys=" + strconv.Itoa(nkeys)
			// One hot key steps one interval per call; spread keys see each
			// call 1/nkeys as often, so the step shrinks accordingly.
			step := max(p.Interval()/time.Duration(nkeys), time.Nanosecond)
			b.Run(name+"/serial", func(b *testing.B) {
				m := benchStore(p, keys)
				defer m.Close()
				decideSerially(b, m, p, keys, t0, step)
			})
			if nkeys > 1 {
				// As a gateway sees them: keys in no order, each a fresh
				// string equal to the stored one but not sharing its
				// bytes, so a lookup reads the bucket's key.
				b.Run(name+"/scattered", func(b *testing.B) {
					m := benchStore(p, keys)
					defer m.Close()
					fresh := make([]string, nkeys)
					for i, k := range keys {
						fresh[i] = strings.Clone(k)
					}
					order := make([]string, nkeys)
					for i, j := range rand.New(rand.NewPCG(1, 2)).Perm(nkeys) {
						order[i] = fresh[j]
					}
					decideSerially(b, m, p, order, t0, step)
				})
			}
			b.Run(name+"/parallel", func(b *testing.B) {
				m := benchStore(p, keys)
				defer m.Close()
				var clock atomic.Int64
				ctx := context.Background()
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					reqs := []Request{{Policy: p}}
					out := make([]Decision, 1)
					if nkeys == 1 {
						// One bucket: every goroutine reads one shared
						// clock, as callers of time.Now would.
						reqs[0].Key = keys[0]
						for pb.Next() {
							m.Decide(ctx, t0.Add(time.Duration(clock.Add(1))*step), reqs, out)
						}
						return
					}
					// Many buckets: the serial sequence of (key, time) is
					// dealt out, goroutine g taking every procs-th call
					// from g on. With nkeys a multiple of procs each
					// goroutine owns its keys, as cores serving different
					// consumers do, and each key sees the serial rate.
					procs := runtime.GOMAXPROCS(0)
					i := int(clock.Add(1)) - 1
					for pb.Next() {
						reqs[0].Key = keys[i%nkeys]
						m.Decide(ctx, t0.Add(time.Duration(i)*step), reqs, out)
						i += procs
					}
				})
			})
		}
	}
}

// benchStore returns a store that already tracks every key, so a
// benchmark measures decisions, not the creation of buckets.
func benchStore(p *Policy, keys []string) *MemoryStore {
	m := NewMemoryStore(MemoryOptions{SweepInterval: -1})
	reqs := []Request{{Policy: p}}
	out := make([]Decision, 1)
	for _, k := range keys {
		reqs[0].Key = k
		m.Decide(context.Background(), time.Time{}, reqs, out)
	}
	return m
}

// BenchmarkDecideRoute measures a route of three limits decided together
// (sliding_window_log on the API key, fixed_window on the client address,
// token_bucket on both), over 100,000 consumers.
func BenchmarkDecideRoute(b *testing.B) {
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	log := MustPolicy(Policy{Name: "otp", Algorithm: SlidingWindowLog, Limit: 100, Window: time.Second})
	fw := MustPolicy(Policy{Name: "per-ip", Algorithm: FixedWindow, Limit: 100, Window: time.Second})
	tb := MustPolicy(Policy{Name: "api", Algorithm: TokenBucket, Limit: 100, Window: time.Second})
	const n = 100_000
	keys := benchKeys(n)
	routes := make([][]Request, n)
	for i := range routes {
		routes[i] = []Request{{Policy: log, Key: keys[i]}, {Policy: fw, Key: keys[(i*7)%n]}, {Policy: tb, Key: keys[(i*13)%n]}}
	}
	step := 10 * time.Millisecond / n
	b.Run("serial", func(b *testing.B) {
		m := NewMemoryStore(MemoryOptions{SweepInterval: -1})
		defer m.Close()
		out := make([]Decision, 3)
		ctx := context.Background()
		for i := range routes {
			m.Decide(ctx, t0, routes[i], out)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; b.Loop(); i++ {
			m.Decide(ctx, t0.Add(time.Duration(i)*step), routes[i%n], out)
		}
	})
}

// decideSerially times one decision per iteration for p, visiting keys in
// order and moving a virtual clock on by step each time.
func decideSerially(b *testing.B, m *MemoryStore, p *Policy, keys []string, t0 time.Time, step time.Duration) {
	reqs := []Request{{Policy: p}}
	out := make([]Decision, 1)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		reqs[0].Key = keys[i%len(keys)]
		m.Decide(ctx, t0.Add(time.Duration(i)*step), reqs, out)
	}
}

// BenchmarkMemoryLatency is the floor under the 100,000-key benchmarks: one
// load that misses the cache, over a buffer the size of the store's tables
// for 100,000 buckets (64 shards of 2,048 64-byte slots, 8 MiB), each load
// depending on the one before as a decision's does. It measures the
// machine, not sluice.
func BenchmarkMemoryLatency(b *testing.B) {
	const lines = 64 * 2048
	next := make([]uint32, lines*16) // one index per 64-byte line
	perm := rand.New(rand.NewPCG(3, 4)).Perm(lines)
	for i, l := range perm {
		next[l*16] = uint32(perm[(i+1)%lines])
	}
	j := uint32(0)
	for range lines { // touch every line once first
		j = next[j*16]
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		j = next[j*16]
	}
	runtime.KeepAlive(j)
}

// BenchmarkBaselineRate is the yardstick for the memory store's decisions:
// golang.org/x/time/rate limiters, one per key in a sync.Map, the way a
// gateway without a store of its own keeps them. It decides as
// keys=100000/scattered does: keys visited in no order as fresh strings,
// a virtual clock, limit 100 a second. The memory store's budget is a
// fraction of this in the same run.
//
// Each algorithm's sub-benchmark alternates blocks of 1,024 decisions of
// the memory store with 1,024 of the baseline, so that both see the same
// load on the machine, and reports each one's time per decision and
// their ratio (store/rate); ns/op is both together.
func BenchmarkBaselineRate(b *testing.B) {
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	const nkeys = 100_000
	keys := benchKeys(nkeys)
	order := make([]string, nkeys)
	for i, j := range rand.New(rand.NewPCG(1, 2)).Perm(nkeys) {
		order[i] = strings.Clone(keys[j])
	}
	tb := benchPolicy(TokenBucket)
	var limiters sync.Map
	limit := rate.Every(tb.Interval())
	for _, k := range keys {
		l := rate.NewLimiter(limit, int(tb.Burst))
		l.AllowN(t0, 1)
		limiters.Store(k, l)
	}
	for _, a := range Algorithms {
		p := benchPolicy(a)
		step := max(p.Interval()/nkeys, time.Nanosecond)
		b.Run(a.String()+"/keys=100000/scattered", func(b *testing.B) {
			m := benchStore(p, keys)
			defer m.Close()
			reqs := []Request{{Policy: p}}
			out := make([]Decision, 1)
			ctx := context.Background()
			const block = 1024
			var storeTime, rateTime time.Duration
			i, j := 0, 0
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				start := time.Now()
				for range block {
					reqs[0].Key = order[i%nkeys]
					m.Decide(ctx, t0.Add(time.Duration(i)*step), reqs, out)
					i++
				}
				mid := time.Now()
				for range block {
					k := order[j%nkeys]
					v, ok := limiters.Load(k)
					if !ok {
						v, _ = limiters.LoadOrStore(k, rate.NewLimiter(limit, int(tb.Burst)))
					}
					v.(*rate.Limiter).AllowN(t0.Add(time.Duration(j)*step), 1)
					j++
				}
				storeTime += mid.Sub(start)
				rateTime += time.Since(mid)
			}
			b.ReportMetric(float64(storeTime)/float64(i), "store-ns/decision")
			b.ReportMetric(float64(rateTime)/float64(j), "rate-ns/decision")
			b.ReportMetric(float64(storeTime)/float64(rateTime), "store/rate")
		})
	}
}

// BenchmarkDecideFlood measures a flood: every decision is for a key never
// seen before, on a policy of 100,000 buckets already at its bound, so each
// makes a bucket and evicts a live one into its shard's record.
func BenchmarkDecideFlood(b *testing.B) {
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	p := MustPolicy(Policy{Name: "otp", Algorithm: TokenBucket, Limit: 5, Window: 10 * time.Minute})
	const bound = 100_000
	keys := benchKeys(4 * bound)
	m := NewMemoryStore(MemoryOptions{MaxKeys: bound, SweepInterval: -1})
	defer m.Close()
	reqs := []Request{{Policy: p}}
	out := make([]Decision, 1)
	ctx := context.Background()
	for i := range 2 * bound { // past the bound: evicting from here on
		reqs[0].Key = keys[i]
		m.Decide(ctx, t0.Add(time.Duration(i)*time.Microsecond), reqs, out)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 2 * bound; b.Loop(); i++ {
		reqs[0].Key = keys[i%len(keys)] // seen again after 2 bounds: evicted long before
		m.Decide(ctx, t0.Add(time.Duration(i)*time.Microsecond), reqs, out)
	}
}
