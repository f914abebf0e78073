package redisstore

import (
	"context"
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
