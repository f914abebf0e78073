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

// TestAdminUnlocksEveryBucketOfKey: SPEC §8: DELETE "resets that bucket to
// fresh and lifts its block". Support unlocks a customer by the key
// /v1/limits takes; a customer whose requests a clients: override
// matched, on a policy that does not key on ip (login-per-user for the
// office NAT), is blocked in the override's bucket, which the key alone
// does not name. A 204 that leaves the customer blocked is an unlock that
// did not happen.
func TestAdminUnlocksEveryBucketOfKey(t *testing.T) {
	t.Run("memory", func(t *testing.T) { adminUnlocksOverrideBucket(t, "memory") })
	t.Run("redis", func(t *testing.T) {
		rs := redistest.Start(t)
		adminUnlocksOverrideBucket(t, fmt.Sprintf("redis\n  redis: {addresses: [%q], timeout: 2s}", rs.Addr()))
	})
}

func adminUnlocksOverrideBucket(t *testing.T, store string) {
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
  login-per-user:
    algorithm: sliding_window_log
    limit: 1
    window: 1h
    key: [json:username]
    count_status: [401, 403]
    block: 1h
    overrides:
      - clients: [127.0.0.0/8]   # the office NAT
        limit: 2
routes:
  - name: login
    match: {path: /login}
    upstream: %s
    limits: [login-per-user]
`, store, up.URL))
	post := func() int {
		resp, err := client.Post(r.url("http")+"/login", "application/json", strings.NewReader(`{"username":"alice"}`))
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
	req, _ := http.NewRequest("DELETE", r.url("admin")+"/v1/limits?policy=login-per-user&key=alice", nil)
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
		t.Errorf("after DELETE of alice's bucket: got %d, want 401 from the upstream (block lifted)", c)
	}
}
