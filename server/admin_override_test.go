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
// lifts its block". A consumer a clients: override matched (the office
// NAT) is blocked in the override's bucket; support's DELETE with the key
// /v1/limits takes must lift that block, and a 204 that leaves the
// consumer blocked is an unlock that did not happen.
//   - by ip: README's own login-per-ip shape (key [ip]); the office
//     address's bucket is the override's, and GET must show its block.
//   - by username: a policy that does not key on ip (login-per-user), so
//     the key alone does not name the override's bucket.
func TestAdminReachesClientsOverrideBucket(t *testing.T) {
	for _, tc := range []struct {
		name, policy, algorithm, key, body, value string
		getShowsBlock                             bool
	}{
		{"by ip", "login-per-ip", "sliding_window_counter", "ip", `{}`, "127.0.0.1", true},
		{"by username", "login-per-user", "sliding_window_log", "json:username", `{"username":"alice"}`, "alice", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Run("memory", func(t *testing.T) {
				adminClientsOverride(t, "memory", tc.policy, tc.algorithm, tc.key, tc.body, tc.value, tc.getShowsBlock)
			})
			t.Run("redis", func(t *testing.T) {
				rs := redistest.Start(t)
				store := fmt.Sprintf("redis\n  redis: {addresses: [%q], timeout: 2s}", rs.Addr())
				adminClientsOverride(t, store, tc.policy, tc.algorithm, tc.key, tc.body, tc.value, tc.getShowsBlock)
			})
		})
	}
}

func adminClientsOverride(t *testing.T, store, policy, algorithm, key, body, value string, getShowsBlock bool) {
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
  %s:
    algorithm: %s
    limit: 1
    window: 1h
    key: [%s]
    count_status: [401, 403]
    block: 1h
    overrides:
      - clients: [127.0.0.0/8]   # the office NAT
        limit: 2
routes:
  - name: login
    match: {path: /login}
    upstream: %s
    limits: [%s]
`, store, policy, algorithm, key, up.URL, policy))
	post := func() int {
		resp, err := client.Post(r.url("http")+"/login", "application/json", strings.NewReader(body))
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
	limits := r.url("admin") + "/v1/limits?policy=" + policy + "&key=" + value
	if getShowsBlock {
		if _, _, got := get(t, limits, ""); !strings.Contains(got, "blocked_seconds") {
			t.Errorf("GET /v1/limits for the blocked consumer: got %s, want blocked_seconds in it", strings.TrimSpace(got))
		}
	}
	req, _ := http.NewRequest("DELETE", limits, nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE: got %d, want 204", resp.StatusCode)
	}
	if c := post(); c != http.StatusUnauthorized {
		t.Errorf("after DELETE of %s's bucket: got %d, want 401 from the upstream (block lifted)", value, c)
	}
}
