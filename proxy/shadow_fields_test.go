package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestShadowOnlyRouteKeepsUpstreamLimitFields: shadow limits appear in no
// response header (SPEC §4), so a route whose limits are all shadow sets
// no rate-limit field of its own, and the upstream's pass as they would
// without the limit: turning a policy on in shadow mode to watch it must
// not change what clients get.
func TestShadowOnlyRouteKeepsUpstreamLimitFields(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Ratelimit-Remaining", "41")
		w.Header().Set("Ratelimit", `"app";r=41;t=10`)
	}))
	defer up.Close()
	srv, _ := newTestGateway(t, `
routes:
  - name: watched
    match: {path_prefix: /watched}
    upstream: %[1]s
    limits:
      - {algorithm: fixed_window, limit: 1000, window: 1h, key: [ip], shadow: true}
  - name: limited
    upstream: %[1]s
    limits:
      - {algorithm: fixed_window, limit: 1000, window: 1h, key: [ip]}
`, up.URL)
	get := func(path string) http.Header {
		resp, err := testClient.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.Header
	}
	h := get("/watched")
	for name, want := range map[string]string{"Ratelimit": `"app";r=41;t=10`, "X-Ratelimit-Remaining": "41"} {
		if got := h.Get(name); got != want {
			t.Errorf("shadow-only route: %s: got %q, want the upstream's %q", name, got, want)
		}
	}
	h = get("/limited")
	if got := h.Values("Ratelimit"); len(got) != 1 || got[0] == `"app";r=41;t=10` {
		t.Errorf("limited route: Ratelimit: got %q, want sluice's alone", got)
	}
}
