package redisstore

// How the store behaves when Redis misbehaves: slow, full, gone.

import (
	"context"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// delayProxy forwards to addr, holding every server->client chunk for delay:
// a Redis that answers everything, pings included, but late.
func delayProxy(t *testing.T, addr string, delay time.Duration) string {
	return tcpProxy(t, func() string { return addr }, func(c, u net.Conn, wg *sync.WaitGroup) {
		type chunk struct {
			at time.Time
			b  []byte
		}
		ch := make(chan chunk, 1024)
		wg.Go(func() {
			defer close(ch)
			for {
				b := make([]byte, 64<<10)
				n, err := u.Read(b)
				if n > 0 {
					ch <- chunk{time.Now().Add(delay), b[:n]}
				}
				if err != nil {
					return
				}
			}
		})
		wg.Go(func() {
			for k := range ch {
				time.Sleep(time.Until(k.at))
				if _, err := c.Write(k.b); err != nil {
					return
				}
			}
			c.Close()
		})
	})
}

// tcpProxy forwards each connection it accepts to the address target
// names at that moment: client->server bytes as they come, server->client
// bytes as down copies them from u to c, with goroutines it adds to wg. It
// stops, closing every connection, when the test ends.
func tcpProxy(t *testing.T, target func() string, down func(c, u net.Conn, wg *sync.WaitGroup)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target())
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, u)
			mu.Unlock()
			wg.Go(func() { io.Copy(u, c); u.Close() })
			down(c, u, &wg)
		}
	})
	return ln.Addr().String()
}

// TestSlowRedisKeepsBreakerOpen: after 3 consecutive failures the breaker
// opens and "decisions stop going to Redis at all". A Redis that answers
// every call in 35ms, above the 20ms timeout, answers no decision in
// time; the prober's PING, held to the same timeout, must not close the
// breaker on it and send all traffic back to wait out the timeout.
func TestSlowRedisKeepsBreakerOpen(t *testing.T) {
	srv := redistest.Start(t)
	const timeout, delay = 20 * time.Millisecond, 35 * time.Millisecond
	addr := delayProxy(t, srv.Addr(), delay)
	var decFailed, pingOK atomic.Int64
	s, err := New(context.Background(), Options{Addresses: []string{addr}, Timeout: timeout,
		Observe: func(d time.Duration, err error) {
			if err != nil {
				decFailed.Add(1)
			} else {
				pingOK.Add(1)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p := policyOf(t, "slow", ratelimit.TokenBucket, 1000, time.Second)
	reqs := []ratelimit.Request{{Policy: p, Key: "k"}}
	// Let the connection settle (the first connect may itself time out).
	time.Sleep(1500 * time.Millisecond)
	start := decFailed.Load()
	var slow, total, healthySamples, samples atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(2 * time.Second)
	for range 8 {
		wg.Go(func() {
			out := make([]ratelimit.Decision, 1)
			for time.Now().Before(deadline) {
				t0 := time.Now()
				_ = s.Decide(context.Background(), time.Now(), reqs, out)
				if time.Since(t0) >= timeout {
					slow.Add(1)
				}
				total.Add(1)
				samples.Add(1)
				if s.Healthy() {
					healthySamples.Add(1)
				}
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	failed := decFailed.Load() - start
	t.Logf("2s against a Redis answering in 35ms (timeout 20ms): %d decisions, %d waited the full timeout, %d failed round trips, %d successful pings, Healthy true in %d of %d samples",
		total.Load(), slow.Load(), failed, pingOK.Load(), healthySamples.Load(), samples.Load())
	if failed > breakerFailures+20 {
		t.Errorf("breaker re-closed on a PING that a decision could never match: %d failed decision round trips in 2s, want about %d (breaker stays open)", failed, breakerFailures)
	}
}

// A late answer to a timed-out call must not be taken as the answer of the
// next call on the same connection (rueidis pipelining). Redis is stalled
// by a busy script from another connection; call A times out; B is sent
// just before Redis frees up, so A's late reply and B's reply arrive
// back to back on the store's connection.
func TestLateReplyNotAppliedToNext(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: faultTimeout})
	ctx := context.Background()
	pa := policyOf(t, "late-a", ratelimit.FixedWindow, 100, time.Hour)
	pb := policyOf(t, "late-b", ratelimit.FixedWindow, 10, time.Hour)
	const busy = `local s=redis.call('TIME') local st=s[1]*1000000+s[2] while true do local n=redis.call('TIME') if n[1]*1000000+n[2]-st > 150000 then break end end return 1`
	for round := range 5 {
		ka := []ratelimit.Request{{Policy: pa, Key: "a" + string(rune('0'+round))}}
		kb := []ratelimit.Request{{Policy: pb, Key: "b" + string(rune('0'+round))}}
		// Warm: B at 1 taken (remaining 8 after the next).
		out := make([]ratelimit.Decision, 1)
		if err := s.Decide(ctx, time.Now(), kb, out); err != nil || out[0].Remaining != 9 {
			t.Fatalf("round %d warm B: %+v %v", round, out[0], err)
		}
		done := make(chan struct{})
		go func() { defer close(done); redistest.Command(srv.Addr(), "EVAL", busy, "0") }()
		time.Sleep(10 * time.Millisecond)
		outA := make([]ratelimit.Decision, 1)
		ta := time.Now()
		_ = s.Decide(ctx, time.Now(), ka, outA) // times out: fallback
		tookA := time.Since(ta)
		time.Sleep(80 * time.Millisecond) // ~140ms: Redis frees at 150ms
		outB := make([]ratelimit.Decision, 1)
		tb := time.Now()
		_ = s.Decide(ctx, time.Now(), kb, outB)
		tookB := time.Since(tb)
		<-done
		if outB[0].Remaining != 8 && outB[0].Remaining != 9 {
			t.Errorf("round %d: B got Remaining %d (limit %d), want 8 (Redis) or 9 (fallback): A's late reply applied to B", round, outB[0].Remaining, outB[0].Limit)
		}
		t.Logf("round %d: A took %v (remaining %d), Redis counts A %q; B took %v remaining %d", round, tookA, outA[0].Remaining, srv.Do("GET", Key(s.prefix, ka[0])), tookB, outB[0].Remaining)
		// Let the breaker settle.
		waitFor(3*time.Second, func() bool { return s.Healthy() && !s.br.open.Load() })
	}
}

// TestLeaseFallbackNFromDeclare: SPEC §9, with Redis unreachable "each
// instance falls back to limit / N, with N the number of instances seen
// alive recently (heartbeats in Redis)". An instance whose configuration
// has leased policies beats from the load (DeclareLeases), so one whose
// first leased request comes after Redis failed (just restarted, or idle
// on that policy) still counts the others: not the whole limit.
func TestLeaseFallbackNFromDeclare(t *testing.T) {
	srv := redistest.Start(t)
	others := []*Store{
		newStore(t, Options{Addresses: []string{srv.Addr()}}),
		newStore(t, Options{Addresses: []string{srv.Addr()}}),
	}
	for _, o := range others {
		o.startHeartbeat()
	}
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: faultTimeout})
	s.DeclareLeases()
	if _, ok := waitFor(3*time.Second, func() bool { return s.Instances() == 3 }); !ok {
		t.Fatalf("after DeclareLeases: N = %d, want 3", s.Instances())
	}
	srv.Kill()
	p := leasePolicy(t, "lease-n", ratelimit.FixedWindow, 300, time.Hour)
	reqs := []ratelimit.Request{{Policy: p, Key: "k"}}
	admitted := 0
	for range 400 {
		if d, _ := decideTimed(t, s, reqs); d[0].Allowed {
			admitted++
		}
	}
	if admitted > 100 {
		t.Errorf("Redis down, 3 instances alive in Redis: this instance admitted %d of limit 300 (N=%d), want at most limit / 3 = 100", admitted, s.Instances())
	}
}

// TestFirstLeasedDecisionWithinTimeout: README, "Each decision has
// timeout for its round trips; no request waits longer on Redis". With
// the heartbeat started at the load, the first leased decision does not
// wait for the first beat, which has a looser bound.
func TestFirstLeasedDecisionWithinTimeout(t *testing.T) {
	srv := redistest.Start(t)
	const timeout = 10 * time.Millisecond
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: timeout})
	s.DeclareLeases()
	if _, ok := waitFor(3*time.Second, func() bool { return s.beating.Load() }); !ok {
		t.Fatal("the heartbeat did not start")
	}
	p := leasePolicy(t, "lease-first", ratelimit.FixedWindow, 300, time.Hour)
	reqs := []ratelimit.Request{{Policy: p, Key: "k"}}
	srv.Pause()
	defer srv.Resume()
	_, took := decideTimed(t, s, reqs)
	if took > timeout+40*time.Millisecond {
		t.Errorf("first leased decision with a hung Redis took %v, want about the %v timeout", took, timeout)
	}
}

// TestLeaseFallbackDoesNotFlapUnderOOM: "The instance logs `lease
// fallback` once per policy ... when Redis answers again leases resume,
// with one `lease resumed` line". A full Redis (noeviction) answers OOM to
// every lease call of a fresh key while a key whose lease still holds
// units is served locally; a local decision is no answer from Redis, so
// neither the line nor the gauge may flip on every request.
func TestLeaseFallbackDoesNotFlapUnderOOM(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory-policy", "noeviction")
	var logs syncBuffer
	var flips atomic.Int64
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: testTimeout,
		Logger:          slog.New(slog.NewTextHandler(&logs, nil)),
		OnLeaseFallback: func(string, bool) { flips.Add(1) },
	})
	p := leasePolicy(t, "lease-oom", ratelimit.FixedWindow, 1_000_000, time.Hour)
	old := []ratelimit.Request{{Policy: p, Key: "old"}}
	warmLease(t, s, old, 20)
	srv.Do("CONFIG", "SET", "maxmemory", "1")
	for i := range 10 {
		decideTimed(t, s, []ratelimit.Request{{Policy: p, Key: "fresh-" + string(rune('a'+i))}})
		decideTimed(t, s, old)
	}
	t.Logf("breaker open %v healthy %v last error %v", s.br.open.Load(), s.Healthy(), s.LastError())
	if n := logs.count("lease fallback"); n != 1 {
		t.Errorf(`"lease fallback" lines: got %d for one outage, want 1`, n)
	}
	if n := logs.count("lease resumed"); n != 0 {
		t.Errorf(`"lease resumed" lines: got %d while every lease call got OOM, want 0`, n)
	}
	t.Logf("OnLeaseFallback (gauge) flips: %d", flips.Load())
}

// TestOutageLogsTransitions: a Redis outage under per-request policies
// (the default sync) writes one line when the breaker opens and one when
// Redis answers again, not one per request.
func TestOutageLogsTransitions(t *testing.T) {
	srv := redistest.Start(t)
	var logs syncBuffer
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: faultTimeout,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	reqs := []ratelimit.Request{{Policy: policyOf(t, "per-request", ratelimit.TokenBucket, 1000, time.Second), Key: "k"}}
	decideTimed(t, s, reqs)
	srv.Kill()
	for range 100 {
		decideTimed(t, s, reqs)
	}
	srv.Restart()
	if _, ok := waitFor(3*time.Second, func() bool { decideTimed(t, s, reqs); return s.Healthy() && !s.br.open.Load() }); !ok {
		t.Fatal("Redis back: still unhealthy")
	}
	logs.mu.Lock()
	out := logs.b.String()
	logs.mu.Unlock()
	if lines := strings.Count(out, "\n"); lines < 2 {
		t.Errorf("Redis down then back under per-request policies: %d log lines, want one when it fails and one when it is back:\n%s", lines, out)
	}
}

// TestRetireLeasesLeavesTheCount: a reload to a configuration without
// leased policies stops the heartbeat and takes the instance out of the
// others' N at once; they would otherwise fall back to a smaller limit / N
// than the instances that lease, until it stopped. Leasing again later
// starts it again.
func TestRetireLeasesLeavesTheCount(t *testing.T) {
	srv := redistest.Start(t)
	other := newStore(t, Options{Addresses: []string{srv.Addr()}})
	other.startHeartbeat()
	s := newStore(t, Options{Addresses: []string{srv.Addr()}})
	s.DeclareLeases()
	if _, ok := waitFor(3*time.Second, func() bool { return s.Instances() == 2 }); !ok {
		t.Fatalf("after DeclareLeases: N = %d, want 2", s.Instances())
	}
	s.RetireLeases()
	members := func() string { return srv.Do("ZRANGE", InstancesKey(s.prefix), "0", "-1") }
	if got := members(); strings.Contains(got, s.id) {
		t.Fatalf("after RetireLeases: instances %q still hold this one", got)
	}
	// Past a heartbeat's period: no beat puts it back.
	time.Sleep(heartbeatEvery + 300*time.Millisecond)
	if got := members(); strings.Contains(got, s.id) {
		t.Errorf("a beat after RetireLeases: instances %q hold this one again", got)
	}
	other.beat(false)
	if n := other.Instances(); n != 1 {
		t.Errorf("the other instance counts N = %d, want 1", n)
	}
	s.DeclareLeases()
	if _, ok := waitFor(3*time.Second, func() bool { return strings.Contains(members(), s.id) }); !ok {
		t.Errorf("after DeclareLeases again: instances %q lack this one", members())
	}
}

// TestRetireBeforeBackgroundDeclare: two reloads in a row, one with
// leased policies and one without, run RetireLeases before the background
// start of DeclareLeases: no heartbeat may start after it.
func TestRetireBeforeBackgroundDeclare(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addresses: []string{srv.Addr()}})
	prev := runtime.GOMAXPROCS(1) // the order the scheduler usually picks
	s.DeclareLeases()
	s.RetireLeases()
	runtime.GOMAXPROCS(prev)
	time.Sleep(heartbeatEvery + 300*time.Millisecond)
	if got := srv.Do("ZRANGE", InstancesKey(s.prefix), "0", "-1"); strings.Contains(got, s.id) || s.beating.Load() {
		t.Errorf("after DeclareLeases then RetireLeases: beating=%v, instances %q hold this one", s.beating.Load(), got)
	}
}

// TestRetiredLeasesStayRetired: a leased decision still in flight from the
// configuration before a reload without leases does not start the
// heartbeat again; only DeclareLeases does.
func TestRetiredLeasesStayRetired(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addresses: []string{srv.Addr()}})
	p := leasePolicy(t, "old", ratelimit.FixedWindow, 100, time.Minute)
	s.DeclareLeases()
	if _, ok := waitFor(3*time.Second, s.beating.Load); !ok {
		t.Fatal("no heartbeat after DeclareLeases")
	}
	s.RetireLeases()
	decide1(t, s, time.Now(), ratelimit.Request{Policy: p, Key: "k"})
	time.Sleep(heartbeatEvery + 300*time.Millisecond)
	if got := srv.Do("ZRANGE", InstancesKey(s.prefix), "0", "-1"); strings.Contains(got, s.id) || s.beating.Load() {
		t.Errorf("after a leased decision of the configuration before: beating=%v, instances %q hold this one", s.beating.Load(), got)
	}
}

// TestCloseRightAfterDeclareLeavesTheSet: a reload with leased policies
// (DeclareLeases) followed at once by shutdown (Close) leaves this
// instance out of the set: the others must not count a closed store in N.
func TestCloseRightAfterDeclareLeavesTheSet(t *testing.T) {
	srv := redistest.Start(t)
	for i := range 10 {
		s := newStore(t, Options{Addresses: []string{srv.Addr()}})
		s.DeclareLeases()
		s.Close()
		if got := srv.Do("ZRANGE", InstancesKey(s.prefix), "0", "-1"); strings.Contains(got, s.id) {
			t.Fatalf("run %d: after DeclareLeases then Close: instances %q still hold this closed store", i, got)
		}
	}
}
