package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// leaseFleet is n stores on one Redis, deciding on virtual clocks, that
// have each counted the others through a heartbeat.
type leaseFleet struct {
	stores []*Store
	trips  atomic.Int64 // Redis round trips of all stores
}

func newLeaseFleet(t *testing.T, srv *redistest.Server, n int) *leaseFleet {
	t.Helper()
	f := &leaseFleet{}
	for range n {
		f.stores = append(f.stores, newStore(t, Options{
			Addresses: []string{srv.Addr()}, CallerTime: true, Timeout: time.Second,
			Observe: func(time.Duration, error) { f.trips.Add(1) },
		}))
	}
	for _, s := range f.stores {
		s.startHeartbeat()
	}
	for _, s := range f.stores {
		s.beat(false)
		if got := s.Instances(); got != n {
			t.Fatalf("instances seen: got %d, want %d", got, n)
		}
	}
	return f
}

// held is the units the fleet's leases on bucket r hold and may still
// spend at now.
func (f *leaseFleet) held(r ratelimit.Request, now time.Time) int64 {
	var sum int64
	for _, s := range f.stores {
		s.leases.mu.Lock()
		l := s.leases.m[Key(s.prefix, r)]
		s.leases.mu.Unlock()
		if l == nil {
			continue
		}
		l.mu.Lock()
		if now.Before(l.deadline) {
			sum += l.units
		}
		l.mu.Unlock()
	}
	return sum
}

// heldBound is the README's bound on the units all instances hold at
// once: a tenth of the capacity, or one per instance when that is more.
func heldBound(p *ratelimit.Policy, n int) int64 {
	return max(int64(n), p.Capacity()/holdShare)
}

// skewed picks an instance of three with probabilities 80/15/5.
func skewed(rng *rand.Rand) int {
	switch x := rng.IntN(100); {
	case x < 80:
		return 0
	case x < 95:
		return 1
	}
	return 2
}

// arrivals returns n whole-microsecond times in [from, from+span), sorted.
func arrivals(rng *rand.Rand, from time.Time, span time.Duration, n int) []time.Time {
	ts := make([]time.Time, n)
	for i := range ts {
		ts[i] = from.Add(time.Duration(rng.Int64N(int64(span/time.Microsecond))) * time.Microsecond)
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	return ts
}

func seeded(t *testing.T) *rand.Rand {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(seed, 17))
}

// TestLeaseFixedWindowExactAcrossInstances runs twice the limit's demand
// per window through three instances, skewed 80/15/5, each instance
// deciding its own arrivals concurrently with the others: every window
// admits at most limit and at least 90% of it, and the units held in
// leases never exceed the stated bound.
func TestLeaseFixedWindowExactAcrossInstances(t *testing.T) {
	srv := redistest.Start(t)
	f := newLeaseFleet(t, srv, 3)
	rng := seeded(t)
	p := leasePolicy(t, "fw-exact", ratelimit.FixedWindow, 1000, time.Second)
	r := ratelimit.Request{Policy: p, Key: "k"}
	bound := heldBound(p, 3)
	t0 := time.Unix(1_700_000_000, 0)
	var over atomic.Int64
	for w := range 4 {
		start := t0.Add(time.Duration(w) * time.Second)
		per := make([][]time.Time, 3)
		for _, at := range arrivals(rng, start, time.Second, 2000) {
			i := skewed(rng)
			per[i] = append(per[i], at)
		}
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for i, s := range f.stores {
			wg.Go(func() {
				out := make([]ratelimit.Decision, 1)
				for _, at := range per[i] {
					if err := s.Decide(context.Background(), at, []ratelimit.Request{r}, out); err != nil {
						t.Error(err)
						return
					}
					if out[0].Allowed {
						admitted.Add(1)
					}
					if h := f.held(r, at); h > bound {
						over.Store(h)
					}
				}
			})
		}
		wg.Wait()
		// The proof's invariant: admitted <= granted (net of give-backs)
		// = the window's count in Redis <= limit.
		var st, count int64
		if _, err := fmt.Sscan(srv.Do("GET", Key("", r)), &st, &count); err != nil {
			t.Fatal(err)
		}
		if got := admitted.Load(); st != start.UnixMicro() || count > 1000 || got > count {
			t.Errorf("window %d: Redis holds window %d count %d after %d admissions, want window %d, admissions <= count <= 1000", w, st, count, got, start.UnixMicro())
		}
		t.Logf("window %d: admitted %d, counted %d", w, admitted.Load(), count)
		if got := admitted.Load(); got > 1000 || got < 900 {
			t.Errorf("window %d: admitted %d, want 900 to 1000", w, got)
		}
	}
	if h := over.Load(); h != 0 {
		t.Errorf("leases held %d units at once, want at most %d", h, bound)
	}
}

// replayLease decides arrivals at the given times, each through a store
// chosen 80/15/5, one at a time, and returns the times admitted.
func replayLease(t *testing.T, f *leaseFleet, rng *rand.Rand, r ratelimit.Request, ts []time.Time, check func(now time.Time)) []time.Time {
	t.Helper()
	var admitted []time.Time
	out := make([]ratelimit.Decision, 1)
	for _, at := range ts {
		s := f.stores[skewed(rng)]
		if err := s.Decide(context.Background(), at, []ratelimit.Request{r}, out); err != nil {
			t.Fatal(err)
		}
		if out[0].Allowed {
			admitted = append(admitted, at)
		}
		if check != nil {
			check(at)
		}
	}
	return admitted
}

// TestLeaseTokenBucketConformsToOneBucket sends twice the rate, in bursts
// and lulls, through three instances: the admitted sequence, replayed
// through one token bucket of the policy's burst and rate, is admitted
// whole, however the units were spread over the instances' leases.
func TestLeaseTokenBucketConformsToOneBucket(t *testing.T) {
	srv := redistest.Start(t)
	f := newLeaseFleet(t, srv, 3)
	rng := seeded(t)
	p, err := ratelimit.NewPolicy(ratelimit.Policy{Name: "tb-exact", Algorithm: ratelimit.TokenBucket, Limit: 300, Window: time.Second, Burst: 600, Sync: ratelimit.SyncLease})
	if err != nil {
		t.Fatal(err)
	}
	r := ratelimit.Request{Policy: p, Key: "k"}
	t0 := time.Unix(1_700_000_000, 0)
	var ts []time.Time
	for sec := range 8 {
		// Three times the rate in odd seconds, a fifth of it in even
		// ones, so that the bucket both drains and refills.
		n := 60
		if sec%2 == 1 {
			n = 900
		}
		ts = append(ts, arrivals(rng, t0.Add(time.Duration(sec)*time.Second), time.Second, n)...)
	}
	bound := heldBound(p, 3)
	var over int64
	admitted := replayLease(t, f, rng, r, ts, func(now time.Time) {
		if h := f.held(r, now); h > bound {
			over = h
		}
	})
	var st ratelimit.TokenBucketState
	for i, at := range admitted {
		var d ratelimit.Decision
		if st, d = ratelimit.StepTokenBucket(p, st, at.UnixNano(), 1); !d.Allowed {
			t.Fatalf("admission %d at %v: one token bucket rejects it (retry %v): the fleet admitted more than the policy", i, at.Sub(t0), d.RetryAfter)
		}
	}
	// What one bucket would admit of the same arrivals, for the record.
	var one ratelimit.TokenBucketState
	ideal := 0
	for _, at := range ts {
		var d ratelimit.Decision
		if one, d = ratelimit.StepTokenBucket(p, one, at.UnixNano(), 1); d.Allowed {
			ideal++
		}
	}
	t.Logf("admitted %d of %d arrivals; one bucket admits %d", len(admitted), len(ts), ideal)
	if len(admitted) < ideal*9/10 {
		t.Errorf("admitted %d, want at least 90%% of the %d one bucket admits", len(admitted), ideal)
	}
	if over != 0 {
		t.Errorf("leases held %d units at once, want at most %d", over, bound)
	}
}

// TestLeaseSlidingWindowCounterKeepsTheEstimate sends twice the limit per
// window through three instances: replayed through one sliding window
// counter, every admission finds the combined estimate below the limit.
func TestLeaseSlidingWindowCounterKeepsTheEstimate(t *testing.T) {
	srv := redistest.Start(t)
	f := newLeaseFleet(t, srv, 3)
	rng := seeded(t)
	p := leasePolicy(t, "swc-exact", ratelimit.SlidingWindowCounter, 600, time.Second)
	r := ratelimit.Request{Policy: p, Key: "k"}
	t0 := time.Unix(1_700_000_000, 0)
	var ts []time.Time
	for w := range 6 {
		ts = append(ts, arrivals(rng, t0.Add(time.Duration(w)*time.Second), time.Second, 1200)...)
	}
	admitted := replayLease(t, f, rng, r, ts, nil)
	var st ratelimit.SlidingWindowCounterState
	for i, at := range admitted {
		var d ratelimit.Decision
		if st, d = ratelimit.StepSlidingWindowCounter(p, st, at.UnixNano(), 1); !d.Allowed {
			t.Fatalf("admission %d at %v: the combined estimate is at the limit (cur %d, prev %d)", i, at.Sub(t0), st.Cur, st.Prev)
		}
	}
	var one ratelimit.SlidingWindowCounterState
	ideal := 0
	for _, at := range ts {
		var d ratelimit.Decision
		if one, d = ratelimit.StepSlidingWindowCounter(p, one, at.UnixNano(), 1); d.Allowed {
			ideal++
		}
	}
	t.Logf("admitted %d of %d arrivals; one counter admits %d", len(admitted), len(ts), ideal)
	if len(admitted) < ideal*9/10 {
		t.Errorf("admitted %d, want at least 90%% of the %d one counter admits", len(admitted), ideal)
	}
}

// TestLeaseFewRedisCalls sends steady traffic below the limit through
// three instances, skewed 80/15/5: Redis round trips, heartbeats
// included, are at most a fifth of the decisions.
func TestLeaseFewRedisCalls(t *testing.T) {
	srv := redistest.Start(t)
	for _, a := range []ratelimit.Algorithm{ratelimit.FixedWindow, ratelimit.TokenBucket, ratelimit.SlidingWindowCounter} {
		t.Run(a.String(), func(t *testing.T) {
			f := newLeaseFleet(t, srv, 3)
			rng := seeded(t)
			p := leasePolicy(t, "few-"+a.String(), a, 100_000, time.Second)
			r := ratelimit.Request{Policy: p, Key: "k"}
			ts := arrivals(rng, time.Unix(1_700_000_000, 0), 3*time.Second, 9000)
			before := f.trips.Load()
			admitted := replayLease(t, f, rng, r, ts, nil)
			trips := f.trips.Load() - before
			if len(admitted) != len(ts) {
				t.Errorf("admitted %d of %d, want all (far below the limit)", len(admitted), len(ts))
			}
			if trips > int64(len(ts))/5 {
				t.Errorf("got %d Redis round trips for %d decisions, want at most a fifth", trips, len(ts))
			}
			t.Logf("%d Redis round trips for %d decisions", trips, len(ts))
		})
	}
}
