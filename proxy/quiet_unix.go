//go:build unix

package proxy

import (
	"net"
	"syscall"
)

// quietCheck reports whether nothing has come on an idle connection since
// its last answer was read: no byte and no close.
type quietCheck func() bool

// canPeek says the direct path can check an idle connection before reuse.
const canPeek = true

// newQuietCheck returns the check for c, made once per connection, or nil
// when c has no socket to peek at.
func newQuietCheck(c net.Conn) quietCheck {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	var (
		buf   [1]byte
		quiet bool
	)
	peek := func(fd uintptr) bool {
		// A peek that would block means nothing is there: no byte,
		// no end of stream.
		_, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		quiet = err == syscall.EAGAIN || err == syscall.EWOULDBLOCK
		return true // never wait
	}
	return func() bool {
		quiet = false
		if err := rc.Read(peek); err != nil {
			return false
		}
		return quiet
	}
}
