package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/sluicehq/sluice/ratelimit"
)

// TestH2ResetMidBodyIsClientGone: an HTTP/2 client that resets its stream
// while sending its body has gone away, as an HTTP/1 client that closes
// its connection has: the request is logged 499 (README › Access log),
// not 400 as a malformed body it never finished sending, whether json:
// keys were reading the body or the upstream was.
func TestH2ResetMidBodyIsClientGone(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{}, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		io.Copy(io.Discard, r.Body)
	}))
	t.Cleanup(up.Close)
	var log lockedBuffer
	g := clockedGateway(t, fmt.Sprintf(`
routes:
  - name: keyed
    match: {path: /keyed}
    upstream: %[1]s
    limits:
      - {algorithm: fixed_window, limit: 100, window: 1h, key: [json:phone]}
  - name: streamed
    match: {path: /streamed}
    upstream: %[1]s
`, up.URL), ratelimit.SystemClock(), &log)
	srv := httptest.NewUnstartedServer(g)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)

	for _, path := range []string{"/keyed", "/streamed"} {
		c, fr := h2Open(t, srv.Listener.Addr().String(), 10*time.Second)
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		for _, f := range h2Req("POST", path, "content-type", "application/json") {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
		fr.WriteData(1, false, []byte(`{"phone":`))
		if path == "/streamed" {
			select {
			case <-arrived:
			case <-time.After(5 * time.Second):
				t.Fatal("the request never reached the upstream")
			}
		} else {
			time.Sleep(100 * time.Millisecond) // the keys are reading; a late reset is the same case
		}
		fr.WriteRSTStream(1, http2.ErrCodeCancel)
		c.Close()
	}
	// An HTTP/2 handler may outlive srv.Close: wait for both lines.
	var lines []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if lines = log.lines(); len(lines) == 2 {
			break
		}
	}
	for _, path := range []string{"/keyed", "/streamed"} {
		found := false
		for _, l := range lines {
			if strings.Contains(l, `"path":"`+path+`"`) {
				found = true
				if !strings.Contains(l, `"status":499`) {
					t.Errorf("%s: got access line %s, want status 499", path, l)
				}
			}
		}
		if !found {
			t.Errorf("%s: no access line in %q", path, lines)
		}
	}
}
