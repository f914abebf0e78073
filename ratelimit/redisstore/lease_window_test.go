package redisstore

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// TestLeaseUnitsNotSpentAfterWindowEnd: a route with two leased limits, a
// fixed_window P (limit 10000 per 2s) whose lease holds units of window k,
// and a second leased limit Q taken first. Requests that arrive just
// before the end of window k find Q's lease empty; its refill is a round
// trip that Redis answers after the window has ended (a slow Redis here:
// SIGSTOP for 150ms). P is then taken with the requests' decision time
// (from before the round trip), which is still before the lease's
// deadline, so units counted in window k are spent in window k+1, while
// another instance spends window k+1's whole budget: more than limit
// admissions in window k+1. README "Leases": "an instance spends a unit
// only before the local deadline ... Units are spent only in the window
// they were counted in".
func TestLeaseUnitsNotSpentAfterWindowEnd(t *testing.T) {
	const limit = 10000
	run := startBoundaryRun(t, 2*time.Second)
	a, srv, boundary, startK := run.a, run.srv, run.boundary, run.startK
	p := leasePolicy(t, "p", ratelimit.FixedWindow, limit, run.window)
	q := leasePolicy(t, "q", ratelimit.FixedWindow, 1_000_000, time.Hour)
	rp := ratelimit.Request{Policy: p, Key: "global"}
	rq := ratelimit.Request{Policy: q, Key: "global"}
	// Instance A serves P's traffic in window k: its lease grows, and
	// steady traffic keeps it until requests arrive 40ms before window k
	// ends; Redis is slow to answer Q's refill, until 100ms after the end.
	run.fillUntilBoundary(t, rp)
	now0 := time.Now()
	srv.Pause()
	var stale, fresh atomic.Int64
	var wg sync.WaitGroup
	for range 400 {
		wg.Go(func() {
			out := make([]ratelimit.Decision, 2)
			if err := a.Decide(context.Background(), now0, []ratelimit.Request{rq, rp}, out); err != nil {
				t.Error(err)
				return
			}
			if out[0].Allowed && out[1].Allowed {
				if out[1].Ticket.At == startK {
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
	resumed := time.Now()
	if !resumed.After(boundary) {
		t.Fatalf("resumed before the window's end")
	}
	// A goes away (its unspent units of window k+1 go back); B then takes
	// what Redis has of window k+1.
	admittedB := run.drainB(t, rp)
	// Every admission counted here happened after window k ended (Redis
	// answered Q's refill only after the end) and before window k+1 did.
	total := stale.Load() + fresh.Load() + admittedB
	t.Logf("in window k+1: A spent %d units of window k and %d of k+1; B %d; total %d (limit %d)", stale.Load(), fresh.Load(), admittedB, total, limit)
	if stale.Load() > 0 {
		t.Errorf("%d units counted in window k were spent after window k ended", stale.Load())
	}
	if total > limit {
		t.Errorf("window k+1 admitted %d > limit %d", total, limit)
	}
}

// TestTakeOneReportsSpent: past maxLeases leases, a leased token_bucket
// decision takes one unit with a call of its own (takeOne). Were its
// units never reported spent, each grant would renew the instance's whole
// holding in Redis, which grows by one per admission and caps the refill
// at burst minus it: the bucket would stall for a second after every
// burst's worth (a token bucket of 10/s, burst 10, sent 50/s for 3s
// admitted 20, not 40).
func TestTakeOneReportsSpent(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, CallerTime: true})
	s.startHeartbeat()
	p := leasePolicy(t, "tb", ratelimit.TokenBucket, 10, time.Second)
	// The table is full (65,536 other keys in use).
	s.leases.mu.Lock()
	s.leases.m = make(map[string]*lease, maxLeases)
	for i := range maxLeases {
		k := "other" + strconv.Itoa(i)
		s.leases.m[k] = &lease{key: k, lastUse: time.Now().Add(time.Hour)}
	}
	s.leases.mu.Unlock()
	r := ratelimit.Request{Policy: p, Key: "busy"}
	t0 := time.Unix(1_700_000_000, 0)
	admitted := 0
	for i := range 150 {
		d := decide1(t, s, t0.Add(time.Duration(i)*20*time.Millisecond), r)
		if d[0].Allowed {
			admitted++
		}
	}
	// A token bucket admits burst + rate x 3s = 40 of this traffic.
	if admitted < 36 {
		t.Errorf("admitted %d of 150 requests over 3s at 10/s with burst 10; a token bucket admits 40", admitted)
	}
}
