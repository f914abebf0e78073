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

// t0 is a window boundary for every window the tests use.
var t0 = time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)

// testTimeout bounds the round trips of stores in tests that check what is
// decided, not how fast: a first call on a loaded machine, which loads the
// scripts or learns a cluster's slots, can take longer than the 50ms
// default. Tests of timeouts set their own.
const testTimeout = 2 * time.Second

func newStore(t testing.TB, o Options) *Store {
	t.Helper()
	if o.Timeout == 0 {
		o.Timeout = testTimeout
	}
	s, err := New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	// A loaded machine can make the first connection outlast its
	// timeout; the store's prober then connects, as it would in service.
	if _, ok := waitFor(10*time.Second, s.Healthy); !ok {
		t.Fatalf("new store not healthy after 10s: %v", s.LastError())
	}
	return s
}

// mirrorPolicies returns policies of every algorithm whose windows and
// intervals are whole microseconds, so the Redis scripts and the steps
// compute the very same numbers.
func mirrorPolicies(r *rand.Rand, n int) []*ratelimit.Policy {
	var ps []*ratelimit.Policy
	for i := range n {
		alg := ratelimit.Algorithms[i%len(ratelimit.Algorithms)]
		limit := int64(1 + r.IntN(8))
		window := time.Duration(limit*int64(1+r.IntN(50))) * time.Millisecond
		p := ratelimit.Policy{Name: fmt.Sprintf("p%d", i), Algorithm: alg, Limit: limit, Window: window}
		switch alg {
		case ratelimit.TokenBucket:
			p.Burst = int64(r.IntN(10))
			p.Hold = r.IntN(2) == 0
		case ratelimit.LeakyBucket:
			p.Queue = int64(r.IntN(6))
			if r.IntN(2) == 0 {
				p.MaxWait = time.Duration(r.IntN(int(p.Queue+1)*int(window/time.Millisecond)/int(limit)+1)) * time.Millisecond
			}
		}
		if r.IntN(3) == 0 {
			p.Block = time.Duration(1+r.IntN(500)) * time.Millisecond
		}
		ps = append(ps, ratelimit.MustPolicy(p))
	}
	return ps
}

func sameDecision(got, want ratelimit.Decision) bool {
	return got.Allowed == want.Allowed && got.Limit == want.Limit && got.Remaining == want.Remaining &&
		got.RetryAfter == want.RetryAfter && got.Reset == want.Reset && got.Delay == want.Delay &&
		got.Departure.Equal(want.Departure) && got.Blocked == want.Blocked
}

// TestMirrorsMemoryStore replays random traffic, single limits and
// combinations with shadows and blocks, with units given back now and
// then, through the Redis store and the memory store (the steps
// themselves) and wants identical decisions.
func TestMirrorsMemoryStore(t *testing.T) {
	srv := redistest.Start(t)
	runMirror(t, Options{Addresses: []string{srv.Addr()}}, 6, 1500)
}

// runMirror runs seeds random sequences of steps requests each through a
// caller-time store with options o and through a memory store.
func runMirror(t *testing.T, o Options, seeds uint64, steps int) {
	for seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(seed, 99))
			o := o
			o.CallerTime, o.KeyPrefix = true, fmt.Sprintf("mirror%d:", seed)
			rs := newStore(t, o)
			ms := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{SweepInterval: -1})
			defer ms.Close()
			ps := mirrorPolicies(r, 10)
			ctx := context.Background()
			now := t0
			// admitted holds recent admitted requests, whose units a
			// refund may give back: the requests and both stores' answers.
			type taken struct {
				reqs      []ratelimit.Request
				got, want []ratelimit.Decision
			}
			var admitted []taken
			for step := range steps {
				if len(admitted) > 0 && r.IntN(8) == 0 {
					i := r.IntN(len(admitted))
					a := admitted[i]
					admitted = append(admitted[:i], admitted[i+1:]...)
					// Refunded, or kept: both end a token_bucket's hold.
					msSettle, rsSettle, what := ms.Refund, rs.Refund, "refund"
					if r.IntN(2) == 0 {
						msSettle, rsSettle, what = ms.Keep, rs.Keep, "keep"
					}
					if err := msSettle(ctx, now, a.reqs, a.want); err != nil {
						t.Fatal(err)
					}
					if err := rsSettle(ctx, now, a.reqs, a.got); err != nil {
						t.Fatal(err)
					}
					for _, q := range a.reqs {
						want, _ := ms.Peek(ctx, now, q)
						got, err := rs.Peek(ctx, now, q)
						if err != nil {
							t.Fatal(err)
						}
						if !sameDecision(got, want) {
							t.Fatalf("step %d after a %s, peek %s %v at +%v: got %+v, want %+v", step, what, q.Policy.Name, q.Policy.Algorithm, now.Sub(t0), got, want)
						}
					}
					continue
				}
				switch x := r.IntN(100); {
				case x < 40:
				case x < 80:
					now = now.Add(time.Duration(r.IntN(20000)) * time.Microsecond)
				case x < 90:
					now = now.Add(time.Duration(r.IntN(400)) * time.Millisecond)
				case x < 95:
					// Odd seeds race harder: arrivals late by up to a
					// window, behind entries already logged or dropped.
					back := 3000
					if seed%2 == 1 {
						back = 150000
					}
					now = now.Add(-time.Duration(r.IntN(back)) * time.Microsecond)
				default:
					now = now.Add(time.Duration(r.IntN(5)) * time.Second)
				}
				n := 1 + r.IntN(3)
				reqs := make([]ratelimit.Request, 0, n)
				leaky := false
				for range n {
					p := ps[r.IntN(len(ps))]
					if p.Algorithm == ratelimit.LeakyBucket {
						if leaky {
							continue
						}
						leaky = true
					}
					if r.IntN(5) == 0 {
						q := *p
						q.Shadow = true
						p = &q
					}
					reqs = append(reqs, ratelimit.Request{Policy: p, Key: fmt.Sprint("k", r.IntN(2))})
				}
				if r.IntN(6) == 0 {
					want, err := ms.Peek(ctx, now, reqs[0])
					if err != nil {
						t.Fatal(err)
					}
					got, err := rs.Peek(ctx, now, reqs[0])
					if err != nil {
						t.Fatal(err)
					}
					if !sameDecision(got, want) {
						t.Fatalf("step %d peek %s %v at +%v: got %+v, want %+v", step, reqs[0].Policy.Name, reqs[0].Policy.Algorithm, now.Sub(t0), got, want)
					}
					continue
				}
				want := make([]ratelimit.Decision, len(reqs))
				got := make([]ratelimit.Decision, len(reqs))
				if err := ms.Decide(ctx, now, reqs, want); err != nil {
					t.Fatal(err)
				}
				if err := rs.Decide(ctx, now, reqs, got); err != nil {
					t.Fatal(err)
				}
				if !rs.Healthy() {
					t.Fatalf("step %d: store unhealthy: %v", step, rs.LastError())
				}
				for i := range reqs {
					if !sameDecision(got[i], want[i]) {
						for j, r := range reqs {
							t.Logf("limit %d: %s %s %+v: got %+v, want %+v", j, r.Policy.Name, r.Key, r.Policy.Settings(), got[j], want[j])
						}
						t.Fatalf("step %d limit %d/%d %s %v (shadow %v) at +%v: got %+v, want %+v",
							step, i, len(reqs), reqs[i].Policy.Name, reqs[i].Policy.Algorithm, reqs[i].Policy.Shadow, now.Sub(t0), got[i], want[i])
					}
				}
				if ratelimit.Admitted(reqs, want) {
					admitted = append(admitted, taken{reqs, got, want})
					if len(admitted) > 8 {
						admitted = admitted[1:]
					}
				}
			}
		})
	}
}
