package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestUpstreamTrailerFieldsNotKept: an upstream's rate-limit fields and
// X-Request-Id sent as trailers reach the client no more than those in
// its header do. ReverseProxy adds the trailers to the header map, after
// the gateway's own values of the same fields, and net/http sends what
// the map holds under an announced name as the trailer: the client got
// `X-RateLimit-Remaining: 4, 999` and the upstream's RateLimit beside
// sluice's. Both forwarding paths are tried: the direct one (a GET with
// no body) and ReverseProxy's transport (a POST with one).
func TestUpstreamTrailerFieldsNotKept(t *testing.T) {
	t.Parallel()
	up := newTrailerUpstream(t)
	srv, _ := newTestGateway(t, trailerRoutes, up.url())
	for _, method := range []string{"GET", "POST"} {
		for _, path := range []string{"/limited", "/shadowed"} {
			t.Run(method+path, func(t *testing.T) {
				var body io.Reader
				if method == "POST" {
					body = strings.NewReader("{}")
				}
				req, _ := http.NewRequest(method, srv.URL+path, body)
				resp, err := testClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if got := resp.Trailer.Get("X-Upstream"); got != "yes" {
					t.Errorf("trailer X-Upstream %q, want the upstream's other trailers passed", got)
				}
				for _, k := range []string{"X-Request-Id", http.TrailerPrefix + "X-Request-Id"} {
					if got := resp.Trailer.Values(k); len(got) != 0 {
						t.Errorf("trailer %s %q, want none", k, got)
					}
				}
				got := resp.Trailer.Values("X-Ratelimit-Remaining")
				if path == "/shadowed" {
					// A route of shadow limits alone passes the
					// upstream's limit fields, trailers too.
					if len(got) != 1 || got[0] != "999" {
						t.Errorf("trailer X-Ratelimit-Remaining %q, want the upstream's [999]", got)
					}
					return
				}
				if len(got) != 0 {
					t.Errorf("trailer X-Ratelimit-Remaining %q, want none", got)
				}
				if got := resp.Trailer.Values("Ratelimit"); len(got) != 0 {
					t.Errorf("trailer Ratelimit %q, want none", got)
				}
				if got := resp.Header.Values("X-Ratelimit-Remaining"); len(got) != 1 || got[0] != "4" && got[0] != "3" {
					t.Errorf("header X-Ratelimit-Remaining %q, want sluice's alone", got)
				}
			})
		}
	}
}

// newTrailerUpstream answers every request with a chunked "ok" whose
// trailers hold rate-limit fields, an X-Request-Id and a field of its own.
func newTrailerUpstream(t *testing.T) *rawUpstream {
	const chunked = "HTTP/1.1 200 OK\r\nTrailer: X-Ratelimit-Remaining, Ratelimit, X-Upstream\r\nTransfer-Encoding: chunked\r\n\r\n" +
		"2\r\nok\r\n0\r\nX-Ratelimit-Remaining: 999\r\nRatelimit: \"up\";r=999;t=1\r\nX-Upstream: yes\r\nX-Request-Id: upstream-trailer\r\n\r\n"
	return newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		for answer(c, br, chunked) {
		}
	})
}

// trailerRoutes puts the trailer upstream (%[1]s) behind a limited route
// and one whose only limit is a shadow.
const trailerRoutes = `
routes:
  - name: limited
    match: {path_prefix: /limited}
    upstream: %[1]s
    limits:
      - {algorithm: fixed_window, limit: 5, window: 1m, key: [ip]}
  - name: shadowed
    match: {path_prefix: /shadowed}
    upstream: %[1]s
    limits:
      - {algorithm: fixed_window, limit: 5, window: 1m, key: [ip], shadow: true}
`
