package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
)

// slowKeep is a store whose Keep takes a while, as the Redis store's does,
// up to its timeout, when Redis is slow: a count_status request keeps its
// held unit once its exchange is over, cut off or not, before its access
// line is written. It notes whether the store had been closed by then.
type slowKeep struct {
	ratelimit.Store
	delay  time.Duration
	closed atomic.Bool
	late   atomic.Bool // a Keep ended after Close
}

func (s *slowKeep) Keep(ctx context.Context, now time.Time, reqs []ratelimit.Request, ds []ratelimit.Decision) error {
	time.Sleep(s.delay)
	s.late.Store(s.closed.Load())
	return s.Store.Keep(ctx, now, reqs, ds)
}

func (s *slowKeep) Close() error {
	s.closed.Store(true)
	return s.Store.Close()
}

// TestShutdownWaitsForCutOffHandlers: at shutdown_timeout the connections
// are closed, which ends a request's context but not its handler, and
// Serve's return ends the process. A handler that takes a moment to
// finish once cut off (here a count_status unit kept on a slow store)
// must be done before Serve returns, its access line written, rather than
// find the store closed under it and its line lost at the exit.
func TestShutdownWaitsForCutOffHandlers(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(up.Close)
	t.Cleanup(func() { close(release) })
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, path, fmt.Sprintf(`listen: 127.0.0.1:0
admin: ""
shutdown_timeout: 200ms
policies:
  logins: {algorithm: token_bucket, limit: 10, window: 1h, key: [global], count_status: [401]}
routes:
  - name: slow
    upstream: %s
    limits: [logins]
`, up.URL))
	logs := &logBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := New(ctx, path, slog.New(slog.NewJSONHandler(logs, nil)), logs)
	if err != nil {
		t.Fatal(err)
	}
	store := &slowKeep{Store: s.store, delay: 300 * time.Millisecond}
	s.store = store
	s.gateway.Load(s.cfg.Load(), store)
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	for deadline := time.Now().Add(10 * time.Second); logs.find(t, "sluice started") == nil; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("sluice did not start within 10s")
		}
	}
	go func() {
		c := &http.Client{Transport: testTransport, Timeout: 10 * time.Second}
		if resp, err := c.Get("http://" + s.Addr("http").String() + "/slow"); err == nil {
			resp.Body.Close()
		}
	}()
	for deadline := time.Now().Add(5 * time.Second); s.inflight.Load() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the request did not reach the gateway within 5s")
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return within 10s")
	}
	if logs.find(t, "shutdown timeout expired") == nil {
		t.Fatal("got no timeout warning: the request was not cut off, the test proves nothing")
	}
	if n := s.inflight.Load(); n != 0 {
		t.Errorf("got %d requests still in their handlers when Serve returned, want 0", n)
	}
	if store.late.Load() {
		t.Error("the cut-off request kept its unit after the store was closed, want before")
	}
	var got bool
	for _, r := range logs.records(t) {
		got = got || r["msg"] == "request" && r["path"] == "/slow"
	}
	if !got {
		t.Error("got no access line for the cut-off request when Serve returned, want it written before the process exits")
	}
}

// TestShutdownWritesLineOfWebSocketClosedInTime: a WebSocket's access line
// is written by its handler once the tunnel has closed, after its
// connection has left the drain's count. A drain that ends as the client
// closes must still have that line written before Serve returns. The
// handler's last steps race with the end of Serve, so the drain is run a
// few times over.
func TestShutdownWritesLineOfWebSocketClosedInTime(t *testing.T) {
	t.Parallel()
	up := wsUpstream(t)
	for i := range 10 {
		r := serve(t, fmt.Sprintf("listen: 127.0.0.1:0\nadmin: \"\"\nshutdown_timeout: 20s\nroutes:\n  - name: ws\n    upstream: %s\n", up.URL))
		conn, br := upgrade(t, r.Addr("http").String())
		if err := echo(conn, br, "before"); err != nil {
			t.Fatal(err)
		}
		r.stop()
		if err := echo(conn, br, "while draining"); err != nil {
			t.Fatalf("drain %d: echo after shutdown began: %v", i, err)
		}
		conn.Close()
		select {
		case <-r.done:
		case <-time.After(10 * time.Second):
			t.Fatalf("drain %d: Serve did not return within 10s of the WebSocket closing", i)
		}
		var got bool
		for _, rec := range r.logs.records(t) {
			got = got || rec["msg"] == "request" && rec["status"] == 101.0
		}
		if n := r.inflight.Load(); n != 0 || !got {
			t.Fatalf("drain %d: when Serve returned, got %d requests in their handlers and the 101 line written %v; want 0 and true", i, n, got)
		}
	}
}
