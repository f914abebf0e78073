package proxy

import (
	"errors"
	"net"
	"sync/atomic"
	"time"
)

// errTunnelIdle ends a WebSocket no byte has crossed for
// websocket_idle_timeout.
var errTunnelIdle = errors.New("websocket idle for websocket_idle_timeout")

// idleConn is the client's end of an upgraded connection (a WebSocket),
// closed with the upstream's end once no byte has crossed the tunnel, in
// either direction, for idle. ReverseProxy copies each direction in a
// goroutine of its own, and only bytes that cross the client's end are
// seen here; that is every byte of the tunnel. A timer, rather than the
// connection's deadlines, ends it: a copy may be blocked on the upstream
// (one that reads nothing while the client has filled every buffer on
// the way), where no deadline of the client's end would wake it. end
// cancels the forwarded request, which makes ReverseProxy close the
// upstream's connection; closing the client's end wakes a copy blocked
// on it.
type idleConn struct {
	net.Conn
	idle  time.Duration
	end   func(cause error) // nil for none
	by    atomic.Int64      // when the tunnel is idle unless a byte crosses, Unix ns
	timer *time.Timer
	shut  atomic.Bool // Close was called: check moves the timer no more
}

func newIdleConn(c net.Conn, idle time.Duration, end func(cause error)) *idleConn {
	ic := &idleConn{Conn: c, idle: idle, end: end}
	ic.touch()
	ic.timer = time.AfterFunc(idle, ic.check)
	return ic
}

func (c *idleConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.touch()
	}
	return n, err
}

func (c *idleConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if n > 0 {
		c.touch()
	}
	return n, err
}

func (c *idleConn) Close() error {
	c.shut.Store(true)
	c.timer.Stop()
	return c.Conn.Close()
}

// CloseWrite half-closes the client's end, as ReverseProxy does once the
// upstream has said all it will: the client may still send. Without it
// the wrapper would hide the connection's own CloseWrite, and ReverseProxy
// would end the whole tunnel instead.
func (c *idleConn) CloseWrite() error { return closeWrite(c.Conn) }

// closeWrite half-closes c, or closes it when it cannot be half-closed.
func closeWrite(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}

// earlyConn is a hijacked connection whose first bytes, early, were read
// from the client before the hijack.
type earlyConn struct {
	net.Conn
	early []byte
}

func (c *earlyConn) Read(p []byte) (int, error) {
	if len(c.early) > 0 {
		n := copy(p, c.early)
		c.early = c.early[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// CloseWrite keeps the connection's own, as idleConn's does.
func (c *earlyConn) CloseWrite() error { return closeWrite(c.Conn) }

// touch notes that a byte crossed: the tunnel is idle at idle from now.
func (c *idleConn) touch() { c.by.Store(time.Now().Add(c.idle).UnixNano()) }

// check runs when the timer fires: it waits on until the tunnel is idle,
// then ends it. The timer is moved only here, once per idle at the most,
// not for every byte.
func (c *idleConn) check() {
	if c.shut.Load() {
		return
	}
	if left := time.Duration(c.by.Load() - time.Now().UnixNano()); left > 0 {
		c.timer.Reset(left)
		if c.shut.Load() {
			// Close ran beside this check, its Stop perhaps before
			// the Reset: the timer stays stopped.
			c.timer.Stop()
		}
		return
	}
	if c.end != nil {
		c.end(errTunnelIdle)
	}
	c.Conn.Close()
}
