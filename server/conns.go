package server

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
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

	// first closes the connection unless a request's header fields have
	// come first (see connState); nil once they have. actives counts the
	// StateActive changes of an HTTP/2 connection.
	first   atomic.Pointer[time.Timer]
	actives atomic.Int32
}

// connState is the listeners' ConnState hook. It yields the processor
// between a keep-alive connection's requests (see takeTurns), and bounds,
// for each TLS connection, the time from its accept to its first
// request's header fields by headerTimeout: the connection is closed
// unless they came by then. net/http's ReadHeaderTimeout does that for
// HTTP/1, but over HTTP/2 nothing bounds a connection that sent its
// preface and nothing more, or a first header block trickled in
// CONTINUATION frames, short of the idle timeout.
//
// The hook, unlike the handler, sees every request, those net/http
// answers itself (OPTIONS *) too: an HTTP/1 connection is active once a
// request was read; an HTTP/2 one goes active, then idle, once its
// preface is read, and active again when a stream's header block is
// complete.
func connState(headerTimeout time.Duration) func(net.Conn, http.ConnState) {
	return func(c net.Conn, state http.ConnState) {
		switch state {
		case http.StateIdle:
			takeTurns()
		case http.StateNew:
			if tc := trackedOf(c); tc != nil && headerTimeout > 0 {
				tc.first.Store(time.AfterFunc(headerTimeout, func() { tc.Close() }))
			}
		case http.StateActive:
			tc := trackedOf(c)
			if tc == nil || tc.first.Load() == nil {
				return
			}
			if c.(*tls.Conn).ConnectionState().NegotiatedProtocol == "h2" && tc.actives.Add(1) < 2 {
				return // the preface
			}
			if t := tc.first.Swap(nil); t != nil {
				t.Stop()
			}
		}
	}
}

// trackedOf is the tracked connection under a TLS connection, or nil.
func trackedOf(c net.Conn) *trackedConn {
	if t, ok := c.(*tls.Conn); ok {
		tc, _ := t.NetConn().(*trackedConn)
		return tc
	}
	return nil
}

// CloseWrite half-closes the connection: a WebSocket tunnel passes on the
// upstream's half-close this way, and the client may still send. A
// wrapper without it would make the tunnel close the whole connection.
func (tc *trackedConn) CloseWrite() error {
	if cw, ok := tc.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return tc.Close()
}

// SyscallConn gives the socket under the connection, whose TCP state a
// request waiting in a queue reads to tell whether its client is still
// there.
func (tc *trackedConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := tc.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.ErrUnsupported
}

func (tc *trackedConn) Close() error {
	if t := tc.first.Swap(nil); t != nil {
		t.Stop()
	}
	err := tc.Conn.Close()
	tc.once.Do(func() { tc.set.remove(tc) })
	return err
}
