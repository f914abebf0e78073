package proxy

import (
	"net"
	"sync/atomic"
	"time"
)

// idleConn is the client's end of an upgraded connection (a WebSocket),
// closed by its deadlines once no byte has crossed it, in either
// direction, for idle. ReverseProxy copies each direction in a goroutine
// of its own and ends the tunnel, closing both ends, when either copy
// fails; a read or write here that times out is such a failure. Both
// deadlines move together: an upstream that talks keeps a client's quiet
// read alive, and a client that talks keeps the upstream's quiet answer
// alive. A write the client takes none of for idle also ends the tunnel.
type idleConn struct {
	net.Conn
	idle time.Duration
	by   atomic.Int64 // the deadline set last, in Unix nanoseconds
}

func newIdleConn(c net.Conn, idle time.Duration) *idleConn {
	ic := &idleConn{Conn: c, idle: idle}
	ic.touch()
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

// touch moves the deadlines past idle from now. Setting them costs a
// timer update each, so they are moved only when less than idle is left,
// and then to idle and a quarter: a quiet tunnel is closed after at least
// idle and at most a quarter more.
func (c *idleConn) touch() {
	now := time.Now()
	if time.Duration(c.by.Load()-now.UnixNano()) >= c.idle {
		return
	}
	by := now.Add(c.idle + c.idle/4)
	c.by.Store(by.UnixNano())
	c.Conn.SetDeadline(by)
}
