package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
)

// TestH2ToHTTP1Translation: requests framed by hand over HTTP/2, in the
// shapes RFC 9113 calls malformed or that HTTP/1 cannot carry, reach the
// HTTP/1.1 upstream only as the request the routes and keys saw, or not
// at all. The host routed and keyed is :authority (or, without one, the
// host field), and it alone reaches the upstream (as X-Forwarded-Host); a
// second host field never does. Connection-specific fields, bytes that
// would split an HTTP/1 line and userinfo never reach it. Cookie fields
// are joined into one, as the upstream reads them; a key given in two
// fields is refused however the header block is split into CONTINUATION
// frames.
func TestH2ToHTTP1Translation(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []string // what each request reached the upstream as
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var fs []string
		for k, vs := range r.Header {
			if k != "X-Request-Id" && k != "X-Forwarded-For" && k != "X-Real-Ip" && k != "X-Forwarded-Proto" && k != "Accept-Encoding" {
				fs = append(fs, k+": "+strings.Join(vs, "|"))
			}
		}
		sort.Strings(fs)
		mu.Lock()
		got = append(got, r.Method+" "+r.RequestURI+" "+strings.Join(fs, "; "))
		mu.Unlock()
	}))
	t.Cleanup(up.Close)
	srv := newTLSGateway(t, fmt.Sprintf(`
routes:
  - name: tenant
    match: {host: api.example.com}
    upstream: %[1]s
    limits:
      - {algorithm: fixed_window, limit: 100, window: 1h, key: [header:Host]}
  - name: cookie
    match: {path: /v1/cookie}
    upstream: %[1]s
    limits:
      - {algorithm: fixed_window, limit: 100, window: 1h, key: [cookie:sid]}
  - name: key
    upstream: %[1]s
    limits:
      - {algorithm: fixed_window, limit: 100, window: 1h, key: [header:X-Api-Key]}
`, up.URL))
	addr := srv.Listener.Addr().String()
	at := func(path, authority string, fields ...string) [][2]string {
		f := [][2]string{{":method", "GET"}, {":scheme", "https"}, {":path", path}}
		if authority != "" {
			f = append(f, [2]string{":authority", authority})
		}
		for i := 0; i < len(fields); i += 2 {
			f = append(f, [2]string{fields[i], fields[i+1]})
		}
		return f
	}
	req := func(authority string, fields ...string) [][2]string { return at("/v1/otp", authority, fields...) }
	const reset = 0 // the stream is reset as malformed
	for _, tc := range []struct {
		name   string
		fields [][2]string
		split  bool   // the header block is sent as HEADERS and CONTINUATION, one field each
		status int    // reset: refused with RST_STREAM
		want   string // what the upstream got; "" for nothing
	}{
		{":authority and host differ", req("api.example.com", "host", "evil.example.com"), false, 200,
			"GET /v1/otp X-Forwarded-Host: api.example.com"},
		{"host field without :authority", req("", "host", "API.example.com."), false, 200,
			"GET /v1/otp X-Forwarded-Host: api.example.com"},
		{"userinfo in :authority", req("victim@api.example.com"), false, reset, ""},
		{"connection", req("acme.example.com", "connection", "x-api-key", "x-api-key", "a"), false, 400, ""},
		{"keep-alive", req("acme.example.com", "keep-alive", "timeout=5"), false, 400, ""},
		{"proxy-connection", req("acme.example.com", "proxy-connection", "keep-alive"), false, 400, ""},
		{"transfer-encoding", req("acme.example.com", "transfer-encoding", "chunked"), false, 400, ""},
		{"upgrade", req("acme.example.com", "upgrade", "websocket"), false, 400, ""},
		{"te other than trailers", req("acme.example.com", "te", "gzip"), false, 400, ""},
		{"CR LF in a value", req("acme.example.com", "x-api-key", "a\r\nX-Forwarded-For: 6.6.6.6"), false, reset, ""},
		{"NUL in a value", req("acme.example.com", "x-api-key", "a\x00b"), false, reset, ""},
		{"upper-case name", req("acme.example.com", "X-Api-Key", "a"), false, reset, ""},
		{"cookie fields joined", at("/v1/cookie", "acme.example.com", "cookie", "a=1", "cookie", "sid=s1"), false, 200,
			"GET /v1/cookie Cookie: a=1; sid=s1; X-Forwarded-Host: acme.example.com"},
		{"cookie key in two fields", at("/v1/cookie", "acme.example.com", "cookie", "sid=victim", "cookie", "sid=decoy"), true, 400, ""},
		{"key in HEADERS and CONTINUATION", req("acme.example.com", "x-api-key", "victim", "x-api-key", "decoy"), true, 400, ""},
		{"key in CONTINUATION", req("acme.example.com", "x-api-key", "victim"), true, 200,
			"GET /v1/otp X-Api-Key: victim; X-Forwarded-Host: acme.example.com"},
	} {
		status := h2Split(t, addr, tc.fields, tc.split)
		mu.Lock()
		g := strings.Join(got, "\n")
		got = nil
		mu.Unlock()
		if status != tc.status || g != tc.want {
			t.Errorf("%s: got %d, upstream %q; want %d, upstream %q", tc.name, status, g, tc.status, tc.want)
		}
	}
}

// h2Split sends one bodiless request of fields on a new HTTP/2
// connection, its header block in one HEADERS frame, or with split one
// field in each of HEADERS and CONTINUATION frames, and returns the
// answer's status, or 0 for a reset stream.
func h2Split(t *testing.T, addr string, fields [][2]string, split bool) int {
	t.Helper()
	_, fr := h2Open(t, addr, 10*time.Second)
	var blocks [][]byte
	var hb bytes.Buffer
	e := hpack.NewEncoder(&hb)
	for _, f := range fields {
		e.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		if split {
			blocks = append(blocks, bytes.Clone(hb.Bytes()))
			hb.Reset()
		}
	}
	if !split {
		blocks = [][]byte{hb.Bytes()}
	}
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: blocks[0], EndStream: true, EndHeaders: len(blocks) == 1})
	for i, b := range blocks[1:] {
		fr.WriteContinuation(1, i == len(blocks)-2, b)
	}
	dec := hpack.NewDecoder(4096, nil)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("%q: no answer: %v", fields, err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.RSTStreamFrame:
			return 0
		case *http2.HeadersFrame:
			hf, err := dec.DecodeFull(f.HeaderBlockFragment())
			if err != nil {
				t.Fatal(err)
			}
			for _, h := range hf {
				if h.Name == ":status" {
					var s int
					fmt.Sscan(h.Value, &s)
					return s
				}
			}
		}
	}
}

// TestH2RapidResetChargesAndForwardsNothing: a client that opens streams
// and resets each at once (CVE-2023-44487) gets no request past the
// limits for free. Every stream the limits decided was charged, reset or
// not: once one of them was refused, the bucket stays spent for the next
// request. A stream reset while it waits in a leaky_bucket queue never
// reaches the upstream, though its place comes up later. The upstream
// never gets more requests than the limit admits.
func TestH2RapidResetChargesAndForwardsNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, limit     string
		streams, admits int
	}{
		{"fixed_window", "{algorithm: fixed_window, limit: 3, window: 1h, key: [global]}", 40, 3},
		// One leaves each second: the five queued would go within 5s
		// had their resets not taken them out.
		{"leaky_bucket queue", "{algorithm: leaky_bucket, limit: 1, window: 1s, queue: 5, key: [global]}", 6, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var hits atomic.Int64
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
			t.Cleanup(up.Close)
			cfg, err := routes.Parse("test.yaml", []byte(fmt.Sprintf("routes:\n  - name: otp\n    upstream: %s\n    limits:\n      - %s\n", up.URL, tc.limit)),
				func(string) (string, bool) { return "", false })
			if err != nil {
				t.Fatal(err)
			}
			store := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{})
			t.Cleanup(func() { store.Close() })
			var access lockedBuffer
			g := New(Options{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), AccessLog: &access})
			g.Load(cfg, store)
			srv := httptest.NewUnstartedServer(g)
			srv.EnableHTTP2 = true
			srv.StartTLS()
			t.Cleanup(srv.Close)
			addr := srv.Listener.Addr().String()

			c, fr := h2Open(t, addr, 20*time.Second)
			var hb bytes.Buffer
			e := hpack.NewEncoder(&hb)
			for _, f := range h2Req("GET", "/v1/otp") {
				e.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
			}
			go io.Copy(io.Discard, c) // keeps the server's writes flowing
			for i := range tc.streams {
				id := uint32(2*i + 1)
				fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true})
				fr.WriteRSTStream(id, http2.ErrCodeCancel)
			}
			// Each stream has its access line once its handler is done,
			// after anything it sent upstream.
			lines := func() []string {
				if l := access.lines(); l[0] != "" {
					return l
				}
				return nil
			}
			deadline := time.Now().Add(10 * time.Second)
			for len(lines()) < tc.streams && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			ls := lines()
			if len(ls) != tc.streams {
				t.Fatalf("%d streams reset: %d access lines after 10s, want %d", tc.streams, len(ls), tc.streams)
			}
			refused := 0
			for _, l := range ls {
				if strings.Contains(l, `"status":429`) {
					refused++
				}
			}
			if n := hits.Load(); n > int64(tc.admits) {
				t.Errorf("the upstream got %d of %d reset streams, want at most the %d the limit admits", n, tc.streams, tc.admits)
			}
			if refused > 0 && tc.name == "fixed_window" {
				if a := h2Do(t, addr, h2Stream{fields: h2Req("GET", "/v1/otp")}); a.status != 429 {
					t.Errorf("%d of %d reset streams were refused, so the others spent the bucket; the next request got %d, want 429", refused, tc.streams, a.status)
				}
			}
		})
	}
}

// TestRequestWithoutHostIs400: RFC 9113 §8.3.1 has an https request
// carry :authority or a host field, and neither empty; net/http takes an
// HTTP/2 one with neither, and over HTTP/1.1 an empty Host field. So with
// a host that is empty once canonical ("." or ":443"). Routes then matched
// no host (a host-bound route's limits did not apply: the request took a
// catch-all) and header:Host keys read "", while the upstream got an empty
// X-Forwarded-Host, which Express, Rails and Spring skip for the Host
// field: the upstream's own host, which no route saw. Such a request is
// answered 400 and never forwarded. HTTP/1.0 predates Host and may still
// go without, or with an empty one, which is how net/http tells it
// apart; a Host it gives that names no host ("." or a port alone) is a
// 400 as in HTTP/1.1, as is a request target of such a host.
func TestRequestWithoutHostIs400(t *testing.T) {
	t.Parallel()
	addr, hits := hostBoundGateway(t)
	base := [][2]string{{":method", "GET"}, {":scheme", "https"}, {":path", "/v1/otp"}}
	for _, tc := range []struct {
		name   string
		fields [][2]string
	}{
		{"no :authority, no host", nil},
		{"empty :authority", [][2]string{{":authority", ""}}},
		{"empty :authority and host", [][2]string{{":authority", ""}, {"host", ""}}},
		{":authority of a dot", [][2]string{{":authority", "."}}},
		{":authority of a default port", [][2]string{{":authority", ":443"}}},
		{":authority of another port alone", [][2]string{{":authority", ":8443"}}},
		{"host of a dot", [][2]string{{"host", "."}}},
	} {
		fields := append(append([][2]string{}, base...), tc.fields...)
		if a := h2Do(t, addr, h2Stream{fields: fields}); a.status != http.StatusBadRequest {
			t.Errorf("HTTP/2, %s: got %d (reset %v), want 400", tc.name, a.status, a.wasRST)
		}
	}
	// h1Target sends head, a request line and fields, over HTTP/1.
	h1Target := func(head string) int {
		c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "%sConnection: close\r\n\r\n", head)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	h1 := func(proto, host string) int {
		return h1Target(fmt.Sprintf("GET /v1/otp %s\r\n%s", proto, host))
	}
	for _, host := range []string{"Host: \r\n", "Host: .\r\n", "Host: :443\r\n", "Host: :8443\r\n", "Host: .:80\r\n"} {
		if got := h1("HTTP/1.1", host); got != http.StatusBadRequest {
			t.Errorf("HTTP/1.1, %q: got %d, want 400", host, got)
		}
	}
	for _, host := range []string{"Host: .\r\n", "Host: ..\r\n", "Host: :443\r\n", "Host: :8443\r\n", "Host: .:80\r\n"} {
		if got := h1("HTTP/1.0", host); got != http.StatusBadRequest {
			t.Errorf("HTTP/1.0, %q: got %d, want 400", host, got)
		}
	}
	if got := h1Target("GET https://./v1/otp HTTP/1.0\r\n"); got != http.StatusBadRequest {
		t.Errorf("HTTP/1.0, request target of host \".\": got %d, want 400", got)
	}
	if n := hits(); n != 0 {
		t.Errorf("the upstream got %d requests, want none", n)
	}
	if a := h2Do(t, addr, h2Stream{fields: append(base, [2]string{":authority", "api.example.com"})}); a.status != 200 {
		t.Errorf("HTTP/2 with a host: got %d, want 200", a.status)
	}
	if got := h1("HTTP/1.0", ""); got != 200 {
		t.Errorf("HTTP/1.0 without Host: got %d, want 200", got)
	}
	if got := h1("HTTP/1.0", "Host: \r\n"); got != 200 {
		t.Errorf("HTTP/1.0 with an empty Host: got %d, want 200", got)
	}
}

// TestH2AuthorityEscapedIs400: WHATWG's URL parser, which Node
// frameworks build request URLs with, decodes escapes in a host, so
// ":authority: api%2eexample.com" is api.example.com to an upstream that
// reads X-Forwarded-Host through it, while routes matched
// another host: the request took the catch-all, past api.example.com's
// limit, and keyed a bucket of its own. It is answered 400.
func TestH2AuthorityEscapedIs400(t *testing.T) {
	t.Parallel()
	addr, hits := hostBoundGateway(t)
	for _, authority := range []string{"api%2eexample.com", "%61pi.example.com", "api.example.co%6d:443"} {
		if got := h2Status(t, addr, authority); got != http.StatusBadRequest {
			t.Errorf(":authority %q: got %d, want 400", authority, got)
		}
	}
	if n := hits(); n != 0 {
		t.Errorf("the upstream got %d requests, want none", n)
	}
}

// hostBoundGateway starts a TLS gateway with a route bound to
// api.example.com, limited per host, beside a catch-all, and returns its
// address and the count of requests its upstream got.
func hostBoundGateway(t *testing.T) (addr string, hits func() int64) {
	t.Helper()
	var up *httptest.Server
	up, hits = countingUpstream(t)
	srv := newTLSGateway(t, fmt.Sprintf(`
routes:
  - name: tenant
    match: {host: api.example.com}
    upstream: %[1]s
    limits:
      - {algorithm: fixed_window, limit: 1, window: 1h, key: [header:Host]}
  - name: other
    upstream: %[1]s
`, up.URL))
	return srv.Listener.Addr().String(), hits
}
