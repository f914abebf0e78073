package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// TestFallbackBlockCopyDroppedWhenRedisAnswers: README "When Redis
// fails", Redis data loss: a restart without persistence "lifts every
// block, including a block this instance carried into its fallback
// during the outage (that copy is dropped when Redis answers again, so
// that DELETE /v1/limits on any instance lifts a block everywhere)". Here
// instance A carries alice's block into its fallback during outage 1;
// Redis answers again (empty) and instance B resets alice as support
// would; in outage 2 A's fallback must not still refuse alice.
func TestFallbackBlockCopyDroppedWhenRedisAnswers(t *testing.T) {
	srv := redistest.Start(t)
	a := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: testTimeout})
	b := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: testTimeout})
	p := ratelimit.MustPolicy(ratelimit.Policy{Name: "login", Algorithm: ratelimit.SlidingWindowLog, Limit: 3, Window: time.Hour, Block: time.Hour})
	r := []ratelimit.Request{{Policy: p, Key: "alice"}}
	ctx := context.Background()
	out := make([]ratelimit.Decision, 1)
	decide := func(s *Store) ratelimit.Decision {
		t.Helper()
		if err := s.Decide(ctx, time.Now(), r, out); err != nil {
			t.Fatal(err)
		}
		return out[0]
	}
	for range 4 {
		decide(a)
	}
	if out[0].Allowed {
		t.Fatalf("fourth guess: got %+v, want rejected with a block", out[0])
	}
	// Outage 1: the block is carried into A's fallback, as documented.
	srv.Kill()
	if d := decide(a); d.Allowed {
		t.Fatalf("outage 1: got %+v, want the carried block", d)
	}
	// Redis answers again, empty; support resets alice through B.
	srv.Restart()
	if _, ok := waitFor(5*time.Second, func() bool { return !a.br.open.Load() && !b.br.open.Load() && a.Healthy() && b.Healthy() }); !ok {
		t.Fatal("breakers did not close after the restart")
	}
	if err := b.Reset(ctx, r[0]); err != nil {
		t.Fatal(err)
	}
	// Allowed once Redis answers A for alice (a decision that misses its
	// timeout on a loaded machine is the fallback's, still blocked).
	if _, ok := waitFor(5*time.Second, func() bool { return decide(a).Allowed }); !ok {
		t.Fatalf("Redis back, after the reset: got %+v, want allowed", out[0])
	}
	// Outage 2: A's fallback decides alice again.
	srv.Kill()
	if d := decide(a); !d.Allowed {
		t.Errorf("outage 2, after Redis answered again and alice was reset: got %+v (blocked %v, retry %v), want allowed (the carried copy is dropped when Redis answers again)", d, d.Blocked, d.RetryAfter)
	}
}

// TestFallbackBlockCopyDroppedWithoutSeeingKey: as
// TestFallbackBlockCopyDroppedWhenRedisAnswers, but instance A decides
// only another key between the outages: Redis answering any request ends
// the fallback's copy of alice's block, and the reset made through B
// meanwhile holds at the next outage.
func TestFallbackBlockCopyDroppedWithoutSeeingKey(t *testing.T) {
	srv := redistest.Start(t)
	a := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: testTimeout})
	b := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: testTimeout})
	p := ratelimit.MustPolicy(ratelimit.Policy{Name: "login", Algorithm: ratelimit.SlidingWindowLog, Limit: 3, Window: time.Hour, Block: time.Hour})
	alice := []ratelimit.Request{{Policy: p, Key: "alice"}}
	bob := []ratelimit.Request{{Policy: p, Key: "bob"}}
	ctx := context.Background()
	out := make([]ratelimit.Decision, 1)
	decide := func(r []ratelimit.Request) ratelimit.Decision {
		t.Helper()
		if err := a.Decide(ctx, time.Now(), r, out); err != nil {
			t.Fatal(err)
		}
		return out[0]
	}
	for range 4 {
		decide(alice)
	}
	srv.Kill()
	if d := decide(alice); d.Allowed {
		t.Fatalf("outage 1: got %+v, want the carried block", d)
	}
	srv.Restart()
	if _, ok := waitFor(5*time.Second, func() bool { return !a.br.open.Load() && a.Healthy() }); !ok {
		t.Fatal("breaker did not close after the restart")
	}
	if _, ok := waitFor(5*time.Second, func() bool { return decide(bob).Allowed && a.br.failures.Load() == 0 }); !ok {
		t.Fatal("Redis did not decide bob after the restart")
	}
	if err := b.Reset(ctx, alice[0]); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	if d := decide(alice); !d.Allowed {
		t.Errorf("outage 2, alice reset through B and never decided by A in between: got %+v, want allowed", d)
	}
}

// TestResetOnOtherInstanceLiftsBlockOnceSeen: instance A saw alice
// blocked; support resets alice through instance B while Redis is up. A
// cannot learn of the reset before Redis answers it for alice (README
// "When Redis fails"): once it has, the next outage does not hand the
// stale block to A's fallback.
func TestResetOnOtherInstanceLiftsBlockOnceSeen(t *testing.T) {
	srv := redistest.Start(t)
	a := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: testTimeout})
	b := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: testTimeout})
	p := ratelimit.MustPolicy(ratelimit.Policy{Name: "login", Algorithm: ratelimit.SlidingWindowLog, Limit: 3, Window: time.Hour, Block: time.Hour})
	r := []ratelimit.Request{{Policy: p, Key: "alice"}}
	ctx := context.Background()
	out := make([]ratelimit.Decision, 1)
	for range 4 {
		if err := a.Decide(ctx, time.Now(), r, out); err != nil {
			t.Fatal(err)
		}
	}
	if out[0].Allowed {
		t.Fatalf("fourth guess: got %+v, want rejected with a block", out[0])
	}
	if err := b.Reset(ctx, r[0]); err != nil {
		t.Fatal(err)
	}
	if err := a.Decide(ctx, time.Now(), r, out); err != nil || !out[0].Allowed {
		t.Fatalf("through A after the reset: got %+v %v, want allowed by Redis", out[0], err)
	}
	srv.Kill()
	if err := a.Decide(ctx, time.Now(), r, out); err != nil {
		t.Fatal(err)
	}
	if !out[0].Allowed {
		t.Errorf("after a reset through another instance that A has seen, Redis gone: got %+v, want allowed", out[0])
	}
}
