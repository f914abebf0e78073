package proxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"
)

// TestHalfCloserGetsNoEmpty200: a client that sends its request and shuts
// down its sending side counts as gone, as net/http and nginx take it:
// its request, waiting in a queue or for a slow upstream, is abandoned.
// It must then get no answer at all, not an empty 200 that net/http
// writes when a handler returns without one, which would read as success
// for a request nobody served.
func TestHalfCloserGetsNoEmpty200(t *testing.T) {
	t.Parallel()
	slow := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		time.Sleep(3 * time.Second)
		io.WriteString(c, okAnswer)
	})
	up := newBodyUpstream(t)
	srv, _ := newTestGateway(t, `
policies:
  shaping: {algorithm: leaky_bucket, limit: 1, window: 8s, queue: 5, key: [global]}
routes:
  - name: slow
    match: {path_prefix: /slow}
    upstream: `+slow.url()+`
  - name: queued
    upstream: %s
    limits: [shaping]
`, up.URL)
	for _, tc := range []struct {
		path string
		// before runs just ahead of the request, in the subtest: a
		// parallel subtest may wait for its slot longer than the
		// queue's interval (20s in a run of the whole package), and a
		// request that comes once the interval has passed is not queued
		// but forwarded at once, often answered before net/http has
		// seen the half-close.
		before func(t *testing.T)
	}{
		{"/queued", func(t *testing.T) {
			// The next request on the queued route waits up to 8s: long
			// enough that it still waits on a loaded machine, short
			// enough that, were it forwarded, its answer would come
			// within the read deadline below.
			resp, err := testClient.Get(srv.URL + "/first")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}},
		{"/slow", func(*testing.T) {}},
	} {
		t.Run(tc.path, func(t *testing.T) {
			t.Parallel()
			tc.before(t)
			c, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			io.WriteString(c, "GET "+tc.path+" HTTP/1.1\r\nHost: x\r\n\r\n")
			c.(*net.TCPConn).CloseWrite()
			c.SetReadDeadline(time.Now().Add(20 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("no answer and the connection still open after 20s: want it closed once the request is abandoned")
			}
			if err != nil {
				return // no answer
			}
			b, _ := io.ReadAll(resp.Body)
			t.Errorf("got %d %q for a request abandoned when its client half-closed: want no answer", resp.StatusCode, b)
		})
	}
}
