package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// scrape returns the admin listener's metrics as "name{labels}" -> value,
// labels in the order exported.
func scrape(t *testing.T, admin string) map[string]float64 {
	t.Helper()
	resp, err := client.Get(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out
}

func TestMetricsCountKnownTraffic(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
admin: 127.0.0.1:0
policies:
  tight:
    algorithm: fixed_window
    limit: 2
    window: 1h
    key: [header:X-API-Key]
  watch:
    algorithm: token_bucket
    limit: 1
    window: 1h
    key: [header:X-API-Key]
    shadow: true
  shaping:
    algorithm: leaky_bucket
    limit: 2
    window: 1s
    queue: 10
    key: [global]
routes:
  - name: api
    match: {path_prefix: /api}
    upstream: %s
    limits: [tight, watch]
  - name: queued
    match: {path_prefix: /queued}
    upstream: %s
    limits: [shaping]
  - name: broken
    match: {path_prefix: /broken}
    upstream: http://%s
`, up.URL, up.URL, closedPort(t))
	in := start(t, writeConfig(t, cfg))
	key := map[string]string{"X-API-Key": "k"}
	for range 3 { // allowed+allowed (shadow: allowed, then shadow_rejected), then rejected
		do(t, nil, "GET", in.HTTP+"/api", nil, key)
	}
	// 1 at once, 3 wait: the 500ms interval leaves a loaded machine room to
	// spread the four arrivals without letting the first's slot pass.
	codes, took := burst(t, in.HTTP+"/queued", 4, nil)
	for _, c := range codes {
		if c != 200 {
			t.Fatalf("queued: got %d, want 200", c)
		}
	}
	do(t, nil, "GET", in.HTTP+"/broken", nil, nil)
	do(t, nil, "GET", in.HTTP+"/nowhere", nil, nil)

	m := scrape(t, in.Admin)
	want := map[string]float64{
		`sluice_ratelimit_decisions_total{algorithm="fixed_window",policy="tight",result="allowed",route="api"}`:         2,
		`sluice_ratelimit_decisions_total{algorithm="fixed_window",policy="tight",result="rejected",route="api"}`:        1,
		`sluice_ratelimit_decisions_total{algorithm="token_bucket",policy="watch",result="allowed",route="api"}`:         1,
		`sluice_ratelimit_decisions_total{algorithm="token_bucket",policy="watch",result="shadow_rejected",route="api"}`: 1,
		`sluice_ratelimit_decisions_total{algorithm="leaky_bucket",policy="shaping",result="allowed",route="queued"}`:    1,
		`sluice_ratelimit_decisions_total{algorithm="leaky_bucket",policy="shaping",result="queued",route="queued"}`:     3,
		`sluice_http_requests_total{code="200",route="api"}`:                                                             2,
		`sluice_http_requests_total{code="429",route="api"}`:                                                             1,
		`sluice_http_requests_total{code="200",route="queued"}`:                                                          4,
		`sluice_http_requests_total{code="502",route="broken"}`:                                                          1,
		`sluice_http_requests_total{code="404",route="(unmatched)"}`:                                                     1,
		`sluice_upstream_errors_total{kind="refused",route="broken"}`:                                                    1,
		`sluice_ratelimit_queue_wait_seconds_count{policy="shaping"}`:                                                    3,
		`sluice_ratelimit_queue_depth{policy="shaping"}`:                                                                 0,
		`sluice_http_request_duration_seconds_count{route="api"}`:                                                        3,
		`sluice_ratelimit_keys{policy="tight"}`:                                                                          1,
	}
	for k, v := range want {
		if got, ok := m[k]; !ok || got != v {
			t.Errorf("%s: got %v (present %v), want %v", k, got, ok, v)
		}
	}
	// The waits sum to what the gateway measured for each request, as its
	// access log says (to the microsecond), and no wait is longer than the
	// request took at the client. The waits themselves hold whatever delay
	// a loaded machine added to the departures, so they are bounded by
	// what the requests took rather than by the schedule alone.
	var logged float64
	var lines int
	deadline := time.Now().Add(5 * time.Second)
	for lines < 3 && time.Now().Before(deadline) {
		logged, lines = 0, 0
		for _, l := range in.logs.Lines() {
			var e struct {
				Route string  `json:"route"`
				Wait  float64 `json:"queue_wait_ms"`
			}
			if json.Unmarshal([]byte(l), &e) == nil && e.Route == "queued" && e.Wait > 0 {
				logged += e.Wait / 1000
				lines++
			}
		}
		if lines < 3 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	var most time.Duration
	for _, d := range took {
		most += d
	}
	if got := m[`sluice_ratelimit_queue_wait_seconds_sum{policy="shaping"}`]; lines != 3 || math.Abs(got-logged) > 5e-6 || got <= 0 || got > most.Seconds() {
		t.Errorf("queue wait sum: got %v, want the %d logged waits' sum %v, and above 0 and at most the requests' %v", got, lines, logged, most)
	}
	for k := range m {
		if strings.Contains(k, `"k"`) {
			t.Errorf("a consumer key leaked into a label: %s", k)
		}
	}

	// /v1/limits reads a bucket without consuming it.
	for range 2 {
		resp, body := do(t, nil, "GET", in.Admin+"/v1/limits?policy=tight&key=k", nil, nil)
		var l map[string]any
		json.Unmarshal(body, &l)
		if resp.StatusCode != 200 || l["remaining"] != float64(0) || l["limit"] != float64(2) || l["algorithm"] != "fixed_window" || l["key"] != "k" {
			t.Errorf("/v1/limits: got %d %s", resp.StatusCode, body)
		}
	}
	resp, body := do(t, nil, "GET", in.Admin+"/v1/limits?policy=tight&key=fresh", nil, nil)
	if !strings.Contains(string(body), `"remaining":2`) {
		t.Errorf("/v1/limits fresh key: got %d %s", resp.StatusCode, body)
	}
	if resp, _ := do(t, nil, "GET", in.Admin+"/v1/limits?policy=nope&key=k", nil, nil); resp.StatusCode != 404 || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("unknown policy: got %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if resp, body := do(t, nil, "GET", in.Admin+p, nil, nil); resp.StatusCode != 200 || !strings.Contains(string(body), `"ok"`) {
			t.Errorf("%s: got %d %s", p, resp.StatusCode, body)
		}
	}

	// One access log line per request, with the rejecting policy and no key.
	line, ok := in.WaitLog(5*time.Second, `"msg":"request"`, `"status":429`)
	if !ok {
		t.Fatalf("no access log line for the 429")
	}
	var entry map[string]any
	if err := json.Unmarshal([]byte(line), &entry); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"time", "request_id", "route", "method", "path", "status", "duration_ms", "client_ip"} {
		if _, ok := entry[k]; !ok {
			t.Errorf("access log line lacks %q: %s", k, line)
		}
	}
	if entry["rejected_by"] != "tight" || entry["route"] != "api" {
		t.Errorf("access log: got %s, want route api rejected_by tight", line)
	}
	if strings.Contains(line, "keys") {
		t.Errorf("access log carries keys without log_keys: %s", line)
	}
	if _, ok := in.WaitLog(time.Second, `"msg":"request"`, `"upstream":"`+strings.TrimPrefix(up.URL, "http://")+`"`); !ok {
		t.Errorf("no access log line names the upstream")
	}
}

func TestReloadKeepsStateAndSurvivesBadConfig(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	cfg := func(limit int, extra string) string {
		return fmt.Sprintf(`listen: 127.0.0.1:0
admin: 127.0.0.1:0
policies:
  kept:
    algorithm: fixed_window
    limit: 3
    window: 1h
    key: [global]
  changed:
    algorithm: fixed_window
    limit: %d
    window: 1h
    key: [global]
routes:
  - name: kept
    match: {path_prefix: /kept}
    upstream: %s
    limits: [kept]
  - name: changed
    match: {path_prefix: /changed}
    upstream: %s
    limits: [changed]
%s`, limit, up.URL, up.URL, extra)
	}
	path := writeConfig(t, cfg(3, ""))
	in := start(t, path)
	for range 2 {
		do(t, nil, "GET", in.HTTP+"/kept", nil, nil)
		do(t, nil, "GET", in.HTTP+"/changed", nil, nil)
	}
	// An invalid file keeps the running configuration.
	os.WriteFile(path, []byte(cfg(3, "  - name: bad\n    upstream: ftp://x\n")), 0o600)
	in.Signal(syscall.SIGHUP)
	waitMetric(t, in.Admin, `sluice_config_reloads_total{result="error"}`, 1)
	if resp, _ := do(t, nil, "GET", in.HTTP+"/kept", nil, nil); resp.StatusCode != 200 || resp.Header.Get("RateLimit") != `"kept";r=0;t=`+resp.Header.Get("X-RateLimit-Reset") {
		t.Errorf("after a bad reload: got %d RateLimit %q, want 200 and the 3rd of 3", resp.StatusCode, resp.Header.Get("RateLimit"))
	}
	// A valid one applies; the unchanged policy keeps its count.
	os.WriteFile(path, []byte(cfg(5, "")), 0o600)
	in.Signal(syscall.SIGHUP)
	waitMetric(t, in.Admin, `sluice_config_reloads_total{result="success"}`, 1)
	if resp, _ := do(t, nil, "GET", in.HTTP+"/kept", nil, nil); resp.StatusCode != 429 {
		t.Errorf("kept after reload: got %d, want 429 (its 3 requests are remembered)", resp.StatusCode)
	}
	resp, _ := do(t, nil, "GET", in.HTTP+"/changed", nil, nil)
	if got := resp.Header.Get("RateLimit-Policy"); got != `"changed";q=5;w=3600` {
		t.Errorf("changed policy: got %q", got)
	}
	if got := resp.Header.Get("X-RateLimit-Remaining"); got != "4" {
		t.Errorf("changed policy remaining: got %s, want 4 (new settings start fresh)", got)
	}
}

func waitMetric(t *testing.T, admin, name string, want float64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		if scrape(t, admin)[name] == want {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s never reached %v", name, want)
}

func TestShutdownDrainsInFlight(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	arrived := make(chan struct{}, 1)
	up.Handle = func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		time.Sleep(500 * time.Millisecond)
		w.Write([]byte("done"))
	}
	in := start(t, writeConfig(t, fmt.Sprintf("listen: 127.0.0.1:0\nadmin: \"\"\nshutdown_timeout: 5s\nroutes:\n  - name: r\n    upstream: %s\n", up.URL)))
	var wg sync.WaitGroup
	var code int
	wg.Go(func() {
		resp, body := do(t, nil, "GET", in.HTTP+"/", nil, nil)
		if string(body) != "done" {
			t.Errorf("in-flight body: got %q", body)
		}
		code = resp.StatusCode
	})
	// In flight once the upstream has it: a fixed pause let a loaded
	// machine signal before sluice had the request.
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the request did not reach the upstream within 10s")
	}
	in.Signal(syscall.SIGTERM)
	wg.Wait()
	<-in.exited
	if code != 200 || in.err != nil {
		t.Errorf("got status %d and exit %v, want 200 and 0", code, in.err)
	}
}
