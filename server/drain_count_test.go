package server

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestShutdownCountsCutRequestConnections: a plain request still waiting
// on its upstream when shutdown_timeout expires loses its connection, and
// the warning counts that connection, as it counts a WebSocket's.
func TestShutdownCountsCutRequestConnections(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(up.Close)
	t.Cleanup(func() { close(release) })
	r := serve(t, fmt.Sprintf("listen: 127.0.0.1:0\nadmin: \"\"\nshutdown_timeout: %s\nroutes:\n  - name: slow\n    upstream: %s\n", timeout, up.URL))
	answered := make(chan error, 1)
	go func() {
		c := &http.Client{Transport: testTransport, Timeout: 10 * time.Second}
		resp, err := c.Get(r.url("http") + "/slow")
		if err == nil {
			resp.Body.Close()
		}
		answered <- err
	}()
	for deadline := time.Now().Add(5 * time.Second); r.inflight.Load() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the request did not reach the gateway within 5s")
		}
	}
	r.stop()
	select {
	case <-r.done:
		if r.err != nil {
			t.Fatalf("Serve: %v", r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return within 10s")
	}
	if err := <-answered; err == nil {
		t.Error("the cut-off request got an answer, want its connection closed")
	}
	w := r.logs.find(t, "shutdown timeout expired")
	if w == nil {
		t.Fatal("got no timeout warning, want one")
	}
	if w["cut_off"] != 1.0 || w["connections"] != 1.0 {
		t.Errorf("got warning %v, want cut_off 1, connections 1", w)
	}
}
