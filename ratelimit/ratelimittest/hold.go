package ratelimittest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
)

// runHold checks the held tokens of a token_bucket policy with Hold
// (count_status): a held token never refills, a kept one refills from the
// time it was kept, and a refund leaves the bucket exactly as a bucket
// that never counted the request, however decisions interleave.
func runHold(t *testing.T, open func(*testing.T) ratelimit.Store) {
	hold := func(t *testing.T, name string, burst int64) *ratelimit.Policy {
		return mustPolicy(t, ratelimit.Policy{Name: name, Algorithm: ratelimit.TokenBucket, Limit: 4, Window: 8 * sec, Burst: burst, Hold: true})
	}
	ctx := context.Background()
	settle := func(t *testing.T, s ratelimit.Store, now time.Time, r ratelimit.Request, d ratelimit.Decision, refund bool) {
		t.Helper()
		f := s.Keep
		if refund {
			f = s.Refund
		}
		if err := f(ctx, now, []ratelimit.Request{r}, []ratelimit.Decision{d}); err != nil {
			t.Fatalf("settling at %v: %v", now, err)
		}
	}

	t.Run("a held token does not refill; a kept one refills from then", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		r := ratelimit.Request{Policy: hold(t, "hold-refill", 0), Key: "k"}
		d := decide(t, s, T0, []ratelimit.Request{r})[0]
		if !d.Allowed || d.Ticket.Hold == 0 {
			t.Fatalf("got %+v, want admitted with a held ticket", d)
		}
		// Two seconds refill a token, but not a held one.
		checkDecision(t, "held, after 10s", T0.Add(10*sec), peek(t, s, T0.Add(10*sec), r), allow(4, 3, 2*sec, 2*sec))
		settle(t, s, T0.Add(10*sec), r, d, false)
		checkDecision(t, "kept at 10s, at 11s", T0.Add(11*sec), peek(t, s, T0.Add(11*sec), r), allow(4, 3, sec, sec))
		checkDecision(t, "kept at 10s, at 12s", T0.Add(12*sec), peek(t, s, T0.Add(12*sec), r), allow(4, 4, 0, 0))
		// Settling twice settles nothing more.
		settle(t, s, T0.Add(12*sec), r, d, true)
		checkDecision(t, "refunded after it was kept", T0.Add(12*sec), peek(t, s, T0.Add(12*sec), r), allow(4, 4, 0, 0))
	})

	t.Run("a refund after the bucket refilled around it is exact", func(t *testing.T) {
		// The case a plain refund gets wrong: the slow request's token
		// would have refilled while it was out, another request found
		// the bucket full, and giving the token back then makes the
		// bucket fuller than it would be without the slow request.
		t.Parallel()
		s := open(t)
		r := ratelimit.Request{Policy: hold(t, "hold-around", 2), Key: "k"}
		ref := ratelimit.Request{Policy: r.Policy, Key: "ref"}
		slow := decide(t, s, T0, []ratelimit.Request{r})[0]
		at := T0.Add(2400 * ms)
		fast := decide(t, s, at, []ratelimit.Request{r})[0]
		refFast := decide(t, s, at, []ratelimit.Request{ref})[0]
		settle(t, s, at.Add(20*ms), r, fast, false)
		settle(t, s, at.Add(20*ms), ref, refFast, false)
		settle(t, s, T0.Add(3*sec), r, slow, true)
		for _, dt := range []time.Duration{3 * sec, 3100 * ms, 4 * sec, 5 * sec} {
			now := T0.Add(dt)
			checkDecision(t, fmt.Sprintf("at +%v", dt), now, peek(t, s, now, r), peek(t, s, now, ref))
		}
		now := T0.Add(3100 * ms)
		if d := decide(t, s, now, []ratelimit.Request{r, r}); !d[0].Allowed || d[1].Allowed {
			t.Errorf("two more at +3.1s: got %v and %v, want one admitted, as without the refunded request", d[0].Allowed, d[1].Allowed)
		}
	})

	t.Run("random interleavings", func(t *testing.T) {
		t.Parallel()
		for seed := range uint64(6) {
			t.Run(fmt.Sprint(seed), func(t *testing.T) {
				holdRandom(t, open(t), hold(t, fmt.Sprintf("hold-random-%d", seed), 3), seed, settle)
			})
		}
	})

	t.Run("reset drops the holds", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		r := ratelimit.Request{Policy: hold(t, "hold-reset", 0), Key: "k"}
		a := decide(t, s, T0, []ratelimit.Request{r})[0]
		b := decide(t, s, T0, []ratelimit.Request{r})[0]
		if err := s.Reset(ctx, r); err != nil {
			t.Fatal(err)
		}
		// Held tokens of before the reset settle nothing.
		settle(t, s, T0.Add(sec), r, a, true)
		settle(t, s, T0.Add(sec), r, b, false)
		checkDecision(t, "after reset", T0.Add(sec), peek(t, s, T0.Add(sec), r), allow(4, 4, 0, 0))
	})
}

// holdRandom runs a random sequence of takes, keeps and refunds on one
// bucket and, on a reference bucket of the same policy, the same takes and
// keeps without the refunded requests. Whenever no refunded request is
// still out, both must answer alike.
func holdRandom(t *testing.T, s ratelimit.Store, p *ratelimit.Policy, seed uint64, settle func(*testing.T, ratelimit.Store, time.Time, ratelimit.Request, ratelimit.Decision, bool)) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	got := ratelimit.Request{Policy: p, Key: "got"}
	ref := ratelimit.Request{Policy: p, Key: "ref"}
	type out struct {
		got, ref ratelimit.Decision
		refund   bool
	}
	var open []out
	refunds := 0 // refunded requests still out
	now := T0
	compare := func(what string) {
		t.Helper()
		if refunds == 0 {
			checkDecision(t, fmt.Sprintf("%s at +%v", what, now.Sub(T0)), now, peek(t, s, now, got), peek(t, s, now, ref))
		}
	}
	admitted, refunded := 0, 0
	for range 80 {
		// Up to 3 s apart, often at one instant, always whole ms;
		// all of it within one Redis hold epoch and the next.
		if rng.IntN(3) > 0 {
			now = now.Add(time.Duration(rng.IntN(3000)) * ms)
		}
		if len(open) == 0 || rng.IntN(2) == 0 {
			d := decide(t, s, now, []ratelimit.Request{got})[0]
			if !d.Allowed {
				compare("after a rejection")
				continue
			}
			admitted++
			o := out{got: d, refund: rng.IntN(2) == 0}
			if o.refund {
				refunds++
			} else if o.ref = decide(t, s, now, []ratelimit.Request{ref})[0]; !o.ref.Allowed {
				t.Fatalf("at +%v: the reference rejected a request the bucket with more held admitted", now.Sub(T0))
			}
			open = append(open, o)
			continue
		}
		i := rng.IntN(len(open))
		o := open[i]
		open = append(open[:i], open[i+1:]...)
		settle(t, s, now, got, o.got, o.refund)
		if o.refund {
			refunds--
			refunded++
		} else {
			settle(t, s, now, ref, o.ref, false)
		}
		compare("after settling")
	}
	for _, o := range open {
		settle(t, s, now, got, o.got, o.refund)
		if o.refund {
			refunds--
		} else {
			settle(t, s, now, ref, o.ref, false)
		}
	}
	for _, dt := range []time.Duration{0, 700 * ms, 2 * sec, 5 * sec, 20 * sec} {
		at := now.Add(dt)
		checkDecision(t, fmt.Sprintf("at the end +%v", dt), at, peek(t, s, at, got), peek(t, s, at, ref))
	}
	at := now.Add(time.Second)
	for j := range 5 {
		want := decide(t, s, at, []ratelimit.Request{ref})[0]
		want.Ticket = ratelimit.Ticket{}
		checkDecision(t, fmt.Sprintf("request %d at the end", j), at, decide(t, s, at, []ratelimit.Request{got})[0], want)
	}
	if admitted < 20 || refunded < 5 {
		t.Errorf("the sequence admitted %d and refunded %d; want at least 20 and 5 to prove anything", admitted, refunded)
	}
}
