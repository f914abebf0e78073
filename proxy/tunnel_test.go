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

// TestTunnelKeepsHalfClose: when the upstream half-closes an upgraded
// connection (it is done sending but still reads), the client must get
// EOF and still be able to send what it has left. ReverseProxy does this
// by calling CloseWrite on the client connection; were idleConn to hide
// the connection's CloseWrite, ReverseProxy would end the whole tunnel at
// the upstream's EOF, dropping what the client sends after.
func TestTunnelKeepsHalfClose(t *testing.T) {
	t.Parallel()
	got := make(chan string, 1)
	up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			got <- "no request: " + err.Error()
			return
		}
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\nbye\n")
		c.(*net.TCPConn).CloseWrite()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, _ := io.ReadAll(br)
		got <- string(b)
	})
	srv, _ := newTestGateway(t, "routes:\n  - name: up\n    upstream: %s\n", up.url())
	c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: got %v %v, want 101", resp, err)
	}
	rest, _ := io.ReadAll(br) // to the upstream's EOF
	if string(rest) != "bye\n" {
		t.Fatalf("from the upstream: got %q, want %q", rest, "bye\n")
	}
	io.WriteString(c, "last words\n")
	c.(*net.TCPConn).CloseWrite()
	if s := <-got; s != "last words\n" {
		t.Errorf("upstream received after its half-close: got %q, want %q", s, "last words\n")
	}
}
