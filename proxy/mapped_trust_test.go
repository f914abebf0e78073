package proxy

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestMappedTrustedProxies: a trusted_proxies entry written in
// IPv4-mapped form trusts the IPv4 peer it maps, as nginx's and Envoy's
// users expect; before, it never matched, as peers are compared unmapped.
func TestMappedTrustedProxies(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, trusted, want string
	}{
		{"mapped address", `["::ffff:127.0.0.1"]`, "203.0.113.9"},
		{"mapped prefix", `["::ffff:127.0.0.0/104"]`, "203.0.113.9"},
		{"plain address", `["127.0.0.1"]`, "203.0.113.9"},
		{"not trusted", `["::ffff:10.0.0.0/104"]`, "127.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := make(chan string, 1)
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got <- r.Header.Get("X-Real-Ip")
			}))
			t.Cleanup(up.Close)
			srv, _ := newTestGateway(t, `
log: {access_log: false}
trusted_proxies: `+tc.trusted+`
routes:
  - name: any
    upstream: %s
`, up.URL)
			req, _ := http.NewRequest("GET", srv.URL+"/", nil)
			req.Header.Set("X-Forwarded-For", "203.0.113.9")
			resp, err := testClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if rip := <-got; rip != tc.want {
				t.Errorf("upstream got X-Real-IP %q, want %q", rip, tc.want)
			}
		})
	}
}
