package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// TestFaultHungServerSettle pauses Redis under a count_status settle: a
// Refund and a Keep of held units return within the Timeout, as
// decisions do (README "When Redis fails"), with an error, and once Redis
// answers again neither has counted twice: the refund, sent once, gave
// back at most its one unit.
func TestFaultHungServerSettle(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: faultTimeout})
	p := ratelimit.MustPolicy(ratelimit.Policy{Name: "fault-hang-settle", Algorithm: ratelimit.TokenBucket, Limit: 2, Window: time.Hour, Hold: true})
	reqs := []ratelimit.Request{{Policy: p, Key: "k"}}
	ctx := context.Background()
	var ds [2][]ratelimit.Decision
	if _, ok := waitFor(10*time.Second, func() bool {
		_ = s.Reset(ctx, reqs[0])
		for i := range ds {
			ds[i], _ = decideTimed(t, s, reqs)
		}
		return s.br.failures.Load() == 0 && ds[0][0].Ticket.Store == redisTicket && ds[1][0].Ticket.Store == redisTicket
	}); !ok {
		t.Fatalf("no two decisions answered by redis in 10s: %v", s.LastError())
	}
	if !ds[0][0].Allowed || !ds[1][0].Allowed || ds[1][0].Ticket.Hold == 0 {
		t.Fatalf("two requests on a held bucket of 2: got %+v, %+v, want both admitted, held", ds[0][0], ds[1][0])
	}
	srv.Pause()
	defer srv.Resume()
	for _, c := range []struct {
		what   string
		settle func(context.Context, time.Time, []ratelimit.Request, []ratelimit.Decision) error
		d      []ratelimit.Decision
	}{{"Refund", s.Refund, ds[0]}, {"Keep", s.Keep, ds[1]}} {
		woke := deadlineProbe()
		start := time.Now()
		err := c.settle(ctx, time.Now(), reqs, c.d)
		if took := time.Since(start); took > faultTimeout+slack && took > woke()+slack {
			t.Errorf("%s with a hung redis took %v, want <= %v", c.what, took, max(faultTimeout, woke())+slack)
		}
		if err == nil {
			t.Errorf("%s with a hung redis: got nil, want an error", c.what)
		}
	}
	srv.Resume()
	if _, ok := waitFor(3*time.Second, func() bool { return s.Healthy() && !s.br.open.Load() }); !ok {
		t.Fatalf("resumed: not healthy in 3s: %v", s.LastError())
	}
	d, err := s.Peek(ctx, time.Now(), reqs[0])
	if err != nil {
		t.Fatal(err)
	}
	// The refund ran once Redis got to it, or not at all (its connection
	// dropped): 1 or 0 left, never more.
	if d.Remaining > 1 {
		t.Errorf("after a refund and a keep cut short by a hung redis: remaining %d, want at most 1", d.Remaining)
	}
	t.Logf("remaining after the hung settle: %d", d.Remaining)
}
