package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// TestLeasedUnitNotSpentAfterItsWindowEnds: a route with a leased
// fixed_window P and a second limit decided after it (a per-request limit,
// or a second leased limit whose lease is empty). P's unit is taken from
// the local lease first; the other limit's round trip may end after P's
// window k has. A request admitted then must not be admitted on a unit
// counted in window k, while another instance spends window k+1's whole
// budget: window k+1 admits at most limit (SPEC §9 Exactness; README
// "Leases": "Units are spent only in the window they were counted in").
// Redis is paused across the boundary so that every such round trip ends
// in window k+1.
func TestLeasedUnitNotSpentAfterItsWindowEnds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		second func(t *testing.T) *ratelimit.Policy
	}{
		{"per-request second limit", func(t *testing.T) *ratelimit.Policy {
			return policyOf(t, "r", ratelimit.FixedWindow, 1_000_000, time.Hour)
		}},
		{"leased second limit", func(t *testing.T) *ratelimit.Policy {
			return leasePolicy(t, "q", ratelimit.FixedWindow, 1_000_000, time.Hour)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			const window = 2 * time.Second
			const limit = 10000
			mk := func() *Store {
				s, err := New(context.Background(), Options{Addresses: []string{srv.Addr()}, Timeout: 3 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				if _, ok := waitFor(10*time.Second, s.Healthy); !ok {
					t.Fatal("store not healthy")
				}
				return s
			}
			a, b := mk(), mk()
			t.Cleanup(func() { b.Close() })
			for _, s := range []*Store{a, b} {
				s.startHeartbeat()
			}
			a.beat(false)
			b.beat(false)

			p := leasePolicy(t, "p", ratelimit.FixedWindow, limit, window)
			rp := ratelimit.Request{Policy: p, Key: "global"}
			rq := ratelimit.Request{Policy: tc.second(t), Key: "global"}

			w := int64(window / time.Microsecond)
			for {
				us := time.Now().UnixMicro()
				if off := us % w; off > 100_000 && off < 300_000 {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			startK := time.Now().UnixMicro() / w * w
			boundary := time.UnixMicro(startK + w)

			out := make([]ratelimit.Decision, 1)
			for range 3000 {
				if err := a.Decide(context.Background(), time.Now(), []ratelimit.Request{rp}, out); err != nil {
					t.Fatal(err)
				}
			}
			for time.Until(boundary) > 40*time.Millisecond {
				if err := a.Decide(context.Background(), time.Now(), []ratelimit.Request{rp}, out); err != nil {
					t.Fatal(err)
				}
				time.Sleep(2 * time.Millisecond)
			}
			// The second limit's state exists already (per-request) or
			// its lease is empty (leased): either way its decision needs
			// Redis, which is slow until 100ms after the window's end.
			srv.Pause()
			var stale, fresh atomic.Int64
			var wg sync.WaitGroup
			for range 200 {
				wg.Go(func() {
					out := make([]ratelimit.Decision, 2)
					if err := a.Decide(context.Background(), time.Now(), []ratelimit.Request{rp, rq}, out); err != nil {
						t.Error(err)
						return
					}
					if out[0].Allowed && out[1].Allowed {
						if time.Now().Before(boundary) {
							return
						}
						if out[0].Ticket.At == startK {
							stale.Add(1)
						} else {
							fresh.Add(1)
						}
					}
				})
			}
			time.Sleep(time.Until(boundary.Add(100 * time.Millisecond)))
			srv.Resume()
			wg.Wait()
			a.Close()
			var admittedB int64
			for misses := 0; misses < 50 && time.Now().Before(boundary.Add(window-200*time.Millisecond)); {
				if err := b.Decide(context.Background(), time.Now(), []ratelimit.Request{rp}, out); err != nil {
					t.Fatal(err)
				}
				if out[0].Allowed {
					admittedB++
				} else {
					misses++
				}
			}
			if time.Now().After(boundary.Add(window)) {
				t.Fatalf("draining ran past window k+1")
			}
			total := stale.Load() + fresh.Load() + admittedB
			t.Logf("in window k+1: A admitted %d on units of window k and %d on k+1; B %d; total %d (limit %d)", stale.Load(), fresh.Load(), admittedB, total, limit)
			if stale.Load() > 0 {
				t.Errorf("%d requests admitted after window k ended on P units counted in window k", stale.Load())
			}
			if total > limit {
				t.Errorf("window k+1 admitted %d, want at most limit %d", total, limit)
			}
		})
	}
}
