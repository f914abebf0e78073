package server

import (
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestAdminClientThatStopsReading: a client that asks /metrics over and
// over on one connection and never reads the answers loses the connection
// once send_timeout passes with no progress, as on the gateway's
// listeners. /metrics serves at most 4 scrapes at once: without the bound
// 4 such connections held every slot for as long as they stayed open, and
// every real scrape got 503.
func TestAdminClientThatStopsReading(t *testing.T) {
	t.Parallel()
	r := serve(t, "listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\nsend_timeout: 300ms\nroutes: []\n")
	floodUnread(t, r.Addr("admin"), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 3000)
	if code, _, body := get(t, r.url("admin")+"/metrics", ""); code != 200 {
		t.Errorf("/metrics: got %d %s, want 200", code, body)
	}
}

// floodUnread sends request n times on one connection whose receive
// buffer is small, never reading the answers (far more than the sockets'
// buffers hold), and waits for sluice to close the connection: it fails
// when the connection is still open 15s later, though its answers stalled
// for send_timeout (300ms in these tests).
func floodUnread(t *testing.T, addr net.Addr, request string, n int) {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 2048) })
	}}
	c, err := d.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range n {
		c.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
		if _, err := io.WriteString(c, request); err != nil {
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
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the connection is still open 15s after its answers stalled, want it closed once they stalled for send_timeout (300ms)")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
