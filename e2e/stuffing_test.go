package e2e

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// failingLogins is an upstream that answers every login 401 and counts
// the guesses it had to check.
func failingLogins(t *testing.T) (*upstream, *atomic.Int64) {
	up := newUpstream(t)
	var checked atomic.Int64
	up.Handle = func(w http.ResponseWriter, r *http.Request) {
		checked.Add(1)
		w.WriteHeader(http.StatusUnauthorized)
	}
	return up, &checked
}

// stuffingConfig is the README walk-through's pair of login limits, per
// account and per client, with small numbers.
func stuffingConfig(upstream, extra string) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
admin: 127.0.0.1:0
log: {access_log: false}
%s
policies:
  login-per-user:
    algorithm: sliding_window_log
    limit: 3
    window: 15m
    key: [json:username]
    count_status: [401, 403]
    block: 1h
  login-per-ip:
    algorithm: sliding_window_log
    limit: 5
    window: 1h
    key: [ip]
    count_status: [401, 403]
    block: 1h
routes:
  - name: login
    match: {path: /v1/login, methods: [POST]}
    upstream: %s
    limits: [login-per-user, login-per-ip]
`, extra, upstream)
}

// canBind reports whether the system has the loopback address ip (Linux
// has all of 127.0.0.0/8; others may have 127.0.0.1 alone).
func canBind(ip string) bool {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

// fromAddress is a client whose connections come from the loopback
// address ip.
func fromAddress(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, DialContext: d.DialContext}}
}

func stuff(t *testing.T, c *http.Client, in *instance, user string, header map[string]string) int {
	t.Helper()
	h := map[string]string{"Content-Type": "application/json"}
	for k, v := range header {
		h[k] = v
	}
	resp, _ := do(t, c, "POST", in.HTTP+"/v1/login", []byte(fmt.Sprintf(`{"username":%q}`, user)), h)
	return resp.StatusCode
}

func remaining(t *testing.T, in *instance, policy, key string) string {
	t.Helper()
	_, body := do(t, nil, "GET", in.Admin+"/v1/limits?"+url.Values{"policy": {policy}, "key": {key}}.Encode(), nil, nil)
	return string(body)
}

// TestCredentialStuffing plays both sides of stuffing against the
// walk-through's limits: one address trying many accounts gets exactly the
// per-client limit checked, many addresses (loopback sources) on one
// account exactly the per-account limit; a request one limit refuses
// spends nothing of the other.
func TestCredentialStuffing(t *testing.T) {
	up, checked := failingLogins(t)
	in := start(t, writeConfig(t, stuffingConfig(up.URL, "")))

	codes := map[int]int{}
	for i := range 30 {
		codes[stuff(t, nil, in, fmt.Sprintf("user%d", i), nil)]++
	}
	if codes[401] != 5 || codes[429] != 25 || checked.Load() != 5 {
		t.Errorf("one address, 30 accounts: got %v, %d checked; want 5 x 401, 25 x 429, 5 checked", codes, checked.Load())
	}
	if got := remaining(t, in, "login-per-user", "user20"); !strings.Contains(got, `"remaining":3`) {
		t.Errorf("an account the per-client limit refused: got %s, want its 3 untouched", got)
	}

	if !canBind("127.0.0.2") {
		t.Skip("this system cannot send from 127.0.0.2")
	}
	checked.Store(0)
	codes = map[int]int{}
	for i := range 40 {
		codes[stuff(t, fromAddress(fmt.Sprintf("127.0.0.%d", i+2)), in, "victim", nil)]++
	}
	if codes[401] != 3 || codes[429] != 37 || checked.Load() != 3 {
		t.Errorf("40 addresses, one account: got %v, %d checked; want 3 x 401, 37 x 429, 3 checked", codes, checked.Load())
	}
	if got := remaining(t, in, "login-per-ip", "127.0.0.30"); !strings.Contains(got, `"remaining":5`) {
		t.Errorf("an address the per-account limit refused: got %s, want its 5 untouched", got)
	}
}

// TestForwardedClientRotation: behind a trusted proxy that appends the
// address it saw, a client's own X-Forwarded-For elements buy it no
// budget; an IPv6 client is one client however it spells or rotates its
// address within its /64, an IPv4-mapped address is the IPv4 one, and each
// /64 of a /48 is a client of its own, as the README says.
func TestForwardedClientRotation(t *testing.T) {
	up, checked := failingLogins(t)
	in := start(t, writeConfig(t, stuffingConfig(up.URL, "trusted_proxies: [127.0.0.1]")))
	accounts := 0 // every attempt on an account of its own: only login-per-ip limits
	try := func(n int, xff func(i int) string) map[int]int {
		codes := map[int]int{}
		for i := range n {
			accounts++
			codes[stuff(t, nil, in, fmt.Sprintf("account%d", accounts), map[string]string{"X-Forwarded-For": xff(i)})]++
		}
		return codes
	}
	for _, tc := range []struct {
		name    string
		n       int
		xff     func(i int) string
		checked int64
	}{
		{"spoofed elements before the proxy's", 12, func(i int) string { return fmt.Sprintf("198.51.100.%d, 192.0.2.50", i) }, 5},
		{"addresses of one /64", 12, func(i int) string { return fmt.Sprintf("2001:db8:1:2::%x", i+1) }, 5},
		// The /64 the last case blocked.
		{"one /64 spelled otherwise", 4, func(i int) string {
			return []string{"2001:DB8:1:2:0:0:0:99", "[2001:db8:1:2::7]:443", "2001:0db8:0001:0002::1", "[2001:db8:1:2::8]"}[i]
		}, 0},
		{"IPv4 and IPv4-mapped", 12, func(i int) string { return []string{"192.0.2.7", "::ffff:192.0.2.7"}[i%2] }, 5},
		{"4 /64s of one /48", 24, func(i int) string { return fmt.Sprintf("2001:db8:7:%x::1", i%4) }, 20},
	} {
		checked.Store(0)
		codes := try(tc.n, tc.xff)
		if got := checked.Load(); got != tc.checked || codes[401] != int(tc.checked) {
			t.Errorf("%s: got %v, %d checked; want %d checked", tc.name, codes, got, tc.checked)
		}
	}
	if got := remaining(t, in, "login-per-ip", "2001:db8:1:2::/64"); !strings.Contains(got, `"blocked_seconds"`) {
		t.Errorf("the /64: got %s, want it blocked", got)
	}
}
