package proxy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
)

// cutUpstream accepts connections and hands each to serve with the
// request read from it; it notes how many connections it accepted and
// which of them the gateway closed.
type cutUpstream struct {
	l      net.Listener
	serve  func(c net.Conn, br *bufio.Reader, req *http.Request)
	mu     sync.Mutex
	conns  []net.Conn
	closed chan struct{} // one per connection the gateway closed
	wg     sync.WaitGroup
}

func newCutUpstream(t *testing.T, serve func(c net.Conn, br *bufio.Reader, req *http.Request)) *cutUpstream {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &cutUpstream{l: l, serve: serve, closed: make(chan struct{}, 16)}
	u.wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			u.mu.Lock()
			u.conns = append(u.conns, c)
			u.mu.Unlock()
			u.wg.Go(func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						if err == io.EOF || isReset(err) {
							u.closed <- struct{}{}
						}
						return
					}
					io.Copy(io.Discard, req.Body)
					u.serve(c, br, req)
				}
			})
		}
	})
	t.Cleanup(func() {
		l.Close()
		u.mu.Lock()
		for _, c := range u.conns {
			c.Close() // one the gateway keeps idle, too
		}
		u.mu.Unlock()
		u.wg.Wait()
	})
	return u
}

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset")
}

func (u *cutUpstream) url() string { return "http://" + u.l.Addr().String() }

func (u *cutUpstream) accepted() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.conns)
}

// midflightGateway serves one route to up under a count_status limit,
// and writes its access lines to access.
func midflightGateway(t *testing.T, up string, m *metrics.Metrics, access io.Writer) *httptest.Server {
	return midflightGatewayOf(t, `
routes:
  - name: mid
    upstream: %s
    limits:
      - {algorithm: fixed_window, limit: 100, window: 1h, key: [global], count_status: [401]}
`, up, m, access)
}

// midflightGatewayOf is midflightGateway with a configuration of its own,
// yaml with the upstream's URL for its %s.
func midflightGatewayOf(t *testing.T, yaml, up string, m *metrics.Metrics, access io.Writer) *httptest.Server {
	t.Helper()
	cfg, err := routes.Parse("test.yaml", []byte(fmt.Sprintf(yaml, up)), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	store := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{})
	t.Cleanup(func() { store.Close() })
	g := New(Options{Metrics: m, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), AccessLog: access})
	g.Load(cfg, store)
	srv := httptest.NewUnstartedServer(g)
	srv.Config.ConnContext = WithConn
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// awaitLine returns the first access line of route mid, within 5s.
func awaitLine(t *testing.T, access *lockedBuffer) map[string]any {
	t.Helper()
	return awaitLineAt(t, access, 0)
}

// awaitLineAt returns access line i (from 0) of route mid, within 5s.
func awaitLineAt(t *testing.T, access *lockedBuffer, i int) map[string]any {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		n := 0
		for _, l := range access.lines() {
			var e map[string]any
			if json.Unmarshal([]byte(l), &e) == nil && e["route"] == "mid" {
				if n == i {
					return e
				}
				n++
			}
		}
	}
	t.Fatalf("no access line %d within 5s", i)
	return nil
}

// TestClientGoneMidflight: a client that goes away (a close, or a reset)
// while the upstream works on its request, or while its answer streams,
// on the direct path and through http.Transport. Before the answer: the
// line says 499, the count_status unit stays spent (README › Protecting
// login and OTP endpoints), nothing counts as an upstream error, and the
// upstream's connection is closed. While the answer streams: the line has
// the status the answer began with, whose unit went back as its head
// left, and the upstream's connection is closed too.
func TestClientGoneMidflight(t *testing.T) {
	t.Parallel()
	const (
		get      = "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
		streamed = "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
	)
	for _, tc := range []struct {
		name      string
		req       string
		reset     bool
		streaming bool
		status    float64
		refunds   float64
	}{
		{"working, GET, close", get, false, false, 499, 0},
		{"working, GET, reset", get, true, false, 499, 0},
		{"working, streamed POST, close", streamed, false, false, 499, 0},
		{"working, streamed POST, reset", streamed, true, false, 499, 0},
		{"streaming, GET, close", get, false, true, 200, 1},
		{"streaming, GET, reset", get, true, true, 200, 1},
		{"streaming, streamed POST, reset", streamed, true, true, 200, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := make(chan struct{}, 1)
			up := newCutUpstream(t, func(c net.Conn, br *bufio.Reader, req *http.Request) {
				if tc.streaming {
					io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
				}
				got <- struct{}{}
				if tc.streaming {
					// Chunks until the gateway closes the connection.
					for {
						if _, err := io.WriteString(c, "4\r\nmore\r\n"); err != nil {
							break
						}
						time.Sleep(time.Millisecond)
					}
				}
				// The gateway's close ends the upstream's wait.
				if _, err := br.ReadByte(); err == io.EOF || isReset(err) {
					select {
					case <-got:
					default:
					}
				}
			})
			m := metrics.New()
			var access lockedBuffer
			srv := midflightGateway(t, up.url(), m, &access)
			c, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			io.WriteString(c, tc.req)
			select {
			case <-got:
			case <-time.After(5 * time.Second):
				t.Fatal("the upstream never got the request")
			}
			if tc.streaming {
				br := bufio.NewReader(c)
				if resp, err := http.ReadResponse(br, nil); err != nil {
					t.Fatalf("reading the answer's head: %v", err)
				} else if resp.StatusCode != 200 {
					t.Fatalf("answer: got %d, want 200", resp.StatusCode)
				}
			}
			if tc.reset {
				c.(*net.TCPConn).SetLinger(0)
			}
			c.Close()
			line := awaitLine(t, &access)
			if line["status"] != tc.status {
				t.Errorf("access line status: got %v, want %v; line %v", line["status"], tc.status, line)
			}
			if _, ok := line["upstream_error"]; ok {
				t.Errorf("access line has an upstream_error for a client that left: %v", line)
			}
			if n := counterSum(t, m, "sluice_ratelimit_refunds_total"); n != tc.refunds {
				t.Errorf("units given back: %v, want %v", n, tc.refunds)
			}
			if n := counterSum(t, m, "sluice_upstream_errors_total"); n != 0 {
				t.Errorf("upstream errors counted: %v, want 0", n)
			}
			if n := counterSum(t, m, "sluice_http_requests_total"); n != 1 {
				t.Errorf("requests counted: %v, want 1", n)
			}
			select {
			case <-up.closed:
			case <-time.After(5 * time.Second):
				t.Error("the gateway did not close the upstream's connection")
			}
		})
	}
}

// TestUpstreamGoneMidAnswer: an upstream that goes away after its answer's
// head, or in the middle of a chunked or length-framed body. The client
// gets a cut answer: never the terminating chunk, and its connection
// closed. The line and the count have the status the answer began with
// (README › Access log), a 200, whose count_status unit went back as the
// head left (the status the client receives is not listed), and the
// upstream's connection is not used again.
func TestUpstreamGoneMidAnswer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, answer string }{
		{"after the head", "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"},
		{"mid length body", "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789"},
		{"mid chunked body", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\na\r\n0123456789\r\n"},
		{"mid chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n14\r\n0123456789"},
	} {
		for _, method := range []string{"GET", "streamed POST"} {
			t.Run(tc.name+", "+method, func(t *testing.T) {
				t.Parallel()
				var mu sync.Mutex
				first := true
				up := newCutUpstream(t, func(c net.Conn, br *bufio.Reader, req *http.Request) {
					mu.Lock()
					cut := first
					first = false
					mu.Unlock()
					if cut {
						io.WriteString(c, tc.answer)
						c.(*net.TCPConn).CloseWrite()
						return
					}
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				})
				m := metrics.New()
				var access lockedBuffer
				srv := midflightGateway(t, up.url(), m, &access)
				req := "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
				if method != "GET" {
					req = "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
				}
				c, err := net.Dial("tcp", srv.Listener.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				io.WriteString(c, req)
				raw, err := io.ReadAll(c) // to the close
				if err != nil {
					t.Fatalf("reading to the close: %v (got %q)", err, raw)
				}
				if s := string(raw); strings.HasSuffix(s, "0\r\n\r\n") {
					t.Errorf("the cut answer ends as a whole chunked body: %q", s)
				}
				if resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(string(raw))), nil); err == nil {
					if b, err := io.ReadAll(resp.Body); err == nil {
						t.Errorf("the client read a whole answer: %d %q", resp.StatusCode, b)
					}
				}
				line := awaitLine(t, &access)
				if line["status"] != float64(200) {
					t.Errorf("access line status: got %v, want 200; line %v", line["status"], line)
				}
				if n := counterSum(t, m, "sluice_ratelimit_refunds_total"); n != 1 {
					t.Errorf("units given back: %v, want 1", n)
				}
				// The next request goes on a new connection.
				resp, body, err := gatewaySend(t, srv.Listener.Addr().String(), "GET /b HTTP/1.1\r\nHost: x\r\n\r\n")
				if err != nil || resp.StatusCode != 200 || body != "ok" {
					t.Fatalf("next request: %v %v %q", resp, err, body)
				}
				if n := up.accepted(); n != 2 {
					t.Errorf("upstream connections: %d, want 2 (the cut one not used again)", n)
				}
			})
		}
	}
}

// gaugeSum is the sum of the gauge name's series in m.
func gaugeSum(t *testing.T, m *metrics.Metrics, name string) float64 {
	t.Helper()
	return counterSum(t, m, name)
}

// TestClientGoneEarlyMidflight: a client that goes away before its
// request reaches the upstream, while the part of its body json: keys read
// is arriving, or while it waits in a queue. None of it reaches the
// upstream. Mid key body nothing has decided the request yet: no decision
// is counted; a close there is a body shorter than its length, a 400 to
// nobody (README › Errors sluice answers itself), a reset a 499. In the
// queue it was decided: its count_status unit stays spent, and its line
// says 499 with its wait.
func TestClientGoneEarlyMidflight(t *testing.T) {
	t.Parallel()
	const yaml = `
policies:
  shaping: {algorithm: leaky_bucket, limit: 1, window: 1h, queue: 5, key: [global]}
routes:
  - name: mid
    upstream: %s
    limits:
      - {algorithm: fixed_window, limit: 100, window: 1h, key: [json:user], count_status: [401]}
      - shaping
`
	const head = "POST /a HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 14\r\n\r\n"
	for _, tc := range []struct {
		name      string
		queued    bool
		reset     bool
		status    float64
		decisions float64
	}{
		{"key body, close", false, false, 400, 0},
		{"key body, reset", false, true, 499, 0},
		{"queued, close", true, false, 499, 2},
		{"queued, reset", true, true, 499, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			reached := make(chan string, 4)
			up := newCutUpstream(t, func(c net.Conn, br *bufio.Reader, req *http.Request) {
				reached <- req.URL.Path
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
			})
			m := metrics.New()
			var access lockedBuffer
			srv := midflightGatewayOf(t, yaml, up.url(), m, &access)
			addr := srv.Listener.Addr().String()
			if tc.queued {
				// The first leaves at once; the next waits an hour.
				if resp, _, err := gatewaySend(t, addr, strings.Replace(head, "/a", "/first", 1)+`{"user":"a"}  `); err != nil || resp.StatusCode != 200 {
					t.Fatalf("first: %v %v", resp, err)
				}
				<-reached
				awaitLine(t, &access) // its line, before the next one's
			}
			before := counterSum(t, m, "sluice_ratelimit_decisions_total")
			refunded := counterSum(t, m, "sluice_ratelimit_refunds_total") // the first's 200
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if tc.queued {
				io.WriteString(c, head+`{"user":"b"}  `)
				for deadline := time.Now().Add(5 * time.Second); gaugeSum(t, m, "sluice_ratelimit_queue_depth") != 1; time.Sleep(5 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatal("the request never waited")
					}
				}
			} else {
				// A reset that came before the server read the head
				// would discard it with the request. The server's 100
				// Continue says the handler has begun reading the body.
				io.WriteString(c, strings.Replace(head, "\r\n\r\n", "\r\nExpect: 100-continue\r\n\r\n", 1))
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				br := bufio.NewReader(c)
				if l, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(l, "HTTP/1.1 100 ") {
					t.Fatalf("got %q %v, want a 100 Continue as the key body is read", l, err)
				}
				io.WriteString(c, `{"user"`)
			}
			if tc.reset {
				c.(*net.TCPConn).SetLinger(0)
			}
			c.Close()
			i := 0
			if tc.queued {
				i = 1
			}
			line := awaitLineAt(t, &access, i)
			if line["status"] != tc.status {
				t.Errorf("access line status: got %v, want %v; line %v", line["status"], tc.status, line)
			}
			if _, ok := line["queue_wait_ms"]; ok != tc.queued {
				t.Errorf("access line queue_wait_ms present: %v, want %v; line %v", ok, tc.queued, line)
			}
			if n := counterSum(t, m, "sluice_ratelimit_decisions_total") - before; n != tc.decisions {
				t.Errorf("decisions counted: %v, want %v", n, tc.decisions)
			}
			if n := counterSum(t, m, "sluice_ratelimit_refunds_total") - refunded; n != 0 {
				t.Errorf("units given back: %v, want 0", n)
			}
			if n := counterSum(t, m, "sluice_upstream_errors_total"); n != 0 {
				t.Errorf("upstream errors counted: %v, want 0", n)
			}
			if n := gaugeSum(t, m, "sluice_ratelimit_queue_depth"); n != 0 {
				t.Errorf("queue depth after: %v, want 0", n)
			}
			srv.Close()
			select {
			case p := <-reached:
				t.Errorf("the upstream got %s from a client that went away before it", p)
			default:
			}
		})
	}
}
