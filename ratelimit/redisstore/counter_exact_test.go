package redisstore

import (
	"context"
	"fmt"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// TestSlidingWindowCounterExactAsMemory decides sliding_window_counter
// requests from random counts at random times, with windows up to
// ratelimit.MaxSpan and limits up to 2^40, many of them where cur +
// prev*(1-f) lies at the limit or a microsecond's weight from it: the
// script decides, reports and grants leases exactly as the step does.
func TestSlidingWindowCounterExactAsMemory(t *testing.T) {
	srv := redistest.Start(t)
	rs := newStore(t, Options{Addresses: []string{srv.Addr()}, CallerTime: true, KeyPrefix: "swcx:"})
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(11, 12))
	const us = int64(time.Microsecond)
	type boundary struct {
		limit  int64
		window time.Duration
	}
	fixed := []boundary{{751, ratelimit.MaxSpan}, {18719, 365 * 24 * time.Hour}, {455477, 30 * 24 * time.Hour}}
	for i := range 3000 {
		var w, limit, cur, prev, e int64
		if i < len(fixed) {
			// A full previous window, at the first instant of the next.
			w, limit, prev = int64(fixed[i].window), fixed[i].limit, fixed[i].limit
		} else {
			w = (rng.Int64N(int64(ratelimit.MaxSpan)/us) + 1) * us
			if i%2 == 0 {
				w = (rng.Int64N(1<<20) + 1) * us
			}
			limit = rng.Int64N(1<<rng.IntN(41)) + 1
			cur, prev = rng.Int64N(limit+1), rng.Int64N(limit+1)
			e = rng.Int64N(w/us) * us
			if i%3 == 0 && prev > 0 && limit-cur <= prev {
				x := new(big.Int).Mul(big.NewInt(limit-cur), big.NewInt(w/us))
				x.Quo(x, big.NewInt(prev))
				e = min(max(w-x.Int64()*us+(rng.Int64N(3)-1)*us, 0), w-us)
			}
		}
		p := ratelimit.MustPolicy(ratelimit.Policy{Name: fmt.Sprint("swc", i), Algorithm: ratelimit.SlidingWindowCounter, Limit: limit, Window: time.Duration(w)})
		start := t0.UnixNano() - t0.UnixNano()%w
		now := start + e
		st := ratelimit.SlidingWindowCounterState{Start: start, Cur: cur, Prev: prev}
		r := ratelimit.Request{Policy: p, Key: "k"}
		set := func() {
			v := fmt.Sprintf("%d %d %d", start/us, cur, prev)
			if err := c.Do(ctx, c.B().Set().Key(Key("swcx:", r)).Value(v).Px(time.Hour).Build()).Error(); err != nil {
				t.Fatal(err)
			}
		}
		set()
		got, err := rs.Peek(ctx, time.Unix(0, now), r)
		if err != nil {
			t.Fatal(err)
		}
		_, want := ratelimit.StepSlidingWindowCounter(p, st, now, 0)
		if got.Remaining != want.Remaining || got.RetryAfter != want.RetryAfter || got.Reset != want.Reset {
			t.Fatalf("look, w=%v limit=%d cur=%d prev=%d e=%v: got %+v, want %+v", time.Duration(w), limit, cur, prev, time.Duration(e), got, want)
		}
		out := make([]ratelimit.Decision, 1)
		if err := rs.Decide(ctx, time.Unix(0, now), []ratelimit.Request{r}, out); err != nil {
			t.Fatal(err)
		}
		_, want = ratelimit.StepSlidingWindowCounter(p, st, now, 1)
		if got := out[0]; got.Allowed != want.Allowed || got.Remaining != want.Remaining || got.RetryAfter != want.RetryAfter || got.Reset != want.Reset {
			t.Fatalf("decide, w=%v limit=%d cur=%d prev=%d e=%v: got %+v, want %+v", time.Duration(w), limit, cur, prev, time.Duration(e), got, want)
		}
		if i < len(fixed) && out[0].Allowed {
			t.Fatalf("w=%v limit=%d: got allowed at the limit, want rejected", time.Duration(w), limit)
		}
	}
}
