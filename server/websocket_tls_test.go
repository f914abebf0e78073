package server

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestWebSocketNotOfferedOverHTTP2: the HTTPS listener does not announce
// SETTINGS_ENABLE_CONNECT_PROTOCOL (RFC 8441), so a browser opens its
// WebSockets over HTTP/1.1 there; a client that sends an extended CONNECT
// anyway has its stream reset and reaches no upstream. Were it announced
// (a Go release that turns it on by default), browsers would send their
// handshakes as CONNECT, which the gateway answers 501: every wss://
// WebSocket of an HTTP/2 browser would fail. The HTTP/1.1 handshake on
// the same listener still gets its tunnel.
func TestWebSocketNotOfferedOverHTTP2(t *testing.T) {
	t.Parallel()
	certFile, keyFile := writePair(t, t.TempDir(), "a.example.test")
	ws := wsUpstream(t)
	r := serve(t, fmt.Sprintf("listen: 127.0.0.1:0\nadmin: \"\"\ntls:\n  listen: 127.0.0.1:0\n  certificates: [{cert_file: %s, key_file: %s}]\nroutes:\n  - name: ws\n    upstream: %s\n", certFile, keyFile, ws.URL))
	addr := r.Addr("https").String()

	c, fr := h2Dial(t, addr)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, hf := range [][2]string{{":method", "CONNECT"}, {":protocol", "websocket"}, {":scheme", "https"}, {":authority", "a.example.test"}, {":path", "/chat"}, {"sec-websocket-version", "13"}} {
		enc.WriteField(hpack.HeaderField{Name: hf[0], Value: hf[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the answer to an extended CONNECT: %v", err)
		}
		if sf, ok := f.(*http2.SettingsFrame); ok {
			if v, ok := sf.Value(http2.SettingEnableConnectProtocol); ok && v != 0 {
				t.Errorf("the HTTPS listener announces ENABLE_CONNECT_PROTOCOL %d, want it not announced", v)
			}
			continue
		}
		if f.Header().StreamID != 1 {
			continue
		}
		if rst, ok := f.(*http2.RSTStreamFrame); ok {
			if rst.ErrCode != http2.ErrCodeProtocol {
				t.Errorf("extended CONNECT: stream reset with %v, want PROTOCOL_ERROR", rst.ErrCode)
			}
			break
		}
		t.Fatalf("extended CONNECT: got %v, want the stream reset", f)
	}

	// A browser that found no ENABLE_CONNECT_PROTOCOL opens an HTTP/1.1
	// connection for its WebSocket.
	hc, br := tlsUpgrade(t, addr)
	if err := echo(hc, br, "over tls"); err != nil {
		t.Errorf("echo over the TLS WebSocket: %v", err)
	}
}

// TestShutdownCutsTLSWebSocketAtDeadline: a WebSocket on the HTTPS
// listener is cut at shutdown_timeout as one on the plain listener is
// (TestShutdownCutsWebSocketAtDeadline): the hijacked connection is TLS
// over the tracked one, and closing the tracked one must end it.
func TestShutdownCutsTLSWebSocketAtDeadline(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	certFile, keyFile := writePair(t, t.TempDir(), "a.example.test")
	r := serve(t, fmt.Sprintf("listen: 127.0.0.1:0\nadmin: \"\"\nshutdown_timeout: %s\ntls:\n  listen: 127.0.0.1:0\n  certificates: [{cert_file: %s, key_file: %s}]\nroutes:\n  - name: ws\n    upstream: %s\n", timeout, certFile, keyFile, wsUpstream(t).URL))
	conn, br := tlsUpgrade(t, r.Addr("https").String())
	wantCutAtDeadline(t, r, conn, br, timeout)
}

// tlsUpgrade opens a WebSocket through the HTTPS listener at addr, over
// HTTP/1.1.
func tlsUpgrade(t *testing.T, addr string) (*tls.Conn, *bufio.Reader) {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}, ServerName: "a.example.test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET /chat HTTP/1.1\r\nHost: a.example.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("HTTP/1.1 handshake over TLS: got %d, want 101", resp.StatusCode)
	}
	return c, br
}
