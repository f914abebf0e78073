package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestTunnelHalfCloseThroughServer is proxy.TestTunnelKeepsHalfClose
// through the real server, whose listener wraps every connection in a
// trackedConn. The upstream answers 101, sends "bye\n" and half-closes;
// the client must still be able to send, and the upstream receive, its
// last words (README: the tunnel carries a half-close).
func TestTunnelHalfCloseThroughServer(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			got <- "no request: " + err.Error()
			return
		}
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\nbye\n")
		c.(*net.TCPConn).CloseWrite()
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		b, _ := io.ReadAll(br)
		got <- string(b)
	}()
	r := serve(t, fmt.Sprintf("listen: 127.0.0.1:0\nadmin: \"\"\nroutes:\n  - name: ws\n    upstream: http://%s\n", ln.Addr()))
	c, err := net.Dial("tcp", r.Addr("http").String())
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
	rest, _ := io.ReadAll(br)
	if string(rest) != "bye\n" {
		t.Fatalf("from the upstream: got %q, want %q", rest, "bye\n")
	}
	io.WriteString(c, "last words\n")
	c.(*net.TCPConn).CloseWrite()
	if s := <-got; s != "last words\n" {
		t.Errorf("upstream received after its half-close: got %q, want %q", s, "last words\n")
	}
}
