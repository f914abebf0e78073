package redisstore

// Recovery from outages: reconnecting to a latent Redis, leases resuming,
// the heartbeat against Close.

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// TestBreakerClosesAfterRestartOnLatentRedis: a Redis that answers every
// round trip in 25ms, within the 45ms timeout, serves decisions. After it
// restarts, the prober must redial (dial, HELLO, PING: more than one round
// trip), which a PING held to the decision timeout could never fit: the
// probe's first PING has room for it. Shared decisions resume "within
// about a second" (tested: within 2s).
func TestBreakerClosesAfterRestartOnLatentRedis(t *testing.T) {
	srv := redistest.Start(t)
	const timeout, delay = 45 * time.Millisecond, 25 * time.Millisecond
	addr := delayProxy(t, srv.Addr(), delay)
	// Load the script up front, so that this test is about the PING
	// alone (TestScriptsLoadedAfterRestartOnLatentRedis is about them).
	srv.Do("SCRIPT", "LOAD", commonSource+decideSource)
	s, err := New(context.Background(), Options{Addresses: []string{addr}, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p := policyOf(t, "latent", ratelimit.FixedWindow, 100000, time.Hour)
	reqs := []ratelimit.Request{{Policy: p, Key: "k"}}
	out := make([]ratelimit.Decision, 1)
	if _, ok := waitFor(5*time.Second, func() bool {
		_ = s.Decide(context.Background(), time.Now(), reqs, out)
		return s.Healthy() && !s.br.open.Load()
	}); !ok {
		t.Skipf("no successful decision through a %v proxy before the restart: %v", delay, s.LastError())
	}
	// Redis goes away (the proxy's upstream connection dies with it) and
	// decisions open the breaker, then it comes back. Deciding only after
	// the restart did not always open it: a decision that timed out
	// after its EVALSHA met NOSCRIPT had sent the EVAL, which Redis ran
	// and whose script it kept, and the next decision down a connection
	// made again answered in one round trip, well within the timeout.
	srv.Kill()
	if _, ok := waitFor(3*time.Second, func() bool {
		_ = s.Decide(context.Background(), time.Now(), reqs, out)
		return s.br.open.Load()
	}); !ok {
		t.Fatal("breaker not open with Redis gone")
	}
	srv.Restart()
	// The prober alone: no decision is sent while it is open.
	took, closed := waitFor(4*time.Second, func() bool { return !s.br.open.Load() })
	if !closed {
		t.Fatalf("Redis back and answering in %v (< timeout %v): breaker still open after %v, last error %v", delay, timeout, took, s.LastError())
	}
	t.Logf("breaker closed %v after the restart", took)
}

// warmLease decides reqs, whose one limit is leased, 3000 times in a row
// and returns its lease once the refills are in, with the units it holds
// (at least least) and its batch. A stall of the process longer than the
// lease's idle time (400ms here) between the last decision and the look
// at the lease lets the idle sweep give its units back and forget it: the
// look then finds a new, empty lease. The warm-up is run again until it
// holds, within 10s.
func warmLease(t *testing.T, s *Store, reqs []ratelimit.Request, least int64) (l *lease, held, batch int64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		for range 3000 {
			decideTimed(t, s, reqs)
		}
		s.refills.Wait()
		l = s.leases.get(Key(s.prefix, reqs[0]), reqs[0])
		l.mu.Lock()
		held, batch = l.units, l.batch
		l.mu.Unlock()
		if held >= least {
			return l, held, batch
		}
		if time.Now().After(deadline) {
			t.Fatalf("warm lease holds %d units, want >= %d", held, least)
		}
	}
}

// TestLeaseResumesWhenServedFromHeldUnits: "when Redis answers again leases
// resume, with one `lease resumed` line", and the gauge is 1 only "while a
// leased policy decides locally". The breaker opens on another policy's
// failures while the lease still holds many units; once Redis is back,
// decisions served from those units (no refill needed for a long time)
// end the fallback.
func TestLeaseResumesWhenServedFromHeldUnits(t *testing.T) {
	srv := redistest.Start(t)
	var logs syncBuffer
	var mu sync.Mutex
	var states []bool
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: faultTimeout,
		Logger:          slog.New(slog.NewTextHandler(&logs, nil)),
		OnLeaseFallback: func(_ string, on bool) { mu.Lock(); states = append(states, on); mu.Unlock() },
	})
	lp := leasePolicy(t, "held", ratelimit.FixedWindow, 1_000_000, time.Hour)
	leased := []ratelimit.Request{{Policy: lp, Key: "k"}}
	other := []ratelimit.Request{{Policy: policyOf(t, "per-request", ratelimit.FixedWindow, 1000, time.Hour), Key: "k"}}
	l, held, batch := warmLease(t, s, leased, 50)
	srv.Kill()
	for range breakerFailures {
		decideTimed(t, s, other)
	}
	if !s.br.open.Load() {
		t.Fatal("breaker not open after 3 failures")
	}
	decideTimed(t, s, leased) // open breaker: limit / N, fallback on
	if logs.count("lease fallback") != 1 {
		t.Fatalf("no lease fallback line:\n%s", logs.b.String())
	}
	srv.Restart()
	if _, ok := waitFor(3*time.Second, func() bool { return s.Healthy() && !s.br.open.Load() }); !ok {
		t.Fatal("Redis back: breaker still open after 3s")
	}
	// Steady, slow traffic on the leased policy, served from the held units.
	for range 30 {
		decideTimed(t, s, leased)
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	l.mu.Lock()
	left := l.units
	l.mu.Unlock()
	if logs.count("lease resumed") != 1 || states[len(states)-1] {
		t.Errorf("Redis back for 1.5s, breaker closed, 30 leased decisions served from leases (units %d -> %d, batch %d): "+
			"`lease resumed` lines %d, OnLeaseFallback calls %v; want one resumed line and the gauge back at 0",
			held, left, batch, logs.count("lease resumed"), states)
	}
}

// TestLeaseFallbackClearsWithoutTraffic: a leased policy that enters
// fallback and then gets no more requests leaves it, gauge and line, once
// Redis answers again, not at its next request however late.
func TestLeaseFallbackClearsWithoutTraffic(t *testing.T) {
	srv := redistest.Start(t)
	var on atomic.Bool
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: faultTimeout,
		OnLeaseFallback: func(_ string, v bool) { on.Store(v) },
	})
	lp := leasePolicy(t, "quiet", ratelimit.FixedWindow, 300, time.Hour)
	leased := []ratelimit.Request{{Policy: lp, Key: "k"}}
	decideTimed(t, s, leased)
	srv.Kill()
	for range 10 {
		decideTimed(t, s, leased)
	}
	if !on.Load() {
		t.Fatal("Redis down: leased policy not in fallback")
	}
	srv.Restart()
	if _, ok := waitFor(3*time.Second, func() bool { return s.Healthy() && !s.br.open.Load() }); !ok {
		t.Fatal("Redis back: breaker still open after 3s")
	}
	// The heartbeat ends an idle fallback at its next beat, within about
	// a second; a loaded machine may delay the beat or fail one (100 ms
	// for its round trip) and so the health it needs, so the bound is
	// generous: what matters is that it clears with no request at all.
	if took, ok := waitFor(10*time.Second, func() bool { return !on.Load() }); !ok {
		t.Errorf("Redis back and healthy: sluice_ratelimit_lease_fallback still 1 after %s for a policy with no traffic", took.Round(time.Millisecond))
	}
}

// TestDeclareLeasesConcurrentWithClose: gateway.Load (a SIGHUP reload) may
// run while shutdown closes the store: DeclareLeases must not add to the
// WaitGroup Close waits on once Close has begun (a race report, or
// "WaitGroup is reused before previous Wait has returned").
func TestDeclareLeasesConcurrentWithClose(t *testing.T) {
	srv := redistest.Start(t)
	for range 30 {
		s, err := New(context.Background(), Options{Addresses: []string{srv.Addr()}, Timeout: testTimeout})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Go(func() { <-start; s.Close() })
		wg.Go(func() {
			<-start
			for range 200 {
				s.DeclareLeases()
			}
		})
		close(start)
		wg.Wait()
	}
	time.Sleep(100 * time.Millisecond)
}

// TestLogsOncePerTransitionFromStartDown: Redis down at start, then back:
// one `redis unreachable` line and one `redis answers again`.
func TestLogsOncePerTransitionFromStartDown(t *testing.T) {
	srv := redistest.Start(t)
	srv.Kill()
	var logs syncBuffer
	s, err := New(context.Background(), Options{Addresses: []string{srv.Addr()}, Timeout: faultTimeout,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	time.Sleep(1500 * time.Millisecond)
	if n := logs.count("redis unreachable"); n != 1 {
		t.Errorf("down at start: %d unreachable lines, want 1", n)
	}
	srv.Restart()
	if _, ok := waitFor(3*time.Second, func() bool { return s.Healthy() && !s.br.open.Load() }); !ok {
		t.Fatal("not healthy 3s after Redis came up")
	}
	time.Sleep(1500 * time.Millisecond)
	if n, m := logs.count("redis unreachable"), logs.count("redis answers again"); n != 1 || m != 1 {
		t.Errorf("down at start then up: unreachable %d, answers again %d, want 1 and 1:\n%s", n, m, logs.b.String())
	}
}

// TestIdleLatentRedisRestart: the idle ping (closed breaker, no traffic)
// must redial after a Redis restart; with a 25ms Redis and a 45ms timeout,
// dial, HELLO and PING do not fit in a decision's timeout, and a healthy
// Redis must not be marked unhealthy for good.
func TestIdleLatentRedisRestart(t *testing.T) {
	srv := redistest.Start(t)
	const timeout, delay = 45 * time.Millisecond, 25 * time.Millisecond
	addr := delayProxy(t, srv.Addr(), delay)
	s, err := New(context.Background(), Options{Addresses: []string{addr}, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok := waitFor(3*time.Second, s.Healthy); !ok {
		t.Skip("not healthy before the restart")
	}
	srv.Restart()
	time.Sleep(2500 * time.Millisecond) // two idle pings at least
	if _, ok := waitFor(4*time.Second, func() bool { return s.Healthy() && !s.br.open.Load() }); !ok {
		t.Errorf("idle store, Redis restarted 6.5s ago and answering in %v (< timeout %v): never healthy in the last 4s; breaker open %v, last error %v",
			delay, timeout, s.br.open.Load(), s.LastError())
	}
}

// TestScriptsLoadedBeforeBreakerCloses: a Redis restart drops the scripts
// (and a fresh one has none), and a script's first call is then EVALSHA,
// NOSCRIPT and EVAL: two round trips, which a Redis slower than half the
// timeout never fits, so no decision would go through it again. The
// probe loads every script into Redis before it closes the breaker.
func TestScriptsLoadedBeforeBreakerCloses(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: faultTimeout})
	reqs := []ratelimit.Request{{Policy: policyOf(t, "scripts", ratelimit.FixedWindow, 100, time.Hour), Key: "k"}}
	decideTimed(t, s, reqs)
	srv.Kill()
	if _, ok := waitFor(3*time.Second, func() bool { decideTimed(t, s, reqs); return s.br.open.Load() }); !ok {
		t.Fatal("breaker not open with Redis gone")
	}
	srv.Restart() // empty: no scripts
	// No decision is sent while it is open: once it closes, what Redis
	// has is what the probe loaded.
	if _, ok := waitFor(5*time.Second, func() bool { return !s.br.open.Load() }); !ok {
		t.Fatalf("breaker still open: %v", s.LastError())
	}
	for _, src := range scriptSources {
		sum := sha1.Sum([]byte(src))
		if got := srv.Do("SCRIPT", "EXISTS", hex.EncodeToString(sum[:])); got != "1" {
			t.Errorf("script %.40q...: SCRIPT EXISTS %s after the breaker closed, want 1", src, got)
		}
	}
}
