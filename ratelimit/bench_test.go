package ratelimit

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
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
// hot key and spread over 100,000 keys, serially and in parallel. The clock
// is virtual: each call advances it by a fixed step.
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
				m := NewMemoryStore(MemoryOptions{SweepInterval: -1})
				defer m.Close()
				reqs := []Request{{Policy: p}}
				out := make([]Decision, 1)
				ctx := context.Background()
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; b.Loop(); i++ {
					reqs[0].Key = keys[i%nkeys]
					m.Decide(ctx, t0.Add(time.Duration(i)*step), reqs, out)
				}
			})
			b.Run(name+"/parallel", func(b *testing.B) {
				m := NewMemoryStore(MemoryOptions{SweepInterval: -1})
				defer m.Close()
				var clock atomic.Int64
				ctx := context.Background()
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					reqs := []Request{{Policy: p}}
					out := make([]Decision, 1)
					i := int(clock.Add(7919))
					for pb.Next() {
						i++
						reqs[0].Key = keys[i%nkeys]
						m.Decide(ctx, t0.Add(time.Duration(i)*step), reqs, out)
					}
				})
			})
		}
	}
}
