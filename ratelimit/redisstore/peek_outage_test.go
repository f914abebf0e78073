package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// TestPeekDuringOutageSeesWhatTheFallbackTakesOver: with on_error local,
// the first decision of a bucket during an outage carries into the
// fallback what Redis last answered this instance of it: its block, and
// where a leaky_bucket's schedule stood. Peek (GET /v1/limits) reports
// what that decision would find, not the fallback's fresh bucket: before
// it, /v1/limits showed a blocked guesser as unblocked with its whole
// budget while the gateway refused it.
func TestPeekDuringOutageSeesWhatTheFallbackTakesOver(t *testing.T) {
	for _, tc := range []struct {
		name  string
		p     *ratelimit.Policy
		taken int
	}{
		{"block", ratelimit.MustPolicy(ratelimit.Policy{Name: "login", Algorithm: ratelimit.SlidingWindowLog, Limit: 3, Window: time.Hour, Block: time.Hour}), 4},
		{"leaky_bucket schedule", ratelimit.MustPolicy(ratelimit.Policy{Name: "shaping", Algorithm: ratelimit.LeakyBucket, Limit: 1, Window: time.Hour, Queue: 3}), 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			s := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: testTimeout})
			r := ratelimit.Request{Policy: tc.p, Key: "alice"}
			ctx := context.Background()
			out := make([]ratelimit.Decision, 1)
			for range tc.taken {
				if err := s.Decide(ctx, time.Now(), []ratelimit.Request{r}, out); err != nil {
					t.Fatal(err)
				}
			}
			before, err := s.Peek(ctx, time.Now(), r)
			if err != nil {
				t.Fatal(err)
			}
			srv.Kill()
			got, err := s.Peek(ctx, time.Now(), r)
			if err != nil {
				t.Fatal(err)
			}
			if got.Remaining != before.Remaining || got.Blocked != before.Blocked || got.Reset < before.Reset-time.Minute {
				t.Errorf("peek during the outage: got remaining %d, blocked %v, reset %v; want remaining %d, blocked %v, reset about %v, as Redis had it",
					got.Remaining, got.Blocked, got.Reset, before.Remaining, before.Blocked, before.Reset)
			}
		})
	}
}
