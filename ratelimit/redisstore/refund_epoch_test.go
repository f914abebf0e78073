package redisstore

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// TestRefundInWindowStartingAtEpoch: README "count_status": a unit is
// given back when the response's status is not counted. Windows are
// aligned to the Unix epoch, so a window longer than the time since 1970
// (up to 100 years is allowed) starts at 0. The script's mark for the
// unit, that window start, was then 0, which also meant "took nothing":
// the decision carried no ticket and its give-back did nothing, while the
// memory store gives the unit back.
func TestRefundInWindowStartingAtEpoch(t *testing.T) {
	srv := redistest.Start(t)
	rs := newStore(t, Options{Addresses: []string{srv.Addr()}, CallerTime: true, KeyPrefix: "refund-epoch:"})
	ctx := context.Background()
	for _, alg := range []ratelimit.Algorithm{ratelimit.FixedWindow, ratelimit.SlidingWindowCounter} {
		t.Run(alg.String(), func(t *testing.T) {
			p := ratelimit.MustPolicy(ratelimit.Policy{Name: "lifetime-" + alg.String(), Algorithm: alg, Limit: 2, Window: ratelimit.MaxSpan})
			r := []ratelimit.Request{{Policy: p, Key: "k"}}
			decide := func() ratelimit.Decision {
				t.Helper()
				out := make([]ratelimit.Decision, 1)
				if err := rs.Decide(ctx, t0, r, out); err != nil {
					t.Fatal(err)
				}
				return out[0]
			}
			first := decide()
			if !first.Allowed {
				t.Fatalf("first request: got %+v, want allowed", first)
			}
			if err := rs.Refund(ctx, t0, r, []ratelimit.Decision{first}); err != nil {
				t.Fatal(err)
			}
			admitted := 0
			for range 3 {
				if decide().Allowed {
					admitted++
				}
			}
			if admitted != 2 {
				t.Errorf("after giving the first unit back: got %d of 3 admitted, want 2 (limit 2)", admitted)
			}
		})
	}
}
