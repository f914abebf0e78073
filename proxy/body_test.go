package proxy

import (
	"bufio"
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

// bodyUpstream records what an upstream made of each request body: the
// bytes it read and whether the body ended cleanly.
type bodyUpstream struct {
	*httptest.Server
	mu     sync.Mutex
	bodies []string
	errs   []error
	// after, when set, runs once the body is read, before answering.
	after func()
}

func newBodyUpstream(t *testing.T) *bodyUpstream {
	u := &bodyUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		u.mu.Lock()
		u.bodies, u.errs = append(u.bodies, string(b)), append(u.errs, err)
		after := u.after
		u.mu.Unlock()
		if after != nil {
			after()
		}
		fmt.Fprintf(w, "got %d bytes", len(b))
	}))
	t.Cleanup(u.Close)
	return u
}

// complete returns the bodies the upstream read to a clean end.
func (u *bodyUpstream) complete() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []string
	for i, b := range u.bodies {
		if u.errs[i] == nil {
			out = append(out, b)
		}
	}
	return out
}

func (u *bodyUpstream) seen() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.bodies)
}

// rawRequest writes head, then each part of body after pause, and returns
// the status line's code and how long the answer took from the first byte
// written. It closes the write side after the parts when closeWrite is set.
func rawRequest(t *testing.T, addr, head string, parts []string, pause time.Duration, closeWrite bool) (int, time.Duration) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	start := time.Now()
	go func() {
		if _, err := io.WriteString(c, head); err != nil {
			return
		}
		for _, p := range parts {
			time.Sleep(pause)
			if _, err := io.WriteString(c, p); err != nil {
				return
			}
		}
		if closeWrite {
			c.(*net.TCPConn).CloseWrite()
		}
	}()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode, time.Since(start)
}

// upstreamErrors sums sluice_upstream_errors_total.
func upstreamErrors(t *testing.T, m *metrics.Metrics) float64 {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == "sluice_upstream_errors_total" {
			for _, s := range mf.GetMetric() {
				sum += s.GetCounter().GetValue()
			}
		}
	}
	return sum
}

func bytesOf(s string) []string {
	out := make([]string, len(s))
	for i := range s {
		out[i] = s[i : i+1]
	}
	return out
}

// A json: route reads the body before any limit counts the request, so a
// drip must not hold the gateway longer than the headers could: the read is
// bounded as a whole by client_header_timeout, even though each byte comes
// well within client_body_timeout.
func TestKeyBodyDripIsCutOff(t *testing.T) {
	t.Parallel()
	up := newBodyUpstream(t)
	srv, _ := newTestGateway(t, `
client_header_timeout: 300ms
client_body_timeout: 5s
routes:
  - name: otp
    upstream: %s
    limits:
      - {algorithm: token_bucket, limit: 100, window: 1s, key: [json:phone]}
`, up.URL)
	body := `{"phone":"5550100"}`
	head := fmt.Sprintf("POST /otp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
	code, took := rawRequest(t, srv.Listener.Addr().String(), head, bytesOf(body), 100*time.Millisecond, false)
	if code != http.StatusRequestTimeout {
		t.Errorf("got status %d, want 408", code)
	}
	if took > 1500*time.Millisecond {
		t.Errorf("the drip held the request %v, want about client_header_timeout (300ms)", took)
	}
	if n := up.seen(); n != 0 {
		t.Errorf("the upstream saw %d requests, want 0", n)
	}
}

// A body that stops arriving for client_body_timeout is the client's
// failure: 408, and no upstream error.
func TestBodyIdleTimeout(t *testing.T) {
	t.Parallel()
	up := newBodyUpstream(t)
	m := metrics.New()
	srv, _ := newGateway(t, `
client_body_timeout: 200ms
routes:
  - name: upload
    upstream: %s
`, up.URL, m)
	head := "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"
	// Three parts 100 ms apart pass; then the client falls silent.
	code, took := rawRequest(t, srv.Listener.Addr().String(), head, []string{"aaaa", "bbbb", "cccc"}, 100*time.Millisecond, false)
	if code != http.StatusRequestTimeout {
		t.Errorf("got status %d, want 408", code)
	}
	if took > 2*time.Second {
		t.Errorf("answered after %v, want about 300ms + 200ms", took)
	}
	if got := upstreamErrors(t, m); got != 0 {
		t.Errorf("got %v upstream errors, want 0: the client fell silent", got)
	}
	if got := up.complete(); len(got) != 0 {
		t.Errorf("the upstream read complete bodies %q, want none", got)
	}
}

// The route timeout is the upstream's time: an upload that takes longer than
// it to a healthy upstream succeeds, while an upstream that stalls after the
// body, or stops reading it, still gets 504.
func TestRouteTimeoutCountsFromEndOfBody(t *testing.T) {
	t.Parallel()
	up := newBodyUpstream(t)
	slow := newBodyUpstream(t)
	slow.after = func() { time.Sleep(600 * time.Millisecond) }
	release := make(chan struct{})
	deaf := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release // never reads the body, never answers
	}))
	t.Cleanup(deaf.Close)
	t.Cleanup(func() { close(release) })
	m := metrics.New()
	srv, _ := newGateway(t, fmt.Sprintf(`
client_body_timeout: 2s
routes:
  - name: healthy
    match: {path_prefix: /healthy}
    upstream: %s
    timeout: 300ms
  - name: slow
    match: {path_prefix: /slow}
    upstream: %s
    timeout: 300ms
  - name: deaf
    match: {path_prefix: /deaf}
    upstream: %s
    timeout: 300ms
`, up.URL, slow.URL, deaf.URL)+"%.0s", "", m)
	addr := srv.Listener.Addr().String()
	parts := strings.Split(strings.Repeat("x", 10), "")

	code, took := rawRequest(t, addr, "POST /healthy HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n", parts, 100*time.Millisecond, false)
	if code != http.StatusOK {
		t.Errorf("healthy: a 1 s upload behind timeout 300ms got %d after %v, want 200", code, took)
	}
	if got := up.complete(); len(got) != 1 || got[0] != strings.Repeat("x", 10) {
		t.Errorf("healthy: the upstream read %q, want the whole body once", got)
	}
	code, _ = rawRequest(t, addr, "POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n", parts, 50*time.Millisecond, false)
	if code != http.StatusGatewayTimeout {
		t.Errorf("slow: an upstream answering 600ms after the body got %d, want 504", code)
	}
	big := strings.Repeat("y", 8<<20) // more than the sockets buffer between sluice and the deaf upstream
	start := time.Now()
	code, _ = rawRequest(t, addr, fmt.Sprintf("POST /deaf HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", len(big)), []string{big}, 0, false)
	if code != http.StatusGatewayTimeout || time.Since(start) > 5*time.Second {
		t.Errorf("deaf: an upstream that reads nothing got %d after %v, want 504 soon after 300ms", code, time.Since(start))
	}
	if got := upstreamErrors(t, m); got != 2 {
		t.Errorf("got %v upstream errors, want 2 (slow and deaf)", got)
	}
}

// A body the client frames wrongly is a 400 of the client, not a 502
// counted against the upstream.
func TestBodyFramingErrorIsClientError(t *testing.T) {
	t.Parallel()
	up := newBodyUpstream(t)
	m := metrics.New()
	srv, _ := newGateway(t, `
routes:
  - name: keyed
    match: {path_prefix: /keyed}
    upstream: %[1]s
    limits:
      - {algorithm: token_bucket, limit: 100, window: 1s, key: [json:id]}
  - name: plain
    upstream: %[1]s
`, up.URL, m)
	addr := srv.Listener.Addr().String()
	for _, tc := range []struct {
		name, head string
		parts      []string
		closeWrite bool
	}{
		{"bad chunk size", "POST /plain HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", []string{"4\r\nabcd\r\n", "zz\r\nabcd\r\n0\r\n\r\n"}, false},
		{"bad chunk size before keys", "POST /keyed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n", []string{"4\r\n{\"id\r\n", "zz\r\nabcd\r\n0\r\n\r\n"}, false},
		{"short body", "POST /plain HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n", []string{"abcde"}, true},
		{"short body before keys", "POST /keyed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 20\r\n\r\n", []string{`{"id":1`}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _ := rawRequest(t, addr, tc.head, tc.parts, 20*time.Millisecond, tc.closeWrite)
			if code != http.StatusBadRequest {
				t.Errorf("got status %d, want 400", code)
			}
		})
	}
	if got := upstreamErrors(t, m); got != 0 {
		t.Errorf("got %v upstream errors, want 0", got)
	}
	if got := up.complete(); len(got) != 0 {
		t.Errorf("the upstream read complete bodies %q, want none", got)
	}
}

// maxBodyConfig has a route keyed on a JSON field and a plain one, both
// with a max_body of 16 bytes; %[1]s is the upstream.
const maxBodyConfig = `
routes:
  - name: keyed
    match: {path_prefix: /keyed}
    upstream: %[1]s
    max_body: 16B
    limits:
      - {algorithm: token_bucket, limit: 100, window: 1s, key: [json:id]}
  - name: small
    upstream: %[1]s
    max_body: 16
`

// max_body answers 413 for a declared length over it without reaching the
// upstream, cuts a chunked body that grows past it so the upstream never
// reads it whole, and lets a body of exactly max_body through.
func TestMaxBody(t *testing.T) {
	t.Parallel()
	up := newBodyUpstream(t)
	srv, _ := newTestGateway(t, maxBodyConfig, up.URL)
	addr := srv.Listener.Addr().String()
	chunked := func(s string) []string {
		var out []string
		for _, p := range []string{s[:len(s)/2], s[len(s)/2:]} {
			out = append(out, fmt.Sprintf("%x\r\n%s\r\n", len(p), p))
		}
		return append(out, "0\r\n\r\n")
	}
	exact, over := strings.Repeat("a", 16), strings.Repeat("b", 17)
	for _, tc := range []struct {
		name, head string
		parts      []string
		want       int
		wantSeen   int // requests the upstream saw at all; -1: it may or may not have seen the start
	}{
		{"length over", "POST /small HTTP/1.1\r\nHost: x\r\nContent-Length: 17\r\n\r\n", []string{over}, 413, 0},
		{"length over, before keys", "POST /keyed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 17\r\n\r\n", []string{over}, 413, 0},
		{"huge length", "POST /small HTTP/1.1\r\nHost: x\r\nContent-Length: 9000000000\r\n\r\n", nil, 413, 0},
		{"length exact", "POST /small HTTP/1.1\r\nHost: x\r\nContent-Length: 16\r\n\r\n", []string{exact}, 200, 1},
		{"chunked exact", "POST /small HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", chunked(exact), 200, 1},
		{"chunked exact, before keys", "POST /keyed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n", chunked(`{"id":1,"p":"xx"}`[:16]), 200, 1},
		// Last: the upstream may see the start of these after the client
		// has its 413, which would count in a later case's tally.
		{"chunked over", "POST /small HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", chunked(over), 413, -1},
		{"chunked over, before keys", "POST /keyed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n", chunked(`{"id":1,"pad":"xxxxxxxx"}`), 413, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := up.seen()
			code, _ := rawRequest(t, addr, tc.head, tc.parts, 20*time.Millisecond, false)
			if code != tc.want {
				t.Errorf("got status %d, want %d", code, tc.want)
			}
			if got := up.seen() - before; tc.wantSeen >= 0 && got != tc.wantSeen {
				t.Errorf("the upstream saw %d requests, want %d", got, tc.wantSeen)
			}
		})
	}
	for _, b := range up.complete() {
		if len(b) > 16 {
			t.Errorf("the upstream read a complete body of %d bytes, over max_body 16", len(b))
		}
	}
}

// Over HTTP/2 the idle deadline is the stream's: a stalled body gets 408
// and the connection's other streams are untouched.
func TestBodyIdleTimeoutHTTP2(t *testing.T) {
	t.Parallel()
	up := newBodyUpstream(t)
	cfg, err := routes.Parse("test.yaml", []byte(fmt.Sprintf(`
client_body_timeout: 200ms
routes:
  - name: upload
    upstream: %s
`, up.URL)), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	store := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{})
	t.Cleanup(func() { store.Close() })
	g := New(Options{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	g.Load(cfg, store)
	srv := httptest.NewUnstartedServer(g)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	c := srv.Client()

	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() })
	go pw.Write([]byte("abc")) // then nothing more
	req, _ := http.NewRequest("POST", srv.URL+"/upload", pr)
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusRequestTimeout {
		t.Errorf("got HTTP/%d %d, want HTTP/2 408", resp.ProtoMajor, resp.StatusCode)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("answered after %v, want about 200ms", took)
	}
	resp, err = c.Post(srv.URL+"/upload", "text/plain", strings.NewReader("whole"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a whole body after the stalled one got %d, want 200", resp.StatusCode)
	}
}

// BenchmarkBodyPath measures a POST with a 1 KiB body through a route
// without limits and through one keyed by json:, the requests whose body
// the gateway guards.
func BenchmarkBodyPath(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write([]byte("ok"))
	}))
	defer up.Close()
	srv, _ := newGateway(b, `
log: {access_log: false}
routes:
  - name: keyed
    match: {path_prefix: /keyed}
    upstream: %[1]s
    limits:
      - {algorithm: token_bucket, limit: 1000000000, window: 1000s, key: [json:user]}
  - name: plain
    upstream: %[1]s
`, up.URL, nil)
	tr := &http.Transport{MaxIdleConnsPerHost: 256}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	body := `{"user":"bench","pad":"` + strings.Repeat("p", 1000) + `"}`
	for _, path := range []string{"/plain", "/keyed"} {
		b.Run(path[1:], func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req, _ := http.NewRequest("POST", srv.URL+path, strings.NewReader(body))
					req.Header.Set("Content-Type", "application/json")
					benchSend(b, c, req)
				}
			})
		})
	}
}

// A body sluice answers without reading (no route: 404; a limit: 429) is
// read away by the server before it answers, so the connection can carry
// the next request; a client that stops halfway must not hold the answer
// and its connection for good: the read gets client_body_timeout, then the
// answer goes out and the connection is closed.
func TestUnreadBodyDoesNotHoldTheAnswer(t *testing.T) {
	t.Parallel()
	for _, cfg := range []struct {
		name, timeouts string
		body           time.Duration
	}{
		{"", "client_body_timeout: 300ms", 300 * time.Millisecond},
		// The read of the rest comes before the answer is written: a
		// send_timeout shorter than it must not fail the answer's write
		// before the client had a chance to take it. The write deadline
		// was set before the read and had passed when the answer was
		// written: the 404 or 429 was never sent.
		{"send_timeout shorter/", "client_body_timeout: 600ms\nsend_timeout: 200ms", 600 * time.Millisecond},
	} {
		up := newBodyUpstream(t)
		srv, _ := newTestGateway(t, cfg.timeouts+`
routes:
  - name: shut
    match: {path_prefix: /shut}
    upstream: %s
    limits:
      - {algorithm: fixed_window, limit: 1, window: 1h, key: [global]}
`, up.URL)
		addr := srv.Listener.Addr().String()
		if code, _ := rawRequest(t, addr, "POST /shut HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\n", []string{"x"}, 0, false); code != 200 {
			t.Fatalf("%sfirst request: got %d, want 200", cfg.name, code)
		}
		for _, tc := range []struct {
			name, path string
			want       int
		}{{"no route", "/nowhere", 404}, {"rejected", "/shut", 429}} {
			t.Run(cfg.name+tc.name, func(t *testing.T) {
				t.Parallel()
				code, answered, closed := stalledBodyExchange(t, addr, tc.path)
				if code != tc.want || answered > cfg.body+2*time.Second {
					t.Errorf("got %d after %v, want %d after about client_body_timeout (%v)", code, answered, tc.want, cfg.body)
				}
				if !closed {
					t.Errorf("the connection stayed open after the answer, want it closed")
				}
			})
		}
	}
}

// The transport closes a request body it could not send (the upstream
// refused the connection), and closing reads the rest of the body away: a
// client that stopped halfway must not hold the 502 back for good.
func TestUnreachableUpstreamWithStalledBody(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	srv, _ := newTestGateway(t, `
client_body_timeout: 300ms
routes:
  - name: dead
    upstream: %s
`, dead)
	code, took := rawRequest(t, srv.Listener.Addr().String(), "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n", []string{"only ten b"}, 0, false)
	if code != http.StatusBadGateway || took > 2*time.Second {
		t.Errorf("got %d after %v, want 502 within about client_body_timeout (300ms)", code, took)
	}
}

// A Config built without routes.Parse has no client_body_timeout: bodies
// then read without an idle bound rather than failing at once.
func TestZeroBodyTimeoutMeansNoBound(t *testing.T) {
	t.Parallel()
	up := newBodyUpstream(t)
	cfg, err := routes.Parse("test.yaml", []byte(fmt.Sprintf("routes:\n  - name: up\n    upstream: %s\n", up.URL)), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	cfg.ClientBodyTimeout = 0
	store := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{})
	t.Cleanup(func() { store.Close() })
	g := New(Options{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	g.Load(cfg, store)
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	// The body comes after the headers, so the gateway has to wait for it.
	code, _ := rawRequest(t, srv.Listener.Addr().String(), "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\n", []string{"body"}, 50*time.Millisecond, false)
	if code != 200 {
		t.Errorf("got %d, want 200", code)
	}
}
