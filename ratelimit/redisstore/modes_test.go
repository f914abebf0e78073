package redisstore

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// TestSentinelMode finds the master through a sentinel and shares its
// budget with a store that talks to the master directly.
func TestSentinelMode(t *testing.T) {
	master := redistest.Start(t, "--requirepass", "s3cret")
	sentinel := redistest.StartSentinel(t, master.Addr(), "main")
	viaSentinel := newStore(t, Options{Mode: Sentinel, Addresses: []string{sentinel}, MasterName: "main", Password: "s3cret", DB: 2})
	direct := newStore(t, Options{Addresses: []string{master.Addr()}, Password: "s3cret", DB: 2})
	p := policyOf(t, "sentinel", ratelimit.FixedWindow, 3, time.Hour)
	reqs := []ratelimit.Request{{Policy: p, Key: "k"}}
	admitted := 0
	for i := range 6 {
		s := viaSentinel
		if i%2 == 1 {
			s = direct
		}
		out := make([]ratelimit.Decision, 1)
		if err := s.Decide(context.Background(), time.Now(), reqs, out); err != nil {
			t.Fatal(err)
		}
		if out[0].Allowed {
			admitted++
		}
	}
	if admitted != 3 {
		t.Errorf("got %d admitted, want 3 (one budget through sentinel and direct)", admitted)
	}
	if !viaSentinel.Healthy() {
		t.Errorf("sentinel store unhealthy: %v", viaSentinel.LastError())
	}
}

// TestStartsWithoutRedis starts a store while Redis is down: it is
// unhealthy and decides locally, then connects on its own once Redis is up.
func TestStartsWithoutRedis(t *testing.T) {
	srv := redistest.Start(t)
	srv.Kill()
	var c trips
	s, err := New(context.Background(), Options{Addresses: []string{srv.Addr()}, Timeout: faultTimeout, Observe: c.observe})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Healthy() {
		t.Fatal("redis down at start: got healthy, want unhealthy")
	}
	reqs := []ratelimit.Request{{Policy: policyOf(t, "late", ratelimit.TokenBucket, 5, time.Hour), Key: "k"}}
	if d := decideWithin(t, s, reqs, "redis down at start: a decision"); !d[0].Allowed {
		t.Fatalf("redis down at start: got %+v, want allowed by the fallback", d[0])
	}
	srv.Restart()
	if took, ok := waitFor(3*time.Second, s.Healthy); !ok || took > 2*time.Second {
		t.Fatalf("redis up: healthy after %v (ok %v), want within 2s", took, ok)
	}
	decideTimed(t, s, reqs)
	if got := srv.Do("EXISTS", Key(s.prefix, reqs[0])); got != "1" {
		t.Errorf("after connecting: bucket key exists %s, want 1", got)
	}
}

// aclCommands are the commands README "Redis permissions" lists for an
// ACL user of sluice's: those it sends and those its scripts run.
var aclCommands = []string{
	"+ping", "+select", "+cluster|slots", "+cluster|shards",
	"+evalsha", "+eval", "+script|load",
	"+time", "+get", "+set", "+del", "+pexpire",
	"+hset", "+hdel", "+hgetall",
	"+zadd", "+zcard", "+zcount", "+zrange", "+zrangebyscore", "+zrevrangebyscore", "+zrem", "+zremrangebyscore",
}

// TestACLUserWithListedCommands runs every kind of round trip (decisions
// of each algorithm, looks, resets, give-backs, a queue give-up, leases,
// heartbeats, the prober's ping and script loads) as an ACL user that may
// run only the commands README "Redis permissions" lists, on keys under
// the prefix, and in a database other than 0: none fails.
func TestACLUserWithListedCommands(t *testing.T) {
	srv := redistest.Start(t)
	srv.Do(append([]string{"ACL", "SETUSER", "gateway", "on", ">s3cret", "~gw:*", "resetchannels", "-@all"}, aclCommands...)...)
	var c trips
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, Username: "gateway", Password: "s3cret", DB: 3, KeyPrefix: "gw:", Observe: c.observe})
	ctx := context.Background()
	now := time.Now()
	for _, a := range ratelimit.Algorithms {
		p := ratelimit.Policy{Name: "acl-" + a.String(), Algorithm: a, Limit: 2, Window: time.Minute, Block: time.Minute}
		switch a {
		case ratelimit.LeakyBucket:
			p.Queue, p.Block = 2, 0
		case ratelimit.TokenBucket:
			p.Hold = true
		}
		r := []ratelimit.Request{{Policy: ratelimit.MustPolicy(p), Key: "k"}}
		for range 4 {
			out := decide1(t, s, now, r...)
			if out[0].Allowed && out[0].Delay > 0 {
				wctx, cancel := context.WithCancel(ctx)
				cancel() // gives the queued request's place back
				_ = s.Wait(wctx, r[0], out[0])
			} else if out[0].Allowed {
				if err := s.Refund(ctx, now, r, out); err != nil {
					t.Errorf("%v: refund: %v", a, err)
				}
			}
		}
		if _, err := s.Peek(ctx, now, r[0]); err != nil {
			t.Errorf("%v: peek: %v", a, err)
		}
		if err := s.Reset(ctx, r[0]); err != nil {
			t.Errorf("%v: reset: %v", a, err)
		}
	}
	// A late arrival (behind the sliding log's newest entry) takes the
	// log's other path; only virtual clocks make one on demand.
	vs := newStore(t, Options{Addresses: []string{srv.Addr()}, Username: "gateway", Password: "s3cret", DB: 3, KeyPrefix: "gw:", Observe: c.observe, CallerTime: true})
	log := []ratelimit.Request{{Policy: ratelimit.MustPolicy(ratelimit.Policy{Name: "acl-late", Algorithm: ratelimit.SlidingWindowLog, Limit: 2, Window: time.Minute}), Key: "k"}}
	for _, at := range []time.Duration{time.Second, 0, 2 * time.Second, time.Second} {
		decide1(t, vs, t0.Add(at), log...)
	}
	s.DeclareLeases()
	for _, a := range []ratelimit.Algorithm{ratelimit.FixedWindow, ratelimit.TokenBucket, ratelimit.SlidingWindowCounter} {
		r := ratelimit.Request{Policy: leasePolicy(t, "acl-lease-"+a.String(), a, 1000, time.Second), Key: "k"}
		for range 20 {
			decide1(t, s, time.Now(), r)
		}
	}
	if err := s.probe(); err != nil {
		t.Errorf("probe: %v", err)
	}
	if got := c.failed.Load(); got != 0 || !s.Healthy() {
		t.Errorf("got %d failed round trips (last %v), want none", got, s.LastError())
	}
	if log := srv.Do("ACL", "LOG"); log != "" {
		t.Errorf("ACL LOG: got %q, want no denied command", log)
	}
}

// TestSentinelFailover: README "Redis data loss". After a failover that
// the sentinels announce, decisions reach the new master.
func TestSentinelFailover(t *testing.T) {
	master := redistest.Start(t)
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port()))
	sentinel := redistest.StartSentinel(t, master.Addr(), "main")
	known := func() bool {
		r, err := redistest.Command(sentinel, "SENTINEL", "REPLICAS", "main")
		return err == nil && strings.Contains(r, strconv.Itoa(replica.Port())) && strings.Contains(replica.Do("INFO", "replication"), "master_link_status:up")
	}
	if _, ok := waitFor(20*time.Second, known); !ok {
		t.Fatal("the sentinel does not know the replica after 20s")
	}
	s := newStore(t, Options{Mode: Sentinel, Addresses: []string{sentinel}, MasterName: "main"})
	r := []ratelimit.Request{{Policy: policyOf(t, "failover", ratelimit.FixedWindow, 1_000_000, time.Hour), Key: "k"}}
	key := Key(s.prefix, r[0])
	decide1(t, s, time.Now(), r...)
	if _, err := redistest.Command(sentinel, "SENTINEL", "FAILOVER", "main"); err != nil {
		t.Fatal(err)
	}
	// The replica becomes master; a decision counted there after that
	// raises the bucket's count beyond what it copied.
	promoted := func() bool {
		role, err := redistest.Command(replica.Addr(), "ROLE")
		if err != nil || !strings.HasPrefix(role, "master") {
			return false
		}
		before := replica.Do("GET", key)
		decide1(t, s, time.Now(), r...)
		return replica.Do("GET", key) != before
	}
	took, ok := waitFor(20*time.Second, promoted)
	if !ok {
		t.Fatalf("decisions do not reach the new master 20s after the failover (healthy %v, last error %v)", s.Healthy(), s.LastError())
	}
	t.Logf("decisions reach the new master %v after the failover", took)
}
