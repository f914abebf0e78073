package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestReloadKeepsOverrideBuckets: adding or removing an override entry
// leaves the buckets of the other entries as they were (SPEC §6, §8):
// a consumer whose override did not change keeps its spent budget and
// its block, wherever its entry now stands in the list.
func TestReloadKeepsOverrideBuckets(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(up.Close)
	config := func(overrides string) string {
		return fmt.Sprintf(`listen: 127.0.0.1:0
admin: 127.0.0.1:0
policies:
  per-key:
    algorithm: fixed_window
    limit: 1000
    window: 1h
    block: 1h
    key: [query:k]
    overrides:
%s
routes:
  - name: api
    upstream: %s
    limits: [per-key]
`, overrides, up.URL)
	}
	const partner = "      - {keys: [partner], limit: 1}\n"
	r := serve(t, config(partner))
	admin, plain := r.url("admin"), r.url("http")
	check := func(when string) {
		t.Helper()
		if code, _, _ := get(t, plain+"/?k=partner", ""); code != http.StatusTooManyRequests {
			t.Errorf("%s: got %d, want 429 (the partner's block kept)", when, code)
		}
		code, _, body := get(t, admin+"/v1/limits?policy=per-key&key=partner", "")
		var got struct {
			Limit, Remaining, BlockedSeconds int64 `json:",omitempty"`
		}
		if code != http.StatusOK || json.Unmarshal([]byte(body), &got) != nil {
			t.Fatalf("%s: /v1/limits got %d %s", when, code, body)
		}
		if !strings.Contains(body, `"blocked_seconds"`) || got.Limit != 1 || got.Remaining != 0 {
			t.Errorf("%s: /v1/limits got %s, want limit 1, remaining 0 and blocked_seconds", when, body)
		}
	}
	for i, want := range []int{http.StatusNoContent, http.StatusTooManyRequests} {
		if code, _, _ := get(t, plain+"/?k=partner", ""); code != want {
			t.Fatalf("partner request %d: got %d, want %d", i+1, code, want)
		}
	}
	check("before any reload")
	for _, tc := range []struct{ name, overrides string }{
		{"an exempt entry added before", "      - {clients: [192.0.2.0/24], exempt: true}\n" + partner},
		{"another partner added before", "      - {keys: [other], limit: 5}\n      - {clients: [192.0.2.0/24], exempt: true}\n" + partner},
		{"the entries before removed", partner},
	} {
		writeFile(t, r.path, config(tc.overrides))
		if err := r.Reload(); err != nil {
			t.Fatalf("%s: reload: %v", tc.name, err)
		}
		check("after " + tc.name)
	}
}
