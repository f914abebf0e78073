package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// fleetConfig is a gateway on a shared Redis store with a route per
// algorithm, each keyed by X-Key so that every check takes a fresh bucket.
// The windows are long so that no check straddles one's end.
func fleetConfig(store, upstream string, limit int) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
admin: 127.0.0.1:0
admin_token: "${SLUICE_ADMIN_TOKEN:-}"
log: {access_log: false}
store:
%s
policies:
  log: {algorithm: sliding_window_log, limit: %[3]d, window: 24h, key: [header:X-Key]}
  fixed: {algorithm: fixed_window, limit: %[3]d, window: 24h, key: [header:X-Key]}
  bucket: {algorithm: token_bucket, limit: %[3]d, window: 24h, key: [header:X-Key]}
  counter: {algorithm: sliding_window_counter, limit: %[3]d, window: 24h, key: [header:X-Key]}
  leaky: {algorithm: leaky_bucket, limit: 1, window: 1h, queue: 0, key: [header:X-Key]}
  queue: {algorithm: leaky_bucket, limit: 1, window: 1h, queue: 2, key: [header:X-Key]}
  guard: {algorithm: fixed_window, limit: 2, window: 24h, block: 1h, key: [header:X-Key]}
routes:
  - {name: log, match: {path_prefix: /log}, upstream: %[2]s, limits: [log]}
  - {name: fixed, match: {path_prefix: /fixed}, upstream: %[2]s, limits: [fixed]}
  - {name: bucket, match: {path_prefix: /bucket}, upstream: %[2]s, limits: [bucket]}
  - {name: counter, match: {path_prefix: /counter}, upstream: %[2]s, limits: [counter]}
  - {name: leaky, match: {path_prefix: /leaky}, upstream: %[2]s, limits: [leaky]}
  - {name: queue, match: {path_prefix: /queue}, upstream: %[2]s, limits: [queue]}
  - {name: guard, match: {path_prefix: /guard}, upstream: %[2]s, limits: [guard]}
`, store, upstream, limit)
}

var reFleetR = regexp.MustCompile(`^"[a-z]+";r=(\d+);t=(\d+)$`)

// fleetLimits is the body of GET /v1/limits.
type fleetLimits struct {
	Remaining      int64  `json:"remaining"`
	Limit          int64  `json:"limit"`
	BlockedSeconds *int64 `json:"blocked_seconds"`
}

func fleetPeek(t *testing.T, in *instance, policy, key string) fleetLimits {
	t.Helper()
	resp, body := do(t, nil, "GET", in.Admin+"/v1/limits?policy="+policy+"&key="+key, nil, nil)
	var l fleetLimits
	if resp.StatusCode != 200 || json.Unmarshal(body, &l) != nil {
		t.Fatalf("GET /v1/limits %s %s: got %d %s", policy, key, resp.StatusCode, body)
	}
	return l
}

// fleetPoll waits up to 10s for GET /v1/limits on in to show remaining.
func fleetPoll(t *testing.T, in *instance, policy, key string, remaining int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		l := fleetPeek(t, in, policy, key)
		if l.Remaining == remaining {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /v1/limits %s %s: remaining %d, want %d", policy, key, l.Remaining, remaining)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fleetGet sends one GET with X-Key and returns the status, the r of the
// RateLimit field, X-RateLimit-Remaining and Retry-After.
func fleetGet(t *testing.T, in *instance, path, key string) (code, r, remaining, retry int) {
	t.Helper()
	resp, _ := do(t, nil, "GET", in.HTTP+path, nil, map[string]string{"X-Key": key})
	m := reFleetR.FindStringSubmatch(resp.Header.Get("RateLimit"))
	if m == nil {
		t.Fatalf("%s: RateLimit %q, want one item", path, resp.Header.Get("RateLimit"))
	}
	r, _ = strconv.Atoi(m[1])
	remaining, _ = strconv.Atoi(resp.Header.Get("X-RateLimit-Remaining"))
	retry, _ = strconv.Atoi(resp.Header.Get("Retry-After"))
	return resp.StatusCode, r, remaining, retry
}

// TestFleetOneBucketTwoInstances: two gateways on one Redis (and on a
// three-node cluster) behave as one for a client that alternates between
// them: the budget, the headers, /v1/limits, blocks and their reset.
func TestFleetOneBucketTwoInstances(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	stores := map[string]func(t *testing.T) string{
		"standalone": func(t *testing.T) string {
			rs := redistest.Start(t)
			return fmt.Sprintf("  type: redis\n  redis: {addresses: [%q], timeout: 2s}", rs.Addr())
		},
		"cluster": func(t *testing.T) string {
			nodes := redistest.StartCluster(t, 3)
			return fmt.Sprintf("  type: redis\n  redis: {mode: cluster, addresses: [%s], timeout: 2s}", strings.Join(nodes, ", "))
		},
	}
	for _, name := range []string{"standalone", "cluster"} {
		t.Run(name, func(t *testing.T) {
			const limit = 5
			path := writeConfig(t, fleetConfig(stores[name](t), up.URL, limit))
			a := start(t, path, "SLUICE_ADMIN_TOKEN="+bruteToken)
			b := start(t, path, "SLUICE_ADMIN_TOKEN="+bruteToken)
			ins := []*instance{a, b}

			for _, policy := range []string{"log", "fixed", "bucket", "counter"} {
				for i := range limit + 2 {
					in := ins[i%2]
					code, r, rem, _ := fleetGet(t, in, "/"+policy, "k")
					wantCode, wantR := 200, limit-1-i
					if i >= limit {
						wantCode, wantR = 429, 0
					}
					if code != wantCode || r != wantR || rem != wantR {
						t.Errorf("%s request %d on %d: got %d r=%d X-RateLimit-Remaining=%d, want %d r=%d", policy, i, i%2, code, r, rem, wantCode, wantR)
					}
					// The other instance reads what this one spent.
					if l := fleetPeek(t, ins[1-i%2], policy, "k"); l.Remaining != int64(wantR) {
						t.Errorf("%s after request %d: GET /v1/limits on the other instance: remaining %d, want %d", policy, i, l.Remaining, wantR)
					}
				}
			}

			// Leaky bucket, one place per hour and no queue: the place a
			// took is taken for b.
			if code, _, _, _ := fleetGet(t, a, "/leaky", "k"); code != 200 {
				t.Errorf("leaky on a: got %d, want 200", code)
			}
			if code, _, _, retry := fleetGet(t, b, "/leaky", "k"); code != 429 || retry < 3590 {
				t.Errorf("leaky on b: got %d Retry-After %d, want 429 near 3600", code, retry)
			}

			// Concurrent requests spread over both instances: exactly the
			// limit is admitted, whatever the algorithm.
			for _, policy := range []string{"log", "fixed", "bucket", "counter"} {
				codes := map[int]int{}
				var mu sync.Mutex
				var wg sync.WaitGroup
				for i := range 8 * limit {
					wg.Go(func() {
						resp, _ := do(t, nil, "GET", ins[i%2].HTTP+"/"+policy, nil, map[string]string{"X-Key": "many"})
						mu.Lock()
						codes[resp.StatusCode]++
						mu.Unlock()
					})
				}
				wg.Wait()
				if codes[200] != limit || codes[429] != 7*limit {
					t.Errorf("%s, %d concurrent requests: got %v, want %d 200s and the rest 429", policy, 8*limit, codes, limit)
				}
			}

			// A request waiting in the queue through b takes a place that
			// a's /v1/limits shows; when its client goes away, the place
			// comes back for both.
			if code, r, _, _ := fleetGet(t, a, "/queue", "q"); code != 200 || r != 2 {
				t.Errorf("queue on a: got %d r=%d, want 200 r=2", code, r)
			}
			ctx, cancel := context.WithCancel(context.Background())
			waited := make(chan error, 1)
			go func() {
				req, _ := http.NewRequestWithContext(ctx, "GET", b.HTTP+"/queue", nil)
				req.Header.Set("X-Key", "q")
				resp, err := client.Do(req)
				if err == nil {
					resp.Body.Close()
				}
				waited <- err
			}()
			fleetPoll(t, a, "queue", "q", 1)
			cancel()
			if err := <-waited; err == nil {
				t.Errorf("the queued request on b answered; want it waiting until its client went away")
			}
			fleetPoll(t, a, "queue", "q", 2)

			// A block started through a holds on b with the same end; a
			// DELETE through a lifts it on b at once.
			// The third request, refused by the budget, starts the block.
			for _, in := range ins {
				fleetGet(t, in, "/guard", "g")
			}
			if code, _, _, _ := fleetGet(t, a, "/guard", "g"); code != 429 {
				t.Fatalf("third request on a: got %d, want 429", code)
			}
			codeA, _, _, retryA := fleetGet(t, a, "/guard", "g")
			codeB, rB, _, retryB := fleetGet(t, b, "/guard", "g")
			if codeA != 429 || codeB != 429 || retryA < 3590 || retryB < retryA-1 || retryB > retryA {
				t.Errorf("block: a got %d Retry-After %d, b got %d Retry-After %d; want both 429 near 3600, b's equal to a's", codeA, retryA, codeB, retryB)
			}
			if rB != 0 {
				t.Errorf("block on b: r=%d, want 0", rB)
			}
			if l := fleetPeek(t, b, "guard", "g"); l.BlockedSeconds == nil || *l.BlockedSeconds < 3590 {
				t.Errorf("GET /v1/limits on b during the block: blocked_seconds %v, want near 3600", l.BlockedSeconds)
			}
			resp, body := do(t, nil, "DELETE", a.Admin+"/v1/limits?policy=guard&key=g", nil, map[string]string{"Authorization": "Bearer " + bruteToken})
			if resp.StatusCode != 204 {
				t.Fatalf("DELETE on a: got %d %s, want 204", resp.StatusCode, body)
			}
			if l := fleetPeek(t, b, "guard", "g"); l.BlockedSeconds != nil || l.Remaining != 2 {
				t.Errorf("GET /v1/limits on b after the DELETE on a: blocked_seconds %v remaining %d, want none and 2", l.BlockedSeconds, l.Remaining)
			}
			if code, r, _, _ := fleetGet(t, b, "/guard", "g"); code != 200 || r != 1 {
				t.Errorf("on b after the DELETE on a: got %d r=%d, want 200 r=1", code, r)
			}
		})
	}
}

// TestFleetReloadChangesPolicy: a reload that changes a policy's numbers
// on one instance gives that instance a fresh bucket of its own (the
// settings name other keys); the other instance keeps the old shared
// bucket until it reloads too, and then both share the new one.
func TestFleetReloadChangesPolicy(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	up := newUpstream(t)
	store := fmt.Sprintf("  type: redis\n  redis: {addresses: [%q], timeout: 2s}", rs.Addr())
	pathA := writeConfig(t, fleetConfig(store, up.URL, 3))
	pathB := writeConfig(t, fleetConfig(store, up.URL, 3))
	a, b := start(t, pathA), start(t, pathB)
	for _, in := range []*instance{a, b, a} {
		fleetGet(t, in, "/fixed", "k")
	}
	if err := os.WriteFile(pathA, []byte(fleetConfig(store, up.URL, 4)), 0o600); err != nil {
		t.Fatal(err)
	}
	a.Signal(syscall.SIGHUP)
	waitMetric(t, a.Admin, `sluice_config_reloads_total{result="success"}`, 1)
	if code, r, _, _ := fleetGet(t, a, "/fixed", "k"); code != 200 || r != 3 {
		t.Errorf("a after its reload to limit 4: got %d r=%d, want 200 r=3 (a fresh bucket)", code, r)
	}
	if code, _, _, _ := fleetGet(t, b, "/fixed", "k"); code != 429 {
		t.Errorf("b, not reloaded: got %d, want 429 (the old bucket is spent)", code)
	}
	if err := os.WriteFile(pathB, []byte(fleetConfig(store, up.URL, 4)), 0o600); err != nil {
		t.Fatal(err)
	}
	b.Signal(syscall.SIGHUP)
	waitMetric(t, b.Admin, `sluice_config_reloads_total{result="success"}`, 1)
	if code, r, _, _ := fleetGet(t, b, "/fixed", "k"); code != 200 || r != 2 {
		t.Errorf("b after its reload: got %d r=%d, want 200 r=2 (the bucket a spent from)", code, r)
	}
}

// TestFleetAgreesAfterRedisRestart: with on_error local, after Redis is
// killed and restarted both instances go back to one shared bucket.
func TestFleetAgreesAfterRedisRestart(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	up := newUpstream(t)
	path := writeConfig(t, fleetConfig(fmt.Sprintf("  type: redis\n  redis: {addresses: [%q], timeout: 200ms, on_error: local}", rs.Addr()), up.URL, 5))
	a, b := start(t, path), start(t, path)
	rs.Kill()
	// Both decide locally, each with its own fresh budget.
	for _, in := range []*instance{a, b} {
		for range 3 {
			fleetGet(t, in, "/log", "down")
		}
	}
	rs.Restart()
	for _, in := range []*instance{a, b} {
		deadline := time.Now().Add(15 * time.Second)
		for {
			resp, body := do(t, nil, "GET", in.Admin+"/readyz", nil, nil)
			if resp.StatusCode == 200 && strings.Contains(string(body), `"ok"`) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redis back for 15s: readyz %d %s", resp.StatusCode, body)
			}
			fleetGet(t, in, "/fixed", "probe")
			time.Sleep(50 * time.Millisecond)
		}
	}
	for _, policy := range []string{"log", "fixed", "bucket", "counter"} {
		ins := []*instance{a, b}
		for i := range 6 {
			code, r, _, _ := fleetGet(t, ins[i%2], "/"+policy, "up")
			wantCode, wantR := 200, 4-i
			if i >= 5 {
				wantCode, wantR = 429, 0
			}
			if code != wantCode || r != wantR {
				t.Errorf("%s after recovery, request %d: got %d r=%d, want %d r=%d", policy, i, code, r, wantCode, wantR)
			}
		}
	}
}
