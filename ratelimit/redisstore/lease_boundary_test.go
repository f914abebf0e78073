package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
			const limit = 10000
			run := startBoundaryRun(t, 2*time.Second)
			a, srv, boundary, startK := run.a, run.srv, run.boundary, run.startK
			p := leasePolicy(t, "p", ratelimit.FixedWindow, limit, run.window)
			rp := ratelimit.Request{Policy: p, Key: "global"}
			rq := ratelimit.Request{Policy: tc.second(t), Key: "global"}
			run.fillUntilBoundary(t, rp)
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
			admittedB := run.drainB(t, rp)
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
