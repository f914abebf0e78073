package redisstore

import (
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// TestReplicaKeepsBreakerOpen: README "When Redis fails": the prober
// closes the breaker once Redis answers as a decision needs. A server
// that became a replica (a failover that demoted it in place, while the
// gateway stays connected) answers PING but refuses every script that
// writes with READONLY, as does one whose ACL user may not run the
// scripts (NOPERM) or a cluster that is down. Closing the breaker on the
// PING alone sent the next decisions to fail again: the breaker, Healthy
// and /readyz flapped four times a second, each time with a "redis
// answers again" and a "redis unreachable" line.
func TestReplicaKeepsBreakerOpen(t *testing.T) {
	primary := redistest.Start(t)
	srv := redistest.Start(t)
	var logs syncBuffer
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	reqs := []ratelimit.Request{{Policy: policyOf(t, "demoted", ratelimit.FixedWindow, 1000, time.Minute), Key: "k"}}
	decide1(t, s, time.Now(), reqs...)
	srv.Do("REPLICAOF", "127.0.0.1", strconv.Itoa(primary.Port()))
	// Decide until the breaker has opened and the prober has had a few
	// chances (it probes 250ms after opening, then at most 1s apart).
	opened := false
	for start := time.Now(); time.Since(start) < 2500*time.Millisecond; time.Sleep(5 * time.Millisecond) {
		decide1(t, s, time.Now(), reqs...)
		opened = opened || s.br.open.Load()
	}
	if !opened {
		t.Fatalf("decisions on a replica: the breaker never opened (last error %v)", s.LastError())
	}
	if n := logs.count("redis answers again"); n != 0 || s.Healthy() {
		t.Errorf("a replica that refuses every decision: breaker closed %d times, healthy %v (last error %v), want it open", n, s.Healthy(), s.LastError())
	}
}

// switchProxy forwards each connection it accepts to the address target
// holds at that moment, as a service's endpoint (a DNS name) that a
// failover points at the new primary: connections made before stay with
// the old server.
func switchProxy(t *testing.T, target *atomic.Value) string {
	return tcpProxy(t, func() string { return target.Load().(string) }, func(c, u net.Conn, wg *sync.WaitGroup) {
		wg.Go(func() { io.Copy(c, u); c.Close() })
	})
}

// TestFailoverBehindOneAddressReconnects: a managed Redis fails over by
// demoting the primary in place and pointing its address at the new
// one. The gateway's connection still leads to the old server, which
// answers every decision with READONLY; it must connect again, to
// whatever the address names now, rather than stay on the replica (in
// on_error) until it restarts.
func TestFailoverBehindOneAddressReconnects(t *testing.T) {
	old, promoted := redistest.Start(t), redistest.Start(t)
	var target atomic.Value
	target.Store(old.Addr())
	s := newStore(t, Options{Addresses: []string{switchProxy(t, &target)}})
	reqs := []ratelimit.Request{{Policy: policyOf(t, "endpoint", ratelimit.FixedWindow, 1_000_000, time.Minute), Key: "k"}}
	decide1(t, s, time.Now(), reqs...)
	target.Store(promoted.Addr())
	old.Do("REPLICAOF", "127.0.0.1", strconv.Itoa(promoted.Port()))
	key := Key(s.prefix, reqs[0])
	reached := func() bool {
		decide1(t, s, time.Now(), reqs...)
		return promoted.Do("EXISTS", key) == "1"
	}
	if _, ok := waitFor(10*time.Second, reached); !ok {
		t.Fatalf("decisions do not reach the new primary 10s after the failover (healthy %v, last error %v)", s.Healthy(), s.LastError())
	}
}
