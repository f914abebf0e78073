package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestReloadWithRequestsQueued: a reload that comes while requests wait in
// a leaky_bucket queue (SPEC §6). An invalid file keeps the running
// configuration and the bucket; a valid one that leaves the policy as it
// was keeps its schedule; one that changes the policy starts the new
// schedule behind the requests already waiting (README › Reload and
// shutdown), never beside them. The waiting requests themselves are
// answered by the drain that ends the test.
func TestReloadWithRequestsQueued(t *testing.T) {
	t.Parallel()
	u := &seenUpstream{}
	up := u.start(t)
	// 1 per 10s: the two waiters leave 10 and 20s after the first, long
	// after the checks below, which read the bucket through the admin
	// listener rather than by timing anything.
	const cfg = `listen: 127.0.0.1:0
admin: 127.0.0.1:0
shutdown_timeout: 100ms
policies:
  shaping: {algorithm: leaky_bucket, limit: 1, window: 10s, queue: %d, key: [global]}
routes:
  - name: orders
    upstream: %s
    limits: [shaping]
%s`
	r := serve(t, fmt.Sprintf(cfg, 5, up.URL, ""))
	admin := r.url("admin")
	url := r.url("http") + "/"
	if code := sendSeq(context.Background(), url, "0"); code != 200 {
		t.Fatalf("first: got %d, want 200", code)
	}
	var wg sync.WaitGroup
	codes := make([]int, 2)
	for i, seq := range []string{"A", "B"} {
		wg.Go(func() { codes[i] = sendSeq(context.Background(), url, seq) })
		if !awaitQueueDepth(t, admin, "shaping", float64(i+1), 5*time.Second) {
			t.Fatalf("%s never waited", seq)
		}
	}
	// The next free departure is 30s after the first: of the 50s a
	// request may wait (queue 5 x 10s), 20s and more are left, which
	// is 3 more requests, until 10s have passed.
	remaining := func(what string, want int64) {
		t.Helper()
		code, _, body := get(t, admin+"/v1/limits?policy=shaping&key=global", "")
		var got struct{ Remaining int64 }
		if code != 200 || json.Unmarshal([]byte(body), &got) != nil {
			t.Fatalf("%s: /v1/limits got %d %s", what, code, body)
		}
		if got.Remaining != want {
			t.Errorf("%s: remaining got %d, want %d", what, got.Remaining, want)
		}
	}
	remaining("before any reload", 3)

	writeFile(t, r.path, strings.Replace(fmt.Sprintf(cfg, 5, up.URL, ""), "limit: 1,", "limit: 0,", 1))
	if err := r.Reload(); err == nil {
		t.Fatal("reloading an invalid file: got nil, want an error")
	}
	remaining("after an invalid reload", 3)
	_, _, metrics := get(t, admin+"/metrics", "")
	if got := metricValue(t, metrics, `sluice_config_reloads_total{result="error"}`); got != 1 {
		t.Errorf("reloads counted as errors: got %v, want 1", got)
	}

	// Valid, and the policy unchanged (a route added): the schedule stays.
	writeFile(t, r.path, fmt.Sprintf(cfg, 5, up.URL, "  - name: other\n    match: {path_prefix: /other}\n    upstream: "+up.URL+"\n"))
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	remaining("after a reload that keeps the policy", 3)

	// Changed (queue 6, 60s of waiting): the new schedule starts one
	// interval after B, 30s after the first, so 30s and more are left,
	// 4 requests, not the 7 of a fresh bucket.
	writeFile(t, r.path, fmt.Sprintf(cfg, 6, up.URL, ""))
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	remaining("after a reload that changes the policy", 4)

	r.stop()
	wg.Wait()
	for i, c := range codes {
		if c != http.StatusServiceUnavailable {
			t.Errorf("waiter %d at shutdown: got %d, want 503", i, c)
		}
	}
	if got := u.got(); len(got) != 1 {
		t.Errorf("upstream got %q, want only the first", got)
	}
}
