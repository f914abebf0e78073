package redisstore

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// benchPolicy admits everything, so every decision writes.
func benchPolicy(t testing.TB) *ratelimit.Policy {
	return policyOf(t, "bench", ratelimit.TokenBucket, 1_000_000_000, 1000*time.Minute)
}

func BenchmarkDecide(b *testing.B) {
	srv := redistest.Start(b)
	s := newStore(b, Options{Addresses: []string{srv.Addr()}, Timeout: time.Second})
	reqs := []ratelimit.Request{{Policy: benchPolicy(b), Key: "k"}}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		out := make([]ratelimit.Decision, 1)
		for b.Loop() {
			if err := s.Decide(context.Background(), time.Now(), reqs, out); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			out := make([]ratelimit.Decision, 1)
			for pb.Next() {
				if err := s.Decide(context.Background(), time.Now(), reqs, out); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// TestThroughputAgainstRedisBenchmark compares decisions per second through
// the Store with redis-benchmark running the very same EVALSHA on the same
// server, at 1, 16 and 64 concurrent callers. It runs only with
// SLUICE_REDIS_BENCH=1 and prints its figures.
func TestThroughputAgainstRedisBenchmark(t *testing.T) {
	if os.Getenv("SLUICE_REDIS_BENCH") != "1" {
		t.Skip("set SLUICE_REDIS_BENCH=1 to measure throughput")
	}
	bench, err := exec.LookPath("redis-benchmark")
	if err != nil {
		t.Skipf("redis-benchmark not installed: %v", err)
	}
	srv := redistest.Start(t)
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: time.Second})
	p := benchPolicy(t)
	reqs := []ratelimit.Request{{Policy: p, Key: "k"}}
	sha := srv.Do("SCRIPT", "LOAD", commonSource+decideSource)
	keys, args := s.call(time.Now(), reqs, modeTake, "bench.1", "", nil, nil, nil)
	const perRun = 200_000
	rate := regexp.MustCompile(`([0-9.]+) requests per second`)
	t.Logf("%-8s %14s %18s %7s", "callers", "store dec/s", "redis-benchmark/s", "ratio")
	for _, c := range []int{1, 16, 64} {
		n := perRun
		if c == 1 {
			n = perRun / 4
		}
		cmd := benchmarkCommand(strconv.Itoa(srv.Port()), strconv.Itoa(c), strconv.Itoa(n), sha, keys, args)
		if c == 64 {
			t.Logf("reference: redis-benchmark %q", cmd)
		}
		out, err := exec.Command(bench, cmd...).CombinedOutput()
		if err != nil {
			t.Fatalf("redis-benchmark: %v\n%s", err, out)
		}
		m := rate.FindSubmatch(out)
		if m == nil {
			t.Fatalf("redis-benchmark: no rate in %q", out)
		}
		ref, _ := strconv.ParseFloat(string(m[1]), 64)

		var done atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range c {
			wg.Go(func() {
				out := make([]ratelimit.Decision, 1)
				for done.Add(1) <= int64(n) {
					if err := s.Decide(context.Background(), time.Now(), reqs, out); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		got := float64(n) / time.Since(start).Seconds()
		if !s.Healthy() {
			t.Fatalf("store unhealthy during the run: %v", s.LastError())
		}
		t.Logf("%-8d %14.0f %18.0f %6.0f%%", c, got, ref, 100*got/ref)
		fmt.Printf("callers=%d store=%.0f/s redis-benchmark=%.0f/s ratio=%.0f%%\n", c, got, ref, 100*got/ref)
	}
}

// BenchmarkDecideLease is BenchmarkDecide with the policy leased (sync:
// lease): most decisions never reach Redis. "per-request" is the same
// policy without the lease, measured in the same run as the baseline.
func BenchmarkDecideLease(b *testing.B) {
	srv := redistest.Start(b)
	s := newStore(b, Options{Addresses: []string{srv.Addr()}, Timeout: time.Second})
	per := benchPolicy(b)
	leased, err := ratelimit.NewPolicy(ratelimit.Policy{Name: "bench-lease", Algorithm: ratelimit.TokenBucket, Limit: per.Limit, Window: per.Window, Sync: ratelimit.SyncLease})
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		p    *ratelimit.Policy
	}{{"per-request", per}, {"lease", leased}} {
		reqs := []ratelimit.Request{{Policy: tc.p, Key: "k"}}
		b.Run(tc.name+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			out := make([]ratelimit.Decision, 1)
			for b.Loop() {
				if err := s.Decide(context.Background(), time.Now(), reqs, out); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(tc.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				out := make([]ratelimit.Decision, 1)
				for pb.Next() {
					if err := s.Decide(context.Background(), time.Now(), reqs, out); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// benchmarkCommand is redis-benchmark's command line for the decision
// script sha with keys and args, on the server at port, for c callers and n
// requests.
func benchmarkCommand(port, c, n, sha string, keys, args []string) []string {
	cmd := []string{"-h", "127.0.0.1", "-p", port, "-c", c, "-n", n, "-q", "EVALSHA", sha, strconv.Itoa(len(keys))}
	cmd = append(cmd, keys...)
	return append(cmd, args...)
}
