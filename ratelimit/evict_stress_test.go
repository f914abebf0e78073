package ratelimit_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
)

// TestEvictionStressKeepsLimits decides, from many goroutines at times a
// little out of order, on more keys than the store keeps, with sweeps
// among them: buckets are evicted live, removed idle and made again while
// others decide. Each key's admitted requests must still keep its
// algorithm's promise, as if its bucket had never left.
func TestEvictionStressKeepsLimits(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	cases := []ratelimit.Policy{
		{Name: "evs-log", Algorithm: ratelimit.SlidingWindowLog, Limit: 3, Window: 2 * time.Millisecond},
		{Name: "evs-tb", Algorithm: ratelimit.TokenBucket, Limit: 2, Window: 2 * time.Millisecond, Burst: 3},
		{Name: "evs-lb", Algorithm: ratelimit.LeakyBucket, Limit: 4, Window: 2 * time.Millisecond, Queue: 2},
	}
	for _, pc := range cases {
		t.Run(pc.Algorithm.String(), func(t *testing.T) {
			t.Parallel()
			p := ratelimit.MustPolicy(pc)
			m := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{MaxKeys: 2, SweepInterval: -1})
			defer m.Close()
			const keys = 6
			var clock atomic.Int64
			var mu sync.Mutex
			got := make([][]time.Time, keys) // admitted times, or departures
			var wg sync.WaitGroup
			for w := range 8 {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(w), 11))
					for range 600 {
						at := clock.Add(int64(10*time.Microsecond)) - rng.Int64N(int64(200*time.Microsecond))
						now := t0.Add(time.Duration(at) + time.Millisecond)
						if rng.IntN(25) == 0 {
							m.Sweep(now)
							continue
						}
						k := rng.IntN(keys)
						reqs := []ratelimit.Request{{Policy: p, Key: fmt.Sprint("k", k)}}
						var out [1]ratelimit.Decision
						if err := m.Decide(context.Background(), now, reqs, out[:]); err != nil {
							t.Errorf("deciding: %v", err)
							return
						}
						if out[0].Allowed {
							mu.Lock()
							got[k] = append(got[k], now.Add(out[0].Delay))
							mu.Unlock()
						}
					}
				})
			}
			wg.Wait()
			for k, ts := range got {
				slices.SortFunc(ts, time.Time.Compare)
				for i := range ts {
					for j := i; j < len(ts); j++ {
						span := ts[j].Sub(ts[i])
						n := int64(j - i + 1)
						switch p.Algorithm {
						case ratelimit.SlidingWindowLog:
							if span < p.Window && n > p.Limit {
								t.Fatalf("k%d: got %d admitted in %v, want at most %d in any window", k, n, span, p.Limit)
							}
						case ratelimit.TokenBucket:
							if most := p.Burst + int64(span/p.Interval()); n > most {
								t.Fatalf("k%d: got %d admitted in %v, want at most %d", k, n, span, most)
							}
						case ratelimit.LeakyBucket:
							if j == i+1 && span < p.Interval() {
								t.Fatalf("k%d: got departures %v apart, want at least %v", k, span, p.Interval())
							}
						}
					}
				}
			}
		})
	}
}

// TestEvictedLogJudgesLateRequests evicts a full sliding_window_log
// bucket, makes it again once its entries have left the window, and then
// decides a request that comes late, at a time its old entries still
// count for: it must be rejected, as the bucket that stayed would reject
// it, whether the record of evicted buckets still held the bucket's entry
// or another eviction had taken its way meanwhile.
func TestEvictedLogJudgesLateRequests(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	p := ratelimit.MustPolicy(ratelimit.Policy{Name: "late-log", Algorithm: ratelimit.SlidingWindowLog, Limit: 3, Window: 2 * ms})
	type step struct {
		key  string
		at   time.Duration
		want bool
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"record entry passed", []step{
			{"b", 100 * time.Microsecond, true}, // evicts a, full until 2ms
			{"a", 2*ms + time.Microsecond, true},
			{"a", 1900 * time.Microsecond, false}, // its window holds the 3 at 0
		}},
		{"record way taken", []step{
			{"b", 100 * time.Microsecond, true},  // evicts a, full until 2ms
			{"c", 2050 * time.Microsecond, true}, // evicts b into a's way
			{"a", 2100 * time.Microsecond, true},
			{"a", 1950 * time.Microsecond, false},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{MaxKeys: 1, SweepInterval: -1})
			defer m.Close()
			decide := func(key string, at time.Duration) bool {
				var out [1]ratelimit.Decision
				if err := m.Decide(context.Background(), t0.Add(at), []ratelimit.Request{{Policy: p, Key: key}}, out[:]); err != nil {
					t.Fatal(err)
				}
				return out[0].Allowed
			}
			for range 3 {
				if !decide("a", 0) {
					t.Fatal("a at 0: got rejected, want admitted")
				}
			}
			for _, s := range tc.steps {
				if got := decide(s.key, s.at); got != s.want {
					t.Errorf("%s at %v: got allowed %v, want %v", s.key, s.at, got, s.want)
				}
			}
		})
	}
}
