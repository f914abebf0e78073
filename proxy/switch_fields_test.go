package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestSwitchDropsUpstreamHopFields: ReverseProxy passes a 101's header
// on whole, hop-by-hop fields and all, where it strips them from every
// other answer. The client must get the 101 without them ("hop-by-hop
// headers are stripped, both ways, and so are the fields a Connection
// header names"), keeping only what switches the connection, and the
// tunnel must still work.
func TestSwitchDropsUpstreamHopFields(t *testing.T) {
	t.Parallel()
	up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\n"+
			"Upgrade: websocket\r\n"+
			"Connection: Upgrade, X-Internal\r\n"+
			"X-Internal: secret\r\n"+
			"Keep-Alive: timeout=5\r\n"+
			"Proxy-Connection: keep-alive\r\n"+
			"Trailer: X-Sum\r\n"+
			"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n")
		io.Copy(c, br) // echo
	})
	srv, _ := newTestGateway(t, "routes:\n  - name: ws\n    upstream: %s\n", up.url())
	c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "GET /chat HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: got %v %v, want 101", resp, err)
	}
	for _, name := range []string{"X-Internal", "Keep-Alive", "Proxy-Connection", "Trailer"} {
		if v, ok := resp.Header[name]; ok {
			t.Errorf("101 field %s: got %q, want none (hop by hop)", name, v)
		}
	}
	if got := resp.Header.Values("Connection"); len(got) != 1 || !strings.EqualFold(got[0], "Upgrade") {
		t.Errorf("101 Connection: got %q, want [Upgrade]", got)
	}
	if got := resp.Header.Get("Upgrade"); got != "websocket" {
		t.Errorf("101 Upgrade: got %q, want websocket", got)
	}
	if got := resp.Header.Get("Sec-WebSocket-Accept"); got == "" {
		t.Errorf("101 lost Sec-WebSocket-Accept, an end-to-end field")
	}
	io.WriteString(c, "ping")
	buf := make([]byte, 4)
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "ping" {
		t.Errorf("tunnel echo: got %q %v, want ping", buf, err)
	}
}
