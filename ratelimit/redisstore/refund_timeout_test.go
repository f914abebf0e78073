package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// TestTimedOutDecisionGivenBack: SPEC §8 count_status: "When the
// status the client receives is not in the list, the unit is given back:
// the bucket is left as if the request had not been counted ... Works
// with the memory and Redis stores alike." A decision that misses its
// timeout against a slow Redis is decided by the fallback (README "When
// Redis fails"), but the script it sent still runs once Redis gets to it
// and takes the unit in the shared bucket. The give-back then goes to the
// fallback only: the shared bucket keeps a unit for a request that
// succeeded, and every instance sees one guess fewer for the owner.
func TestTimedOutDecisionGivenBack(t *testing.T) {
	srv := redistest.Start(t)
	// The timeout is long enough for any answered round trip on a loaded
	// machine: only the stall below makes a decision miss it, and the
	// give-back after it has the whole timeout to reach Redis.
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: time.Second})
	p := ratelimit.MustPolicy(ratelimit.Policy{Name: "login", Algorithm: ratelimit.SlidingWindowLog, Limit: 5, Window: time.Hour, Hold: true})
	r := []ratelimit.Request{{Policy: p, Key: "alice"}}
	ctx := context.Background()
	out := make([]ratelimit.Decision, 1)
	if err := s.Decide(ctx, time.Now(), r, out); err != nil || !out[0].Allowed {
		t.Fatalf("first login: %+v %v", out[0], err)
	}
	if err := s.Refund(ctx, time.Now(), r, out); err != nil {
		t.Fatal(err)
	}
	// Redis stalls (a slow command, a fork, a paused VM) for longer than
	// the timeout: the decision misses it and is decided by the fallback.
	srv.Pause()
	err := s.Decide(ctx, time.Now(), r, out)
	time.Sleep(100 * time.Millisecond)
	srv.Resume()
	if err != nil || !out[0].Allowed {
		t.Fatalf("login while Redis stalls: %+v %v, want admitted by the fallback", out[0], err)
	}
	// The login succeeded: its unit goes back.
	if err := s.Refund(ctx, time.Now(), r, out); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if _, ok := waitFor(3*time.Second, func() bool { return s.Healthy() && !s.br.open.Load() }); !ok {
		t.Fatal("store not healthy after Resume")
	}
	d, err := s.Peek(ctx, time.Now(), r[0])
	if err != nil {
		t.Fatal(err)
	}
	if d.Remaining != 5 {
		t.Errorf("after two successful logins, both given back: shared bucket remaining %d, want 5 (Redis log %s)", d.Remaining, srv.Do("ZCARD", Key(s.prefix, r[0])))
	}
}
