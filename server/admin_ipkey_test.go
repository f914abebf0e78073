package server

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// TestAdminClientAddressKey: SPEC §5 makes /v1/limits's VALUE the
// bucket's key values, and the ip source keys an IPv6 client by its /64
// and an IPv4-mapped one as IPv4 (SPEC §2). The access log names the
// client by its address, which is what an operator pastes: a GET that
// answers a fresh budget and a DELETE that answers 204 for a bucket no
// request could have made would say a blocked client is free while it
// stays blocked. Such a VALUE is 400, naming the value the key holds;
// that value reaches the client's bucket.
func TestAdminClientAddressKey(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(up.Close)
	r := serve(t, fmt.Sprintf(`listen: 127.0.0.1:0
admin: 127.0.0.1:0
admin_token: tok
trusted_proxies: [127.0.0.1]
policies:
  per-ip: {algorithm: fixed_window, limit: 1, window: 1h, key: [ip], block: 1h}
  per-ip-path: {algorithm: fixed_window, limit: 1000, window: 1h, key: [path, ip]}
routes:
  - name: api
    upstream: %s
    limits: [per-ip, per-ip-path]
`, up.URL))
	send := func(xff string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", r.url("http")+"/x", nil)
		req.Header.Set("X-Forwarded-For", xff)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	admin := func(method, policy, key string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, r.url("admin")+"/v1/limits?policy="+policy+"&key="+url.QueryEscape(key), nil)
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct{ client, asKey string }{
		{"2001:db8:1:2::5", "2001:db8:1:2::/64"},
		{"::ffff:192.0.2.7", "192.0.2.7"},
	} {
		if code := send(tc.client); code != http.StatusOK {
			t.Fatalf("%s: first request got %d, want 200", tc.client, code)
		}
		if code := send(tc.client); code != http.StatusTooManyRequests {
			t.Fatalf("%s: second request got %d, want 429", tc.client, code)
		}
		for _, q := range []struct{ method, policy, key string }{
			{"GET", "per-ip", tc.client},
			{"DELETE", "per-ip", tc.client},
			{"GET", "per-ip-path", "/x|" + tc.client},
		} {
			code, body := admin(q.method, q.policy, q.key)
			if code != http.StatusBadRequest || !strings.Contains(body, `\"`+strings.ReplaceAll(q.key, tc.client, tc.asKey)+`\"`) {
				t.Errorf("%s %s key %q: got %d %s, want 400 naming %q", q.method, q.policy, q.key, code, body, strings.ReplaceAll(q.key, tc.client, tc.asKey))
			}
		}
		if code := send(tc.client); code != http.StatusTooManyRequests {
			t.Fatalf("%s: after the refused DELETE got %d, want 429 (still blocked)", tc.client, code)
		}
		if code, body := admin("GET", "per-ip", tc.asKey); code != http.StatusOK || !strings.Contains(body, `"blocked_seconds"`) {
			t.Errorf("GET %q: got %d %s, want 200 showing the block", tc.asKey, code, body)
		}
		if code, body := admin("DELETE", "per-ip", tc.asKey); code != http.StatusNoContent {
			t.Errorf("DELETE %q: got %d %s, want 204", tc.asKey, code, body)
		}
		if code := send(tc.client); code != http.StatusOK {
			t.Errorf("%s: after DELETE %q got %d, want 200", tc.client, tc.asKey, code)
		}
	}
}
