package proxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
)

// refusedURL returns scheme://host:port of a port nothing listens on: one
// that was listened on, noted and closed, so a connection to it is refused.
func refusedURL(t *testing.T, scheme string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return scheme + "://" + addr
}

// liveUpstream records each request body it read whole and the protocol
// it came over, and answers with the body's length.
type liveUpstream struct {
	*httptest.Server
	mu     sync.Mutex
	bodies [][]byte
	protos []int
}

func newLiveUpstream(t *testing.T, useTLS bool) *liveUpstream {
	t.Helper()
	u := &liveUpstream{}
	u.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		u.mu.Lock()
		u.bodies, u.protos = append(u.bodies, b), append(u.protos, r.ProtoMajor)
		u.mu.Unlock()
		fmt.Fprintf(w, "got %d bytes", len(b))
	}))
	if useTLS {
		u.EnableHTTP2 = true
		u.StartTLS()
	} else {
		u.Start()
	}
	t.Cleanup(u.Close)
	return u
}

func (u *liveUpstream) got() ([][]byte, []int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.bodies, u.protos
}

// nextupGateway serves yaml (with %[1]s for the refused target and %[2]s
// for the live one), trusting up's certificate when it has one, and keeps
// the access lines.
func nextupGateway(t *testing.T, yaml string, up *liveUpstream, refused ...any) (*httptest.Server, *metrics.Metrics, *lockedBuffer) {
	t.Helper()
	args := append(refused, up.URL)
	cfg, err := routes.Parse("test.yaml", []byte(fmt.Sprintf(yaml, args...)), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	store := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{})
	t.Cleanup(func() { store.Close() })
	tr := NewTransport()
	if up.TLS != nil {
		tr.base.(*http.Transport).TLSClientConfig = up.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	}
	t.Cleanup(tr.CloseIdleConnections)
	m := metrics.New()
	access := &lockedBuffer{}
	g := New(Options{Metrics: m, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), Transport: tr, AccessLog: access})
	g.Load(cfg, store)
	srv := httptest.NewUnstartedServer(g)
	srv.Config.ConnContext = WithConn
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, m, access
}

// nextupRoute sends every request to a refused target first (the round
// robin's first pick), then to the live one. Its limits key on a JSON
// field; the second gives back what the live target answers (not a 401).
const nextupRoute = `
routes:
  - name: nx
    upstreams: [%[1]s, %[2]s]
    limits:
      - {algorithm: fixed_window, limit: 10, window: 1h, key: [json:id]}
      - {algorithm: fixed_window, limit: 10, window: 1h, key: [json:id], count_status: [401]}
`

// counterSum is the sum of the series of name in m, a counter or a
// gauge.
func counterSum(t *testing.T, m *metrics.Metrics, name string) float64 {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, s := range mf.GetMetric() {
				sum += s.GetCounter().GetValue() + s.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// nextupRequest is a POST of body to srv: with a Content-Length, or
// chunked, of type JSON or not.
func nextupRequest(t *testing.T, srv string, body []byte, chunked, isJSON bool) *http.Request {
	t.Helper()
	req, err := http.NewRequest("POST", srv+"/otp", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if chunked {
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = -1
		req.TransferEncoding = []string{"chunked"}
	}
	if isJSON {
		req.Header.Set("Content-Type", "application/json")
	}
	return req
}

// bigJSON is a JSON body of about n bytes with "id":"a".
func bigJSON(n int) []byte {
	pad := strings.Repeat("x", n)
	return []byte(`{"id":"a","pad":"` + pad + `"}`)
}

// TestNextTargetAfterFailedConnect: a request of any method whose target
// could not be connected to (refused: nothing of it was sent) moves to the
// next target, as nginx's proxy_next_upstream error does, with its body
// whole: the live target gets the exact bytes and the client its answer,
// on sluice's own transport (a json:-held body) and on http.Transport
// (streamed, chunked, https:// over HTTP/2). The limits count the request
// once and count_status gives it back once, no upstream error is counted,
// and the access line names the target that answered.
func TestNextTargetAfterFailedConnect(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		tls     bool
		body    []byte
		chunked bool
		isJSON  bool
	}{
		{name: "streamed 1 MiB POST", body: bytes.Repeat([]byte("0123456789abcdef"), 1<<16)},
		{name: "chunked POST", body: bytes.Repeat([]byte("chunk "), 50000), chunked: true},
		{name: "json-keyed POST", body: []byte(`{"id":"a","otp":"123456"}`), isJSON: true},
		{name: "json-keyed 1 MiB POST", body: bigJSON(1 << 20), isJSON: true},
		{name: "POST without body", body: nil},
		{name: "https streamed POST", tls: true, body: bytes.Repeat([]byte("s"), 300000)},
		{name: "https json-keyed POST", tls: true, body: []byte(`{"id":"a"}`), isJSON: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up := newLiveUpstream(t, tc.tls)
			scheme := "http"
			if tc.tls {
				scheme = "https"
			}
			srv, m, access := nextupGateway(t, nextupRoute, up, refusedURL(t, scheme))
			wantMovedOn(t, srv, m, access, up, nextupRequest(t, srv.URL, tc.body, tc.chunked, tc.isJSON), tc.body)
			if n := counterSum(t, m, "sluice_ratelimit_refunds_total"); n != 1 {
				t.Errorf("sluice_ratelimit_refunds_total: got %v, want 1", n)
			}
		})
	}
}

// TestAllTargetsRefusedIs502: when every target refuses, each is tried
// once and the client gets a 502 problem+json, counted once as refused.
func TestAllTargetsRefusedIs502(t *testing.T) {
	t.Parallel()
	const route = `
routes:
  - name: nx
    upstreams: [%[1]s, %[2]s, %[3]s]
    limits:
      - {algorithm: fixed_window, limit: 10, window: 1h, key: [json:id]}
`
	for _, tc := range []struct {
		name    string
		body    []byte
		chunked bool
		isJSON  bool
	}{
		{name: "streamed POST", body: bytes.Repeat([]byte("z"), 64<<10)},
		{name: "chunked POST", body: bytes.Repeat([]byte("z"), 64<<10), chunked: true},
		{name: "json-keyed POST", body: []byte(`{"id":"a"}`), isJSON: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The "live" one is a third refused target here.
			dead := &liveUpstream{Server: &httptest.Server{URL: refusedURL(t, "http")}}
			srv, m, _ := nextupGateway(t, route, dead, refusedURL(t, "http"), refusedURL(t, "http"))
			want502(t, nextupRequest(t, srv.URL, tc.body, tc.chunked, tc.isJSON))
			if n := upstreamErrors(t, m); n != 1 {
				t.Errorf("sluice_upstream_errors_total: got %v, want 1", n)
			}
		})
	}
}

// TestNoResendAfterPartOfBodySent: a target that accepted the connection
// and read part of a POST body before closing may have acted on it: the
// request is not sent to the next target, and the client gets 502.
func TestNoResendAfterPartOfBodySent(t *testing.T) {
	t.Parallel()
	partial := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.CopyN(io.Discard, req.Body, 100)
	})
	up := newLiveUpstream(t, false)
	srv, _, _ := nextupGateway(t, nextupRoute, up, "http://"+partial.ln.Addr().String())
	body := bytes.Repeat([]byte("p"), 64<<10)
	head := fmt.Sprintf("POST /otp HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", len(body))
	code, _ := rawRequest(t, srv.Listener.Addr().String(), head, []string{string(body)}, 0, false)
	if code != http.StatusBadGateway {
		t.Errorf("got %d, want 502", code)
	}
	if bodies, _ := up.got(); len(bodies) != 0 {
		t.Errorf("the next target got %d requests, want none", len(bodies))
	}
	if n := partial.accepted.Load(); n != 1 {
		t.Errorf("the target that read part of the body got %d connections, want 1", n)
	}
}

// nextupBase stands in for the transport under upstreams: its first
// attempt does what first says to the request, then fails as a connect
// that could not be made; later attempts read the body whole and close it,
// as transports do.
type nextupBase struct {
	first func(req *http.Request) error
	mu    sync.Mutex
	hosts []string
	read  []string
}

func (b *nextupBase) RoundTrip(req *http.Request) (*http.Response, error) {
	b.mu.Lock()
	b.hosts = append(b.hosts, req.URL.Host)
	n := len(b.hosts)
	b.mu.Unlock()
	if n == 1 {
		return nil, b.first(req)
	}
	var got []byte
	if req.Body != nil {
		var err error
		got, err = io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
	}
	b.mu.Lock()
	b.read = append(b.read, string(got))
	b.mu.Unlock()
	return &http.Response{StatusCode: 200, Body: http.NoBody, Request: req}, nil
}

// closeCounter is a request body that counts its Closes.
type closeCounter struct {
	io.Reader
	mu     sync.Mutex
	closes int
}

func (c *closeCounter) Close() error {
	c.mu.Lock()
	c.closes++
	c.mu.Unlock()
	return nil
}

// TestNextTargetOnlyWhileBodyUnread: a failed connect moves a request with
// a body on only when no byte of the body was read; a transport's close of
// the body on the failed connect neither ends nor consumes it, and the
// client's body is closed once, when the request is done with it (the
// test's transport closes it on every attempt but one). An
// error other than a failed connect (the connection was made) moves
// nothing on.
func TestNextTargetOnlyWhileBodyUnread(t *testing.T) {
	t.Parallel()
	dialRefused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, tc := range []struct {
		name      string
		first     func(req *http.Request) error
		wantHosts string
		wantRead  string // what the second target read
		wantErr   bool
	}{
		{"refused, body closed", func(req *http.Request) error { req.Body.Close(); return dialRefused }, "a:1 b:2", "0123456789", false},
		{"refused, body untouched", func(req *http.Request) error { return dialRefused }, "a:1 b:2", "0123456789", false},
		{"refused, body closed twice", func(req *http.Request) error {
			req.Body.Close()
			req.Body.Close()
			return dialRefused
		}, "a:1 b:2", "0123456789", false},
		{"one byte read, body closed twice, then refused", func(req *http.Request) error {
			req.Body.Read(make([]byte, 1))
			req.Body.Close()
			req.Body.Close()
			return dialRefused
		}, "a:1", "", true},
		{"unreachable", func(req *http.Request) error {
			req.Body.Close()
			return &net.OpError{Op: "dial", Net: "tcp", Err: syscall.EHOSTUNREACH}
		}, "a:1 b:2", "0123456789", false},
		{"dial timeout", func(req *http.Request) error {
			req.Body.Close()
			return &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}
		}, "a:1 b:2", "0123456789", false},
		{"one byte read, then refused", func(req *http.Request) error {
			req.Body.Read(make([]byte, 1))
			req.Body.Close()
			return dialRefused
		}, "a:1", "", true},
		{"empty read, then refused", func(req *http.Request) error {
			req.Body.Read(nil)
			req.Body.Close()
			return dialRefused
		}, "a:1", "", true},
		{"reset after connecting", func(req *http.Request) error {
			req.Body.Close()
			return &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
		}, "a:1", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base := &nextupBase{first: tc.first}
			a, _ := url.Parse("http://a:1")
			b, _ := url.Parse("http://b:2")
			u := &upstreams{base: base, targets: []*url.URL{a, b}}
			body := &closeCounter{Reader: strings.NewReader("0123456789")}
			req, _ := http.NewRequest("POST", "http://a:1/x", body)
			resp, err := u.RoundTrip(req)
			if (err != nil) != tc.wantErr {
				t.Fatalf("got error %v, want error: %v", err, tc.wantErr)
			}
			if err == nil {
				resp.Body.Close()
			}
			if got := strings.Join(base.hosts, " "); got != tc.wantHosts {
				t.Errorf("targets tried: got %q, want %q", got, tc.wantHosts)
			}
			if got := strings.Join(base.read, ""); got != tc.wantRead {
				t.Errorf("the next target read %q, want %q", got, tc.wantRead)
			}
			body.mu.Lock()
			closes := body.closes
			body.mu.Unlock()
			if closes != 1 {
				t.Errorf("the client's body was closed %d times, want once", closes)
			}
		})
	}
}

// wantMovedOn sends req, whose body is body, through srv and checks that it
// reached the live target up and no other: the client got up's answer,
// up got the exact bytes once (over HTTP/2 when it is an https:// one),
// the request was counted once and no upstream error at all, and the
// access line, written as srv closes, names up.
func wantMovedOn(t *testing.T, srv *httptest.Server, m *metrics.Metrics, access *lockedBuffer, up *liveUpstream, req *http.Request, body []byte) {
	t.Helper()
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := fmt.Sprintf("got %d bytes", len(body)); resp.StatusCode != 200 || string(answer) != want {
		t.Fatalf("got %d %q, want 200 %q", resp.StatusCode, answer, want)
	}
	bodies, protos := up.got()
	if len(bodies) != 1 {
		t.Fatalf("the live target got %d requests, want 1", len(bodies))
	}
	if !bytes.Equal(bodies[0], body) {
		t.Errorf("the live target got %d bytes, not the %d sent", len(bodies[0]), len(body))
	}
	scheme, _, _ := strings.Cut(up.URL, "://")
	if scheme == "https" && protos[0] != 2 {
		t.Errorf("the https target got HTTP/%d, want HTTP/2", protos[0])
	}
	if got := resp.Header.Get("X-RateLimit-Remaining"); got != "9" {
		t.Errorf("X-RateLimit-Remaining: got %q, want 9 (the request counted once)", got)
	}
	if n := upstreamErrors(t, m); n != 0 {
		t.Errorf("sluice_upstream_errors_total: got %v, want 0", n)
	}
	srv.Close() // waits for the handler, which writes the access line as it ends
	var line struct {
		Upstream string `json:"upstream"`
		Status   int    `json:"status"`
	}
	if err := json.Unmarshal([]byte(access.lines()[0]), &line); err != nil {
		t.Fatal(err)
	}
	if want := strings.TrimPrefix(up.URL, scheme+"://"); line.Upstream != want || line.Status != 200 {
		t.Errorf("access line: got upstream %q status %d, want %q 200", line.Upstream, line.Status, want)
	}
}

// want502 sends req and checks that it is answered 502 problem+json, as
// an upstream nobody could reach.
func want502(t *testing.T, req *http.Request) {
	t.Helper()
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(string(answer), "unavailable") {
		t.Errorf("got %d %s %q, want 502 problem+json", resp.StatusCode, resp.Header.Get("Content-Type"), answer)
	}
}
