package proxy

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestInformationalKeepsGatewayHeaders sends a 103 Early Hints before the
// final answer. ReverseProxy clears the response header map after passing a
// 1xx on, so the final answer must still get the limit fields and the
// request id the gateway set before forwarding.
func TestInformationalKeepsGatewayHeaders(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		w.Header().Set("X-Upstream", "yes")
		w.Write([]byte("ok"))
	}))
	defer up.Close()
	srv, _ := newTestGateway(t, `
routes:
  - name: hinted
    match: {path_prefix: /}
    upstream: %s
    limits:
      - {algorithm: fixed_window, limit: 5, window: 1m, key: [ip]}
`, up.URL)
	req, _ := http.NewRequest("GET", srv.URL+"/page", nil)
	req.Header.Set("X-Request-Id", "hinted-1")
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("got status %d, want 200", resp.StatusCode)
	}
	for k, want := range map[string]string{
		"X-Upstream":            "yes",
		"X-Request-Id":          "hinted-1",
		"Ratelimit-Policy":      `"hinted#1";q=5;w=60`,
		"X-Ratelimit-Limit":     "5",
		"X-Ratelimit-Remaining": "4",
	} {
		if got := resp.Header.Values(k); len(got) != 1 || got[0] != want {
			t.Errorf("%s: got %q, want [%q]", k, got, want)
		}
	}
	if got := resp.Header.Get("Ratelimit"); got == "" {
		t.Errorf("Ratelimit: got none after a 103")
	}
}
