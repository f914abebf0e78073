package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

// TestReloadInvalidKeepsConfig: a reload of a file that is invalid in
// any way (SPEC §6) returns the error, counts result="error", and leaves
// the running routes serving and their buckets as they were.
func TestReloadInvalidKeepsConfig(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(up.Close)
	good := fmt.Sprintf(`listen: 127.0.0.1:0
admin: 127.0.0.1:0
policies:
  per-all: {algorithm: fixed_window, limit: 1000, window: 1h, key: [global]}
routes:
  - name: api
    upstream: %s
    limits: [per-all]
`, up.URL)
	r := serve(t, good)
	admin, plain := r.url("admin"), r.url("http")
	remaining := func(what string) int64 {
		t.Helper()
		code, _, body := get(t, admin+"/v1/limits?policy=per-all&key=global", "")
		var got struct{ Remaining int64 }
		if code != http.StatusOK || json.Unmarshal([]byte(body), &got) != nil {
			t.Fatalf("%s: /v1/limits got %d %s", what, code, body)
		}
		return got.Remaining
	}
	if code, _, _ := get(t, plain+"/", ""); code != http.StatusNoContent {
		t.Fatalf("before any reload: got %d, want 204", code)
	}
	want := remaining("before any reload")
	for i, tc := range []struct{ name, file string }{
		{"syntax error", good + "routes: [\n"},
		{"unknown field", strings.Replace(good, "upstream:", "upstrem:", 1)},
		{"duplicate field", good + "listen: 127.0.0.1:0\n"},
		{"duplicate route", good + "  - {name: api, upstream: " + up.URL + "}\n"},
		{"unset variable", strings.Replace(good, "limit: 1000", "limit: \"${SLUICE_TEST_UNSET_LIMIT}\"", 1)},
		{"two documents", good + "---\nlisten: 127.0.0.1:0\n"},
		{"byte not UTF-8", good + "# \xff\n"},
		{"policy invalid", strings.Replace(good, "window: 1h", "window: 0s", 1)},
		{"lease on memory", strings.Replace(good, "key: [global]", "key: [global], sync: lease", 1)},
		{"missing file", ""},
	} {
		if tc.file == "" {
			if err := os.Remove(r.path); err != nil {
				t.Fatal(err)
			}
		} else {
			writeFile(t, r.path, tc.file)
		}
		if err := r.Reload(); err == nil {
			t.Fatalf("%s: reload got no error, want one", tc.name)
		}
		if code, _, _ := get(t, plain+"/", ""); code != http.StatusNoContent {
			t.Errorf("%s: after the reload got %d, want 204 from the running route", tc.name, code)
		}
		want--
		if got := remaining(tc.name); got != want {
			t.Errorf("%s: remaining got %d, want %d (the bucket kept)", tc.name, got, want)
		}
		_, _, metrics := get(t, admin+"/metrics", "")
		if got := metricValue(t, metrics, `sluice_config_reloads_total{result="error"}`); got != float64(i+1) {
			t.Errorf("%s: reloads counted as errors got %v, want %d", tc.name, got, i+1)
		}
	}
}
