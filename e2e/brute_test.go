package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"go.yaml.in/yaml/v3"
)

const bruteToken = "e2e-admin-token-7d1f"

// bruteStores runs f once with the memory store and once with a Redis
// store on a real redis-server; store is the config's store section. The
// tests run one at a time, before the parallel ones, so their processes
// do not crowd the timing-sensitive tests that run in parallel.
func bruteStores(t *testing.T, f func(t *testing.T, store string)) {
	t.Run("memory", func(t *testing.T) {
		f(t, "  type: memory")
	})
	t.Run("redis", func(t *testing.T) {
		rs := redistest.Start(t)
		f(t, fmt.Sprintf("  type: redis\n  redis: {addresses: [%q], timeout: 2s}", rs.Addr()))
	})
}

// loginUpstream answers 200 to the password "right" and 401 to any other.
// The recording upstream has read the body already; the password rides in
// a header beside it.
func loginUpstream(t *testing.T) *upstream {
	up := newUpstream(t)
	up.Handle = func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Password") == "right" {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
	}
	return up
}

func loginConfig(store, upstream, extra string) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
admin: 127.0.0.1:0
admin_token: "${SLUICE_ADMIN_TOKEN:-}"
log: {access_log: false}
store:
%s
policies:
  logins:
    algorithm: sliding_window_log
    limit: 3
    window: 1h
    key: [json:username]
    count_status: [401, 403]
    block: 1h
%s
routes:
  - name: login
    match: {path: /login}
    upstream: %s
    limits: [logins]
`, store, extra, upstream)
}

func login(t *testing.T, in *instance, user, password string) *http.Response {
	t.Helper()
	body := fmt.Sprintf(`{"username":%q}`, user)
	resp, _ := do(t, nil, "POST", in.HTTP+"/login", []byte(body), map[string]string{"Content-Type": "application/json", "X-Password": password})
	return resp
}

// TestBruteForceLogin: successful logins never spend the budget; the
// failures that reach the limit start a block that rejects even the right
// password, shows in /v1/limits and the metrics, survives an unchanged
// reload, and is lifted by DELETE with the admin token.
func TestBruteForceLogin(t *testing.T) {
	bruteStores(t, func(t *testing.T, store string) {
		up := loginUpstream(t)
		path := writeConfig(t, loginConfig(store, up.URL, ""))
		in := start(t, path, "SLUICE_ADMIN_TOKEN="+bruteToken)

		for i := range 10 {
			if resp := login(t, in, "alice", "right"); resp.StatusCode != 200 {
				t.Fatalf("successful login %d: got %d, want 200", i, resp.StatusCode)
			}
		}
		for i := range 3 {
			if resp := login(t, in, "alice", "wrong"); resp.StatusCode != 401 {
				t.Fatalf("failed login %d: got %d, want 401", i, resp.StatusCode)
			}
		}
		resp := login(t, in, "alice", "right")
		if resp.StatusCode != 429 {
			t.Fatalf("4th failure's retry: got %d, want 429", resp.StatusCode)
		}
		if ra, _ := strconv.Atoi(resp.Header.Get("Retry-After")); ra < 3590 || ra > 3600 {
			t.Errorf("first rejection: Retry-After %q, want the block's end, about 3600", resp.Header.Get("Retry-After"))
		}
		// Later attempts are rejected by the block, which they do not
		// extend; another user is not affected.
		time.Sleep(1100 * time.Millisecond)
		resp = login(t, in, "alice", "right")
		ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		if resp.StatusCode != 429 || ra > 3599 || ra < 3580 {
			t.Errorf("during the block: got %d Retry-After %q, want 429 pointing at the first block's end", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		if rl := resp.Header.Get("RateLimit"); !strings.Contains(rl, fmt.Sprintf(";t=%d", ra)) {
			t.Errorf("during the block: RateLimit %q, want t=%d", rl, ra)
		}
		if resp := login(t, in, "bob", "right"); resp.StatusCode != 200 {
			t.Errorf("another user: got %d, want 200", resp.StatusCode)
		}
		if got := len(up.Requests()); got != 14 {
			t.Errorf("upstream saw %d requests, want 14 (10 + 3 for alice, 1 for bob)", got)
		}

		// An unchanged reload keeps the block.
		in.Signal(syscall.SIGHUP)
		waitMetric(t, in.Admin, `sluice_config_reloads_total{result="success"}`, 1)
		if resp := login(t, in, "alice", "right"); resp.StatusCode != 429 {
			t.Errorf("after an unchanged reload: got %d, want 429", resp.StatusCode)
		}

		limits := in.Admin + "/v1/limits?policy=logins&key=alice"
		_, body := do(t, nil, "GET", limits, nil, nil)
		var l struct {
			Remaining      int64 `json:"remaining"`
			BlockedSeconds int64 `json:"blocked_seconds"`
		}
		if err := json.Unmarshal(body, &l); err != nil || l.BlockedSeconds < 3500 || l.BlockedSeconds > 3600 {
			t.Errorf("GET /v1/limits: got %s, want blocked_seconds near 3600", body)
		}

		m := scrape(t, in.Admin)
		for name, want := range map[string]float64{
			`sluice_ratelimit_refunds_total{policy="logins",route="login"}`:                                                    11,
			`sluice_ratelimit_decisions_total{algorithm="sliding_window_log",policy="logins",result="rejected",route="login"}`: 1,
			`sluice_ratelimit_decisions_total{algorithm="sliding_window_log",policy="logins",result="blocked",route="login"}`:  2,
		} {
			if m[name] != want {
				t.Errorf("%s: got %v, want %v", name, m[name], want)
			}
		}

		// DELETE needs the token, which no answer shows.
		resp, body = do(t, nil, "DELETE", limits, nil, nil)
		if resp.StatusCode != 401 || resp.Header.Get("WWW-Authenticate") != "Bearer" {
			t.Errorf("DELETE without a token: got %d %q, want 401 with WWW-Authenticate: Bearer", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
		}
		resp, body = do(t, nil, "DELETE", limits, nil, map[string]string{"Authorization": "Bearer wrong"})
		if resp.StatusCode != 401 || strings.Contains(string(body), bruteToken) {
			t.Errorf("DELETE with a wrong token: got %d %s, want 401", resp.StatusCode, body)
		}
		resp, _ = do(t, nil, "DELETE", in.Admin+"/v1/limits?policy=nope&key=alice", nil, map[string]string{"Authorization": "Bearer " + bruteToken})
		if resp.StatusCode != 404 {
			t.Errorf("DELETE of an unknown policy: got %d, want 404", resp.StatusCode)
		}
		resp, _ = do(t, nil, "DELETE", limits, nil, map[string]string{"Authorization": "Bearer " + bruteToken})
		if resp.StatusCode != 204 {
			t.Fatalf("DELETE: got %d, want 204", resp.StatusCode)
		}
		if resp := login(t, in, "alice", "right"); resp.StatusCode != 200 {
			t.Errorf("after DELETE: got %d, want 200", resp.StatusCode)
		}
		for _, l := range in.logs.Lines() {
			if strings.Contains(l, bruteToken) {
				t.Errorf("log line shows the admin token: %s", l)
			}
		}
		if _, body := do(t, nil, "GET", in.Admin+"/metrics", nil, nil); strings.Contains(string(body), bruteToken) {
			t.Errorf("metrics show the admin token")
		}
	})
}

// TestBruteForcePatientGuesserIsNotBlocked: a block starts with a refusal
// (SPEC section 8: "when this limit rejects a request"), not when the
// budget runs out, as the README's walk-through says: a guesser that stops
// when RateLimit shows r=0 and waits until X-RateLimit-Reset is never
// blocked and gets limit guesses a window; one more attempt while the
// budget is spent starts the block.
func TestBruteForcePatientGuesserIsNotBlocked(t *testing.T) {
	up := newUpstream(t)
	var reached atomic.Int64
	up.Handle = func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		w.WriteHeader(http.StatusUnauthorized)
	}
	in := start(t, writeConfig(t, fmt.Sprintf(`listen: 127.0.0.1:0
admin: 127.0.0.1:0
log: {access_log: false}
policies:
  logins:
    algorithm: sliding_window_log
    limit: 3
    window: 2s
    key: [json:username]
    count_status: [401]
    block: 1h
routes:
  - name: login
    match: {path: /login}
    upstream: %s
    limits: [logins]
`, up.URL)))
	for round := range 2 {
		var resp *http.Response
		for i := 0; i == 0 || !strings.Contains(resp.Header.Get("RateLimit"), ";r=0;"); i++ {
			if resp = login(t, in, "frank", "guess"); resp.StatusCode != 401 || i == 3 {
				t.Fatalf("round %d, attempt %d: got %d RateLimit %q, want 401 and r=0 by the 3rd", round, i, resp.StatusCode, resp.Header.Get("RateLimit"))
			}
		}
		reset, err := strconv.Atoi(resp.Header.Get("X-RateLimit-Reset"))
		if err != nil || reset < 1 || reset > 2 {
			t.Fatalf("round %d: X-RateLimit-Reset %q, want the window, 2s or less", round, resp.Header.Get("X-RateLimit-Reset"))
		}
		if _, body := do(t, nil, "GET", in.Admin+"/v1/limits?policy=logins&key=frank", nil, nil); strings.Contains(string(body), "blocked_seconds") {
			t.Errorf("round %d: got %s, want no block before a refusal", round, body)
		}
		time.Sleep(time.Duration(reset)*time.Second + 50*time.Millisecond)
	}
	if got := reached.Load(); got != 6 {
		t.Errorf("the patient guesser reached the upstream %d times, want 6 (3 a window, never blocked)", got)
	}
	login(t, in, "frank", "guess")
	login(t, in, "frank", "guess")
	login(t, in, "frank", "guess")
	resp := login(t, in, "frank", "guess")
	if ra, _ := strconv.Atoi(resp.Header.Get("Retry-After")); resp.StatusCode != 429 || ra < 3590 {
		t.Errorf("an attempt past the limit: got %d Retry-After %q, want 429 and the hour's block", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}

// TestBruteForceNoAdminToken: without admin_token, DELETE is refused.
func TestBruteForceNoAdminToken(t *testing.T) {
	up := loginUpstream(t)
	in := start(t, writeConfig(t, loginConfig("  type: memory", up.URL, "")))
	resp, _ := do(t, nil, "DELETE", in.Admin+"/v1/limits?policy=logins&key=alice", nil, map[string]string{"Authorization": "Bearer anything"})
	if resp.StatusCode != 403 {
		t.Errorf("DELETE without admin_token: got %d, want 403", resp.StatusCode)
	}
}

// TestAdminLongKey: a bucket whose key is longer than 256 bytes is kept
// under its digest; /v1/limits reads and resets it by the key values as
// the README says, with either store.
func TestAdminLongKey(t *testing.T) {
	bruteStores(t, func(t *testing.T, store string) {
		up := newUpstream(t)
		cfg := fmt.Sprintf("listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\nadmin_token: \"${SLUICE_ADMIN_TOKEN:-}\"\nstore:\n%s\npolicies:\n  per-key: {algorithm: fixed_window, limit: 1, window: 1h, key: [header:X-API-Key]}\nroutes:\n  - name: api\n    upstream: %s\n    limits: [per-key]\n", store, up.URL)
		in := start(t, writeConfig(t, cfg), "SLUICE_ADMIN_TOKEN="+bruteToken)
		key := strings.Repeat("k", 300)
		call := func() int {
			resp, _ := do(t, nil, "GET", in.HTTP+"/", nil, map[string]string{"X-API-Key": key})
			return resp.StatusCode
		}
		if a, b := call(), call(); a != 200 || b != 429 {
			t.Fatalf("two requests: got %d %d, want 200 429", a, b)
		}
		limits := in.Admin + "/v1/limits?" + url.Values{"policy": {"per-key"}, "key": {key}}.Encode()
		if resp, body := do(t, nil, "GET", limits, nil, nil); resp.StatusCode != 200 || !strings.Contains(string(body), `"remaining":0`) {
			t.Errorf("GET: got %d %s, want the spent bucket", resp.StatusCode, body)
		}
		if resp, _ := do(t, nil, "DELETE", limits, nil, map[string]string{"Authorization": "Bearer " + bruteToken}); resp.StatusCode != 204 {
			t.Fatalf("DELETE: got %d, want 204", resp.StatusCode)
		}
		if got := call(); got != 200 {
			t.Errorf("after DELETE: got %d, want 200", got)
		}
	})
}

// TestBruteForceConcurrentGuesses sends many failing attempts at once
// against a slow upstream: each takes its unit before it is forwarded,
// so exactly limit of them reach it.
func TestBruteForceConcurrentGuesses(t *testing.T) {
	bruteStores(t, func(t *testing.T, store string) {
		up := newUpstream(t)
		var reached atomic.Int64
		up.Handle = func(w http.ResponseWriter, r *http.Request) {
			reached.Add(1)
			time.Sleep(300 * time.Millisecond)
			w.WriteHeader(http.StatusUnauthorized)
		}
		in := start(t, writeConfig(t, loginConfig(store, up.URL, "")))
		var wg sync.WaitGroup
		var mu sync.Mutex
		codes := map[int]int{}
		for range 40 {
			wg.Go(func() {
				resp := login(t, in, "carol", "guess")
				mu.Lock()
				codes[resp.StatusCode]++
				mu.Unlock()
			})
		}
		wg.Wait()
		if got := reached.Load(); got != 3 {
			t.Errorf("upstream reached %d times, want exactly 3 (the limit)", got)
		}
		if codes[401] != 3 || codes[429] != 37 {
			t.Errorf("got statuses %v, want 3 x 401 and 37 x 429", codes)
		}
	})
}

// TestBruteForceClientGoneKeepsUnit: a client that hangs up before the
// answer keeps its unit spent, though the upstream then answers with a
// status count_status does not list.
func TestBruteForceClientGoneKeepsUnit(t *testing.T) {
	bruteStores(t, func(t *testing.T, store string) {
		up := newUpstream(t)
		arrived := make(chan struct{}, 1)
		up.Handle = func(w http.ResponseWriter, r *http.Request) {
			if strings.Contains(r.Header.Get("X-Slow"), "1") {
				arrived <- struct{}{}
				time.Sleep(500 * time.Millisecond)
			}
			w.WriteHeader(http.StatusOK)
		}
		in := start(t, writeConfig(t, loginConfig(store, up.URL, "")))
		// The client gives up once the upstream has the request, so the
		// unit is certainly taken: a fixed 100ms let a loaded machine
		// give up before sluice had decided it.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		go func() {
			select {
			case <-arrived:
				cancel()
			case <-ctx.Done():
			}
		}()
		req, _ := http.NewRequestWithContext(ctx, "POST", in.HTTP+"/login", strings.NewReader(`{"username":"dave"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Slow", "1")
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			t.Fatalf("slow request: got %d, want the client to give up", resp.StatusCode)
		}
		// Once the upstream has answered, the unit is still taken.
		time.Sleep(700 * time.Millisecond)
		_, body := do(t, nil, "GET", in.Admin+"/v1/limits?policy=logins&key=dave", nil, nil)
		if !strings.Contains(string(body), `"remaining":2`) {
			t.Errorf("after the client went away: got %s, want remaining 2", body)
		}
		// An answered 200 gives its unit back.
		if resp := login(t, in, "dave", "x"); resp.StatusCode != 200 {
			t.Fatalf("got %d, want 200", resp.StatusCode)
		}
		_, body = do(t, nil, "GET", in.Admin+"/v1/limits?policy=logins&key=dave", nil, nil)
		if !strings.Contains(string(body), `"remaining":2`) {
			t.Errorf("after a 200: got %s, want remaining still 2", body)
		}
	})
}

// TestBruteForceSlowSuccessBuysNoGuess: a success that takes its time
// gives back exactly its token, not one the bucket refilled meanwhile.
// token_bucket 2 per 8s (a token each 4s): a slow login that succeeds
// after 5s is out while its token would have refilled; a failure comes
// in then. Once the success is given back, the bucket must hold what it
// would without the success: room for one more failure, not two.
func TestBruteForceSlowSuccessBuysNoGuess(t *testing.T) {
	bruteStores(t, func(t *testing.T, store string) {
		up := newUpstream(t)
		var failures atomic.Int64
		up.Handle = func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Password") == "right" {
				time.Sleep(5 * time.Second)
				w.WriteHeader(http.StatusOK)
				return
			}
			failures.Add(1)
			w.WriteHeader(http.StatusUnauthorized)
		}
		in := start(t, writeConfig(t, fmt.Sprintf(`listen: 127.0.0.1:0
admin: 127.0.0.1:0
log: {access_log: false}
store:
%s
policies:
  guesses:
    algorithm: token_bucket
    limit: 2
    window: 8s
    key: [header:X-User]
    count_status: [401]
routes:
  - name: login
    match: {path: /login}
    upstream: %s
    limits: [guesses]
`, store, up.URL)))
		try := func(password string) int {
			resp, _ := do(t, nil, "POST", in.HTTP+"/login", nil, map[string]string{"X-User": "mallory", "X-Password": password})
			return resp.StatusCode
		}
		began := time.Now()
		slow := make(chan int, 1)
		go func() { slow <- try("right") }()
		time.Sleep(4300 * time.Millisecond)
		// Held while it is out: the token has not refilled.
		if _, body := do(t, nil, "GET", in.Admin+"/v1/limits?policy=guesses&key=mallory", nil, nil); !strings.Contains(string(body), `"remaining":1`) {
			t.Errorf("while the slow login is out: got %s, want remaining 1", body)
		}
		first := time.Since(began)
		if got := try("guess"); got != 401 {
			t.Fatalf("first guess: got %d, want 401", got)
		}
		if got := <-slow; got != 200 {
			t.Fatalf("slow login: got %d, want 200", got)
		}
		codes := map[int]int{}
		for range 3 {
			codes[try("guess")]++
		}
		// Without the success, the bucket has one token from the
		// first guess's on, and a second once that guess's token has
		// refilled, 4s after it: the guesses came well before.
		if late := time.Since(began) - first; late > 3800*time.Millisecond {
			t.Skipf("the guesses came %v after the first, too late to tell one token from two on this machine", late)
		}
		if codes[401] != 1 || codes[429] != 2 || failures.Load() != 2 {
			t.Errorf("after the success was given back: got %v (%d guesses reached the upstream), want one 401, two 429 (2 reached it)", codes, failures.Load())
		}
	})
}

// TestBruteForceOverrides: a partner key gets its own bucket and numbers,
// shown in the headers; a monitoring network is exempt.
func TestBruteForceOverrides(t *testing.T) {
	bruteStores(t, func(t *testing.T, store string) {
		up := newUpstream(t)
		in := start(t, writeConfig(t, fmt.Sprintf(`listen: 127.0.0.1:0
admin: 127.0.0.1:0
log: {access_log: false}
trusted_proxies: [127.0.0.1]
store:
%s
policies:
  api:
    algorithm: fixed_window
    limit: 2
    window: 1h
    key: [header:X-API-Key]
    overrides:
      - keys: ["${PARTNER_KEY}"]
        limit: 5
      - clients: [203.0.113.0/24]
        exempt: true
routes:
  - name: api
    match: {path_prefix: /}
    upstream: %s
    limits: [api]
`, store, up.URL)), "PARTNER_KEY=partner-1")
		send := func(key, client string) *http.Response {
			resp, _ := do(t, nil, "GET", in.HTTP+"/x", nil, map[string]string{"X-API-Key": key, "X-Forwarded-For": client})
			return resp
		}
		count := func(key, client string, n int) (ok int, last *http.Response) {
			for range n {
				last = send(key, client)
				if last.StatusCode == 200 {
					ok++
				}
			}
			return ok, last
		}
		if ok, last := count("someone", "198.51.100.1", 4); ok != 2 || last.Header.Get("RateLimit-Policy") != `"api";q=2;w=3600` {
			t.Errorf("default: got %d admitted, policy %q; want 2 and q=2", ok, last.Header.Get("RateLimit-Policy"))
		}
		ok, last := count("partner-1", "198.51.100.1", 7)
		if ok != 5 || last.StatusCode != 429 {
			t.Errorf("partner: got %d admitted, want 5", ok)
		}
		if got := last.Header.Get("RateLimit-Policy"); got != `"api";q=5;w=3600` {
			t.Errorf("partner RateLimit-Policy: got %q, want q=5", got)
		}
		if got := last.Header.Get("X-RateLimit-Limit"); got != "5" {
			t.Errorf("partner X-RateLimit-Limit: got %q, want 5", got)
		}
		_, body := do(t, nil, "GET", in.Admin+"/v1/limits?policy=api&key=partner-1", nil, nil)
		if !strings.Contains(string(body), `"limit":5,"remaining":0`) {
			t.Errorf("partner bucket: got %s, want limit 5, remaining 0", body)
		}
		// The exempt network is never limited, even with a spent key.
		ok, last = count("someone", "203.0.113.9", 10)
		if ok != 10 || last.Header.Get("RateLimit") != "" {
			t.Errorf("exempt: got %d admitted, RateLimit %q; want 10 and no header", ok, last.Header.Get("RateLimit"))
		}
		m := scrape(t, in.Admin)
		if got := m[`sluice_ratelimit_decisions_total{algorithm="fixed_window",policy="api",result="exempt",route="api"}`]; got != 10 {
			t.Errorf("exempt decisions: got %v, want 10", got)
		}
	})
}

// TestBruteForceSharedThroughRedis: two instances on one Redis see the
// same block and the same give-back.
func TestBruteForceSharedThroughRedis(t *testing.T) {
	rs := redistest.Start(t)
	up := loginUpstream(t)
	path := writeConfig(t, loginConfig(fmt.Sprintf("  type: redis\n  redis: {addresses: [%q], timeout: 2s}", rs.Addr()), up.URL, ""))
	a, b := start(t, path), start(t, path)
	// Two failures on a, a success on b: the success gives its unit back
	// in Redis, so b's third failure is still admitted, and a sees it.
	login(t, a, "erin", "wrong")
	login(t, a, "erin", "wrong")
	if resp := login(t, b, "erin", "right"); resp.StatusCode != 200 {
		t.Fatalf("success on b: got %d, want 200", resp.StatusCode)
	}
	if resp := login(t, b, "erin", "wrong"); resp.StatusCode != 401 {
		t.Fatalf("third failure on b: got %d, want 401 (the success was given back)", resp.StatusCode)
	}
	if resp := login(t, a, "erin", "right"); resp.StatusCode != 429 {
		t.Fatalf("over the limit on a: got %d, want 429", resp.StatusCode)
	}
	// The block a started holds on b.
	resp := login(t, b, "erin", "right")
	if ra, _ := strconv.Atoi(resp.Header.Get("Retry-After")); resp.StatusCode != 429 || ra < 3500 {
		t.Errorf("on b during a's block: got %d Retry-After %q, want 429 near 3600", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	mb := scrape(t, b.Admin)
	if got := mb[`sluice_ratelimit_decisions_total{algorithm="sliding_window_log",policy="logins",result="blocked",route="login"}`]; got != 1 {
		t.Errorf("b's blocked decisions: got %v, want 1", got)
	}
}

// TestValidateCountStatusOnLeakyBucket names the field at fault.
func TestValidateCountStatusOnLeakyBucket(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, `policies:
  shaped:
    algorithm: leaky_bucket
    limit: 10
    window: 1s
    key: [ip]
    count_status: [401]
routes:
  - {name: r, upstream: "http://127.0.0.1:9", limits: [shaped]}
`)
	out, err := runValidate(path)
	if err == nil || !strings.Contains(out, path+":7:19: policies.shaped.count_status: not allowed on leaky_bucket") {
		t.Errorf("validate: got %v\n%s\nwant an error at 7:19", err, out)
	}
}

// readmeLoginConfig returns the yaml block of the README's login and OTP
// walk-through.
func readmeLoginConfig(t *testing.T) string {
	t.Helper()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## Protecting login and OTP endpoints\n")
	if !ok {
		t.Fatal("README has no section Protecting login and OTP endpoints")
	}
	_, block, ok := strings.Cut(section, "\n```yaml\n")
	block, _, closed := strings.Cut(block, "\n```\n")
	if !ok || !closed {
		t.Fatal("the section has no yaml block")
	}
	return block
}

// TestREADMELoginRecipeHoldsInAnyWindow: the walk-through's table promises
// each of its policies' limits per window ("30 failures an hour per
// address", "20 sends an hour"), and a guesser does not wait for the turn
// of the hour: it sends a limit's worth just before one window ends and
// another just before the next ends, which fixed_window and
// sliding_window_counter both admit (twice the limit in one window). The
// simulator, which replays the gateway's own steps, must find no window
// of any policy with more than its limit.
func TestREADMELoginRecipeHoldsInAnyWindow(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, readmeLoginConfig(t))
	var cfg struct {
		Policies map[string]struct {
			Algorithm string        `yaml:"algorithm"`
			Limit     int64         `yaml:"limit"`
			Window    time.Duration `yaml:"window"`
		} `yaml:"policies"`
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &cfg); err != nil || len(cfg.Policies) == 0 {
		t.Fatalf("reading the walk-through's policies: %v", err)
	}
	for name, p := range cfg.Policies {
		at := fmt.Sprintf("%d@%s,%d@%s", p.Limit, p.Window-time.Second, p.Limit, 2*p.Window-2*time.Second)
		out, err := exec.Command(binary, "simulate", "-config", path, "-policy", name, "-at", at, "-format", "json").Output()
		if err != nil {
			t.Fatalf("simulate %s: %v", name, err)
		}
		var rows []struct {
			Algorithm string `json:"algorithm"`
			Peak      int64  `json:"peak"`
		}
		if err := json.Unmarshal(out, &rows); err != nil {
			t.Fatalf("simulate %s: %v\n%s", name, err, out)
		}
		found := false
		for _, r := range rows {
			if r.Algorithm != p.Algorithm {
				continue
			}
			found = true
			if r.Peak > p.Limit {
				t.Errorf("%s (%s, %d per %s): -at %q admits %d in one window, want at most %d", name, p.Algorithm, p.Limit, p.Window, at, r.Peak, p.Limit)
			}
		}
		if !found {
			t.Errorf("%s: simulate printed no row for %s:\n%s", name, p.Algorithm, out)
		}
	}
}

func runValidate(path string) (string, error) {
	out, err := exec.Command(binary, "validate", "-config", path).CombinedOutput()
	return string(out), err
}

// TestValidateREADMELoginConfig keeps the README's login and OTP
// walk-through a configuration sluice accepts.
func TestValidateREADMELoginConfig(t *testing.T) {
	t.Parallel()
	block := readmeLoginConfig(t)
	for _, want := range []string{"count_status:", "block:", "overrides:", "admin_token:", "json:username", "json:phone", "key: [ip]"} {
		if !strings.Contains(block, want) {
			t.Errorf("the walk-through config lacks %q", want)
		}
	}
	if out, err := runValidate(writeConfig(t, block)); err != nil {
		t.Errorf("validate the README's config: %v\n%s", err, out)
	}
}

// TestBruteForceGatewayStatuses: a status sluice answers itself, here 502
// for an unreachable upstream, is compared with count_status like any
// other.
func TestBruteForceGatewayStatuses(t *testing.T) {
	dead := "http://" + closedPort(t)
	for _, tc := range []struct {
		name, counted string
		want          []int
	}{
		{"listed", "[502]", []int{502, 502, 429}},
		{"not listed", "[401]", []int{502, 502, 502, 502}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := start(t, writeConfig(t, fmt.Sprintf(`listen: 127.0.0.1:0
admin: 127.0.0.1:0
log: {access_log: false}
routes:
  - name: r
    upstream: %s
    limits:
      - {algorithm: fixed_window, limit: 2, window: 1h, key: [global], count_status: %s}
`, dead, tc.counted)))
			for i, want := range tc.want {
				if resp, _ := do(t, nil, "GET", in.HTTP+"/", nil, nil); resp.StatusCode != want {
					t.Errorf("request %d: got %d, want %d", i, resp.StatusCode, want)
				}
			}
		})
	}
}
