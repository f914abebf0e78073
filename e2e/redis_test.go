package e2e

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// sharedConfig is a gateway on a Redis store with one route per algorithm.
func sharedConfig(store, upstream string) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
admin: 127.0.0.1:0
log: {access_log: false}
store:
%s
policies:
  log:
    algorithm: sliding_window_log
    limit: 100
    window: 1h
    key: [global]
  fixed:
    algorithm: fixed_window
    limit: 100
    window: 1h
    key: [global]
  bucket:
    algorithm: token_bucket
    limit: 100
    window: 1h
    burst: 100
    key: [global]
  shaping:
    algorithm: leaky_bucket
    limit: 10
    window: 1s
    queue: 30
    key: [global]
routes:
  - {name: log, match: {path_prefix: /log}, upstream: %[2]s, limits: [log]}
  - {name: fixed, match: {path_prefix: /fixed}, upstream: %[2]s, limits: [fixed]}
  - {name: bucket, match: {path_prefix: /bucket}, upstream: %[2]s, limits: [bucket]}
  - {name: shaping, match: {path_prefix: /shaping}, upstream: %[2]s, limits: [shaping]}
`, store, upstream)
}

// spread sends n concurrent GETs to path, round robin over the instances,
// and counts the answers by status.
func spread(t *testing.T, ins []*instance, path string, n int) map[int]int {
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			resp, _ := do(t, nil, "GET", ins[i%len(ins)].HTTP+path, nil, nil)
			mu.Lock()
			codes[resp.StatusCode]++
			mu.Unlock()
		})
	}
	wg.Wait()
	return codes
}

// TestRedisOneBudgetAcrossInstances runs before the parallel tests: it
// measures departure spacing.
func TestRedisOneBudgetAcrossInstances(t *testing.T) {
	rs := redistest.Start(t)
	up := newUpstream(t)
	path := writeConfig(t, sharedConfig(fmt.Sprintf("  type: redis\n  redis: {addresses: [%q], timeout: 2s}", rs.Addr()), up.URL))
	ins := []*instance{start(t, path), start(t, path), start(t, path)}
	for _, route := range []string{"/log", "/fixed", "/bucket"} {
		codes := spread(t, ins, route, 300)
		if codes[200] != 100 || codes[429] != 200 {
			t.Errorf("%s: got %v, want exactly 100 200s and 200 429s", route, codes)
		}
	}
	// Leaky bucket: the instances share one departure schedule, so the
	// upstream sees one request per 100ms in all.
	before := len(up.Requests())
	sent := time.Now()
	codes := spread(t, ins, "/shaping", 15)
	if codes[200] != 15 {
		t.Fatalf("/shaping: got %v, want 15 200s", codes)
	}
	var at []time.Time
	for _, r := range up.Requests()[before:] {
		at = append(at, r.At)
	}
	sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
	// Redis decides every request after sent, on its own clock, and puts
	// the k-th slot k intervals after the first; each instance counts the
	// delay from the reply, so no request leaves before its slot, however
	// late the machine lets it leave. So the k-th arrival is at least k
	// intervals after sent. Load only delays departures, which can bring
	// one close to the next, so single gaps prove nothing; two requests
	// let out at one slot, or a schedule kept per instance, put the later
	// arrivals whole intervals ahead of their bound.
	const interval = 100 * time.Millisecond
	for k, a := range at {
		if got, want := a.Sub(sent), time.Duration(k)*interval; got < want {
			t.Errorf("departure %d: %s after the requests were sent, want at least %s (%d intervals)", k, got, want, k)
		}
	}
	if keys := rs.Do("KEYS", "sluice:*"); !strings.Contains(keys, "sluice:") {
		t.Errorf("redis keys: got %q, want keys under the default prefix", keys)
	}
	for _, k := range strings.Fields(rs.Do("KEYS", "*")) {
		if ttl := rs.Do("PTTL", k); strings.HasPrefix(ttl, "-") {
			t.Errorf("key %s has no expiry (PTTL %s)", k, ttl)
		}
	}
}

func TestRedisCluster(t *testing.T) {
	t.Parallel()
	nodes := redistest.StartCluster(t, 3)
	up := newUpstream(t)
	path := writeConfig(t, sharedConfig(fmt.Sprintf("  type: redis\n  redis: {mode: cluster, addresses: [%s], timeout: 2s}", strings.Join(nodes, ", ")), up.URL))
	ins := []*instance{start(t, path), start(t, path)}
	for _, route := range []string{"/log", "/fixed", "/bucket"} {
		codes := spread(t, ins, route, 200)
		if codes[200] != 100 || codes[429] != 100 {
			t.Errorf("cluster %s: got %v, want exactly 100 200s and 100 429s", route, codes)
		}
	}
}

func TestRedisFailureFallsBackAndRecovers(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	up := newUpstream(t)
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
admin: 127.0.0.1:0
log: {access_log: false}
store:
  type: redis
  redis: {addresses: [%q], timeout: 50ms, on_error: local}
policies:
  generous:
    algorithm: token_bucket
    limit: 1000000
    window: 1s
    key: [global]
routes:
  - {name: free, match: {path_prefix: /free}, upstream: %[2]s}
  - {name: api, upstream: %[2]s, limits: [generous]}
`, rs.Addr(), up.URL)
	in := start(t, writeConfig(t, cfg))

	// Load from 8 clients for the whole test; Redis dies and comes back
	// under it. Each client alternates with a route that has no limit:
	// the slowest of those, sent the same way at the same times, is what
	// the loaded machine alone made a request wait, store aside.
	var stop atomic.Bool
	var slowest, slowestFree atomic.Int64
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				path, worst := "/", &slowest
				if i%2 == 1 {
					path, worst = "/free", &slowestFree
				}
				t0 := time.Now()
				resp, err := client.Get(in.HTTP + path)
				if err != nil {
					t.Errorf("GET: %v", err)
					return
				}
				resp.Body.Close()
				took := int64(time.Since(t0))
				for {
					old := worst.Load()
					if took <= old || worst.CompareAndSwap(old, took) {
						break
					}
				}
				if path == "/" {
					mu.Lock()
					codes[resp.StatusCode]++
					mu.Unlock()
				}
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	rs.Kill()
	time.Sleep(time.Second)
	if resp, body := do(t, nil, "GET", in.Admin+"/readyz", nil, nil); resp.StatusCode != 200 || !strings.Contains(string(body), "degraded") {
		t.Errorf("/readyz with redis down: got %d %s, want 200 degraded", resp.StatusCode, body)
	}
	errs := scrape(t, in.Admin)[`sluice_store_errors_total{store="redis"}`]
	if errs < 1 {
		t.Errorf("store errors: got %v, want some", errs)
	}
	rs.Restart()
	back := time.Now()
	// The prober pings within a second of Redis answering and the next
	// decisions use it; but with a 50ms timeout a loaded machine can make
	// a ping or those decisions miss it, and each miss starts the wait
	// again. Only a gateway that never uses Redis again fails here.
	for {
		resp, body := do(t, nil, "GET", in.Admin+"/readyz", nil, nil)
		if resp.StatusCode == 200 && strings.Contains(string(body), `"ok"`) && rs.Do("DBSIZE") != "0" {
			break
		}
		if time.Since(back) > 15*time.Second {
			t.Fatalf("redis back for 15s, still not used: readyz %d %s, DBSIZE %s", resp.StatusCode, body, rs.Do("DBSIZE"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("redis used again %v after its restart", time.Since(back))
	stop.Store(true)
	wg.Wait()
	for code, n := range codes {
		if code >= 500 {
			t.Errorf("got %d answers with status %d, want no 5xx", n, code)
		}
	}
	if s, free := time.Duration(slowest.Load()), time.Duration(slowestFree.Load()); s > free+500*time.Millisecond {
		t.Errorf("slowest request: %s, want none waiting much past the 50ms store timeout (within 500ms of the slowest without a limit, %s)", s, free)
	}
	// Attempts stopped during the outage: far fewer errors than requests.
	m := scrape(t, in.Admin)
	if errs, total := m[`sluice_store_errors_total{store="redis"}`], float64(codes[200]); errs > total/4 {
		t.Errorf("store errors %v for %v requests: the breaker should stop trying Redis", errs, total)
	}
}

func TestRedisDenyOnError(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	up := newUpstream(t)
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
admin: 127.0.0.1:0
log: {access_log: false}
store:
  type: redis
  redis: {addresses: [%q], timeout: 50ms, on_error: deny}
routes:
  - name: api
    upstream: %s
    limits: [{algorithm: fixed_window, limit: 100, window: 1m, key: [ip]}]
`, rs.Addr(), up.URL)
	in := start(t, writeConfig(t, cfg))
	if resp, _ := do(t, nil, "GET", in.HTTP+"/", nil, nil); resp.StatusCode != 200 {
		t.Fatalf("with redis: got %d, want 200", resp.StatusCode)
	}
	rs.Kill()
	resp, _ := do(t, nil, "GET", in.HTTP+"/", nil, nil)
	if resp.StatusCode != 429 {
		t.Errorf("on_error deny with redis down: got %d, want 429", resp.StatusCode)
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		resp, _ := do(t, nil, "GET", in.Admin+"/readyz", nil, nil)
		if resp.StatusCode == 503 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz with redis down and on_error deny: got %d, want 503", resp.StatusCode)
		}
		do(t, nil, "GET", in.HTTP+"/", nil, nil)
		time.Sleep(50 * time.Millisecond)
	}
}
