package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// TestResetLiftsFallbackBlock: SPEC §8's DELETE /v1/limits resets a
// bucket and lifts its block. Store.Reset clears Redis and the Fallback,
// but not the block end that recordBlocks noted for the handover: the
// next time the fallback decides the key (Redis gone, or a decision that
// missed its timeout), handOver blocks it again for the rest of the hour.
func TestResetLiftsFallbackBlock(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: testTimeout})
	p := ratelimit.MustPolicy(ratelimit.Policy{Name: "login", Algorithm: ratelimit.SlidingWindowLog, Limit: 3, Window: time.Hour, Block: time.Hour})
	r := []ratelimit.Request{{Policy: p, Key: "alice"}}
	ctx := context.Background()
	out := make([]ratelimit.Decision, 1)
	for range 4 {
		if err := s.Decide(ctx, time.Now(), r, out); err != nil {
			t.Fatal(err)
		}
	}
	if out[0].Allowed {
		t.Fatalf("fourth guess: got %+v, want rejected with a block", out[0])
	}
	if err := s.Reset(ctx, r[0]); err != nil {
		t.Fatal(err)
	}
	if err := s.Decide(ctx, time.Now(), r, out); err != nil || !out[0].Allowed {
		t.Fatalf("after the reset, Redis up: got %+v, %v, want allowed", out[0], err)
	}
	srv.Kill()
	if err := s.Decide(ctx, time.Now(), r, out); err != nil {
		t.Fatal(err)
	}
	if !out[0].Allowed {
		t.Errorf("after the reset, Redis gone: got %+v, want allowed (the reset lifted the block)", out[0])
	}
}

// TestFallbackKeepsRedisBlockBesideLease: TestFallbackKeepsRedisBlock
// for a route that also has a leased limit (a per-IP lease beside a
// per-user brute-force block). Such a request is decided by
// decideWithLeases, which never calls recordBlocks: the block Redis keeps
// is unknown to the fallback, whose fresh bucket admits the blocked key
// again.
func TestFallbackKeepsRedisBlockBesideLease(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: testTimeout})
	api := ratelimit.MustPolicy(ratelimit.Policy{Name: "per-ip", Algorithm: ratelimit.FixedWindow, Limit: 1000, Window: time.Minute, Sync: ratelimit.SyncLease})
	login := ratelimit.MustPolicy(ratelimit.Policy{Name: "login", Algorithm: ratelimit.SlidingWindowLog, Limit: 3, Window: time.Hour, Block: time.Hour})
	r := []ratelimit.Request{{Policy: api, Key: "10.0.0.1"}, {Policy: login, Key: "alice"}}
	ctx := context.Background()
	out := make([]ratelimit.Decision, 2)
	for i := range 4 {
		if err := s.Decide(ctx, time.Now(), r, out); err != nil {
			t.Fatal(err)
		}
		if want := i < 3; out[1].Allowed != want {
			t.Fatalf("guess %d: allowed %v, want %v", i+1, out[1].Allowed, want)
		}
	}
	srv.Kill()
	for i := range 3 {
		if err := s.Decide(ctx, time.Now(), r, out); err != nil {
			t.Fatal(err)
		}
		if out[1].Allowed {
			t.Errorf("guess %d with Redis gone: got %+v, want rejected until the block's end, about 1h away", i+5, out[1])
		}
	}
}
