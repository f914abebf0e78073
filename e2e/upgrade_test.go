package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestWebSocketUpgradePassesThrough upgrades a connection through sluice to
// an upstream that echoes bytes, as a WebSocket server would after its
// handshake.
func TestWebSocketUpgradePassesThrough(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	up.Handle = func(w http.ResponseWriter, r *http.Request) {
		if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			http.Error(w, "want an upgrade", 400)
			return
		}
		conn, rw, ok := acceptUpgrade(w)
		if !ok {
			return
		}
		defer conn.Close()
		io.Copy(conn, rw) // echo until the client closes
	}
	// send_timeout bounds writes of answers, not the quiet of a tunnel.
	cfg := fmt.Sprintf("listen: 127.0.0.1:0\nadmin: \"\"\nsend_timeout: 300ms\nroutes:\n  - name: ws\n    upstream: %s\n    limits: [{algorithm: token_bucket, limit: 10, window: 1s, key: [ip]}]\n", up.URL)
	in := start(t, writeConfig(t, cfg))
	conn, br, resp := openRaw(t, in, "GET /chat HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
	if resp.StatusCode != 101 {
		t.Fatalf("upgrade: got %d, want 101", resp.StatusCode)
	}
	if resp.Header.Get("RateLimit") == "" {
		t.Errorf("101 carries no RateLimit header")
	}
	for i, msg := range []string{"hello", "over the upgraded connection", "after a quiet longer than send_timeout"} {
		if i == 2 {
			time.Sleep(700 * time.Millisecond)
		}
		conn.Write([]byte(msg))
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(br, buf); err != nil || string(buf) != msg {
			t.Fatalf("echo: got %q %v, want %q", buf, err, msg)
		}
	}
}

// TestWebSocketIdleTunnelIsClosed: a tunnel is kept while bytes cross it
// in either direction, and closed at both ends once none has crossed for
// websocket_idle_timeout, as nginx closes one at proxy_read_timeout. A
// client could otherwise hold a connection and two of sluice's goroutines,
// and one of the upstream's connections, for as long as it liked.
func TestWebSocketIdleTunnelIsClosed(t *testing.T) {
	t.Parallel()
	upstreamDone := make(chan struct{})
	up := newUpstream(t)
	up.Handle = func(w http.ResponseWriter, r *http.Request) {
		conn, rw, ok := acceptUpgrade(w)
		if !ok {
			return
		}
		defer close(upstreamDone)
		defer conn.Close()
		for {
			line, err := rw.ReadString('\n')
			if err != nil {
				return // sluice closed the tunnel
			}
			if line != "push\n" {
				rw.WriteString(line)
				rw.Flush()
				continue
			}
			// The upstream alone talks, for longer than the timeout.
			for range 6 {
				time.Sleep(250 * time.Millisecond)
				rw.WriteString("tick\n")
				rw.Flush()
			}
		}
	}
	cfg := fmt.Sprintf("listen: 127.0.0.1:0\nadmin: \"\"\nwebsocket_idle_timeout: 1s\nroutes:\n  - name: ws\n    upstream: %s\n", up.URL)
	in := start(t, writeConfig(t, cfg))
	conn, br, resp := openRaw(t, in, "GET /chat HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
	if resp.StatusCode != 101 {
		t.Fatalf("upgrade: got %d, want 101", resp.StatusCode)
	}
	// The client alone talks, for longer than the timeout.
	for i := range 6 {
		time.Sleep(250 * time.Millisecond)
		msg := fmt.Sprintf("m%d\n", i)
		io.WriteString(conn, msg)
		if got, err := br.ReadString('\n'); got != msg {
			t.Fatalf("echo %d: got %q %v, want %q", i, got, err, msg)
		}
	}
	io.WriteString(conn, "push\n")
	for i := range 6 {
		if got, err := br.ReadString('\n'); got != "tick\n" {
			t.Fatalf("tick %d: got %q %v: the tunnel was closed while the upstream talked", i, got, err)
		}
	}
	// Now nobody talks.
	quiet := time.Now()
	if got, err := br.ReadString('\n'); err == nil {
		t.Fatalf("after the ticks: got %q, want the tunnel closed", got)
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("a quiet tunnel was still open after %v; websocket_idle_timeout is 1s", time.Since(quiet).Round(time.Millisecond))
	}
	select {
	case <-upstreamDone:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream's end of the tunnel was not closed")
	}
}

// TestWebSocketHeldByUnreadUpstream: a client that sends more than the
// upstream reads leaves one copy of the tunnel blocked writing to the
// upstream and the other blocked reading from it; nothing then waits on
// the client's end. The tunnel must still close once no byte has crossed
// for websocket_idle_timeout, upstream connection and goroutines with it.
func TestWebSocketHeldByUnreadUpstream(t *testing.T) {
	t.Parallel()
	upDone := make(chan struct{})
	t.Cleanup(func() { close(upDone) })
	up := newUpstream(t)
	up.Handle = func(w http.ResponseWriter, r *http.Request) {
		conn, _, ok := acceptUpgrade(w)
		if !ok {
			return
		}
		defer conn.Close()
		<-upDone // reads nothing, writes nothing
	}
	cfg := fmt.Sprintf("listen: 127.0.0.1:0\nadmin: \"\"\nwebsocket_idle_timeout: 1s\nshutdown_timeout: 1s\nroutes:\n  - name: ws\n    upstream: %s\n", up.URL)
	in := start(t, writeConfig(t, cfg))
	conn, br, resp := openRaw(t, in, "GET /chat HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
	if resp.StatusCode != 101 {
		t.Fatalf("upgrade: got %d, want 101", resp.StatusCode)
	}
	// Push until every buffer on the way is full.
	conn.SetWriteDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 64<<10)
	sent := 0
	for {
		n, err := conn.Write(buf)
		sent += n
		if err != nil {
			break
		}
	}
	quiet := time.Now()
	t.Logf("pushed %d bytes; now nothing crosses either way", sent)
	conn.SetReadDeadline(time.Now().Add(6 * time.Second))
	_, err := br.ReadByte()
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Errorf("a tunnel no byte had crossed was still open %v later; websocket_idle_timeout is 1s", time.Since(quiet).Round(100*time.Millisecond))
	}
}

// TestH2CUpgradeIsNotTunnelled: only a WebSocket handshake may switch
// protocols through sluice. The upstream here switches to HTTP/2 on
// "Upgrade: h2c" as a lenient server may (it does not insist that
// HTTP2-Settings be named in Connection, which sluice's hop-by-hop
// handling would remove). Were the upgrade tunnelled, the client would
// speak HTTP/2 to the upstream through a connection sluice no longer
// reads, and send /v1/otp as often as it liked: here 5 times against a
// limit of 1. The client asks as curl --http2 does for an http:// URL.
func TestH2CUpgradeIsNotTunnelled(t *testing.T) {
	t.Parallel()
	var otp atomic.Int64 // /v1/otp requests that reached the upstream
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/otp" {
			otp.Add(1)
		}
		fmt.Fprintf(w, "%s %s", r.Proto, r.URL.Path)
	})
	up := newUpstream(t)
	up.Handle = func(w http.ResponseWriter, r *http.Request) {
		if !strings.EqualFold(r.Header.Get("Upgrade"), "h2c") {
			inner(w, r)
			return
		}
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		fmt.Fprintf(rw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n")
		rw.Flush()
		(&http2.Server{}).ServeConn(conn, &http2.ServeConnOpts{Handler: inner})
	}
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
admin: ""
routes:
  - name: otp
    match: {path: /v1/otp}
    upstream: %s
    limits: [{algorithm: fixed_window, limit: 1, window: 1m, key: [ip]}]
  - name: rest
    match: {path_prefix: /}
    upstream: %s
`, up.URL, up.URL)
	in := start(t, writeConfig(t, cfg))
	conn, br, resp := openRaw(t, in, "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n")
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// The tunnel is open: show what it lets through.
		cc, err := (&http2.Transport{}).NewClientConn(&bufferedConn{conn, br})
		if err != nil {
			t.Fatalf("upgrade tunnelled (101); HTTP/2 over it: %v", err)
		}
		for range 5 {
			req, _ := http.NewRequest("POST", "http://x/v1/otp", nil)
			if resp, err := cc.RoundTrip(req); err == nil {
				resp.Body.Close()
			}
		}
		t.Fatalf("upgrade to h2c tunnelled (101): %d requests to /v1/otp reached the upstream past a limit of 1", otp.Load())
	}
	if resp.StatusCode != 200 || string(body) != "HTTP/1.1 /" {
		t.Fatalf("got %d %q, want 200 %q", resp.StatusCode, body, "HTTP/1.1 /")
	}
	for _, r := range up.Requests() {
		if v := r.Header.Values("Upgrade"); len(v) > 0 {
			t.Errorf("upstream got Upgrade %q", v)
		}
		if v := r.Header.Values("Http2-Settings"); len(v) > 0 {
			t.Errorf("upstream got HTTP2-Settings %q", v)
		}
	}
	// The connection goes on as HTTP/1.1, under the limit.
	var got []int
	for range 3 {
		fmt.Fprintf(conn, "POST /v1/otp HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		got = append(got, resp.StatusCode)
	}
	if fmt.Sprint(got) != "[200 429 429]" || otp.Load() != 1 {
		t.Errorf("then /v1/otp over HTTP/1.1: got %v with %d at the upstream, want [200 429 429] with 1", got, otp.Load())
	}
}

// acceptUpgrade takes the connection of a WebSocket handshake and answers
// it 101, as a WebSocket server does; the caller closes the connection.
// ok is false when the connection cannot be taken.
func acceptUpgrade(w http.ResponseWriter) (net.Conn, *bufio.ReadWriter, bool) {
	conn, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return nil, nil, false
	}
	fmt.Fprintf(rw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	rw.Flush()
	return conn, rw, true
}

// openRaw sends raw on a new connection to in's plain listener and
// reads the answer's head. The connection, closed when the test ends, has
// 10 s for everything.
func openRaw(t *testing.T, in *instance, raw string) (net.Conn, *bufio.Reader, *http.Response) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(in.HTTP, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(conn, raw)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	return conn, br, resp
}

// bufferedConn reads what its reader has buffered before the connection.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// TestStreamedRequestBody sends a chunked body of unknown length; the
// upstream receives it whole.
func TestStreamedRequestBody(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	in := start(t, writeConfig(t, fmt.Sprintf("listen: 127.0.0.1:0\nadmin: \"\"\nroutes:\n  - name: upload\n    upstream: %s\n", up.URL)))
	pr, pw := io.Pipe()
	want := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
	go func() {
		for i := 0; i < len(want); i += 32 << 10 {
			pw.Write(want[i : i+32<<10])
		}
		pw.Close()
	}()
	req, _ := http.NewRequest("POST", in.HTTP+"/upload", pr)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("upload: got %d, want 200", resp.StatusCode)
	}
	if got := up.Requests()[0].Body; !bytes.Equal(got, want) {
		t.Errorf("upstream got %d bytes, want the same %d", len(got), len(want))
	}
}
