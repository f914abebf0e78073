package server

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// announcedDecide is a store that says when a decision begins, then
// decides through the store it wraps.
type announcedDecide struct {
	ratelimit.Store
	deciding chan struct{}
}

func (s *announcedDecide) Decide(ctx context.Context, now time.Time, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	select {
	case s.deciding <- struct{}{}:
	default:
	}
	return s.Store.Decide(ctx, now, reqs, out)
}

// TestClientGoneWhileDecidingOnRedis: a client that goes away while its
// limits are decided on Redis ends the store's call, which the store then
// decides as on_error says, as it would a Redis that failed: with deny, a
// rejection. That is no 429 to anyone, nor a failure of Redis: the
// request is logged 499 (README › Access log, the client went away
// first), no rejection is counted (the rejected counts add up to the 429s
// sent), no store error is counted, and it never reaches the upstream;
// with allow and local, whose decisions admit it, the same.
func TestClientGoneWhileDecidingOnRedis(t *testing.T) {
	t.Parallel()
	for _, onError := range []string{"deny", "allow", "local"} {
		t.Run(onError, func(t *testing.T) {
			t.Parallel()
			clientGoneWhileDeciding(t, onError)
		})
	}
}

func clientGoneWhileDeciding(t *testing.T, onError string) {
	t.Helper()
	rs := redistest.Start(t)
	var reached atomic.Int32
	up := newCountingUpstream(t, &reached)
	r := serve(t, fmt.Sprintf(`listen: 127.0.0.1:0
admin: 127.0.0.1:0
store:
  type: redis
  redis: {addresses: ["%s"], timeout: 10s, on_error: %s}
policies:
  per-hour: {algorithm: fixed_window, limit: 100, window: 1h, key: [global]}
routes:
  - name: gone
    upstream: %s
    limits: [per-hour]
`, rs.Addr(), onError, up))
	store := &announcedDecide{Store: r.store, deciding: make(chan struct{}, 1)}
	r.gateway.Load(r.cfg.Load(), store)

	// Redis answers nothing while it is stopped: the decision waits on
	// it, within the store's 10s timeout, until the client goes.
	rs.Pause()
	defer rs.Resume()
	c, err := net.Dial("tcp", r.Addr("http").String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
	select {
	case <-store.deciding:
	case <-time.After(5 * time.Second):
		t.Fatal("the request was never decided")
	}
	c.Close()

	var line map[string]any
	for deadline := time.Now().Add(5 * time.Second); line == nil; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no access line within 5s of the client going away")
		}
		for _, rec := range r.logs.records(t) {
			if rec["msg"] == "request" && rec["route"] == "gone" {
				line = rec
			}
		}
	}
	rs.Resume()
	if line["status"] != float64(499) {
		t.Errorf("access line status: got %v, want 499 (the client went away first); line %v", line["status"], line)
	}
	if _, ok := line["rejected_by"]; ok {
		t.Errorf("access line names rejected_by %v for a client that got no answer", line["rejected_by"])
	}
	resp, err := http.Get(r.url("admin") + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if v := metricValue(t, string(body), `sluice_ratelimit_decisions_total{algorithm="fixed_window",policy="per-hour",result="rejected",route="gone"}`); v != 0 {
		t.Errorf("rejections counted: %v, want 0: no 429 was sent", v)
	}
	if v := metricValue(t, string(body), `sluice_http_requests_total{code="499",route="gone"}`); v != 1 {
		t.Errorf(`sluice_http_requests_total{code="499"}: %v, want 1`, v)
	}
	if v := metricValue(t, string(body), `sluice_store_errors_total{store="redis"}`); v != 0 {
		t.Errorf(`sluice_store_errors_total{store="redis"}: %v, want 0: a client that left is no Redis failure`, v)
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("the upstream got %d requests, want none", n)
	}
}

// newCountingUpstream starts an upstream that counts the requests it gets
// and returns its URL.
func newCountingUpstream(t *testing.T, n *atomic.Int32) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) { n.Add(1) })}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return "http://" + l.Addr().String()
}
