package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// holdT0 is the start of one of decide.lua's hold epochs (5 minutes).
var holdT0 = time.Unix(1_700_000_100, 0)

// TestHoldsRunOut: a hold its instance never settles (the instance went
// away) holds the token for at least one whole epoch after its own, and
// is then kept: the token refills from the time that is found, and a
// late refund gives nothing back.
func TestHoldsRunOut(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, CallerTime: true})
	ctx := context.Background()
	p, err := ratelimit.NewPolicy(ratelimit.Policy{Name: "held", Algorithm: ratelimit.TokenBucket, Limit: 2, Window: time.Minute, Hold: true})
	if err != nil {
		t.Fatal(err)
	}
	remaining := func(r ratelimit.Request, at time.Duration) int64 {
		t.Helper()
		d, err := s.Peek(ctx, holdT0.Add(at), r)
		if err != nil {
			t.Fatal(err)
		}
		return d.Remaining
	}

	// In the next epoch the hold still counts, and a refund is exact.
	next := ratelimit.Request{Policy: p, Key: "next"}
	d := decide1(t, s, holdT0.Add(10*time.Second), next)[0]
	if !d.Allowed || d.Ticket.Hold == 0 {
		t.Fatalf("got %+v, want admitted and held", d)
	}
	if got := remaining(next, 310*time.Second); got != 1 {
		t.Errorf("one epoch on: got remaining %d, want 1 (held)", got)
	}
	if err := s.Refund(ctx, holdT0.Add(310*time.Second), []ratelimit.Request{next}, []ratelimit.Decision{d}); err != nil {
		t.Fatal(err)
	}
	if got := remaining(next, 310*time.Second); got != 2 {
		t.Errorf("refunded one epoch on: got remaining %d, want 2", got)
	}

	// Two epochs on it has run out: kept as of then.
	gone := ratelimit.Request{Policy: p, Key: "gone"}
	d = decide1(t, s, holdT0.Add(10*time.Second), gone)[0]
	if got := remaining(gone, 610*time.Second); got != 1 {
		t.Errorf("two epochs on: got remaining %d, want 1 (kept just now)", got)
	}
	if err := s.Refund(ctx, holdT0.Add(611*time.Second), []ratelimit.Request{gone}, []ratelimit.Decision{d}); err != nil {
		t.Fatal(err)
	}
	if got := remaining(gone, 611*time.Second); got != 1 {
		t.Errorf("refunded after it ran out: got remaining %d, want 1", got)
	}
	if got := remaining(gone, 640*time.Second); got != 2 {
		t.Errorf("a token's refill after it ran out: got remaining %d, want 2", got)
	}
}

// TestLeaseHold: a leased token_bucket unit of a Hold policy stays this
// instance's in Redis until it is settled: refunded, it goes back to the
// lease and is spent again without a call; kept, it stays spent.
func TestLeaseHold(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, CallerTime: true})
	ctx := context.Background()
	p, err := ratelimit.NewPolicy(ratelimit.Policy{Name: "leased-held", Algorithm: ratelimit.TokenBucket, Limit: 5, Window: time.Hour, Sync: ratelimit.SyncLease, Hold: true})
	if err != nil {
		t.Fatal(err)
	}
	r := ratelimit.Request{Policy: p, Key: "k"}
	now := holdT0
	var ds []ratelimit.Decision
	for range 5 {
		d := decide1(t, s, now, r)[0]
		if !d.Allowed || d.Ticket.Hold == 0 {
			t.Fatalf("got %+v, want admitted and held", d)
		}
		ds = append(ds, d)
	}
	if decide1(t, s, now, r)[0].Allowed {
		t.Fatal("admitted past the burst")
	}
	now = now.Add(100 * time.Millisecond)
	if err := s.Refund(ctx, now, []ratelimit.Request{r}, ds[:1]); err != nil {
		t.Fatal(err)
	}
	if err := s.Keep(ctx, now, []ratelimit.Request{r}, ds[1:2]); err != nil {
		t.Fatal(err)
	}
	calls := s.calls.Load()
	if !decide1(t, s, now, r)[0].Allowed {
		t.Error("the refunded unit: rejected, want admitted")
	}
	if got := s.calls.Load() - calls; got != 0 {
		t.Errorf("spending the refunded unit took %d Redis calls, want 0 (it went back to the lease)", got)
	}
	if decide1(t, s, now, r)[0].Allowed {
		t.Error("after the refunded unit: admitted, want rejected")
	}
	// Past the lease's deadline Redis may have dropped the holding as
	// spent: a late refund gives nothing back.
	now = now.Add(2 * time.Second)
	if err := s.Refund(ctx, now, []ratelimit.Request{r}, ds[2:3]); err != nil {
		t.Fatal(err)
	}
	if decide1(t, s, now, r)[0].Allowed {
		t.Error("after a refund past the lease's deadline: admitted, want rejected")
	}
}

// TestHoldInFallback: while Redis is down the fallback holds a leased
// token_bucket's tokens (with its limit / N copy of the policy), and a
// refund or a keep ends the hold there: counted answers never pile up as
// holds that would lock the key out until Redis is back.
func TestHoldInFallback(t *testing.T) {
	srv := redistest.Start(t)
	addr := srv.Addr()
	srv.Kill()
	ctx := context.Background()
	down, err := New(ctx, Options{Addresses: []string{addr}, Timeout: faultTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	for _, sync := range []ratelimit.Sync{ratelimit.SyncPerRequest, ratelimit.SyncLease} {
		t.Run(sync.String(), func(t *testing.T) {
			p, err := ratelimit.NewPolicy(ratelimit.Policy{Name: "fallback-held-" + sync.String(), Algorithm: ratelimit.TokenBucket, Limit: 2, Window: time.Hour, Sync: sync, Hold: true})
			if err != nil {
				t.Fatal(err)
			}
			r := []ratelimit.Request{{Policy: p, Key: "k"}}
			out := make([]ratelimit.Decision, 1)
			// Kept and refunded in turn, many more times than the burst.
			for i := range 10 {
				now := time.Now()
				if err := down.Decide(ctx, now, r, out); err != nil || !out[0].Allowed || out[0].Ticket.Hold == 0 {
					t.Fatalf("fallback decision %d: %+v, %v; want admitted and held", i, out[0], err)
				}
				settle := down.Refund
				if i == 0 {
					settle = down.Keep // the one token spent
				}
				if err := settle(ctx, now, r, out); err != nil {
					t.Fatalf("settling in the fallback: %v", err)
				}
			}
			// One kept of the burst of 2 (one instance): one left.
			if err := down.Decide(ctx, time.Now(), r, out); err != nil || !out[0].Allowed {
				t.Errorf("after one kept token of 2: got %+v, %v; want admitted", out[0], err)
			}
			if err := down.Decide(ctx, time.Now(), r, out); err != nil || out[0].Allowed {
				t.Errorf("after two tokens of 2: got %+v, %v; want rejected", out[0], err)
			}
		})
	}
}
