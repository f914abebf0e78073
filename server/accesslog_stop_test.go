package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"
)

// TestAccessLinesAfterServeAreWrittenAtOnce: once Serve has returned the
// process is about to exit, so an access line logged after that (a request
// cut off at shutdown_timeout, or by a listener's failure, finishing) must
// not wait in the buffer for flush_interval, where the exit would lose it.
func TestAccessLinesAfterServeAreWrittenAtOnce(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(up.Close)
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, path, fmt.Sprintf("listen: 127.0.0.1:0\nadmin: \"\"\nlog: {flush_interval: 1h}\nroutes:\n  - name: r\n    upstream: %s\n", up.URL))
	logs := &logBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	ctx, cancel := context.WithCancel(context.Background())
	s, err := New(ctx, path, log, logs)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	for deadline := time.Now().Add(10 * time.Second); logs.find(t, "sluice started") == nil; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("sluice did not start within 10s")
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Serve did not return within 20s")
	}
	// A request that was still running when Serve returned finishes.
	rec := httptest.NewRecorder()
	s.gateway.ServeHTTP(rec, httptest.NewRequest("GET", "/late", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("got status %d, want 200", rec.Code)
	}
	var got bool
	for _, r := range logs.records(t) {
		if r["msg"] == "request" && r["path"] == "/late" {
			got = true
		}
	}
	if !got {
		t.Errorf("got no access line for /late right after it finished, want it written at once after Serve returned; lines: %v", logs.records(t))
	}
}
