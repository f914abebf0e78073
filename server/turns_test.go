package server

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestKeepAliveConnectionsTakeTurns: a connection whose next request has
// already arrived is not served again before the others have had a turn.
// Two clients each send all their requests at once, so neither connection
// ever waits for its client; on one processor, without takeTurns, the
// connection that goes first is served every request it has before the
// other gets one (the longest run is n-1). The race detector's scheduler
// cuts such runs short at random, so under -race a missing yield is
// caught in most runs rather than in every one.
//
// The connections are in memory: serving them never enters the kernel,
// which on a busy machine could park the one thread in a system call and
// let the other connection run alone for a while, rightly.
//
// Not parallel: it runs the scheduler on one processor.
func TestKeepAliveConnectionsTakeTurns(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const n = 40
	var (
		mu    sync.Mutex
		seen  = map[string]bool{}
		order []string
		both  sync.WaitGroup // each connection's first request waits for the other's
		done  = make(chan struct{})
	)
	both.Add(2)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := r.Header.Get("X-Client")
		mu.Lock()
		first := !seen[c]
		seen[c] = true
		if !first {
			if order = append(order, c); len(order) == 2*(n-1) {
				close(done)
			}
		}
		mu.Unlock()
		if first {
			both.Done()
			both.Wait()
		}
	})
	s := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	srv := s.httpServer(h, nil)
	ln := &memListener{conns: make(chan net.Conn, 2), closed: make(chan struct{})}
	for _, name := range []string{"A", "B"} {
		req := "GET / HTTP/1.1\r\nHost: sluice.test\r\nX-Client: " + name + "\r\n\r\n"
		ln.conns <- &memConn{in: []byte(strings.Repeat(req, n)), wake: make(chan struct{})}
	}
	go srv.Serve(ln)
	defer srv.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the requests were not all served within 10 s")
	}

	mu.Lock()
	defer mu.Unlock()
	longest, run := 0, 0
	for i := range order {
		if i > 0 && order[i] == order[i-1] {
			run++
		} else {
			run = 1
		}
		longest = max(longest, run)
	}
	// Taking turns gives runs of 1 or 2; the scheduler's choices around
	// the first requests may lengthen one a little.
	if longest > 4 {
		t.Errorf("longest run of one connection's requests: got %d, want at most 4 (order %s)", longest, strings.Join(order, ""))
	}
}

// memListener hands out the connections put in conns, then waits for Close.
type memListener struct {
	conns     chan net.Conn
	closed    chan struct{}
	closeOnce sync.Once
}

func (l *memListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *memListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return nil
}

func (l *memListener) Addr() net.Addr { return memAddr{} }

// memConn is a server's end of a connection whose client sent in, all of
// it before the server reads. Writes are dropped and never block. A read
// deadline in the past ends a waiting read, as net/http's abortPendingRead
// needs; the test's server sets no timeouts, so later deadlines are never
// set.
type memConn struct {
	mu       sync.Mutex
	in       []byte
	deadline time.Time
	closed   bool
	wake     chan struct{} // closed, and replaced, when a waiting read should look again
}

func (c *memConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	for {
		switch {
		case len(c.in) > 0:
			k := copy(p, c.in)
			c.in = c.in[k:]
			c.mu.Unlock()
			return k, nil
		case c.closed:
			c.mu.Unlock()
			return 0, io.EOF
		case !c.deadline.IsZero() && !time.Now().Before(c.deadline):
			c.mu.Unlock()
			return 0, os.ErrDeadlineExceeded
		}
		wake := c.wake
		c.mu.Unlock()
		<-wake
		c.mu.Lock()
	}
}

func (c *memConn) Write(p []byte) (int, error) { return len(p), nil }

// lookAgainLocked wakes a waiting read; c.mu must be held.
func (c *memConn) lookAgainLocked() {
	close(c.wake)
	c.wake = make(chan struct{})
}

func (c *memConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		c.lookAgainLocked()
	}
	return nil
}

func (c *memConn) SetReadDeadline(d time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deadline = d
	c.lookAgainLocked()
	return nil
}

func (c *memConn) SetDeadline(d time.Time) error    { return c.SetReadDeadline(d) }
func (c *memConn) SetWriteDeadline(time.Time) error { return nil }
func (c *memConn) LocalAddr() net.Addr              { return memAddr{} }
func (c *memConn) RemoteAddr() net.Addr             { return memAddr{} }

type memAddr struct{}

func (memAddr) Network() string { return "memory" }
func (memAddr) String() string  { return "memory" }
