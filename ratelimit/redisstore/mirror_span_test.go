package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// spanPolicies returns policies of every algorithm with windows, limits,
// bursts, queues and waits from a few microseconds up to MaxSpan, and
// counts up to 2^40: beyond 104 days a span in nanoseconds no longer fits
// a double exactly, while in microseconds it does.
func spanPolicies(r *rand.Rand, n int) []*ratelimit.Policy {
	windows := []time.Duration{7 * time.Microsecond, time.Second, time.Hour, 24 * time.Hour, 200 * 24 * time.Hour, 365 * 24 * time.Hour, 10 * 365 * 24 * time.Hour, ratelimit.MaxSpan}
	counts := []int64{1, 2, 3, 7, 1000, 1000000, 1 << 40}
	var ps []*ratelimit.Policy
	for len(ps) < n {
		alg := ratelimit.Algorithms[len(ps)%len(ratelimit.Algorithms)]
		p := ratelimit.Policy{Name: fmt.Sprintf("p%d", len(ps)), Algorithm: alg, Limit: counts[r.IntN(len(counts))], Window: windows[r.IntN(len(windows))]}
		switch alg {
		case ratelimit.TokenBucket:
			p.Burst = counts[r.IntN(len(counts))]
		case ratelimit.LeakyBucket:
			p.Queue = counts[r.IntN(len(counts))]
			if r.IntN(2) == 0 {
				p.MaxWait = windows[r.IntN(len(windows))]
			}
		}
		if c, err := ratelimit.NewPolicy(p); err == nil {
			ps = append(ps, c)
		}
	}
	return ps
}

// TestMirrorsMemoryStoreOverLongSpans replays random traffic through the
// Redis store and the memory store, as TestMirrorsMemoryStore does, with
// policies whose spans reach MaxSpan, and wants identical decisions, to
// the nanosecond: every duration is a whole number of microseconds.
func TestMirrorsMemoryStoreOverLongSpans(t *testing.T) {
	srv := redistest.Start(t)
	for seed := range uint64(6) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(seed, 7))
			rs := newStore(t, Options{Addresses: []string{srv.Addr()}, CallerTime: true, KeyPrefix: fmt.Sprintf("span%d:", seed)})
			ms := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{SweepInterval: -1})
			defer ms.Close()
			ps := spanPolicies(r, 12)
			ctx := context.Background()
			now := t0
			for step := range 1500 {
				p := ps[r.IntN(len(ps))]
				switch x := r.IntN(10); {
				case x < 4:
				case x < 6:
					now = now.Add(time.Duration(r.Int64N(int64(p.Window)/2 + 1)))
				case x < 7:
					now = now.Add(time.Duration(r.Int64N(min(int64(p.Interval()), int64(ratelimit.MaxSpan)/4)*3 + 1)))
				default:
					now = now.Add(time.Duration(r.IntN(3)) * time.Microsecond)
				}
				if now.Year() > 2120 {
					// Back, as a clock may step, but within what a
					// span after it can reach in int64 nanoseconds.
					now = t0.Add(time.Duration(r.Int64N(int64(ratelimit.MaxSpan))))
				}
				now = now.Truncate(time.Microsecond)
				reqs := []ratelimit.Request{{Policy: p, Key: fmt.Sprint("k", r.IntN(2))}}
				want := make([]ratelimit.Decision, 1)
				got := make([]ratelimit.Decision, 1)
				if err := ms.Decide(ctx, now, reqs, want); err != nil {
					t.Fatal(err)
				}
				if err := rs.Decide(ctx, now, reqs, got); err != nil {
					t.Fatal(err)
				}
				if !rs.Healthy() {
					t.Fatalf("step %d: store unhealthy: %v", step, rs.LastError())
				}
				if !sameDecision(got[0], want[0]) {
					t.Fatalf("step %d %s %+v at %v: got %+v, want %+v", step, p.Name, p.Settings(), now, got[0], want[0])
				}
			}
		})
	}
}
