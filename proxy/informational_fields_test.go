package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestUpstream1xxFieldsNotKept: the gateway's fields are kept for the
// final answer across a 1xx, after ReverseProxy has copied the 1xx's
// fields into the header map; an upstream's X-RateLimit-* and X-Request-Id
// from a 103 must not reach the final answer beside sluice's, as they do
// not from the upstream's final answer (dropLimitHeaders, dropRequestID).
// An HTTP/1.0 client gets no 1xx at all, and the gateway's fields all the
// same.
func TestUpstream1xxFieldsNotKept(t *testing.T) {
	t.Parallel()
	up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		for answer(c, br, "HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\nX-Ratelimit-Remaining: 999\r\nX-Request-Id: upstream-103\r\n\r\n"+okAnswer) {
		}
	})
	srv, _ := newTestGateway(t, `
routes:
  - name: up
    upstream: %s
    limits:
      - {algorithm: fixed_window, limit: 5, window: 1m, key: [ip]}
`, up.url())
	for _, proto := range []string{"HTTP/1.0", "HTTP/1.1"} {
		t.Run(proto, func(t *testing.T) {
			c, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			io.WriteString(c, "GET / "+proto+"\r\nHost: example.com\r\nConnection: close\r\n\r\n")
			br := bufio.NewReader(c)
			var resp *http.Response
			for {
				if resp, err = http.ReadResponse(br, nil); err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode >= 200 {
					break
				}
				if proto == "HTTP/1.0" {
					// RFC 9110 §15.2: it would take the 103 for the answer.
					t.Errorf("HTTP/1.0 client got a %d", resp.StatusCode)
				}
			}
			resp.Body.Close()
			if v := resp.Header.Values("Ratelimit-Policy"); len(v) != 1 {
				t.Errorf("%s final answer Ratelimit-Policy %q, want sluice's", proto, v)
			}
			if v := resp.Header.Values("X-Ratelimit-Remaining"); len(v) != 1 {
				t.Errorf("%s final answer X-Ratelimit-Remaining %q, want sluice's alone", proto, v)
			}
			if v := resp.Header.Values("X-Request-Id"); len(v) != 1 {
				t.Errorf("%s final answer X-Request-Id %q, want sluice's alone", proto, v)
			}
		})
	}
}
