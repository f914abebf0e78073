package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// leasePolicy compiles a leased policy.
func leasePolicy(t testing.TB, name string, a ratelimit.Algorithm, limit int64, window time.Duration) *ratelimit.Policy {
	t.Helper()
	p, err := ratelimit.NewPolicy(ratelimit.Policy{Name: name, Algorithm: a, Limit: limit, Window: window, Sync: ratelimit.SyncLease})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// decide1 decides one request of r at now and fails the test on error.
func decide1(t testing.TB, s *Store, now time.Time, reqs ...ratelimit.Request) []ratelimit.Decision {
	t.Helper()
	out := make([]ratelimit.Decision, len(reqs))
	if err := s.Decide(context.Background(), now, reqs, out); err != nil {
		t.Fatalf("Decide: %v", err)
	}
	return out
}

// TestLeaseFixedWindowOneInstance admits exactly limit per window from one
// store, in far fewer Redis calls than decisions.
func TestLeaseFixedWindowOneInstance(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, CallerTime: true})
	p := leasePolicy(t, "fw-lease", ratelimit.FixedWindow, 1000, time.Second)
	r := ratelimit.Request{Policy: p, Key: "k"}
	t0 := time.Unix(1_700_000_000, 0)
	for w := range 3 {
		admitted := 0
		for i := range 2000 {
			now := t0.Add(time.Duration(w)*time.Second + time.Duration(i)*400*time.Microsecond)
			if decide1(t, s, now, r)[0].Allowed {
				admitted++
			}
		}
		if admitted != 1000 {
			t.Errorf("window %d: admitted %d, want 1000", w, admitted)
		}
	}
	if got := s.calls.Load(); got > 6000/5 {
		t.Errorf("got %d Redis calls for 6000 decisions, want at most 1200", got)
	}
	t.Logf("%d Redis calls for 6000 decisions", s.calls.Load())
}

// windowCount reads a leased fixed_window bucket's count in Redis.
func windowCount(t *testing.T, srv *redistest.Server, r ratelimit.Request) int64 {
	t.Helper()
	v := srv.Do("GET", Key("", r))
	if v == "" {
		return 0
	}
	var st, count int64
	if _, err := fmt.Sscan(v, &st, &count); err != nil {
		t.Fatalf("bucket %q: %v", v, err)
	}
	return count
}

// TestLeaseCloseGivesBack checks that Close returns the units a lease
// holds: Redis then counts only the admitted requests.
func TestLeaseCloseGivesBack(t *testing.T) {
	srv := redistest.Start(t)
	s, err := New(context.Background(), Options{Addresses: []string{srv.Addr()}, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p := leasePolicy(t, "close-back", ratelimit.FixedWindow, 100_000, time.Hour)
	r := ratelimit.Request{Policy: p, Key: "k"}
	for range 200 {
		if !decide1(t, s, time.Now(), r)[0].Allowed {
			t.Fatal("rejected far below the limit")
		}
	}
	s.refills.Wait()
	if held := windowCount(t, srv, r); held <= 200 {
		t.Fatalf("Redis counts %d before Close, want more than the 200 admitted (a lease holds the rest)", held)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := windowCount(t, srv, r); got != 200 {
		t.Errorf("Redis counts %d after Close, want the 200 admitted", got)
	}
}

// TestLeaseIdleGivesBack checks that the sweep returns an idle lease's
// units, and a token_bucket instance's holding, and forgets the leases.
func TestLeaseIdleGivesBack(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: time.Second})
	fw := ratelimit.Request{Policy: leasePolicy(t, "idle-fw", ratelimit.FixedWindow, 100_000, time.Hour), Key: "k"}
	tb := ratelimit.Request{Policy: leasePolicy(t, "idle-tb", ratelimit.TokenBucket, 100_000, time.Hour), Key: "k"}
	for range 100 {
		decide1(t, s, time.Now(), fw, tb)
	}
	s.refills.Wait()
	field := leaseFieldOf(t, s, tb)
	if got := srv.Do("HEXISTS", Key("", tb), field); got != "1" {
		t.Fatalf("token_bucket holding of this instance: HEXISTS got %q, want 1", got)
	}
	c := s.client.Load()
	s.sweepLeases(context.Background(), *c, time.Now().Add(time.Hour))
	if got := windowCount(t, srv, fw); got != 100 {
		t.Errorf("fixed_window count after the sweep: got %d, want the 100 admitted", got)
	}
	if got := srv.Do("HEXISTS", Key("", tb), field); got != "0" {
		t.Errorf("token_bucket holding after the sweep: HEXISTS got %q, want 0 (given back and spent reported)", got)
	}
	if n := s.leases.len(); n != 0 {
		t.Errorf("leases after the sweep: got %d, want 0", n)
	}
}

// TestLeaseChangedPolicyStartsAfresh checks that a reload that changes a
// leased policy's settings, or turns a per-request policy into a leased
// one, starts from a fresh bucket.
func TestLeaseChangedPolicyStartsAfresh(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, CallerTime: true})
	now := time.Unix(1_700_000_000, 0)
	count := func(p *ratelimit.Policy) int {
		n := 0
		for range 30 {
			if decide1(t, s, now, ratelimit.Request{Policy: p, Key: "k"})[0].Allowed {
				n++
			}
		}
		return n
	}
	perRequest := policyOf(t, "afresh", ratelimit.FixedWindow, 10, time.Hour)
	leased := leasePolicy(t, "afresh", ratelimit.FixedWindow, 10, time.Hour)
	bigger := leasePolicy(t, "afresh", ratelimit.FixedWindow, 20, time.Hour)
	for _, tc := range []struct {
		p    *ratelimit.Policy
		want int
	}{{perRequest, 10}, {leased, 10}, {bigger, 20}, {leased, 0}} {
		if got := count(tc.p); got != tc.want {
			t.Errorf("limit %d sync %v: admitted %d of 30, want %d", tc.p.Limit, tc.p.Sync, got, tc.want)
		}
	}
}

// TestLeaseResetAndRefund checks Reset (the Redis state and this
// instance's lease go) and Refund (the unit goes back to the lease).
func TestLeaseResetAndRefund(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, CallerTime: true})
	now := time.Unix(1_700_000_000, 0)
	for _, a := range []ratelimit.Algorithm{ratelimit.FixedWindow, ratelimit.TokenBucket, ratelimit.SlidingWindowCounter} {
		t.Run(a.String(), func(t *testing.T) {
			r := ratelimit.Request{Policy: leasePolicy(t, "reset-"+a.String(), a, 5, time.Hour), Key: "k"}
			var last ratelimit.Decision
			for range 5 {
				if last = decide1(t, s, now, r)[0]; !last.Allowed {
					t.Fatal("rejected within the limit")
				}
			}
			if decide1(t, s, now, r)[0].Allowed {
				t.Fatal("admitted past the limit")
			}
			if err := s.Refund(context.Background(), now, []ratelimit.Request{r}, []ratelimit.Decision{last}); err != nil {
				t.Fatal(err)
			}
			if !decide1(t, s, now, r)[0].Allowed {
				t.Error("refunded unit: rejected, want admitted")
			}
			if decide1(t, s, now, r)[0].Allowed {
				t.Error("after the refunded unit: admitted, want rejected")
			}
			if err := s.Reset(context.Background(), r); err != nil {
				t.Fatal(err)
			}
			if got := srv.Do("EXISTS", Key("", r)); got != "0" {
				t.Errorf("bucket after Reset: EXISTS got %q, want 0", got)
			}
			n := 0
			for range 10 {
				if decide1(t, s, now, r)[0].Allowed {
					n++
				}
			}
			if n != 5 {
				t.Errorf("after Reset: admitted %d of 10, want 5", n)
			}
		})
	}
}

// TestLeaseBesidePerRequestLimits checks a route with a leased limit and
// a per-request one: a request the per-request limit rejects takes
// nothing from the lease, and one the lease rejects nothing from the
// per-request limit.
func TestLeaseBesidePerRequestLimits(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, CallerTime: true})
	now := time.Unix(1_700_000_000, 0)
	leased := ratelimit.Request{Policy: leasePolicy(t, "mixed-lease", ratelimit.FixedWindow, 5, time.Hour), Key: "k"}
	narrow := ratelimit.Request{Policy: policyOf(t, "mixed-narrow", ratelimit.FixedWindow, 3, time.Hour), Key: "k"}
	wide := ratelimit.Request{Policy: policyOf(t, "mixed-wide", ratelimit.FixedWindow, 100, time.Hour), Key: "k"}
	admitted := 0
	for range 10 {
		if ratelimit.Admitted([]ratelimit.Request{leased, narrow}, decide1(t, s, now, leased, narrow)) {
			admitted++
		}
	}
	if admitted != 3 {
		t.Fatalf("leased 5 beside per-request 3: admitted %d, want 3", admitted)
	}
	// The lease still has 2 for a route where the other limit is wide.
	admitted = 0
	for range 10 {
		if ratelimit.Admitted([]ratelimit.Request{leased, wide}, decide1(t, s, now, leased, wide)) {
			admitted++
		}
	}
	if admitted != 2 {
		t.Errorf("then beside per-request 100: admitted %d, want the lease's 2 left", admitted)
	}
	d, err := s.Peek(context.Background(), now, wide)
	if err != nil {
		t.Fatal(err)
	}
	if d.Remaining != 98 {
		t.Errorf("per-request 100 after 2 admissions and 8 rejected by the lease: remaining %d, want 98", d.Remaining)
	}
}

// TestLeaseSlowTrafficHoldsNothing sends one request every two seconds:
// a batch of one is not fetched ahead, so each request costs its own one
// call, as per-request decisions do, and no unit waits to go back idle.
func TestLeaseSlowTrafficHoldsNothing(t *testing.T) {
	srv := redistest.Start(t)
	f := newLeaseFleet(t, srv, 1)
	s := f.stores[0]
	r := ratelimit.Request{Policy: leasePolicy(t, "slow", ratelimit.FixedWindow, 1000, time.Hour), Key: "k"}
	t0 := time.Unix(1_700_000_000, 0)
	before := f.trips.Load()
	for i := range 20 {
		now := t0.Add(time.Duration(i) * 2 * time.Second)
		if !decide1(t, s, now, r)[0].Allowed {
			t.Fatal("rejected far below the limit")
		}
		s.refills.Wait()
		if h := f.held(r, now); h != 0 {
			t.Fatalf("request %d: the lease holds %d units, want 0", i, h)
		}
	}
	// Heartbeats on the real clock may add a beat while the test runs.
	if trips := f.trips.Load() - before; trips > 21 {
		t.Errorf("got %d Redis round trips for 20 slow requests, want at most one each (and a heartbeat)", trips)
	}
	if got := windowCount(t, srv, r); got != 20 {
		t.Errorf("Redis counts %d, want the 20 admitted", got)
	}
}

// TestLeaseRefundAfterReset: a unit a lease spent before a Reset, given
// back after it, does not go to the lease made since, which never counted
// it; each request in flight at a reset would otherwise add one to the
// budget. Units of the new lease still go back.
func TestLeaseRefundAfterReset(t *testing.T) {
	srv := redistest.Start(t)
	for _, a := range []ratelimit.Algorithm{ratelimit.FixedWindow, ratelimit.TokenBucket, ratelimit.SlidingWindowCounter} {
		t.Run(a.String(), func(t *testing.T) {
			s := newStore(t, Options{Addresses: []string{srv.Addr()}, CallerTime: true, KeyPrefix: a.String() + ":"})
			p, err := ratelimit.NewPolicy(ratelimit.Policy{Name: "login", Algorithm: a, Limit: 3, Window: time.Hour, Sync: ratelimit.SyncLease, Hold: true})
			if err != nil {
				t.Fatal(err)
			}
			r := ratelimit.Request{Policy: p, Key: "alice"}
			t0 := time.Unix(1_700_000_000, 0)
			before := decide1(t, s, t0, r)[0]
			if !before.Allowed {
				t.Fatal("first request rejected")
			}
			if err := s.Reset(context.Background(), r); err != nil {
				t.Fatal(err)
			}
			var after []ratelimit.Decision
			for i := range 3 {
				d := decide1(t, s, t0.Add(time.Duration(i+1)*time.Millisecond), r)[0]
				if !d.Allowed {
					t.Fatalf("request %d after the reset: rejected, want admitted", i)
				}
				after = append(after, d)
			}
			if err := s.Refund(context.Background(), t0.Add(5*time.Millisecond), []ratelimit.Request{r}, []ratelimit.Decision{before}); err != nil {
				t.Fatal(err)
			}
			if decide1(t, s, t0.Add(6*time.Millisecond), r)[0].Allowed {
				t.Errorf("a fourth request after the reset: admitted, want rejected (limit 3)")
			}
			if err := s.Refund(context.Background(), t0.Add(7*time.Millisecond), []ratelimit.Request{r}, after[2:]); err != nil {
				t.Fatal(err)
			}
			if !decide1(t, s, t0.Add(8*time.Millisecond), r)[0].Allowed {
				t.Errorf("after a refund of a request of after the reset: rejected, want admitted")
			}
		})
	}
}

// TestLeaseSteadyTrafficCost holds the promise that under steady traffic
// Redis calls are at most one fifth of the requests, also when each
// instance sees a few requests a second: a batch the rate times the
// horizon would be one or two units there, a call every request or two.
func TestLeaseSteadyTrafficCost(t *testing.T) {
	srv := redistest.Start(t)
	for _, a := range []ratelimit.Algorithm{ratelimit.FixedWindow, ratelimit.TokenBucket, ratelimit.SlidingWindowCounter} {
		for _, rate := range []int{2, 5, 10, 20} {
			t.Run(fmt.Sprintf("%v/%d per second", a, rate), func(t *testing.T) {
				f := newLeaseFleet(t, srv, 2)
				r := ratelimit.Request{Policy: leasePolicy(t, fmt.Sprintf("steady-%v-%d", a, rate), a, 100_000, time.Minute), Key: "k"}
				trips, requests := steadyTraffic(t, f, r, rate, 60)
				t.Logf("%d Redis calls for %d requests", trips, requests)
				if trips*5 > int64(requests) {
					t.Errorf("got %d Redis calls for %d requests, want at most a fifth", trips, requests)
				}
			})
		}
	}
}

// TestLeaseSteadyTrafficCostShortWindow holds the cost promise where a
// window lasts a second: its units end with it, so each window costs an
// instance a call, and a refill fetched ahead while the units held last
// to the window's end would be a second call for nothing. Heartbeats
// count, one a second per instance.
func TestLeaseSteadyTrafficCostShortWindow(t *testing.T) {
	srv := redistest.Start(t)
	f := newLeaseFleet(t, srv, 2)
	for _, a := range []ratelimit.Algorithm{ratelimit.FixedWindow, ratelimit.SlidingWindowCounter} {
		for _, rate := range []int{12, 15} {
			t.Run(fmt.Sprintf("%v/%d per second", a, rate), func(t *testing.T) {
				r := ratelimit.Request{Policy: leasePolicy(t, fmt.Sprintf("short-%v-%d", a, rate), a, 100_000, time.Second), Key: "k"}
				const seconds = 60
				trips, requests := steadyTraffic(t, f, r, rate, seconds)
				beats := int64(seconds * len(f.stores))
				t.Logf("%d lease calls and %d heartbeats for %d requests", trips, beats, requests)
				if (trips+beats)*5 > int64(requests) {
					t.Errorf("got %d Redis calls (%d heartbeats) for %d requests, want at most a fifth", trips+beats, beats, requests)
				}
			})
		}
	}
}

// steadyTraffic sends r to every instance of f at rate requests a second
// each for seconds, on a virtual clock, the instances interleaved half a
// step apart, all admitted; it returns the Redis calls the lease made and
// the requests sent.
func steadyTraffic(t *testing.T, f *leaseFleet, r ratelimit.Request, rate, seconds int) (trips int64, requests int) {
	t.Helper()
	t0 := time.Unix(1_700_000_000, 0)
	step := time.Second / time.Duration(rate)
	before := f.trips.Load()
	for i := range seconds * rate {
		for j, s := range f.stores {
			now := t0.Add(time.Duration(i)*step + time.Duration(j)*step/2)
			if !decide1(t, s, now, r)[0].Allowed {
				t.Fatalf("request %d on instance %d rejected far below the limit", i, j)
			}
			requests++
		}
	}
	for _, s := range f.stores {
		s.refills.Wait()
	}
	return f.trips.Load() - before, requests
}
