package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// TestPostWithIdempotencyKeyNotReplayed: the upstream answers the first
// request on a connection; on the next it reads the request (and acts on
// it: sends the OTP) and closes without an answer. A POST is counted once
// by the route's limit and must reach the upstream once, Idempotency-Key
// or not (http.Transport resends a request carrying one), and the field
// itself still reaches the upstream.
func TestPostWithIdempotencyKeyNotReplayed(t *testing.T) {
	t.Parallel()
	for _, field := range idempotencyKeys {
		t.Run(field, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var posts []string
			up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
				for n := 0; ; n++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					if req.Method == "POST" {
						mu.Lock()
						posts = append(posts, req.Header.Get(field))
						mu.Unlock()
					}
					if n == 1 {
						return // acted on the request, then died without an answer
					}
					io.WriteString(c, okAnswer)
				}
			})
			srv, _ := newTestGateway(t, `
routes:
  - name: otp
    upstream: %s
    limits:
      - {algorithm: fixed_window, limit: 100, window: 1h, key: [query:phone]}
`, up.url())
			// Warms one kept-alive upstream connection.
			req, _ := http.NewRequest("POST", srv.URL+"/v1/otp?phone=1", strings.NewReader("x"))
			resp, err := testClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			mu.Lock()
			posts = nil
			mu.Unlock()
			req, _ = http.NewRequest("POST", srv.URL+"/v1/otp?phone=1", nil)
			req.Header.Set(field, "k1")
			resp, err = testClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			mu.Lock()
			defer mu.Unlock()
			if len(posts) != 1 || posts[0] != "k1" {
				t.Errorf("one POST with %s through sluice (answered %d): the upstream got it %d times with %s %q, want once with \"k1\"", field, resp.StatusCode, len(posts), field, posts)
			}
		})
	}
}
