package server

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestAdminReachesClientsOverrideBucket: SPEC §8: "DELETE
// /v1/limits?policy=NAME&key=VALUE ... resets that bucket to fresh and
// lifts its block". With README's own login-per-ip shape (key [ip], a
// clients: override for the office NAT, block), the office address's
// bucket is the override's. Support's DELETE with that key must lift its
// block; GET must show it.
func TestAdminReachesClientsOverrideBucket(t *testing.T) {
	t.Run("memory", func(t *testing.T) { adminClientsOverride(t, "memory") })
	t.Run("redis", func(t *testing.T) {
		rs := redistest.Start(t)
		adminClientsOverride(t, fmt.Sprintf("redis\n  redis: {addresses: [%q], timeout: 2s}", rs.Addr()))
	})
}

func adminClientsOverride(t *testing.T, store string) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
	}))
	t.Cleanup(up.Close)
	r := serve(t, fmt.Sprintf(`listen: 127.0.0.1:0
admin: 127.0.0.1:0
admin_token: tok
store:
  type: %s
policies:
  login-per-ip:
    algorithm: sliding_window_counter
    limit: 1
    window: 1h
    key: [ip]
    count_status: [401, 403]
    block: 1h
    overrides:
      - clients: [127.0.0.0/8]   # the office NAT
        limit: 2
routes:
  - name: login
    match: {path: /login}
    upstream: %s
    limits: [login-per-ip]
`, store, up.URL))
	post := func() int {
		resp, err := client.Post(r.url("http")+"/login", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for i := range 2 {
		if c := post(); c != http.StatusUnauthorized {
			t.Fatalf("failure %d: got %d, want 401", i+1, c)
		}
	}
	if c := post(); c != http.StatusTooManyRequests {
		t.Fatalf("third failure: got %d, want 429 (starts the block)", c)
	}
	_, _, body := get(t, r.url("admin")+"/v1/limits?policy=login-per-ip&key=127.0.0.1", "")
	if !strings.Contains(body, "blocked_seconds") {
		t.Errorf("GET /v1/limits for the blocked office address: got %s, want blocked_seconds in it", strings.TrimSpace(body))
	}
	req, _ := http.NewRequest("DELETE", r.url("admin")+"/v1/limits?policy=login-per-ip&key=127.0.0.1", nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE: got %d, want 204", resp.StatusCode)
	}
	if c := post(); c == http.StatusTooManyRequests {
		t.Errorf("after DELETE of the office address's bucket: got 429, want the block lifted (401 from the upstream)")
	}
}
