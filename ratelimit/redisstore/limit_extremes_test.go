package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// TestLargestLimitExactAsMemory decides fixed_window and
// sliding_window_counter requests at ratelimit.MaxLimit from counts at and
// next to it, with windows of a second and of ratelimit.MaxSpan: the
// scripts, which count in doubles, decide and report as the steps do, to
// the last unit. (A limit of 2^53 + 1 came back one short, and one of
// 2^63 - 1 as a negative remaining count; NewPolicy refuses both.)
func TestLargestLimitExactAsMemory(t *testing.T) {
	srv := redistest.Start(t)
	rs := newStore(t, Options{Addresses: []string{srv.Addr()}, CallerTime: true, KeyPrefix: "maxlim:"})
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	const us = int64(time.Microsecond)
	const top = ratelimit.MaxLimit
	counts := []int64{0, 1, top / 2, top - 2, top - 1, top}
	i := 0
	for _, w := range []time.Duration{time.Second, ratelimit.MaxSpan} {
		start := t0.UnixNano() - t0.UnixNano()%int64(w)
		for _, e := range []time.Duration{0, time.Microsecond, (w / 3).Truncate(time.Microsecond), w - time.Microsecond} {
			now := start + int64(e)
			for _, cur := range counts {
				for _, prev := range counts {
					i++
					alg, v := ratelimit.SlidingWindowCounter, fmt.Sprintf("%d %d %d", start/us, cur, prev)
					if prev == 0 {
						// fixed_window keeps one count: decide it once per cur.
						alg, v = ratelimit.FixedWindow, fmt.Sprintf("%d %d", start/us, cur)
					}
					p := ratelimit.MustPolicy(ratelimit.Policy{Name: fmt.Sprint("p", i), Algorithm: alg, Limit: top, Window: w})
					r := ratelimit.Request{Policy: p, Key: "k"}
					if err := c.Do(ctx, c.B().Set().Key(Key("maxlim:", r)).Value(v).Px(time.Hour).Build()).Error(); err != nil {
						t.Fatal(err)
					}
					var want [2]ratelimit.Decision
					for n := range int64(2) {
						if alg == ratelimit.FixedWindow {
							_, want[n] = ratelimit.StepFixedWindow(p, ratelimit.FixedWindowState{Start: start, Count: cur}, now, n)
						} else {
							_, want[n] = ratelimit.StepSlidingWindowCounter(p, ratelimit.SlidingWindowCounterState{Start: start, Cur: cur, Prev: prev}, now, n)
						}
					}
					look, err := rs.Peek(ctx, time.Unix(0, now), r)
					if err != nil {
						t.Fatal(err)
					}
					out := make([]ratelimit.Decision, 1)
					if err := rs.Decide(ctx, time.Unix(0, now), []ratelimit.Request{r}, out); err != nil {
						t.Fatal(err)
					}
					for n, got := range []ratelimit.Decision{look, out[0]} {
						if got.Allowed != want[n].Allowed || got.Remaining != want[n].Remaining || got.RetryAfter != want[n].RetryAfter || got.Reset != want[n].Reset {
							t.Errorf("%v w=%v e=%v cur=%d prev=%d, taking %d: got %+v, want %+v", alg, w, e, cur, prev, n, got, want[n])
						}
					}
				}
			}
		}
	}
	// A sliding_window_log is a log of what it admitted: its count stays
	// small, but its remaining count is the limit's.
	p := ratelimit.MustPolicy(ratelimit.Policy{Name: "log", Algorithm: ratelimit.SlidingWindowLog, Limit: top, Window: ratelimit.MaxSpan})
	out := make([]ratelimit.Decision, 1)
	for n := range int64(3) {
		if err := rs.Decide(ctx, t0, []ratelimit.Request{{Policy: p, Key: "k"}}, out); err != nil {
			t.Fatal(err)
		}
		if !out[0].Allowed || out[0].Remaining != top-n-1 {
			t.Errorf("sliding_window_log, request %d: got %+v, want allowed with %d remaining", n+1, out[0], top-n-1)
		}
	}
}
