package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// closedPort returns a loopback address nothing listens on for the rest of
// the test: a socket bound to it and never listening holds the port, so a
// connection to it is refused, and no other process (go test runs packages
// side by side) can take the port and answer in its place.
func closedPort(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
}

func TestValidateExampleConfig(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(binary, "validate", "-config", "../config.example.yaml").CombinedOutput()
	if err != nil {
		t.Fatalf("validate config.example.yaml: %v\n%s", err, out)
	}
}

// TestValidateUsageExitsOne: validate exits 0 or 1 and nothing else, as
// SPEC §1 says, a flag it does not know or an argument too many included.
func TestValidateUsageExitsOne(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"validate", "-bogus"}, {"validate", "-config", "../config.example.yaml", "extra"}} {
		err := exec.Command(binary, args...).Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Errorf("sluice %s: got %v, want exit status 1", strings.Join(args, " "), err)
		}
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, `listen: ":8080"
policies:
  p:
    algorithm: token_bucket
    limit: 0
    window: 1m
    key: [ip]
routes:
  - name: r
    upstream: http://127.0.0.1:1
    limits: [p, nope]
    bogus: 1
`)
	cmd := exec.Command(binary, "validate", "-config", path)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("exit: got %v, want exit status 1", err)
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("got %d problems, want 3:\n%s", len(lines), stderr.String())
	}
	for i, want := range []string{path + ":5:12: policies.p.limit: ", path + ":11:17: routes[0].limits[1]: ", path + ":12:5: routes[0].bogus: "} {
		if !strings.HasPrefix(lines[i], want) {
			t.Errorf("line %d: got %q, want prefix %q", i, lines[i], want)
		}
	}
}

// TestValidateRefusesWhatCannotBeCounted runs validate on policies whose
// arithmetic overflowed (and then rejected every request) or that a store
// would round: each is a problem at its field.
func TestValidateRefusesWhatCannotBeCounted(t *testing.T) {
	t.Parallel()
	const path = "../routes/testdata/bad_spans.yaml"
	cmd := exec.Command(binary, "validate", "-config", path)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("exit: got %v, want exit status 1", err)
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	want := []string{
		path + ":6:12: policies.daily-shaping.queue: ",
		path + ":12:12: policies.yearly.burst: ",
		path + ":16:12: policies.too-fast.limit: ",
		path + ":24:15: policies.no-wait.max_wait: ",
		path + ":30:12: policies.no-burst.burst: ",
		path + ":36:12: policies.lockout.block: ",
		path + ":45:9: routes[0].limits[3]: ",
		path + ":48:54: routes[0].limits[6].window: ",
		path + ":49:64: routes[0].limits[7].block: ",
	}
	if len(lines) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%s", len(lines), len(want), stderr.String())
	}
	for i := range want {
		if !strings.HasPrefix(lines[i], want[i]) {
			t.Errorf("line %d: got %q, want prefix %q", i, lines[i], want[i])
		}
	}
}

func TestRoutingAndForwarding(t *testing.T) {
	t.Parallel()
	api, other := newUpstream(t), newUpstream(t)
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
admin: ""
routes:
  - name: v2-only
    match: {host: api.example.com, path_prefix: /v1/items, methods: [POST], headers: {X-Api-Version: "2"}}
    upstream: %[2]s
  - name: items
    match: {host: "*.example.com", path_prefix: /v1/items}
    upstream: %[1]s
    strip_prefix: /v1
  - name: exact
    match: {path: /health}
    upstream: %[1]s
`, api.URL, other.URL)
	in := start(t, writeConfig(t, cfg))

	resp, _ := do(t, nil, "POST", in.HTTP+"/v1/items/7?x=1", []byte("{}"), map[string]string{"Host": "api.example.com", "X-Api-Version": "2"})
	if resp.StatusCode != 200 || len(other.Requests()) != 1 {
		t.Fatalf("v2 POST: got status %d and %d requests at the v2 upstream, want 200 and 1", resp.StatusCode, len(other.Requests()))
	}
	resp, _ = do(t, nil, "GET", in.HTTP+"/v1/items/7?x=1", nil, map[string]string{"Host": "shop.example.com", "X-Request-Id": "abc-123", "X-Forwarded-For": "203.0.113.9"})
	if resp.StatusCode != 200 {
		t.Fatalf("GET items: got status %d, want 200", resp.StatusCode)
	}
	if got := resp.Header.Get("X-Request-Id"); got != "abc-123" {
		t.Errorf("response X-Request-Id: got %q, want abc-123", got)
	}
	reqs := api.Requests()
	if len(reqs) != 1 {
		t.Fatalf("items upstream: got %d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if r.Path != "/items/7" || r.Query != "x=1" {
		t.Errorf("forwarded path: got %s?%s, want /items/7?x=1", r.Path, r.Query)
	}
	// The peer (this test, 127.0.0.1) is not trusted: its X-Forwarded-For
	// claim is replaced by the peer address.
	if got := r.Header.Get("X-Forwarded-For"); got != "127.0.0.1" {
		t.Errorf("X-Forwarded-For: got %q, want 127.0.0.1", got)
	}
	if got := r.Header.Get("X-Forwarded-Host"); got != "shop.example.com" {
		t.Errorf("X-Forwarded-Host: got %q, want shop.example.com", got)
	}
	if got := r.Header.Get("X-Forwarded-Proto"); got != "http" {
		t.Errorf("X-Forwarded-Proto: got %q, want http", got)
	}
	if got := r.Header.Get("X-Request-Id"); got != "abc-123" {
		t.Errorf("upstream X-Request-Id: got %q, want abc-123", got)
	}

	// A request id is made up when the client sends none.
	resp, _ = do(t, nil, "GET", in.HTTP+"/health", nil, nil)
	if id := resp.Header.Get("X-Request-Id"); len(id) != 32 {
		t.Errorf("generated X-Request-Id: got %q, want 32 hex digits", id)
	}
	if got := api.Requests()[1].Header.Get("X-Request-Id"); got != resp.Header.Get("X-Request-Id") {
		t.Errorf("upstream saw request id %q, client got %q", got, resp.Header.Get("X-Request-Id"))
	}
	// Exact path: /health/x is not /health.
	resp, body := do(t, nil, "GET", in.HTTP+"/health/x", nil, nil)
	if resp.StatusCode != 404 || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("unmatched: got %d %s, want 404 application/problem+json", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var p map[string]any
	if err := json.Unmarshal(body, &p); err != nil || p["status"] != float64(404) || p["title"] != "Not Found" {
		t.Errorf("404 body: got %s", body)
	}
	// Host mismatch falls through to no route.
	resp, _ = do(t, nil, "GET", in.HTTP+"/v1/items", nil, map[string]string{"Host": "example.org"})
	if resp.StatusCode != 404 {
		t.Errorf("other host: got %d, want 404", resp.StatusCode)
	}
}

func TestTrustedProxyClientAddress(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
admin: ""
trusted_proxies: [127.0.0.0/8, 10.0.0.0/8]
policies:
  per-ip:
    algorithm: fixed_window
    limit: 1
    window: 1h
    key: [ip]
routes:
  - name: r
    upstream: %s
    limits: [per-ip]
`, up.URL)
	in := start(t, writeConfig(t, cfg))
	// Walk right to left past trusted hops: the client is 198.51.100.7.
	hdr := map[string]string{"X-Forwarded-For": "192.0.2.1, 198.51.100.7, 10.1.2.3"}
	if resp, _ := do(t, nil, "GET", in.HTTP+"/", nil, hdr); resp.StatusCode != 200 {
		t.Fatalf("first: got %d, want 200", resp.StatusCode)
	}
	if resp, _ := do(t, nil, "GET", in.HTTP+"/", nil, map[string]string{"X-Forwarded-For": "198.51.100.7"}); resp.StatusCode != 429 {
		t.Errorf("same client again: got %d, want 429", resp.StatusCode)
	}
	if resp, _ := do(t, nil, "GET", in.HTTP+"/", nil, map[string]string{"X-Forwarded-For": "198.51.100.8"}); resp.StatusCode != 200 {
		t.Errorf("another client: got %d, want 200", resp.StatusCode)
	}
	if got, want := up.Requests()[0].Header.Get("X-Forwarded-For"), "192.0.2.1, 198.51.100.7, 10.1.2.3, 127.0.0.1"; got != want {
		t.Errorf("forwarded X-Forwarded-For: got %q, want %q", got, want)
	}
	if got, want := up.Requests()[0].Header.Get("X-Real-Ip"), "198.51.100.7"; got != want {
		t.Errorf("X-Real-Ip: got %q, want %q", got, want)
	}
}

func TestUpstreamErrors(t *testing.T) {
	t.Parallel()
	slow := newUpstream(t)
	slow.Handle = func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stream" {
			// Headers at once, the body slowly: a started response is
			// never cut by the route timeout.
			w.WriteHeader(200)
			for i := range 3 {
				fmt.Fprintf(w, "chunk %d\n", i)
				w.(http.Flusher).Flush()
				time.Sleep(150 * time.Millisecond)
			}
			return
		}
		time.Sleep(2 * time.Second)
	}
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
admin: ""
routes:
  - name: down
    match: {path_prefix: /down}
    upstream: http://%s
  - name: slow
    match: {path_prefix: /}
    upstream: %s
    timeout: 300ms
`, closedPort(t), slow.URL)
	in := start(t, writeConfig(t, cfg))
	for _, tc := range []struct {
		path   string
		status int
	}{{"/down", 502}, {"/slow", 504}} {
		start := time.Now()
		resp, body := do(t, nil, "GET", in.HTTP+tc.path, nil, nil)
		if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: got %d %q, want %d application/problem+json", tc.path, resp.StatusCode, resp.Header.Get("Content-Type"), tc.status)
		}
		var p map[string]any
		if err := json.Unmarshal(body, &p); err != nil || p["status"] != float64(tc.status) {
			t.Errorf("%s body: got %s", tc.path, body)
		}
		if tc.status == 504 && time.Since(start) > 1500*time.Millisecond {
			t.Errorf("504 took %s, want about the 300ms timeout", time.Since(start))
		}
	}
	resp, body := do(t, nil, "GET", in.HTTP+"/stream", nil, nil)
	if resp.StatusCode != 200 || strings.Count(string(body), "chunk") != 3 {
		t.Errorf("stream: got %d %q, want 200 and 3 chunks", resp.StatusCode, body)
	}
}

func TestRoundRobinSkipsRefusedTarget(t *testing.T) {
	t.Parallel()
	a, b := newUpstream(t), newUpstream(t)
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
admin: ""
routes:
  - name: r
    upstreams: [%s, http://%s, %s]
`, a.URL, closedPort(t), b.URL)
	in := start(t, writeConfig(t, cfg))
	for i := range 6 {
		if resp, _ := do(t, nil, "GET", in.HTTP+"/", nil, nil); resp.StatusCode != 200 {
			t.Fatalf("GET %d: got %d, want 200", i, resp.StatusCode)
		}
	}
	if na, nb := len(a.Requests()), len(b.Requests()); na+nb != 6 || na < 2 || nb < 2 {
		t.Errorf("spread: got %d and %d, want 6 in all, both used", na, nb)
	}
	// A refused connection sent nothing, so a POST moves on too, as
	// nginx's proxy_next_upstream error does, and arrives once.
	for i := range 3 {
		body := []byte(fmt.Sprintf("otp-%d", i))
		if resp, _ := do(t, nil, "POST", in.HTTP+"/", body, nil); resp.StatusCode != 200 {
			t.Errorf("POST %d: got %d, want 200", i, resp.StatusCode)
		}
	}
	var posts []string
	for _, r := range append(a.Requests(), b.Requests()...) {
		if r.Method == "POST" {
			posts = append(posts, string(r.Body))
		}
	}
	sort.Strings(posts)
	if got := strings.Join(posts, " "); got != "otp-0 otp-1 otp-2" {
		t.Errorf("POST bodies the upstreams got: %q, want each once", got)
	}
}
