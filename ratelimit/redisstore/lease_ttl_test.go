package redisstore

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// TestLeaseTokenBucketRenewalLostReply: a steady lease's token_bucket
// grant may be spent for up to 10s, a later grant for as little as 1s
// (its traffic slowed). A call whose reply is lost (the decision's timeout
// passed, the script ran all the same) leaves the instance spending its
// units until the deadline it knew. Redis must count them as this
// instance's until then: were the holding's expiry shortened to the later
// grant's, the refill would free their room while they are still spent,
// and the fleet would admit more than one bucket of the policy.
func TestLeaseTokenBucketRenewalLostReply(t *testing.T) {
	srv := redistest.Start(t)
	a := newStore(t, Options{Addresses: []string{srv.Addr()}, CallerTime: true, Timeout: 100 * time.Millisecond})
	b := newStore(t, Options{Addresses: []string{srv.Addr()}, CallerTime: true, Timeout: time.Second})
	for _, s := range []*Store{a, b} {
		s.startHeartbeat()
	}
	for _, s := range []*Store{a, b} {
		s.beat(false)
		if got := s.Instances(); got != 2 {
			t.Fatalf("instances seen: got %d, want 2", got)
		}
	}
	// 10 tokens a second, a burst of 600: each of the two instances holds
	// at most 30, and a steady lease asks for 16.
	p, err := ratelimit.NewPolicy(ratelimit.Policy{Name: "tb-lost", Algorithm: ratelimit.TokenBucket, Limit: 600, Window: time.Minute, Burst: 600, Sync: ratelimit.SyncLease})
	if err != nil {
		t.Fatal(err)
	}
	r := ratelimit.Request{Policy: p, Key: "k"}
	key := Key("", r)
	t0 := time.Unix(1_700_000_000, 0)
	var admitted []time.Time
	decide := func(s *Store, at time.Time) {
		if decide1(t, s, at, r)[0].Allowed {
			admitted = append(admitted, at)
		}
		s.refills.Wait()
	}
	lease := func(s *Store) (units int64, deadline time.Duration) {
		s.leases.mu.Lock()
		l := s.leases.m[key]
		s.leases.mu.Unlock()
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.units, l.deadline.Sub(t0)
	}

	// Two requests a second on a: the lease becomes steady and takes a
	// batch of 16 that may be spent for 10s.
	at := t0
	for range 11 {
		decide(a, at)
		at = at.Add(500 * time.Millisecond)
	}
	units, deadline := lease(a)
	field := leaseFieldOf(t, a, r)
	t.Logf("a after steady traffic: %d units until %v; Redis %s", units, deadline, srv.Do("HGET", key, field))
	if units < 8 || deadline < 5*time.Second {
		t.Fatalf("a holds %d units until %v, want a steady batch with a long grant", units, deadline)
	}

	// A pause: the next request finds the traffic no longer steady and
	// its refill asks for a 1s grant, whose reply is lost.
	if units*2 < 16 {
		t.Fatalf("a holds %d units, want at least 8 (no refill due yet)", units)
	}
	at = at.Add(1500 * time.Millisecond)
	before := srv.Do("HGET", key, field)
	srv.Pause()
	if !decide1(t, a, at, r)[0].Allowed {
		t.Fatal("a rejected a request its lease holds units for")
	}
	admitted = append(admitted, at)
	a.refills.Wait() // timed out
	srv.Resume()
	// The script runs once Redis reads the call.
	if _, ok := waitFor(5*time.Second, func() bool { return srv.Do("HGET", key, field) != before }); !ok {
		t.Fatal("the call whose reply was lost never ran")
	}
	units, deadline = lease(a)
	t.Logf("a after the lost reply at %v: %d units until %v; Redis %s", at.Sub(t0), units, deadline, srv.Do("HGET", key, field))
	lost := at

	// b calls once after the 1s grant's end, then the bucket refills.
	decide(b, lost.Add(1100*time.Millisecond))
	// Then b drains the bucket and a spends what it holds.
	burst := lost.Add(2500 * time.Millisecond)
	for i := range 700 {
		decide(b, burst.Add(time.Duration(i)*time.Microsecond))
	}
	for i := range int(units) {
		decide(a, burst.Add(time.Millisecond+time.Duration(i)*time.Microsecond))
	}

	sort.Slice(admitted, func(i, j int) bool { return admitted[i].Before(admitted[j]) })
	var st ratelimit.TokenBucketState
	for i, x := range admitted {
		var d ratelimit.Decision
		if st, d = ratelimit.StepTokenBucket(p, st, x.UnixNano(), 1); !d.Allowed {
			t.Fatalf("admission %d of %d at %v: one token bucket rejects it: the fleet admitted more than the policy", i, len(admitted), x.Sub(t0))
		}
	}
	t.Logf("%d admissions, all within one bucket", len(admitted))
}

// TestLeaseTokenBucketLapseDuringRefill: a refill is sent while the lease
// still holds units, and the script runs only after the holding's expiry
// (Redis slow, a round trip longer than usual). Redis then drops the old
// holding, counted spent, before it grants the batch; the units the lease
// held, and those it spent meanwhile, belong to no holding Redis knows.
// Merged into the new grant's, they would be spent again (or reported
// spent out of the new holding), beyond what one bucket admits.
func TestLeaseTokenBucketLapseDuringRefill(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: 5 * time.Second})
	// 200 tokens a second, a burst of 600: the bucket refills to its cap
	// within the test's pauses, and little while it is drained.
	p, err := ratelimit.NewPolicy(ratelimit.Policy{Name: "tb-lapse", Algorithm: ratelimit.TokenBucket, Limit: 200, Window: time.Second, Burst: 600, Sync: ratelimit.SyncLease})
	if err != nil {
		t.Fatal(err)
	}
	r := ratelimit.Request{Policy: p, Key: "k"}
	key := Key("", r)
	var mu sync.Mutex
	var admitted []time.Time
	decide := func() bool {
		now := time.Now()
		out := make([]ratelimit.Decision, 1)
		if err := s.Decide(context.Background(), now, []ratelimit.Request{r}, out); err != nil {
			t.Error(err)
			return false
		}
		if out[0].Allowed {
			mu.Lock()
			admitted = append(admitted, now)
			mu.Unlock()
		}
		return out[0].Allowed
	}
	// keepalive sends a request every 100ms until then, so that the
	// lease is not idle.
	keepalive := func(until time.Time) {
		for time.Now().Before(until) {
			time.Sleep(min(100*time.Millisecond, time.Until(until)))
			decide()
		}
	}
	lease := func() *lease {
		s.leases.mu.Lock()
		defer s.leases.mu.Unlock()
		return s.leases.m[key]
	}

	// A burst of concurrent requests: the lease takes a steady batch with
	// a short grant.
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() { decide() })
	}
	wg.Wait()
	s.refills.Wait()
	l := lease()
	field := s.leaseField(l)
	// The holding nears its end, as a grant made seconds ago would leave
	// it (Redis's expiry no earlier than the lease's deadline).
	end := time.Now().Add(500 * time.Millisecond)
	l.mu.Lock()
	l.deadline = end
	units := l.units
	l.mu.Unlock()
	var mine, expiry int64
	if _, err := fmt.Sscan(srv.Do("HGET", key, field), &mine, &expiry); err != nil {
		t.Fatal(err)
	}
	srv.Do("HSET", key, field, fmt.Sprintf("%d %d", mine, end.Add(time.Millisecond).UnixMicro()))
	t.Logf("after the burst: %d units, Redis counts %d", units, mine)
	if units*2 < 16 {
		t.Fatalf("the lease holds %d units, want at least 8 (no refill due yet)", units)
	}

	// Shortly before the holding's end, Redis stalls; the lease runs
	// below half its batch and sends a refill, which Redis runs only
	// after the holding's end.
	time.Sleep(time.Until(end.Add(-300 * time.Millisecond)))
	srv.Pause()
	paused := true
	defer func() {
		if paused {
			srv.Resume()
		}
	}()
	for {
		if !decide() {
			t.Fatal("rejected with units held")
		}
		l.mu.Lock()
		inflight := l.inflight != nil
		l.mu.Unlock()
		if inflight {
			break
		}
	}
	// (Requests on, while the units last, and none for less than the
	// idle time, so that the lease stays.)
	keepalive(end.Add(-150 * time.Millisecond))
	time.Sleep(time.Until(end.Add(150 * time.Millisecond)))
	srv.Resume()
	paused = false
	s.refills.Wait()
	mine = 0
	fmt.Sscan(srv.Do("HGET", key, field), &mine, &expiry)
	l.mu.Lock()
	units, spent, held := l.units, l.spent, l.held
	l.mu.Unlock()
	t.Logf("after the refill: the lease holds %d units, %d spent unreported; Redis counts %d as its", units, spent, mine)
	if units+spent+held > mine {
		t.Errorf("the lease holds %d units and %d spent unreported, Redis counts %d as its: Redis no longer counts some of them", units, spent, mine)
	}

	// The bucket refills to its cap; then requests come as fast as they
	// are decided: one bucket of the policy admits all that is admitted.
	keepalive(time.Now().Add(200 * time.Millisecond))
	for stop := time.Now().Add(300 * time.Millisecond); time.Now().Before(stop); {
		decide()
	}
	sort.Slice(admitted, func(i, j int) bool { return admitted[i].Before(admitted[j]) })
	var st ratelimit.TokenBucketState
	for i, x := range admitted {
		var d ratelimit.Decision
		if st, d = ratelimit.StepTokenBucket(p, st, x.UnixNano(), 1); !d.Allowed {
			t.Fatalf("admission %d of %d: one token bucket rejects it: admitted more than the policy", i, len(admitted))
		}
	}
	t.Logf("%d admissions, all within one bucket", len(admitted))
}
