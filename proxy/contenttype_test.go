package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
)

// TestAnswerWithoutContentTypeGetsNone: an upstream answer that names no
// Content-Type reaches the client without one, as nginx and Envoy pass
// it. net/http's server would otherwise sniff the first bytes and add a
// type of its own: a body that starts with "<html" would go out as
// text/html, which a browser renders whatever the upstream meant, and
// which its X-Content-Type-Options: nosniff no longer guards.
func TestAnswerWithoutContentTypeGetsNone(t *testing.T) {
	t.Parallel()
	const body = "<html><script>alert(1)</script>"
	for _, tc := range []struct{ name, head string }{
		{"length", fmt.Sprintf("HTTP/1.1 200 OK\r\nX-Content-Type-Options: nosniff\r\nContent-Length: %d\r\n\r\n", len(body))},
		{"chunked", fmt.Sprintf("HTTP/1.1 200 OK\r\nX-Content-Type-Options: nosniff\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n", len(body))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					io.WriteString(c, tc.head+body)
					if tc.name == "chunked" {
						io.WriteString(c, "\r\n0\r\n\r\n")
					}
				}
			})
			srv, _ := newTestGateway(t, misbehaveConfig, up.url())
			for _, r := range misbehaveRequests {
				resp, got, err := gatewaySend(t, srv.Listener.Addr().String(), r.req)
				if err != nil {
					t.Fatalf("%s: %v", r.name, err)
				}
				if got != body {
					t.Errorf("%s: got body %q, want %q", r.name, got, body)
				}
				if ct, ok := resp.Header["Content-Type"]; ok {
					t.Errorf("%s: got Content-Type %q, want none: the upstream sent none", r.name, ct)
				}
			}
			// HTTP/2 answers are sniffed the same way.
			h2 := newTLSGateway(t, fmt.Sprintf("routes:\n  - name: all\n    upstream: %s\n", up.url()))
			resp, err := h2.Client().Get(h2.URL + "/")
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.ProtoMajor != 2 || string(got) != body {
				t.Fatalf("HTTP/2: got %s %q, want HTTP/2 %q", resp.Proto, got, body)
			}
			if ct, ok := resp.Header["Content-Type"]; ok {
				t.Errorf("HTTP/2: got Content-Type %q, want none: the upstream sent none", ct)
			}
		})
	}
}
