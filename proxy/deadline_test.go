package proxy

import (
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// deadlines records the write deadlines set on it.
type deadlines struct{ last time.Time }

func (d *deadlines) SetWriteDeadline(t time.Time) error { d.last = t; return nil }

// TestSendTimeoutIsNeverShort: every write gets at least send_timeout
// from its start, however soon after the last one it comes; keeping a
// deadline set moments ago must not leave a write less. Nor more than a
// quarter more.
func TestSendTimeoutIsNeverShort(t *testing.T) {
	t.Parallel()
	const send = 50 * time.Millisecond
	var d deadlines
	w := &recorder{send: send, dl: &d}
	for end, n := time.Now().Add(4*send), 0; time.Now().Before(end); n++ {
		start := time.Now()
		w.extend()
		if left := d.last.Sub(start); left < send {
			t.Fatalf("write %d: deadline %v after its start, want at least %v", n, left, send)
		}
		if left := time.Until(d.last); left > send+send/4 {
			t.Fatalf("write %d: deadline %v away, want at most %v", n, left, send+send/4)
		}
	}
}

// closeConn notes when it was closed.
type closeConn struct {
	net.Conn
	closed atomic.Int64 // Unix ns
}

func (c *closeConn) Close() error { c.closed.CompareAndSwap(0, time.Now().UnixNano()); return nil }

// TestTunnelEndsAfterIdle: a tunnel bytes keep crossing stays open, and
// one they stopped crossing ends, both ends of it, no sooner than
// websocket_idle_timeout after the last byte.
func TestTunnelEndsAfterIdle(t *testing.T) {
	t.Parallel()
	const idle = 50 * time.Millisecond
	// Bytes cross every idle/5 for four idles. The tunnel must stay open
	// only if no two touches, nor the last touch and the look at the
	// tunnel, were idle or more apart: a loaded machine can pause the
	// loop that long, and then the tunnel ends by right. Such a round
	// proves nothing either way and runs again.
	var (
		c     *closeConn
		ended *atomic.Int64
		ic    *idleConn
	)
	for round := 1; ; round++ {
		c, ended = new(closeConn), new(atomic.Int64)
		last := time.Now() // at or before the touch newIdleConn makes
		// The round's own: the timer of a round given up may still fire
		// while the next round sets ended anew.
		roundEnded := ended
		ic = newIdleConn(c, idle, func(error) { roundEnded.CompareAndSwap(0, time.Now().UnixNano()) })
		var longest time.Duration // the longest span holding two touches in a row
		for end := time.Now().Add(4 * idle); time.Now().Before(end); {
			time.Sleep(idle / 5)
			before := time.Now()
			ic.touch()
			longest = max(longest, time.Since(last))
			last = before
		}
		gone := c.closed.Load() != 0 || ended.Load() != 0
		longest = max(longest, time.Since(last))
		if longest < idle {
			if gone {
				ic.Close()
				t.Fatalf("the tunnel ended while bytes crossed it (at most %v apart, idle is %v)", longest, idle)
			}
			break
		}
		ic.Close()
		if round == 20 {
			t.Fatalf("in %d rounds the test never touched the tunnel less than %v apart throughout (last round: %v)", round, idle, longest)
		}
		t.Logf("round %d: touches came %v apart, not less than the idle %v: again", round, longest, idle)
	}
	defer ic.Close()
	last := time.Now()
	ic.touch()
	for deadline := time.Now().Add(5 * time.Second); c.closed.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if c.closed.Load() == 0 || ended.Load() == 0 {
		t.Fatalf("the tunnel was still open 5s after its last byte (closed %v, upstream ended %v)", c.closed.Load() != 0, ended.Load() != 0)
	}
	if quiet := time.Duration(c.closed.Load() - last.UnixNano()); quiet < idle {
		t.Errorf("the tunnel ended %v after its last byte, want at least %v", quiet, idle)
	}
}

// testClient has a transport of its own: httptest.Server.Close closes the
// idle connections of http.DefaultTransport, and one a parallel test had
// just taken from the pool would fail its request ("CloseIdleConnections
// called").
var testClient = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
