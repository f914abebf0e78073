package redisstore

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

func policyOf(t testing.TB, name string, a ratelimit.Algorithm, limit int64, window time.Duration) *ratelimit.Policy {
	t.Helper()
	p := ratelimit.Policy{Name: name, Algorithm: a, Limit: limit, Window: window}
	if a == ratelimit.LeakyBucket {
		p.Queue = 3
	}
	c, err := ratelimit.NewPolicy(p)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestKeysPrefixedAndExpiring decides once with every algorithm on server
// time and checks each key: it starts with key_prefix and has a TTL.
func TestKeysPrefixedAndExpiring(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, KeyPrefix: "gw7:"})
	var reqs []ratelimit.Request
	for _, a := range ratelimit.Algorithms {
		reqs = append(reqs, ratelimit.Request{Policy: policyOf(t, "p-"+a.String(), a, 5, time.Minute), Key: "abc"})
	}
	out := make([]ratelimit.Decision, len(reqs))
	for range 3 {
		if err := s.Decide(context.Background(), time.Now(), reqs, out); err != nil {
			t.Fatal(err)
		}
	}
	// A sliding log drops entries on the next request after they leave
	// the window, which also writes its settled key.
	keys := strings.Fields(srv.Do("KEYS", "*"))
	if len(keys) != len(reqs) {
		t.Fatalf("got keys %q, want %d (one per bucket)", keys, len(reqs))
	}
	for _, r := range reqs {
		k := Key("gw7:", r)
		if !slices.Contains(keys, k) {
			t.Errorf("key %q missing from %q", k, keys)
		}
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, "gw7:{") {
			t.Errorf("key %q: want prefix gw7:{", k)
		}
		ttl, err := strconv.Atoi(srv.Do("PTTL", k))
		if err != nil {
			t.Fatal(err)
		}
		// The counter keeps the previous window too: two windows at most.
		if ttl <= 0 || ttl > int(2*time.Minute/time.Millisecond) {
			t.Errorf("key %q: got PTTL %d, want in (0, 120000]", k, ttl)
		}
	}
}

// TestEmptyKeyPrefix checks that an empty key_prefix means no prefix, not
// the default one: the keys are the bucket's alone.
func TestEmptyKeyPrefix(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, KeyPrefix: ""})
	r := ratelimit.Request{Policy: policyOf(t, "bare", ratelimit.FixedWindow, 5, time.Minute), Key: "abc"}
	out := make([]ratelimit.Decision, 1)
	if err := s.Decide(context.Background(), time.Now(), []ratelimit.Request{r}, out); err != nil {
		t.Fatal(err)
	}
	if got, want := srv.Do("KEYS", "*"), Key("", r); got != want || !strings.HasPrefix(got, "{bare|abc}:") {
		t.Errorf("got keys %q, want only %q", got, want)
	}
}

// TestOneRoundTripPerRequest counts script calls through Observe and the
// server's own command statistics: a request with three limits costs one.
func TestOneRoundTripPerRequest(t *testing.T) {
	srv := redistest.Start(t)
	var trips atomic.Int64
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, Observe: func(time.Duration, error) { trips.Add(1) }})
	reqs := []ratelimit.Request{
		{Policy: policyOf(t, "a", ratelimit.SlidingWindowLog, 1000, time.Minute), Key: "k"},
		{Policy: policyOf(t, "b", ratelimit.TokenBucket, 1000, time.Minute), Key: "k"},
		{Policy: policyOf(t, "c", ratelimit.LeakyBucket, 1000, time.Millisecond), Key: "k"},
	}
	out := make([]ratelimit.Decision, len(reqs))
	// The first call loads the script (EVALSHA, NOSCRIPT, EVAL).
	if err := s.Decide(context.Background(), time.Now(), reqs, out); err != nil {
		t.Fatal(err)
	}
	srv.Do("CONFIG", "RESETSTAT")
	trips.Store(0)
	const n = 50
	for range n {
		if err := s.Decide(context.Background(), time.Now(), reqs, out); err != nil {
			t.Fatal(err)
		}
	}
	if got := trips.Load(); got != n {
		t.Errorf("Observe: got %d round trips for %d requests, want %d", got, n, n)
	}
	stats := srv.Do("INFO", "commandstats")
	calls := -1
	for _, line := range strings.Split(stats, "\r\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:calls="); ok {
			calls, _ = strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
		}
	}
	if calls != n {
		t.Errorf("server: got %d EVALSHA calls, want %d\n%s", calls, n, stats)
	}
}

// TestExactAcrossInstances races 300 requests through three stores on one
// Redis against a budget of 100: exactly 100 pass.
func TestExactAcrossInstances(t *testing.T) {
	srv := redistest.Start(t)
	var stores []*Store
	for range 3 {
		stores = append(stores, newStore(t, Options{Addresses: []string{srv.Addr()}}))
	}
	for _, tc := range []struct {
		name string
		pol  ratelimit.Policy
	}{
		{"sliding_window_log", ratelimit.Policy{Algorithm: ratelimit.SlidingWindowLog, Limit: 100, Window: time.Hour}},
		{"fixed_window", ratelimit.Policy{Algorithm: ratelimit.FixedWindow, Limit: 100, Window: time.Hour}},
		{"token_bucket", ratelimit.Policy{Algorithm: ratelimit.TokenBucket, Limit: 1, Window: time.Hour, Burst: 100}},
		{"sliding_window_counter", ratelimit.Policy{Algorithm: ratelimit.SlidingWindowCounter, Limit: 100, Window: 24 * time.Hour}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.pol.Name = "exact-" + tc.name
			p := ratelimit.MustPolicy(tc.pol)
			admitted := admitAcross(t, stores, ratelimit.Request{Policy: p, Key: "shared"}, 300)
			for i, s := range stores {
				if !s.Healthy() {
					t.Fatalf("store %d unhealthy: %v", i, s.LastError())
				}
			}
			// A counter window may roll over mid-run (once a day); the
			// others are exact.
			if got := admitted; got != 100 {
				t.Errorf("got %d admitted, want 100", got)
			}
		})
	}
}

// TestLeakyAcrossInstances queues requests from three stores into one
// leaky bucket at one instant: their departures, merged, are one interval
// apart, whichever instance each came through. The stores decide at the
// caller's time, so the schedule is exact and no round trip can blur it
// (TestDepartureAfterRoundTrip covers departures on server time).
func TestLeakyAcrossInstances(t *testing.T) {
	srv := redistest.Start(t)
	var stores []*Store
	for range 3 {
		stores = append(stores, newStore(t, Options{Addresses: []string{srv.Addr()}, CallerTime: true}))
	}
	p := ratelimit.MustPolicy(ratelimit.Policy{Name: "shape", Algorithm: ratelimit.LeakyBucket, Limit: 10, Window: time.Second, Queue: 30})
	t0 := time.Now().Truncate(time.Second)
	var mu sync.Mutex
	var departs []time.Duration
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Go(func() {
			out := make([]ratelimit.Decision, 1)
			if err := stores[i%3].Decide(context.Background(), t0, []ratelimit.Request{{Policy: p, Key: "g"}}, out); err != nil {
				t.Error(err)
			}
			if out[0].Allowed {
				mu.Lock()
				departs = append(departs, out[0].Delay)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(departs) != 31 {
		t.Fatalf("got %d admitted, want 31 (one leaving now plus a queue of 30)", len(departs))
	}
	slices.Sort(departs)
	for k, got := range departs {
		if want := time.Duration(k) * p.Interval(); got != want {
			t.Errorf("departure %d: got delay %v, want %v", k, got, want)
		}
	}
}

// TestSlidingLogKeysExpire drops log entries (which writes the log's
// settled key) and checks both keys carry a TTL.
func TestSlidingLogKeysExpire(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, CallerTime: true})
	r := ratelimit.Request{Policy: policyOf(t, "log", ratelimit.SlidingWindowLog, 2, time.Second), Key: "k"}
	out := make([]ratelimit.Decision, 1)
	for _, at := range []time.Duration{0, 100 * time.Millisecond, 1500 * time.Millisecond} {
		if err := s.Decide(context.Background(), t0.Add(at), []ratelimit.Request{r}, out); err != nil {
			t.Fatal(err)
		}
	}
	k := Key(s.prefix, r)
	for _, key := range []string{k, k + ":s"} {
		ttl, err := strconv.Atoi(srv.Do("PTTL", key))
		if err != nil {
			t.Fatal(err)
		}
		if max := (time.Second + CallerTimeSlack).Milliseconds(); ttl <= 0 || int64(ttl) > max {
			t.Errorf("key %q: got PTTL %d, want in (0, %d]", key, ttl, max)
		}
	}
	if got := srv.Do("ZCARD", k); got != "1" {
		t.Errorf("log after the window passed: got %s entries, want 1", got)
	}
}

// admitAcross sends n concurrent decisions for r, dealt round robin over
// stores, and returns how many were admitted.
func admitAcross(t *testing.T, stores []*Store, r ratelimit.Request, n int) int64 {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			out := make([]ratelimit.Decision, 1)
			if err := stores[i%len(stores)].Decide(context.Background(), time.Now(), []ratelimit.Request{r}, out); err != nil {
				t.Error(err)
			}
			if out[0].Allowed {
				admitted.Add(1)
			}
		})
	}
	wg.Wait()
	return admitted.Load()
}
