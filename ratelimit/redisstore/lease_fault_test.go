package redisstore

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// syncBuffer is a bytes.Buffer safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) count(s string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(b.b.String(), s)
}

// TestLeaseFallbackAndResume kills Redis under a leased policy seen by
// three instances: the instance falls back to limit / 3 at once, says so
// once in the log and through OnLeaseFallback, decides within the
// timeout, and leases again once Redis is back.
func TestLeaseFallbackAndResume(t *testing.T) {
	srv := redistest.Start(t)
	var logs syncBuffer
	var mu sync.Mutex
	var states []bool
	var c trips
	s := newStore(t, Options{
		Addresses: []string{srv.Addr()}, Timeout: faultTimeout, Observe: c.observe,
		Logger:          slog.New(slog.NewTextHandler(&logs, nil)),
		OnLeaseFallback: func(_ string, on bool) { mu.Lock(); states = append(states, on); mu.Unlock() },
	})
	others := []*Store{
		newStore(t, Options{Addresses: []string{srv.Addr()}}),
		newStore(t, Options{Addresses: []string{srv.Addr()}}),
	}
	for _, o := range others {
		o.startHeartbeat()
	}
	p := leasePolicy(t, "fault-lease", ratelimit.FixedWindow, 300, time.Hour)
	reqs := []ratelimit.Request{{Policy: p, Key: "k"}}
	for range 60 {
		if d, _ := decideTimed(t, s, reqs); !d[0].Allowed {
			t.Fatal("healthy: rejected, want admitted")
		}
	}
	if n := s.Instances(); n != 3 {
		t.Fatalf("instances seen: got %d, want 3", n)
	}
	s.refills.Wait()
	l := s.leases.get(Key(s.prefix, reqs[0]), reqs[0])
	l.mu.Lock()
	held := l.units
	l.mu.Unlock()
	if held == 0 {
		t.Fatal("the lease holds nothing before the kill, want some units")
	}

	srv.Kill()
	failedBefore := c.failed.Load()
	admitted := 0
	for i := range 150 + int(held) {
		d := decideWithin(t, s, reqs, fmt.Sprintf("decision %d with Redis down", i))
		if d[0].Allowed {
			admitted++
		}
	}
	// The units the lease held were counted in Redis and are spent
	// first; then the fallback admits limit / 3.
	if admitted != 100+int(held) {
		t.Errorf("Redis down: admitted %d, want the lease's %d and limit / 3 = 100", admitted, held)
	}
	// Three failures open the breaker; the prober may add a ping.
	if got := c.failed.Load() - failedBefore; got < breakerFailures || got > breakerFailures+1 {
		t.Errorf("Redis down: got %d failed round trips, want %d (breaker open)", got, breakerFailures)
	}
	if got := logs.count("lease fallback"); got != 1 {
		t.Errorf(`"lease fallback" log lines: got %d, want 1`, got)
	}
	if got := logs.count("instances=3 limit=100"); got != 1 {
		t.Errorf("fallback line lacks instances=3 limit=100:\n%s", logs.b.String())
	}

	srv.Restart()
	took, ok := waitFor(3*time.Second, func() bool {
		decideTimed(t, s, reqs)
		return logs.count("lease resumed") == 1
	})
	if !ok || took > 2*time.Second {
		t.Fatalf("Redis back: leases resumed after %v (ok %v), want within 2s", took, ok)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(states) != 2 || !states[0] || states[1] {
		t.Errorf("OnLeaseFallback calls: got %v, want [true false]", states)
	}
	if got := srv.Do("EXISTS", Key(s.prefix, reqs[0])); got != "1" {
		t.Errorf("Redis back: leased bucket exists %s, want 1", got)
	}
}
