package ratelimit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// chaosKeys is how many keys the chaos tests spread requests over: more
// than the store keeps (chaosMaxKeys), so buckets are evicted and come
// back while others decide, settle and sweep.
const (
	chaosKeys    = 7
	chaosMaxKeys = 3
)

// chaosPolicies are held policies of every algorithm count_status allows,
// whose budgets do not grow during the test (an hour's window, decisions
// a few ms apart), each on a route beside a gate that rejects some
// requests.
func chaosPolicies(prefix string) (ps []*Policy, gate *Policy) {
	for _, a := range []Algorithm{TokenBucket, FixedWindow, SlidingWindowLog, SlidingWindowCounter} {
		p := Policy{Name: prefix + a.String(), Algorithm: a, Limit: 6, Window: time.Hour, Hold: true}
		if a == TokenBucket {
			p.Limit = 1 // a token an hour
			p.Burst = 6
		}
		ps = append(ps, MustPolicy(p))
	}
	gate = MustPolicy(Policy{Name: prefix + "gate", Algorithm: FixedWindow, Limit: 40, Window: time.Hour})
	return ps, gate
}

// chaosClock is the chaos tests' real time, which Reset reads: that of
// their decisions.
func chaosClock() time.Time { return time.Date(2026, 1, 1, 10, 0, 0, int(time.Millisecond), time.UTC) }

// chaos runs workers that decide requests of a held policy and the gate
// on random keys at times a little apart, and settle each admitted one:
// kept or refunded. Sweeps, peeks and, when reset is set, resets run
// among them. It returns, per policy and key, the units kept.
func chaos(t *testing.T, m *MemoryStore, ps []*Policy, gate *Policy, reset bool) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	var clock atomic.Int64
	var mu sync.Mutex
	kept := map[string]int64{}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range 400 {
				// Decision times run a little out of order.
				now := t0.Add(time.Duration(clock.Add(int64(time.Microsecond))-rng.Int64N(int64(50*time.Microsecond))) + time.Millisecond)
				p := ps[rng.IntN(len(ps))]
				key := fmt.Sprint("k", rng.IntN(chaosKeys))
				switch rng.IntN(20) {
				case 0:
					m.Sweep(now)
					continue
				case 1:
					if _, err := m.Peek(ctx, now, Request{p, key}); err != nil {
						t.Errorf("peeking: %v", err)
					}
					continue
				case 2:
					if reset {
						if err := m.Reset(ctx, Request{p, key}); err != nil {
							t.Errorf("resetting: %v", err)
						}
					}
					continue
				}
				reqs := []Request{{p, key}, {gate, key}}
				if rng.IntN(2) == 0 {
					reqs[0], reqs[1] = reqs[1], reqs[0]
				}
				if rng.IntN(3) == 0 {
					reqs = reqs[:1] // alone, on the lock-free path
					if reqs[0].Policy == gate {
						reqs[0].Policy = p
					}
				}
				ds := make([]Decision, len(reqs))
				if err := m.Decide(ctx, now, reqs, ds); err != nil {
					t.Errorf("deciding: %v", err)
					continue
				}
				if !Admitted(reqs, ds) {
					continue
				}
				j := slices.IndexFunc(reqs, func(r Request) bool { return r.Policy == p })
				settle := m.Refund
				if rng.IntN(3) == 0 {
					settle = m.Keep
					mu.Lock()
					kept[p.Name+"/"+key]++
					mu.Unlock()
				}
				if err := settle(ctx, now, reqs[j:j+1], ds[j:j+1]); err != nil {
					t.Errorf("settling: %v", err)
				}
			}
		})
	}
	wg.Wait()
	return kept
}

// TestChaosNeverOverAdmits runs decisions, refunds, keeps, peeks and
// sweeps at once on more keys than the store keeps, with no resets: each
// bucket may come back from its eviction emptier than it was, never
// fuller, so it ends with at least the kept units spent, and no key
// keeps more than its limit.
func TestChaosNeverOverAdmits(t *testing.T) {
	t.Parallel()
	m := NewMemoryStore(MemoryOptions{MaxKeys: chaosMaxKeys, SweepInterval: -1, Clock: chaosClock})
	defer m.Close()
	ps, gate := chaosPolicies("chaos-")
	kept := chaos(t, m, ps, gate, false)
	end := time.Date(2026, 1, 1, 10, 0, 1, 0, time.UTC)
	for _, p := range ps {
		for k := range chaosKeys {
			key := fmt.Sprint("k", k)
			n := kept[p.Name+"/"+key]
			if n > p.Capacity() {
				t.Errorf("%s/%s: got %d units kept, want at most %d", p.Name, key, n, p.Capacity())
			}
			d, _ := m.Peek(context.Background(), end, Request{p, key})
			if spent := p.Capacity() - d.Remaining; spent < n {
				t.Errorf("%s/%s: got %d units spent, want at least the %d kept", p.Name, key, spent, n)
			}
		}
	}
}

// TestChaosExactWithoutEviction is TestChaosNeverOverAdmits with room for
// every bucket: then each ends with exactly the kept units spent.
func TestChaosExactWithoutEviction(t *testing.T) {
	t.Parallel()
	m := NewMemoryStore(MemoryOptions{SweepInterval: -1, Clock: chaosClock})
	defer m.Close()
	ps, gate := chaosPolicies("exact-")
	kept := chaos(t, m, ps, gate, false)
	end := time.Date(2026, 1, 1, 10, 0, 1, 0, time.UTC)
	for _, p := range ps {
		for k := range chaosKeys {
			key := fmt.Sprint("k", k)
			d, _ := m.Peek(context.Background(), end, Request{p, key})
			if spent, want := p.Capacity()-d.Remaining, kept[p.Name+"/"+key]; spent != want {
				t.Errorf("%s/%s: got %d units spent, want the %d kept", p.Name, key, spent, want)
			}
		}
	}
}

// TestChaosWithResets adds resets to the chaos: no panic, no race, and
// every bucket's budget stays within [0, capacity].
func TestChaosWithResets(t *testing.T) {
	t.Parallel()
	m := NewMemoryStore(MemoryOptions{MaxKeys: chaosMaxKeys, SweepInterval: -1, Clock: chaosClock})
	defer m.Close()
	ps, gate := chaosPolicies("chaos-reset-")
	chaos(t, m, ps, gate, true)
	end := time.Date(2026, 1, 1, 10, 0, 1, 0, time.UTC)
	for _, p := range ps {
		for k := range chaosKeys {
			key := fmt.Sprint("k", k)
			d, _ := m.Peek(context.Background(), end, Request{p, key})
			if d.Remaining < 0 || d.Remaining > p.Capacity() {
				t.Errorf("%s/%s: got remaining %d, want within [0, %d]", p.Name, key, d.Remaining, p.Capacity())
			}
		}
	}
}
