package proxy

import (
	"net"
	"testing"
	"time"
)

// deadlines records the deadlines set on it, as the write deadline of an
// answer or both deadlines of a connection.
type deadlines struct {
	net.Conn
	last time.Time
}

func (d *deadlines) SetWriteDeadline(t time.Time) error { d.last = t; return nil }
func (d *deadlines) SetDeadline(t time.Time) error      { d.last = t; return nil }

// TestDeadlinesAreNeverShort: every write of an answer gets at least
// send_timeout from its start, and a WebSocket at least
// websocket_idle_timeout from its last byte, however soon after the last
// move of the deadline they come: keeping a deadline set moments ago must
// not leave less. Nor more than a quarter more.
func TestDeadlinesAreNeverShort(t *testing.T) {
	t.Parallel()
	const timeout = 50 * time.Millisecond
	for name, move := range map[string]func(*deadlines) func(){
		"send_timeout": func(d *deadlines) func() {
			w := &recorder{send: timeout, dl: d}
			return w.extend
		},
		"websocket_idle_timeout": func(d *deadlines) func() {
			return newIdleConn(d, timeout).touch
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var d deadlines
			touch := move(&d)
			for end, n := time.Now().Add(4*timeout), 0; time.Now().Before(end); n++ {
				start := time.Now()
				touch()
				if left := d.last.Sub(start); left < timeout {
					t.Fatalf("move %d: deadline %v after it, want at least %v", n, left, timeout)
				}
				if left := time.Until(d.last); left > timeout+timeout/4 {
					t.Fatalf("move %d: deadline %v away, want at most %v", n, left, timeout+timeout/4)
				}
			}
		})
	}
}
