package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestKeySources checks that every key source separates consumers: with
// limit 1, a second request with the same key value is rejected and one
// with another value passes.
func TestKeySources(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	jsonType := map[string]string{"Content-Type": "application/json"}
	type req struct {
		header map[string]string
		path   string
		body   string
		method string
	}
	cases := []struct {
		name       string
		key        string
		same, diff req
	}{
		{"ip", "ip", req{}, req{}},
		{"header", "header:X-API-Key", req{header: map[string]string{"X-API-Key": "k1"}}, req{header: map[string]string{"X-API-Key": "k2"}}},
		{"query", "query:user", req{path: "?user=u1"}, req{path: "?user=u2"}},
		{"cookie", "cookie:session", req{header: map[string]string{"Cookie": "session=s1"}}, req{header: map[string]string{"Cookie": "session=s2"}}},
		{"json", "json:phone", req{header: jsonType, body: `{"phone":"+15550100"}`}, req{header: jsonType, body: `{"phone":"+15550101"}`}},
		{"nested", "json:user.id", req{header: jsonType, body: `{"user":{"id":7}}`}, req{header: jsonType, body: `{"user":{"id":8}}`}},
		{"method", "method", req{method: "POST"}, req{method: "PUT"}},
		{"path", "path", req{path: "/a"}, req{path: "/b"}},
		{"composite", "header:X-Tenant, ip", req{header: map[string]string{"X-Tenant": "t1"}}, req{header: map[string]string{"X-Tenant": "t2"}}},
		{"global", "global", req{}, req{}},
		{"route", "route", req{}, req{}},
	}
	var b strings.Builder
	fmt.Fprintf(&b, "listen: 127.0.0.1:0\nadmin: \"\"\nroutes:\n")
	for _, tc := range cases {
		fmt.Fprintf(&b, "  - name: %s\n    match: {path_prefix: /%s}\n    upstream: %s\n    limits:\n      - {algorithm: fixed_window, limit: 1, window: 1h, key: [%s]}\n", tc.name, tc.name, up.URL, tc.key)
	}
	in := start(t, writeConfig(t, b.String()))
	send := func(name string, r req) int {
		method := r.method
		if method == "" {
			method = "POST"
		}
		var body []byte
		if r.body != "" {
			body = []byte(r.body)
		}
		resp, _ := do(t, nil, method, in.HTTP+"/"+name+r.path, body, r.header)
		return resp.StatusCode
	}
	for _, tc := range cases {
		if got := send(tc.name, tc.same); got != 200 {
			t.Errorf("%s first: got %d, want 200", tc.name, got)
		}
		if got := send(tc.name, tc.same); got != 429 {
			t.Errorf("%s same key again: got %d, want 429", tc.name, got)
		}
		want := 200
		if tc.name == "ip" || tc.name == "global" || tc.name == "route" {
			want = 429 // one client, one route: there is no other value to send
		}
		if got := send(tc.name, tc.diff); got != want {
			t.Errorf("%s other key: got %d, want %d", tc.name, got, want)
		}
	}
	// A request without the key source is limited too, under the empty value.
	if got := send("header", req{}); got != 200 {
		t.Errorf("header absent first: got %d, want 200", got)
	}
	if got := send("header", req{}); got != 429 {
		t.Errorf("header absent again: got %d, want 429", got)
	}
}

// TestJSONBodyForwardedByteForByte checks that reading json: keys leaves the
// body the upstream receives untouched, small or beyond the 64 KiB read.
func TestJSONBodyForwardedByteForByte(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
admin: ""
routes:
  - name: otp
    upstream: %s
    limits:
      - {algorithm: sliding_window_log, limit: 100, window: 1m, key: [json:phone]}
`, up.URL)
	in := start(t, writeConfig(t, cfg))
	small := []byte("{ \"phone\" : \"+15550100\",\n  \"x\": [1, 2.50, \"\\u00e9\"] }")
	big := append([]byte(`{"phone":"+1","pad":"`), bytes.Repeat([]byte("a"), 100<<10)...)
	big = append(big, `"}`...)
	for _, body := range [][]byte{small, big} {
		if resp, _ := do(t, nil, "POST", in.HTTP+"/otp", body, map[string]string{"Content-Type": "application/json"}); resp.StatusCode != 200 {
			t.Fatalf("POST: got %d, want 200", resp.StatusCode)
		}
	}
	reqs := up.Requests()
	if !bytes.Equal(reqs[0].Body, small) {
		t.Errorf("small body: got %q, want %q", reqs[0].Body, small)
	}
	if !bytes.Equal(reqs[1].Body, big) {
		t.Errorf("large body: got %d bytes, want %d identical bytes", len(reqs[1].Body), len(big))
	}
}

var (
	reRateLimit = regexp.MustCompile(`^"otp-per-phone";r=(\d+);t=(\d+), "per-ip-hourly";r=(\d+);t=(\d+)$`)
)

// TestRateLimitContract checks the headers and bodies of 200 and 429 on a
// route with a named and a shadow and an inline limit.
func TestRateLimitContract(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	up.Handle = func(w http.ResponseWriter, r *http.Request) {
		// An upstream's own rate-limit fields never reach the client.
		w.Header().Set("X-RateLimit-Limit", "999")
		w.Header().Set("RateLimit", `"upstream";r=1;t=1`)
		w.WriteHeader(201)
	}
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
admin: ""
policies:
  otp-per-phone:
    algorithm: sliding_window_log
    limit: 3
    window: 10m
    key: [json:phone]
  per-ip-hourly:
    algorithm: fixed_window
    limit: 1000
    window: 1h
    key: [ip]
  shadow-tight:
    algorithm: token_bucket
    limit: 1
    window: 1h
    key: [ip]
    shadow: true
routes:
  - name: otp
    match: {path: /v1/otp, methods: [POST]}
    upstream: %s
    limits: [otp-per-phone, shadow-tight, per-ip-hourly]
  - name: orders
    match: {path_prefix: /v1/orders}
    upstream: %s
    limits:
      - {algorithm: token_bucket, limit: 2, window: 1m, key: [header:X-API-Key]}
`, up.URL, up.URL)
	in := start(t, writeConfig(t, cfg))
	body := []byte(`{"phone":"+15550100"}`)
	for i := range 3 {
		resp, _ := do(t, nil, "POST", in.HTTP+"/v1/otp", body, map[string]string{"Content-Type": "application/json"})
		if resp.StatusCode != 201 {
			t.Fatalf("request %d: got %d, want 201", i, resp.StatusCode)
		}
		if got, want := resp.Header.Get("RateLimit-Policy"), `"otp-per-phone";q=3;w=600, "per-ip-hourly";q=1000;w=3600`; got != want {
			t.Errorf("RateLimit-Policy: got %q, want %q", got, want)
		}
		m := reRateLimit.FindStringSubmatch(resp.Header.Get("RateLimit"))
		if m == nil {
			t.Fatalf("RateLimit: got %q, want two items", resp.Header.Get("RateLimit"))
		}
		if r, _ := strconv.Atoi(m[1]); r != 2-i {
			t.Errorf("request %d: otp r: got %d, want %d", i, r, 2-i)
		}
		if r, _ := strconv.Atoi(m[3]); r != 999-i {
			t.Errorf("request %d: per-ip r: got %d, want %d", i, r, 999-i)
		}
		if got, want := resp.Header.Get("X-RateLimit-Limit"), "3"; got != want {
			t.Errorf("X-RateLimit-Limit: got %q, want %q", got, want)
		}
		if got, want := resp.Header.Get("X-RateLimit-Remaining"), strconv.Itoa(2-i); got != want {
			t.Errorf("X-RateLimit-Remaining: got %q, want %q", got, want)
		}
		if got := resp.Header.Values("RateLimit"); len(got) != 1 {
			t.Errorf("RateLimit fields: got %q, want sluice's alone", got)
		}
	}
	resp, b := do(t, nil, "POST", in.HTTP+"/v1/otp", body, map[string]string{"Content-Type": "application/json"})
	if resp.StatusCode != 429 {
		t.Fatalf("4th: got %d, want 429", resp.StatusCode)
	}
	if got := resp.Header.Get("Content-Type"); got != "application/problem+json" {
		t.Errorf("429 Content-Type: got %q", got)
	}
	retry, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	if retry < 599 || retry > 600 {
		t.Errorf("Retry-After: got %q, want 600 (the oldest OTP leaves the 10m window)", resp.Header.Get("Retry-After"))
	}
	if got := resp.Header.Get("X-RateLimit-Retry-After"); got != resp.Header.Get("Retry-After") {
		t.Errorf("X-RateLimit-Retry-After: got %q, want %q", got, resp.Header.Get("Retry-After"))
	}
	m := reRateLimit.FindStringSubmatch(resp.Header.Get("RateLimit"))
	if m == nil || m[1] != "0" {
		t.Fatalf("429 RateLimit: got %q", resp.Header.Get("RateLimit"))
	}
	if tt, _ := strconv.Atoi(m[2]); tt > retry {
		t.Errorf("Retry-After %d is earlier than t=%d", retry, tt)
	}
	// The rejected request consumed nothing from per-ip-hourly.
	if m[3] != "997" {
		t.Errorf("per-ip r after the 429: got %s, want 997", m[3])
	}
	var p struct {
		Type       string `json:"type"`
		Title      string `json:"title"`
		Status     int    `json:"status"`
		Detail     string `json:"detail"`
		Policy     string `json:"policy"`
		RetryAfter int    `json:"retry_after"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatalf("429 body %s: %v", b, err)
	}
	if p.Type != "about:blank" || p.Title != "Too Many Requests" || p.Status != 429 || p.Policy != "otp-per-phone" || p.RetryAfter != retry || p.Detail == "" {
		t.Errorf("429 body: got %+v", p)
	}
	if n := len(up.Requests()); n != 3 {
		t.Errorf("upstream: got %d requests, want 3", n)
	}

	// Inline policies are named ROUTE#N.
	for i, want := range []int{201, 201, 429} {
		resp, b := do(t, nil, "GET", in.HTTP+"/v1/orders", nil, map[string]string{"X-API-Key": "k"})
		if resp.StatusCode != want {
			t.Errorf("orders %d: got %d, want %d", i, resp.StatusCode, want)
		}
		if got, want := resp.Header.Get("RateLimit-Policy"), `"orders#1";q=2;w=60`; got != want {
			t.Errorf("orders RateLimit-Policy: got %q, want %q", got, want)
		}
		if want == 429 && !strings.Contains(string(b), `"policy":"orders#1"`) {
			t.Errorf("orders 429 body: got %s", b)
		}
	}
}
