package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// stalledBodyExchange sends a request that declares a body of 100 bytes,
// sends 10 of them and stops, and returns the answer's status (0 when the
// connection ended without one), when the answer came and whether the
// connection was closed after it, each within 10s.
func stalledBodyExchange(t *testing.T, addr, path string) (code int, answered time.Duration, closed bool) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nonly ten b", path)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("no answer after %v: the connection is held", time.Since(start))
		}
		return 0, time.Since(start), true
	}
	answered = time.Since(start)
	io.Copy(io.Discard, resp.Body)
	_, err = br.ReadByte()
	return resp.StatusCode, answered, !errors.Is(err, os.ErrDeadlineExceeded)
}

// TestEarlyAnswerWithStalledBody: an upstream that answers before it has
// read the body, with more than net/http buffers before writing, and
// closes, while the client stalls its body: the answer still goes out once
// client_body_timeout is up, and the connection is closed after it. The
// server reads what is left of the body before it writes the header;
// that read was bounded only while WriteHeader ran, which writes nothing
// in HTTP/1, and the header went out on a later write with no bound: the
// client got no answer and held the connection for as long as it stayed
// open.
func TestEarlyAnswerWithStalledBody(t *testing.T) {
	t.Parallel()
	up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 65536\r\nConnection: close\r\n\r\n"+strings.Repeat("x", 65536))
		// close at once, the body unread
	})
	srv, _ := newTestGateway(t, `
client_body_timeout: 300ms
routes:
  - name: early
    upstream: %s
`, up.url())
	code, answered, closed := stalledBodyExchange(t, srv.Listener.Addr().String(), "/early")
	if code != 200 || answered > 2*time.Second {
		t.Errorf("got %d after %v, want 200 after about client_body_timeout (300ms)", code, answered)
	}
	if !closed {
		t.Errorf("the connection stayed open after the answer, want it closed")
	}
}

// TestBrokenAnswerWithStalledBody: an upstream breaks off its answer's
// body, so the gateway gives the answer up halfway (http.ErrAbortHandler),
// while the client has stalled its own body. net/http then closes the
// connection, but first reads what is left of the request body, with no
// deadline when the transport was reading it at that moment (it lifts the
// deadline it uses to stop that read): the client held the connection for
// as long as it stayed silent, in a few runs in a hundred. The connection
// must close within about client_body_timeout.
func TestBrokenAnswerWithStalledBody(t *testing.T) {
	t.Parallel()
	up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nonly part of it")
		// close with 985 bytes owed
	})
	srv, _ := newTestGateway(t, `
client_body_timeout: 300ms
routes:
  - name: broken
    upstream: %s
`, up.url())
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	c.SetDeadline(start.Add(5 * time.Second))
	io.WriteString(c, "POST /broken HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nonly ten b")
	_, err = io.Copy(io.Discard, c) // the header and part of the body, then the end
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the connection was still open %v after an answer broken off, want it closed", time.Since(start).Round(100*time.Millisecond))
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the connection closed after %v, want within about client_body_timeout (300ms)", d.Round(100*time.Millisecond))
	}
}
