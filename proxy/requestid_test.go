package proxy

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestRequestIDOnceWhenUpstreamEchoes checks that the response carries one
// X-Request-Id, the one sent upstream, when the upstream echoes it as
// many frameworks do.
func TestRequestIDOnceWhenUpstreamEchoes(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-Id", r.Header.Get("X-Request-Id"))
		w.Header().Add("X-Request-Id", "upstream-own")
	}))
	defer up.Close()
	srv, _ := newTestGateway(t, benchConfig, up.URL)
	for _, tc := range []struct{ name, path, sent string }{
		{"client id, plain route", "/plain", "abc-123"},
		{"client id, limited route", "/limited", "abc-123"},
		{"generated id, plain route", "/plain", ""},
		{"generated id, limited route", "/limited", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", srv.URL+tc.path, nil)
			if tc.sent != "" {
				req.Header.Set("X-Request-Id", tc.sent)
			}
			resp, err := testClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			got := resp.Header.Values("X-Request-Id")
			if len(got) != 1 || got[0] == "" || got[0] == "upstream-own" || (tc.sent != "" && got[0] != tc.sent) {
				t.Errorf("X-Request-Id: got %q, want exactly one, the id sent upstream (%q when the client sent one)", got, tc.sent)
			}
		})
	}
}
