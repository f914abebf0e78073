package main

// These tests each run the real gateway (proxy.Gateway on the memory
// store, as `sluice run` does) on a config, send it real traffic, take
// its JSON access log, replay that log with `sluice simulate -config
// -policy -replay` and compare what the simulator reports for the
// policy's algorithm with what the gateway decided.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/proxy"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
)

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// gatewayLog serves cfg (with %[1]s standing for the upstream URL) on a
// real gateway, lets send drive it, and returns the config text and the
// gateway's access log.
func gatewayLog(t *testing.T, cfg string, send func(base string)) (string, string) {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok\n")
	}))
	t.Cleanup(up.Close)
	text := fmt.Sprintf(cfg, up.URL)
	c, err := routes.Parse("sluice.yaml", []byte(text), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	store := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{})
	t.Cleanup(func() { store.Close() })
	var log lockedBuf
	g := proxy.New(proxy.Options{Metrics: metrics.New(), Logger: slog.New(slog.NewJSONHandler(&log, nil))})
	g.Load(c, store)
	srv := httptest.NewUnstartedServer(g)
	srv.Config.ConnContext = proxy.WithConn
	srv.Start()
	send(srv.URL)
	srv.Close()
	return text, log.String()
}

type simResult struct {
	Algorithm        string `json:"algorithm"`
	Accepted         int    `json:"accepted"`
	Rejected         int    `json:"rejected"`
	Queued           int    `json:"queued"`
	ConsumersLimited int    `json:"consumers_limited"`
}

// replayLog runs sluice simulate -config -policy -replay on the log and
// returns the result for algorithm, and stderr.
func replayLog(t *testing.T, cfg, policy, log, algorithm string) (simResult, string) {
	t.Helper()
	dir := t.TempDir()
	cp, lp := filepath.Join(dir, "sluice.yaml"), filepath.Join(dir, "access.log")
	os.WriteFile(cp, []byte(cfg), 0o600)
	os.WriteFile(lp, []byte(log), 0o600)
	var out, errOut bytes.Buffer
	if code := run([]string{"simulate", "-config", cp, "-policy", policy, "-replay", lp, "-format", "json"}, &out, &errOut); code != 0 {
		t.Fatalf("simulate exit %d: %s", code, errOut.String())
	}
	var rs []simResult
	if err := json.Unmarshal(out.Bytes(), &rs); err != nil {
		t.Fatalf("simulate output %q: %v", out.String(), err)
	}
	for _, r := range rs {
		if r.Algorithm == algorithm {
			return r, errOut.String()
		}
	}
	t.Fatalf("no %s in %s", algorithm, out.String())
	return simResult{}, ""
}

// gatewayCounts reads what the gateway decided for route's requests from
// its access log: those that reached the upstream, those policy rejected,
// and how many distinct client addresses policy rejected.
func gatewayCounts(t *testing.T, log, route, policy string) (reached, rejected, limited int) {
	t.Helper()
	clients := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(log), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if m["msg"] != "request" || m["route"] != route {
			continue
		}
		if m["upstream"] != nil {
			reached++
		}
		if m["rejected_by"] == policy {
			rejected++
			clients[m["client_ip"].(string)] = true
		}
	}
	return reached, rejected, len(clients)
}

func do(t *testing.T, req *http.Request) int {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestGatewayReplayLeavesOutRequestsRefusedBeforeLimits: README "Replaying
// an access log": "A request the gateway answers 400 before any limit ...
// is left out and counted on stderr." In sluice's own log the gateway
// writes such requests (and max_body's 413 from Content-Length, also
// answered before any limit) with their route, no upstream and no
// rejected_by; the replay charges them to the consumer's bucket, so it
// reports rejections the gateway never made.
func TestGatewayReplayLeavesOutRequestsRefusedBeforeLimits(t *testing.T) {
	const cfg = `
policies:
  per-ip: {algorithm: fixed_window, limit: 3, window: 1h, key: [ip]}
  per-user: {algorithm: fixed_window, limit: 3, window: 1h, key: [ip, header:X-User]}
routes:
  - {name: upload, match: {path_prefix: /upload}, upstream: "%[1]s", max_body: 10, limits: [per-ip]}
  - {name: api, match: {path_prefix: /api}, upstream: "%[1]s", limits: [per-user]}
`
	text, log := gatewayLog(t, cfg, func(base string) {
		for range 4 {
			r, _ := http.NewRequest("POST", base+"/upload/x", strings.NewReader("a body longer than ten bytes"))
			if c := do(t, r); c != 413 {
				t.Fatalf("big body: %d, want 413", c)
			}
			r, _ = http.NewRequest("GET", base+"/api/x", nil)
			r.Header.Add("X-User", "a")
			r.Header.Add("X-User", "b")
			if c := do(t, r); c != 400 {
				t.Fatalf("X-User twice: %d, want 400", c)
			}
		}
		for range 3 {
			r, _ := http.NewRequest("POST", base+"/upload/x", strings.NewReader("small"))
			if c := do(t, r); c != 200 {
				t.Fatalf("small body: %d, want 200", c)
			}
			r, _ = http.NewRequest("GET", base+"/api/x", nil)
			r.Header.Set("X-User", "a")
			if c := do(t, r); c != 200 {
				t.Fatalf("one X-User: %d, want 200", c)
			}
		}
	})
	for _, c := range []struct{ route, policy string }{{"upload", "per-ip"}, {"api", "per-user"}} {
		reached, rejected, _ := gatewayCounts(t, log, c.route, c.policy)
		sim, stderr := replayLog(t, text, c.policy, log, "fixed_window")
		if sim.Rejected != rejected || sim.Accepted != reached {
			t.Errorf("policy %s: gateway let %d through and rejected %d; the replay of its log says accepted %d, rejected %d\nstderr: %s",
				c.policy, reached, rejected, sim.Accepted, sim.Rejected, stderr)
		}
	}
}

// TestGatewayReplayLongOverrideKey: README: overrides are replayed, "a
// request is matched by its key values and client address as the gateway
// matches it". The gateway matches an override's keys against the key
// before it bounds it to 256 bytes; the replay has only the bounded key
// (sluice logs bounded keys), so a partner whose key is longer (a JWT, a
// long User-Agent) must match by the digest, and be exempt in the replay
// as in the gateway.
func TestGatewayReplayLongOverrideKey(t *testing.T) {
	long := strings.Repeat("p", 300)
	cfg := `
log: {log_keys: true}
policies:
  partner:
    algorithm: fixed_window
    limit: 1
    window: 1h
    key: [header:X-Partner]
    overrides:
      - keys: ["` + long + `"]
        exempt: true
routes:
  - {name: p, match: {path_prefix: /p}, upstream: "%[1]s", limits: [partner]}
`
	text, log := gatewayLog(t, cfg, func(base string) {
		for range 3 {
			r, _ := http.NewRequest("GET", base+"/p/x", nil)
			r.Header.Set("X-Partner", long)
			do(t, r)
		}
	})
	reached, rejected, _ := gatewayCounts(t, log, "p", "partner")
	sim, stderr := replayLog(t, text, "partner", log, "fixed_window")
	if sim.Accepted != reached || sim.Rejected != rejected {
		t.Errorf("gateway: %d reached the upstream, %d rejected; replay of its log: accepted %d, rejected %d\nstderr: %s",
			reached, rejected, sim.Accepted, sim.Rejected, stderr)
	}
}

// TestGatewayReplayQueueGiveUp: SPEC §3 leaky_bucket "A waiting request
// whose client goes away never reaches the upstream" and README: "its
// place goes to the next waiter". SPEC §7: accepted counts requests that
// reached the upstream. The gateway logs such a request 499 with its
// queue_wait_ms; the replay must give its place up at arrival plus that
// wait and not count it accepted, so that it queues the later requests
// the gateway queued.
func TestGatewayReplayQueueGiveUp(t *testing.T) {
	const cfg = `
policies:
  shaping: {algorithm: leaky_bucket, limit: 1, window: 1s, queue: 3, key: [ip]}
routes:
  - {name: orders, match: {path_prefix: /orders}, upstream: "%[1]s", limits: [shaping]}
`
	text, log := gatewayLog(t, cfg, func(base string) {
		var wg sync.WaitGroup
		get := func(path string, timeout time.Duration) {
			wg.Go(func() {
				ctx := context.Background()
				if timeout > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, timeout)
					defer cancel()
				}
				r, _ := http.NewRequestWithContext(ctx, "GET", base+path, nil)
				if resp, err := http.DefaultClient.Do(r); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		}
		get("/orders/1", 0) // leaves at once
		time.Sleep(50 * time.Millisecond)
		get("/orders/2", 300*time.Millisecond) // waits, gives up at ~0.35s
		time.Sleep(100 * time.Millisecond)
		get("/orders/3", 0)
		time.Sleep(100 * time.Millisecond)
		get("/orders/4", 0)
		time.Sleep(500 * time.Millisecond)
		get("/orders/5", 0) // the gateway's queue holds 3 and 4 only
		wg.Wait()
	})
	reached, rejected, limited := gatewayCounts(t, log, "orders", "shaping")
	sim, stderr := replayLog(t, text, "shaping", log, "leaky_bucket")
	if sim.Accepted != reached || sim.Rejected != rejected || sim.ConsumersLimited != limited {
		t.Errorf("gateway: %d reached the upstream, %d rejected, %d consumers limited; replay of its log: accepted %d, rejected %d, consumers_limited %d\nstderr: %s\nlog:\n%s",
			reached, rejected, limited, sim.Accepted, sim.Rejected, sim.ConsumersLimited, stderr, log)
	}
}

// TestGatewayReplayPathKeyEncodings: README: "The key is built from the log
// as the gateway builds it from the request". The decoded path alone does
// not tell spellings the gateway keys apart (%3B and a real ;) or merges
// (%2F%2F, whose slashes merge as repeated ones); the replay must key
// them as the gateway did.
func TestGatewayReplayPathKeyEncodings(t *testing.T) {
	const cfg = `
policies:
  per-path: {algorithm: fixed_window, limit: 2, window: 1h, key: [path]}
routes:
  - {name: files, match: {path_prefix: /files}, upstream: "%[1]s", limits: [per-path]}
`
	for _, pair := range [][2]string{{"/files/a%3B1", "/files/a%3B2"}, {"/files/a%2F%2Fb", "/files/a/b"}} {
		text, log := gatewayLog(t, cfg, func(base string) {
			for range 3 {
				for _, p := range pair {
					r, _ := http.NewRequest("GET", base+p, nil)
					do(t, r)
				}
			}
		})
		reached, rejected, _ := gatewayCounts(t, log, "files", "per-path")
		sim, _ := replayLog(t, text, "per-path", log, "fixed_window")
		if sim.Accepted != reached || sim.Rejected != rejected {
			t.Errorf("paths %q: gateway: %d reached the upstream, %d rejected; replay of its log: accepted %d, rejected %d",
				pair, reached, rejected, sim.Accepted, sim.Rejected)
		}
	}
}

// TestGatewayReplayLoggedKeysNotUTF8: README: "With log.log_keys: true,
// sluice's lines carry the keys themselves, and -config FILE -policy NAME
// replays each line with the key the gateway computed for that policy".
// Two consumers whose keys differ only in bytes that are not UTF-8
// (Latin-1 header values, %FF in a path) must stay two in the replay,
// and every line must stay valid JSON.
func TestGatewayReplayLoggedKeysNotUTF8(t *testing.T) {
	const cfg = `
log: {log_keys: true}
policies:
  per-key: {algorithm: fixed_window, limit: 2, window: 1h, key: [header:X-API-Key]}
routes:
  - {name: api, match: {path_prefix: /api}, upstream: "%[1]s", limits: [per-key]}
`
	text, log := gatewayLog(t, cfg, func(base string) {
		for range 3 {
			for _, k := range []string{"caf\xe9", "caf\xe8"} {
				r, _ := http.NewRequest("GET", base+"/api/x", nil)
				r.Header.Set("X-API-Key", k)
				do(t, r)
			}
		}
	})
	reached, rejected, _ := gatewayCounts(t, log, "api", "per-key")
	sim, _ := replayLog(t, text, "per-key", log, "fixed_window")
	if sim.Accepted != reached || sim.Rejected != rejected {
		t.Errorf("gateway: %d reached the upstream, %d rejected; replay of its log (keys logged): accepted %d, rejected %d",
			reached, rejected, sim.Accepted, sim.Rejected)
	}
}
