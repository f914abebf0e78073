package proxy

import (
	"net"
	"testing"
	"time"
)

// deadlines records the write deadlines set on it.
type deadlines struct{ last time.Time }

func (d *deadlines) SetWriteDeadline(t time.Time) error { d.last = t; return nil }

// TestSendTimeoutIsNeverShort: every write gets at least send_timeout
// from its start, however soon after the last one it comes; keeping a
// deadline set moments ago must not leave a write less. A client that
// takes each write within send_timeout is never cut off.
func TestSendTimeoutIsNeverShort(t *testing.T) {
	t.Parallel()
	const send = 50 * time.Millisecond
	var d deadlines
	w := &recorder{send: send, dl: &d}
	end := time.Now().Add(4 * send)
	for n := 0; time.Now().Before(end); n++ {
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

// conn records the deadlines set on it.
type conn struct {
	net.Conn
	last time.Time
}

func (c *conn) SetDeadline(t time.Time) error { c.last = t; return nil }

// TestTunnelIdleIsNeverShort: the same for a WebSocket's deadlines: a
// tunnel is closed after no less than websocket_idle_timeout of quiet.
func TestTunnelIdleIsNeverShort(t *testing.T) {
	t.Parallel()
	const idle = 50 * time.Millisecond
	var c conn
	start := time.Now()
	ic := newIdleConn(&c, idle)
	for n := 0; time.Since(start) < 4*idle; n++ {
		before := time.Now()
		ic.touch()
		if left := c.last.Sub(before); left < idle {
			t.Fatalf("byte %d: deadline %v after it, want at least %v", n, left, idle)
		}
		if left := time.Until(c.last); left > idle+idle/4 {
			t.Fatalf("byte %d: deadline %v away, want at most %v", n, left, idle+idle/4)
		}
	}
}
