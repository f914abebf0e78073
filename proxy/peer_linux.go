package proxy

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// canCheckPeer says peerClosed can read a connection's TCP state.
const canCheckPeer = true

// peerClosed reports whether the client of c has closed or reset its
// side of the TCP connection: the socket is no longer ESTABLISHED (a FIN
// from the client makes it CLOSE_WAIT), whatever of the request is still
// unread in its buffer. A connection it cannot inspect counts as open.
func peerClosed(c net.Conn) bool {
	if t, ok := c.(interface{ NetConn() net.Conn }); ok { // *tls.Conn
		c = t.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var (
		info    *unix.TCPInfo
		infoErr error
	)
	if err := rc.Control(func(fd uintptr) {
		info, infoErr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil || infoErr != nil {
		return false
	}
	return info.State != unix.BPF_TCP_ESTABLISHED
}
