package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// TestOOMSpentKeyWithBlock: TestKeyFloodOOMKeepsBreakerClosed for a
// policy that blocks (the brute-force setting). A spent key's next
// rejection starts its block, a write (SET KEY:b) that a full Redis
// refuses; were the script to fail for it, the decision would go to
// on_error local, whose fresh bucket admits the key's whole limit again.
func TestOOMSpentKeyWithBlock(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
	var full oomSeen
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: floodTimeout, Observe: full.observe})
	// A sliding log, not a window aligned to the clock: a window that
	// turned during the test would make the spent key fresh.
	p := ratelimit.MustPolicy(ratelimit.Policy{Name: "login", Algorithm: ratelimit.SlidingWindowLog, Limit: 3, Window: time.Hour, Block: time.Hour})
	victim := ratelimit.Request{Policy: p, Key: "victim"}
	out := make([]ratelimit.Decision, 1)
	for i := range 3 {
		if err := s.Decide(context.Background(), time.Now(), []ratelimit.Request{victim}, out); err != nil || !out[0].Allowed {
			t.Fatalf("request %d: got %+v %v, want admitted", i+1, out[0], err)
		}
	}
	other := ratelimit.MustPolicy(ratelimit.Policy{Name: "api", Algorithm: ratelimit.FixedWindow, Limit: 3, Window: time.Hour})
	if n := floodKeys(t, s, other, 400_000, full.Load); !full.Load() {
		t.Fatalf("flooded %d fresh keys: Redis never answered OOM, want it full", n)
	}
	// Stay full: the flood stops at the first OOM, when used memory
	// hovers at maxmemory; keep it over, as a flood that goes on does.
	srv.Do("CONFIG", "SET", "maxmemory", "1mb")
	if err := s.Decide(context.Background(), time.Now(), []ratelimit.Request{{Policy: other, Key: "fresh"}}, out); err != nil {
		t.Fatal(err)
	}
	t.Logf("a fresh key's decision: last error %v, healthy %v", s.LastError(), s.Healthy())
	admitted := admittedOf(t, s, victim, 3)
	if admitted > 0 {
		t.Errorf("after the key flood, %d more guesses of a key whose window (limit 3) is spent were admitted; last error: %v", admitted, s.LastError())
	}
}
