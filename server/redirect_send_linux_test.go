package server

import (
	"fmt"
	"net/http"
	"testing"
)

// TestRedirectClientThatStopsReading: with tls.redirect_http on, a client
// that sends request after request to the plain listener and never reads
// the 308s loses the connection once send_timeout passes with no
// progress, as it does on the gateway's own answers. Without the bound
// the connection and its goroutine stayed for as long as the client kept
// it open, so enough such clients ran the process out of descriptors.
func TestRedirectClientThatStopsReading(t *testing.T) {
	t.Parallel()
	certFile, keyFile := writePair(t, t.TempDir(), "api.example.test")
	r := serve(t, fmt.Sprintf("listen: 127.0.0.1:0\nadmin: \"\"\nsend_timeout: 300ms\ntls:\n  listen: 127.0.0.1:0\n  redirect_http: true\n  certificates: [{cert_file: %s, key_file: %s}]\nroutes: []\n", certFile, keyFile))
	floodUnread(t, r.Addr("http"), "GET /v1/a-path-long-enough-to-fill-the-buffers-sooner HTTP/1.1\r\nHost: api.example.test\r\n\r\n", 30000)
	// The listener still answers others.
	code, h, body := get(t, r.url("http")+"/v1/x", "api.example.test")
	if code != http.StatusPermanentRedirect {
		t.Errorf("another client: got %d %v %s, want 308", code, h, body)
	}
}
