package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestExemptChargesNothingOverrideBucketApart: SPEC §8: an exempt
// override "does not limit or charge that request", and "an override's
// bucket is separate from the default one of the same key". One key is
// sent from an exempt network, from an overridden one and from elsewhere:
// the exempt requests leave the default bucket whole and carry no limit
// fields, and the override's requests spend a bucket of their own.
func TestExemptChargesNothingOverrideBucketApart(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(up.Close)
	srv := newStoppedClockGateway(t, `
trusted_proxies: [127.0.0.1]
policies:
  api:
    algorithm: fixed_window
    limit: 2
    window: 1h
    key: [header:X-Key]
    overrides:
      - clients: [203.0.113.0/24]
        exempt: true
      - clients: [198.51.100.0/24]
        limit: 3
routes:
  - name: api
    upstream: `+up.URL+`
    limits: [api]
`)
	send := func(client string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+"/x", nil)
		req.Header.Set("X-Key", "k")
		req.Header.Set("X-Forwarded-For", client)
		resp, err := testClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	admitted := func(client string, n int) (ok int) {
		for range n {
			if send(client).StatusCode == http.StatusOK {
				ok++
			}
		}
		return ok
	}
	for i := range 5 {
		resp := send("203.0.113.9")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("exempt request %d: got %d, want 200", i+1, resp.StatusCode)
		}
		for _, f := range []string{"RateLimit", "RateLimit-Policy", "X-RateLimit-Limit", "X-RateLimit-Remaining"} {
			if v := resp.Header.Get(f); v != "" {
				t.Errorf("exempt request %d: %s %q, want none", i+1, f, v)
			}
		}
	}
	resp := send("192.0.2.1")
	if got, want := resp.Header.Get("RateLimit"), `"api";r=1;t=`; resp.StatusCode != http.StatusOK || len(got) < len(want) || got[:len(want)] != want {
		t.Errorf("first request from elsewhere after 5 exempt ones: got %d RateLimit %q, want 200 and r=1 (nothing charged)", resp.StatusCode, got)
	}
	if got := admitted("192.0.2.1", 3); got != 1 {
		t.Errorf("default bucket: got %d more admitted, want 1", got)
	}
	// The default bucket of k is spent; the override's is its own.
	resp = send("198.51.100.7")
	if got, want := resp.Header.Get("RateLimit-Policy"), `"api";q=3;w=3600`; got != want {
		t.Errorf("override: RateLimit-Policy got %q, want %q", got, want)
	}
	if got, want := resp.Header.Get("RateLimit"), `"api";r=2;t=`; resp.StatusCode != http.StatusOK || len(got) < len(want) || got[:len(want)] != want {
		t.Errorf("override's first request: got %d RateLimit %q, want 200 and r=2", resp.StatusCode, got)
	}
	if got := admitted("198.51.100.7", 3); got != 2 {
		t.Errorf("override bucket: got %d more admitted, want 2", got)
	}
	if got := admitted("203.0.113.9", 3); got != 3 {
		t.Errorf("exempt after both buckets are spent: got %d admitted, want 3", got)
	}
}
