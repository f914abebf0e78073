package server

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 2048) })
	}}
	c, err := d.Dial("tcp", r.Addr("http").String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Far more answers than the sockets' buffers hold.
	for range 30000 {
		c.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
		if _, err := io.WriteString(c, "GET /v1/a-path-long-enough-to-fill-the-buffers-sooner HTTP/1.1\r\nHost: api.example.test\r\n\r\n"); err != nil {
			break
		}
	}
	// Reading would let the answers go on; the socket's state tells
	// without reading whether sluice closed the connection (it resets it,
	// with requests left unread).
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		var info *unix.TCPInfo
		rc.Control(func(fd uintptr) { info, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) })
		if err != nil {
			t.Fatal(err)
		}
		if info.State != unix.BPF_TCP_ESTABLISHED {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the connection is still open 15s after its redirects stalled, want it closed once they stalled for send_timeout (300ms)")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The listener still answers others.
	code, h, body := get(t, r.url("http")+"/v1/x", "api.example.test")
	if code != http.StatusPermanentRedirect {
		t.Errorf("another client: got %d %v %s, want 308", code, h, body)
	}
}
