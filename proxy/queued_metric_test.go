package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/ratelimit"
)

// waitsAs is a memory store whose Wait ends as its wait func says, so a
// test chooses how a queued request's wait ends without a clock.
type waitsAs struct {
	*ratelimit.MemoryStore
	wait func(ctx context.Context) error
}

func (s *waitsAs) Wait(ctx context.Context, _ ratelimit.Request, _ ratelimit.Decision) error {
	return s.wait(ctx)
}

// decisionCount reads sluice_ratelimit_decisions_total for one route,
// policy and result (0 when the series is absent).
func decisionCount(t *testing.T, m *metrics.Metrics, route, policy, result string) float64 {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_ratelimit_decisions_total" {
			continue
		}
	series:
		for _, s := range mf.GetMetric() {
			want := map[string]string{"route": route, "policy": policy, "result": result}
			for _, l := range s.GetLabel() {
				if v, ok := want[l.GetName()]; ok && v != l.GetValue() {
					continue series
				}
			}
			return s.GetCounter().GetValue()
		}
	}
	return 0
}

// TestQueuedCountsTheDecision: result="queued" counts a leaky_bucket
// request its limit put in the queue, once, whatever its wait comes to
// (README, Metrics): sluice_ratelimit_decisions_total counts decisions. One
// that ends in the queue, answered 503 by a shutdown or given up by its
// client, counts queued too; the access log and sluice_http_requests_total
// show its 503 or 499.
func TestQueuedCountsTheDecision(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                string
		wait                func(ctx context.Context) error
		clientGoes          bool
		wantAllowed, wantQd float64
	}{
		{"left for the upstream", func(context.Context) error { return nil }, false, 1, 1},
		{"drained by a shutdown", func(context.Context) error { return ratelimit.ErrDrained }, false, 1, 1},
		{"client went away", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }, true, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			t.Cleanup(up.Close)
			mem := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{SweepInterval: -1})
			t.Cleanup(func() { mem.Close() })
			waiting := make(chan struct{}, 1)
			store := &waitsAs{MemoryStore: mem, wait: func(ctx context.Context) error {
				waiting <- struct{}{}
				return tc.wait(ctx)
			}}
			m := metrics.New()
			srv := queueGateway(t, "1m", up.URL, store, Options{Metrics: m})
			c, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			io.WriteString(c, "GET /second HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
			select {
			case <-waiting:
			case <-time.After(5 * time.Second):
				t.Fatal("the second request never waited")
			}
			if tc.clientGoes {
				c.Close()
			} else {
				io.Copy(io.Discard, c) // the answer, up to the close it asked for
			}
			srv.Close() // returns once every request is over
			if got := decisionCount(t, m, "queued", "shaping", "queued"); got != tc.wantQd {
				t.Errorf("queued: got %v, want %v", got, tc.wantQd)
			}
			if got := decisionCount(t, m, "queued", "shaping", "allowed"); got != tc.wantAllowed {
				t.Errorf("allowed: got %v, want %v", got, tc.wantAllowed)
			}
		})
	}
}
