package server

import (
	"context"
	"net"
	"sync"
)

// conns is the set of open connections of the gateway's listeners. An
// http.Server forgets a connection once a handler hijacks it (a WebSocket
// upgrade), so its Shutdown neither waits for nor closes it; conns keeps
// every connection until it is closed, so shutdown can wait for the
// hijacked ones until the deadline and cut off what is left then. The zero
// value is ready; it is safe for concurrent use.
type conns struct {
	mu   sync.Mutex
	open map[*trackedConn]struct{}
	idle chan struct{} // closed when open becomes empty; nil until wait asks
}

// listener returns ln with every accepted connection tracked in c.
func (c *conns) listener(ln net.Listener) net.Listener {
	return &trackingListener{Listener: ln, set: c}
}

func (c *conns) add(tc *trackedConn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open == nil {
		c.open = make(map[*trackedConn]struct{})
	}
	c.open[tc] = struct{}{}
}

func (c *conns) remove(tc *trackedConn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.open, tc)
	if len(c.open) == 0 && c.idle != nil {
		close(c.idle)
		c.idle = nil
	}
}

// wait blocks until no connection is open or ctx ends, and reports
// whether none is open.
func (c *conns) wait(ctx context.Context) bool {
	c.mu.Lock()
	if len(c.open) == 0 {
		c.mu.Unlock()
		return true
	}
	if c.idle == nil {
		c.idle = make(chan struct{})
	}
	idle := c.idle
	c.mu.Unlock()
	select {
	case <-idle:
		return true
	case <-ctx.Done():
		return false
	}
}

// closeAll closes every open connection and returns how many there were.
func (c *conns) closeAll() int {
	c.mu.Lock()
	open := make([]*trackedConn, 0, len(c.open))
	for tc := range c.open {
		open = append(open, tc)
	}
	c.mu.Unlock()
	for _, tc := range open {
		tc.Close()
	}
	return len(open)
}

type trackingListener struct {
	net.Listener
	set *conns
}

func (l *trackingListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: conn, set: l.set}
	l.set.add(tc)
	return tc, nil
}

// trackedConn leaves its set when it is closed, by whoever closes it.
type trackedConn struct {
	net.Conn
	set  *conns
	once sync.Once
}

func (tc *trackedConn) Close() error {
	err := tc.Conn.Close()
	tc.once.Do(func() { tc.set.remove(tc) })
	return err
}
