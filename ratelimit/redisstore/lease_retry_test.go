package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// TestLeaseRejectRetryAfterNotEarly: once a leased bucket is spent, a
// rejection must not point earlier than the next unit can be free (SPEC
// §4: `t` is the seconds until more budget; README "Leases": the instance
// rejects locally "until a unit may be free (the window's end, the next
// tokens)"), also when the last refill was a partial grant. The same
// bucket decided per request says when.
func TestLeaseRejectRetryAfterNotEarly(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, CallerTime: true})
	t0 := time.Unix(1_700_000_000, 0)
	for _, a := range []ratelimit.Algorithm{ratelimit.TokenBucket, ratelimit.SlidingWindowCounter, ratelimit.FixedWindow} {
		t.Run(a.String(), func(t *testing.T) {
			leased := ratelimit.Request{Policy: leasePolicy(t, "ra-lease-"+a.String(), a, 100, time.Hour), Key: "k"}
			perReq := ratelimit.Request{Policy: policyOf(t, "ra-req-"+a.String(), a, 100, time.Hour), Key: "k"}
			first := func(r ratelimit.Request) (int, ratelimit.Decision) {
				for i := range 300 {
					now := t0.Add(time.Duration(i) * time.Millisecond)
					if d := decide1(t, s, now, r)[0]; !d.Allowed {
						return i, d
					}
				}
				t.Fatal("never rejected")
				return 0, ratelimit.Decision{}
			}
			_, want := first(perReq)
			n, got := first(leased)
			t.Logf("leased: first rejection after %d admissions", n)
			if got.RetryAfter < want.RetryAfter-time.Second {
				t.Errorf("first rejection: RetryAfter got %v, want about %v (as per request)", got.RetryAfter, want.RetryAfter)
			}
		})
	}
}

// TestLeaseRejectRetryAfterKeptThroughTrim: a lease that Redis left short
// (a partial grant) rejects locally, once its units are spent, with the
// Retry-After that short reply gave. When N grows meanwhile, the
// heartbeat's trim gives back what the lease holds past its new share
// with a call that asks for nothing: nothing was short there, and its
// reply (the units just given back are free in Redis) must not stand in
// for the short one. Otherwise the lease rejects with a Retry-After of
// 1µs while it goes on rejecting locally until its quiet time ends.
func TestLeaseRejectRetryAfterKeptThroughTrim(t *testing.T) {
	for _, a := range []ratelimit.Algorithm{ratelimit.TokenBucket, ratelimit.SlidingWindowCounter} {
		t.Run(a.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			s := newStore(t, Options{Addresses: []string{srv.Addr()}, CallerTime: true, Timeout: time.Second})
			s.RetireLeases() // no heartbeats: N is set below
			s.seen.Store(1)
			p := leasePolicy(t, "trim-retry-"+a.String(), a, 1000, time.Hour)
			r := ratelimit.Request{Policy: p, Key: "k"}
			key := Key(s.prefix, r)
			c := *s.client.Load()
			ctx := context.Background()
			t0 := time.Unix(1_700_000_000, 0)
			// Another instance holds all but 40 units.
			if _, err := s.runLease(ctx, c, p, key, s.leaseArgs(t0, p, "o:other/1", 960, 0, 0, 0, 0, time.Hour), 960, 0); err != nil {
				t.Fatal(err)
			}
			// A lease whose traffic asks for a batch of 66 gets the
			// 40: short.
			l := s.leases.get(key, r)
			l.mu.Lock()
			l.score, l.scoreAt, l.lastNow = 1e4, t0, t0
			l.inflight = make(chan struct{})
			l.mu.Unlock()
			if err := s.refill(ctx, c, l, t0); err != nil {
				t.Fatal(err)
			}
			l.mu.Lock()
			units, short := l.units, l.retryAt
			l.mu.Unlock()
			share := maxBatch(p, 10)
			if units <= share || !short.After(t0.Add(time.Second)) {
				t.Fatalf("after the short grant the lease holds %d (want more than %d) until a retry in %v (want more than 1s): the test proves nothing", units, share, short.Sub(t0))
			}
			// N grows: the trim gives back all but the share.
			s.seen.Store(10)
			s.trimLeases()
			s.refills.Wait()
			now := t0
			for i := range share + 1 {
				now = t0.Add(time.Duration(i+1) * time.Millisecond)
				d := decide1(t, s, now, r)[0]
				if int64(i) < share {
					if !d.Allowed {
						t.Fatalf("request %d rejected with %d units of the share left", i, share-int64(i))
					}
					continue
				}
				if d.Allowed {
					t.Fatalf("request %d admitted past the lease's share, %d", i, share)
				}
				if want := short.Sub(now); d.RetryAfter != want {
					t.Errorf("rejection after the trim: RetryAfter %v, want %v, as the short reply said", d.RetryAfter, want)
				}
			}
		})
	}
}
