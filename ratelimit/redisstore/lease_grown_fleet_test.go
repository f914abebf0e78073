package redisstore

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// TestLeaseRefillAfterFleetGrew: an instance that built up a batch while
// alone holds more than its share once others join (N grows). Its next
// refill has nothing to ask for; it must not make a round trip for
// nothing, and every round trip a leased policy makes is counted in
// sluice_ratelimit_lease_requests_total (OnLease).
func TestLeaseRefillAfterFleetGrew(t *testing.T) {
	srv := redistest.Start(t)
	var trips, counted atomic.Int64
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, CallerTime: true, Timeout: time.Second,
		Observe: func(time.Duration, error) { trips.Add(1) },
		OnLease: func(string, string) { counted.Add(1) }})
	s.RetireLeases() // no heartbeats: N is set below
	s.seen.Store(1)
	r := ratelimit.Request{Policy: leasePolicy(t, "grown", ratelimit.FixedWindow, 1000, time.Hour), Key: "k"}
	t0 := time.Unix(1_700_000_000, 0)
	i := 0
	decide := func(n int) {
		for range n {
			if !decide1(t, s, t0.Add(time.Duration(i)*time.Millisecond), r)[0].Allowed {
				t.Fatalf("request %d rejected far below the limit", i)
			}
			s.refills.Wait()
			i++
		}
	}
	decide(300) // 1000 a second: batches of about 40, within 1000/10
	s.seen.Store(10)
	before, beforeCounted := trips.Load(), counted.Load()
	decide(20)
	got, gotCounted := trips.Load()-before, counted.Load()-beforeCounted
	if got != gotCounted {
		t.Errorf("after N grew: %d Redis round trips, %d counted as lease requests, want every one counted", got, gotCounted)
	}
	if got > 2 {
		t.Errorf("after N grew: %d Redis round trips for 20 requests, want at most 2", got)
	}
}

// TestLeaseHoldingShrinksWhenFleetGrows tries to break the README's bound
// on what all instances hold at once, max(N, capacity / 10): an instance
// that was alone builds up a holding sized for N = 1, then nine more join
// and lease too. Once each has seen N = 10 (at its next heartbeat), what
// the first holds past its new share goes back, so that the fleet's
// leases stay within the bound whether its own traffic goes on or stops.
func TestLeaseHoldingShrinksWhenFleetGrows(t *testing.T) {
	for _, tc := range []struct {
		name  string
		alg   ratelimit.Algorithm
		quiet bool // the first instance gets no more traffic once others join
	}{
		{"fixed_window", ratelimit.FixedWindow, false},
		{"fixed_window/first quiet", ratelimit.FixedWindow, true},
		{"sliding_window_counter", ratelimit.SlidingWindowCounter, false},
		{"token_bucket", ratelimit.TokenBucket, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			f := newLeaseFleet(t, srv, 1)
			p := leasePolicy(t, "grown-"+tc.name, tc.alg, 1000, time.Hour)
			r := ratelimit.Request{Policy: p, Key: "k"}
			t0 := time.Unix(1_700_000_000, 0)
			at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Millisecond) }
			i := 0
			// 1000 a second through the first alone, until it holds
			// most of what one alone may: 100, a tenth of the limit.
			alone, admitted := int64(0), int64(0)
			for ; i < 300 || (alone < 60 && i < 2000); i++ {
				admitted++
				if !decide1(t, f.stores[0], at(i), r)[0].Allowed {
					t.Fatalf("request %d rejected far below the limit", i)
				}
				f.stores[0].refills.Wait()
				alone = f.held(r, at(i+1))
			}
			for range 9 {
				s := newStore(t, Options{Addresses: []string{srv.Addr()}, CallerTime: true, Timeout: time.Second})
				s.startHeartbeat()
				f.stores = append(f.stores, s)
			}
			// Every instance has had a beat since the last joined:
			// each sees N = 10.
			for _, s := range f.stores {
				s.beat(false)
				s.refills.Wait()
				if got := s.Instances(); got != 10 {
					t.Fatalf("instances seen: got %d, want 10", got)
				}
			}
			bound := heldBound(p, 10)
			worst := int64(0)
			for range 1000 {
				k := i % 10
				if tc.quiet {
					k = 1 + i%9
				}
				if decide1(t, f.stores[k], at(i), r)[0].Allowed {
					admitted++
				}
				f.stores[k].refills.Wait()
				i++
				worst = max(worst, f.held(r, at(i)))
			}
			t.Logf("the first held %d alone; the ten held at most %d at once", alone, worst)
			if alone < 60 {
				t.Fatalf("the first held %d alone, want at least 60: the test proves nothing", alone)
			}
			if worst > bound {
				t.Errorf("leases held %d units at once, want at most max(N, capacity / 10) = %d", worst, bound)
			}
			if tc.alg == ratelimit.FixedWindow {
				// What went past the share went back to Redis, not
				// lost: the count is what was admitted and what the
				// leases hold.
				var st, count int64
				if _, err := fmt.Sscan(srv.Do("GET", Key("", r)), &st, &count); err != nil {
					t.Fatal(err)
				}
				if held := f.held(r, at(i)); count != admitted+held {
					t.Errorf("Redis counts %d, want the %d admitted and the %d held", count, admitted, held)
				}
			}
		})
	}
}

// TestLeaseTrimLeavesARunOutHoldingAlone: a lease whose holding has run
// out (its window ended, its traffic stopped) holds nothing, whatever
// units it still lists. When N grows, the heartbeat's trim has nothing to
// give back there, and must not fetch the idle lease a fresh batch in the
// background, budget the other instances then cannot have.
func TestLeaseTrimLeavesARunOutHoldingAlone(t *testing.T) {
	srv := redistest.Start(t)
	var granted atomic.Int64
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: time.Second,
		OnLease: func(_, result string) {
			if result == "granted" {
				granted.Add(1)
			}
		}})
	s.RetireLeases() // no heartbeats: N is set below
	s.seen.Store(1)
	r := ratelimit.Request{Policy: leasePolicy(t, "run-out", ratelimit.FixedWindow, 1000, time.Hour), Key: "k"}
	l := growLease(t, s, r, func(int) time.Time { return time.Now() })
	l.mu.Lock()
	if l.units <= maxBatch(r.Policy, 10) {
		l.mu.Unlock()
		t.Fatalf("the lease holds %d, want more than the share among 10: the test proves nothing", l.units)
	}
	// The holding runs out: as when its window ends with no request
	// since.
	l.deadline = time.Now().Add(-time.Millisecond)
	l.mu.Unlock()
	before := granted.Load()
	s.seen.Store(10)
	s.trimLeases()
	s.refills.Wait()
	if got := granted.Load() - before; got != 0 {
		t.Errorf("the trim made %d grants to a lease whose holding had run out, want none", got)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := time.Now(); now.Before(l.deadline) && l.units > 0 {
		t.Errorf("after the trim the run-out lease holds %d units until %v, want none", l.units, l.deadline.Sub(now))
	}
}

// TestLeaseTrimWithUnitsOfAnEndedWindowToGiveBack: a refill whose script
// ran in the next window (on the server's clock, a call made just before
// the window's end) leaves the lease with the units of the ended window
// to give back and the new window's grant. When N grows before its next
// call, the trim must still bring what it holds down to its share: no
// later call would (a refill is not started while the lease holds its
// share or more).
func TestLeaseTrimWithUnitsOfAnEndedWindowToGiveBack(t *testing.T) {
	s, l, share := leaseOverShare(t, "ended")
	l.mu.Lock()
	// Units of the window before, to give back with the next call.
	l.back, l.backMark = 3, l.mark-micros(time.Hour)
	l.mu.Unlock()
	s.seen.Store(10)
	s.trimLeases()
	s.refills.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.units > share {
		t.Errorf("after the trim the lease holds %d, want at most its share among 10, %d", l.units, share)
	}
}

// leaseOverShare returns a store that sees one instance, with a
// fixed_window lease of 1,000 an hour for the policy name grown past its
// share among 10 instances, and that share.
func leaseOverShare(t *testing.T, name string) (*Store, *lease, int64) {
	t.Helper()
	srv := redistest.Start(t)
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, CallerTime: true, Timeout: time.Second})
	s.RetireLeases() // no heartbeats: N is set below
	s.seen.Store(1)
	r := ratelimit.Request{Policy: leasePolicy(t, name, ratelimit.FixedWindow, 1000, time.Hour), Key: "k"}
	t0 := time.Unix(1_700_000_000, 0)
	l := growLease(t, s, r, func(i int) time.Time { return t0.Add(time.Duration(i) * time.Millisecond) })
	share := maxBatch(r.Policy, 10)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.units <= share {
		t.Fatalf("the lease holds %d, want more than the share among 10 (%d): the test proves nothing", l.units, share)
	}
	return s, l, share
}

// growLease admits r's requests, the i-th at at(i), until its lease holds
// more than its share among 10 instances (or 2,000 were admitted), and
// returns the lease.
func growLease(t *testing.T, s *Store, r ratelimit.Request, at func(i int) time.Time) *lease {
	t.Helper()
	var l *lease
	for i := 0; i < 2000; i++ {
		if !decide1(t, s, at(i), r)[0].Allowed {
			t.Fatalf("request %d rejected far below the limit", i)
		}
		s.refills.Wait()
		s.leases.mu.Lock()
		l = s.leases.m[Key(s.prefix, r)]
		s.leases.mu.Unlock()
		l.mu.Lock()
		units := l.units
		l.mu.Unlock()
		if units > maxBatch(r.Policy, 10) {
			break
		}
	}
	return l
}

// TestLeaseTrimOfAGoneLease: the heartbeat's trim picks a lease and
// starts its call in the background; a Reset (DELETE /v1/limits) or the
// idle sweep may drop the lease between the two, taking what it holds.
// The call then has nothing to trim and nothing to report: it must make
// no grant, which the dropped lease would never spend and the bucket
// would count (a fresh one, after a Reset) until the window's end.
func TestLeaseTrimOfAGoneLease(t *testing.T) {
	for _, how := range []string{"reset", "idle"} {
		t.Run(how, func(t *testing.T) {
			srv := redistest.Start(t)
			var granted atomic.Int64
			s := newStore(t, Options{Addresses: []string{srv.Addr()}, CallerTime: true, Timeout: time.Second,
				OnLease: func(_, result string) {
					if result == "granted" {
						granted.Add(1)
					}
				}})
			s.RetireLeases() // no heartbeats: N is set below
			s.seen.Store(1)
			r := ratelimit.Request{Policy: leasePolicy(t, "gone-"+how, ratelimit.FixedWindow, 1000, time.Hour), Key: "k"}
			t0 := time.Unix(1_700_000_000, 0)
			l := growLease(t, s, r, func(i int) time.Time { return t0.Add(time.Duration(i) * time.Millisecond) })
			s.seen.Store(10)
			// As trimLeases does, up to the start of its call.
			l.mu.Lock()
			if l.units <= maxBatch(r.Policy, 10) {
				l.mu.Unlock()
				t.Fatalf("the lease holds %d, want more than the share among 10: the test proves nothing", l.units)
			}
			now := l.lastNow
			l.inflight = make(chan struct{})
			l.mu.Unlock()
			c := s.client.Load()
			switch how {
			case "reset":
				if err := s.Reset(context.Background(), r); err != nil {
					t.Fatal(err)
				}
			case "idle":
				s.leases.drop(l.key)
				s.returnLeases(context.Background(), *c, []*lease{l})
			}
			var before string
			if how == "idle" {
				before = srv.Do("GET", Key("", r))
			}
			beforeGranted := granted.Load()
			if err := s.refill(context.Background(), *c, l, now); err != nil {
				t.Fatal(err)
			}
			if got := granted.Load() - beforeGranted; got != 0 {
				t.Errorf("the trim of a dropped lease made %d grants, want none", got)
			}
			if got := srv.Do("GET", Key("", r)); got != before {
				t.Errorf("after the trim of a dropped lease Redis holds %q, want %q: units no lease will spend", got, before)
			}
		})
	}
}

// TestLeaseTrimAfterACallInFlight: when the heartbeat sees N grow, a lease
// may have a refill on its way, planned for the instances seen before:
// the lease ends up holding up to the old share. The trim must still
// bring it to the new one once that call is back; no later call would (a
// refill is not started while the lease holds its share or more).
func TestLeaseTrimAfterACallInFlight(t *testing.T) {
	s, l, share := leaseOverShare(t, "in-flight")
	// A call on its way as N grows.
	l.mu.Lock()
	ch := make(chan struct{})
	l.inflight = ch
	l.mu.Unlock()
	s.seen.Store(10)
	s.trimLeases()
	// The call comes back.
	l.mu.Lock()
	close(ch)
	l.inflight = nil
	l.mu.Unlock()
	s.refills.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.units > share {
		t.Errorf("after the trim the lease holds %d, want at most its share among 10, %d", l.units, share)
	}
}
