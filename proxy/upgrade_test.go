package proxy

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
)

// earlyBytes has a client send "early" after its upgrade request,
// either in the same write (sameWrite) or 100 ms later, while the upstream
// holds its 101 for 300 ms. It returns what the upstream reads on the
// tunnel after its 101, within 1 s.
func earlyBytes(t *testing.T, sameWrite bool) string {
	got := make(chan string, 1)
	up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			got <- "no request: " + err.Error()
			return
		}
		time.Sleep(300 * time.Millisecond)
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(time.Second))
		b := make([]byte, 64)
		n, _ := io.ReadAtLeast(br, b, len("early"))
		got <- string(b[:n])
	})
	srv, _ := newTestGateway(t, "routes:\n  - name: up\n    upstream: %s\n", up.url())
	c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	req := "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
	if sameWrite {
		io.WriteString(c, req+"early")
	} else {
		io.WriteString(c, req)
		time.Sleep(100 * time.Millisecond)
		io.WriteString(c, "early")
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: got %v %v, want 101", resp, err)
	}
	return <-got
}

// TestTunnelKeepsBytesSentWithTheRequest: bytes that came in the same
// segment as the upgrade request sit in net/http's read buffer at the
// hijack, and ReverseProxy copies from the raw connection: they must
// still reach the upstream, first.
func TestTunnelKeepsBytesSentWithTheRequest(t *testing.T) {
	t.Parallel()
	if s := earlyBytes(t, true); s != "early" {
		t.Errorf("upstream read on the tunnel %q, want %q", s, "early")
	}
}

// TestTunnelKeepsBytesSentBefore101: bytes sent after the request but
// before the 101: net/http's background read takes the first byte into
// the read buffer; the upstream must get it, not the rest one byte short.
func TestTunnelKeepsBytesSentBefore101(t *testing.T) {
	t.Parallel()
	if s := earlyBytes(t, false); s != "early" {
		t.Errorf("upstream read on the tunnel %q, want %q", s, "early")
	}
}

// TestUpgradeSeenOnlyWhereForwarded: a route matches on "Upgrade:
// websocket" (WebSockets go unlimited; the API is limited to 1 request a
// minute per client). ReverseProxy forwards Upgrade only when Connection
// names it; a plain GET carrying Upgrade alone reaches the upstream as an
// ordinary GET, so routes must not see its Upgrade either, and the API
// limit counts it (SPEC §4: the request the limits see is the request
// the upstream gets).
func TestUpgradeSeenOnlyWhereForwarded(t *testing.T) {
	t.Parallel()
	type seen struct{ path, upgrade string }
	got := make(chan seen, 10)
	up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			got <- seen{req.URL.Path, req.Header.Get("Upgrade")}
			io.WriteString(c, okAnswer)
		}
	})
	srv, _ := newTestGateway(t, `routes:
  - name: ws
    match: {path_prefix: /, headers: {Upgrade: websocket}}
    upstream: %[1]s
  - name: api
    upstream: %[1]s
    limits:
      - {algorithm: fixed_window, limit: 1, window: 1m, key: [ip]}
`, up.url())
	passed := 0
	for i := 0; i < 3; i++ {
		req, _ := http.NewRequest("GET", srv.URL+"/api/orders", nil)
		req.Header.Set("Upgrade", "websocket")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 {
			passed++
		}
	}
	close(got)
	for s := range got {
		if s.upgrade != "" {
			t.Errorf("upstream got GET %s with Upgrade %q, which ReverseProxy forwards only on a handshake", s.path, s.upgrade)
		}
	}
	if passed > 1 {
		t.Errorf("%d of 3 GET /api/orders reached the upstream; the api route allows 1 a minute", passed)
	}
}

// TestCountedUpgradeEndsHoldAt101: count_status [101] on a token_bucket
// of 1 a second. "A counted answer ends the hold and its token refills
// from then": the 101 is the whole answer of a handshake, so a second
// handshake 1.5 s later, on the virtual clock, finds the token back while
// the first tunnel is still open.
func TestCountedUpgradeEndsHoldAt101(t *testing.T) {
	t.Parallel()
	up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(4 * time.Second))
		io.Copy(io.Discard, br)
	})
	cfg, err := routes.Parse("test.yaml", []byte(`
routes:
  - name: ws
    upstream: `+up.url()+`
    limits:
      - {algorithm: token_bucket, limit: 1, window: 1s, key: [ip], count_status: [101]}
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	sc := &steppedClock{t0: time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)}
	clock := ratelimit.NewClock(sc.wall, sc.elapsed)
	store := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{SweepInterval: -1, Clock: clock.Now})
	t.Cleanup(func() { store.Close() })
	g := New(Options{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), Clock: clock})
	g.Load(cfg, store)
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	handshake := func() (net.Conn, int) {
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		return c, resp.StatusCode
	}
	c1, s1 := handshake()
	defer c1.Close()
	if s1 != 101 {
		t.Fatalf("first handshake: %d, want 101", s1)
	}
	sc.advance(1500 * time.Millisecond)
	c2, s2 := handshake()
	defer c2.Close()
	if s2 != 101 {
		t.Errorf("second handshake 1.5 s after the first's 101 (limit 1/s): %d, want 101; the first tunnel still holds its token", s2)
	}
}

// TestHTTP10UpgradeIgnored: RFC 9110 §7.8: a server MUST ignore Upgrade
// in an HTTP/1.0 request, rather than forward it as an HTTP/1.1 WebSocket
// handshake and tunnel the HTTP/1.0 connection on a 101.
func TestHTTP10UpgradeIgnored(t *testing.T) {
	t.Parallel()
	up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if req.Header.Get("Upgrade") == "" {
			io.WriteString(c, okAnswer)
			return
		}
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		io.Copy(io.Discard, br)
	})
	srv, _ := newTestGateway(t, "routes:\n  - name: ws\n    upstream: %s\n", up.url())
	c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	io.WriteString(c, "GET / HTTP/1.0\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode == 101 {
		t.Errorf("HTTP/1.0 request with Upgrade: got 101 and a tunnel, want the Upgrade ignored")
	}
}
