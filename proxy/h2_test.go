package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2Stream describes one request sent by hand over HTTP/2.
type h2Stream struct {
	fields   [][2]string // pseudo-fields first
	body     string      // sent in one DATA frame unless empty
	trailers [][2]string // sent as a final HEADERS frame when set
}

// h2Answer is what the gateway answered to one stream.
type h2Answer struct {
	status int
	header http.Header
	reset  http2.ErrCode
	wasRST bool
	goaway bool
	body   string
}

// h2Do sends s on a new HTTP/2 connection and returns the answer.
func h2Do(t *testing.T, addr string, s h2Stream) h2Answer {
	t.Helper()
	_, fr := h2Open(t, addr, 10*time.Second)
	enc := func(fs [][2]string) []byte {
		var hb bytes.Buffer
		e := hpack.NewEncoder(&hb)
		for _, f := range fs {
			e.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		return hb.Bytes()
	}
	endAfterHeaders := s.body == "" && s.trailers == nil
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc(s.fields), EndStream: endAfterHeaders, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	if s.body != "" {
		fr.WriteData(1, s.trailers == nil, []byte(s.body))
	}
	if s.trailers != nil {
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc(s.trailers), EndStream: true, EndHeaders: true})
	}
	dec := hpack.NewDecoder(4096, nil)
	var a h2Answer
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			if a.status != 0 {
				return a
			}
			t.Fatalf("no answer: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.GoAwayFrame:
			a.goaway = true
		case *http2.RSTStreamFrame:
			a.wasRST, a.reset = true, f.ErrCode
			return a
		case *http2.HeadersFrame:
			hf, err := dec.DecodeFull(f.HeaderBlockFragment())
			if err != nil {
				t.Fatal(err)
			}
			if a.status == 0 {
				a.header = http.Header{}
				for _, h := range hf {
					if h.Name == ":status" {
						a.status, _ = strconv.Atoi(h.Value)
					} else {
						a.header.Add(h.Name, h.Value)
					}
				}
			}
			if f.StreamEnded() {
				return a
			}
		case *http2.DataFrame:
			a.body += string(f.Data())
			if f.StreamEnded() {
				return a
			}
		}
	}
}

func h2Req(method, path string, fields ...string) [][2]string {
	f := [][2]string{{":method", method}, {":scheme", "https"}, {":authority", "acme.example.com"}, {":path", path}}
	for i := 0; i < len(fields); i += 2 {
		f = append(f, [2]string{fields[i], fields[i+1]})
	}
	return f
}

// TestH2TrailersNotForwarded: request trailers are not forwarded.
// SPEC §4 has header names with "_" dropped and, from an untrusted peer,
// X-Forwarded-*, X-Real-IP, X-HTTP-Method-Override (and the others)
// removed before forwarding. Trailers arrive after that cleaning: a route
// with a json: key reads the body to its end before ReverseProxy clones
// the request, so net/http has filled Request.Trailer from the client's
// trailing HEADERS frame by then, and the clone would carry them to the
// upstream. One that merges trailers into headers (Apache httpd with
// MergeTrailers on, Tomcat's allowedTrailerHeaders) would read a
// client-chosen address and method override. The same holds for HTTP/1
// chunked trailers, which take the same path.
func TestH2TrailersNotForwarded(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got http.Header
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		got = r.Trailer.Clone()
		mu.Unlock()
	}))
	t.Cleanup(up.Close)
	srv := newTLSGateway(t, fmt.Sprintf(`
routes:
  - name: otp
    match: {path: /v1/otp}
    upstream: %s
    limits:
      - {algorithm: fixed_window, limit: 5, window: 1h, key: [json:phone]}
`, up.URL))
	a := h2Do(t, srv.Listener.Addr().String(), h2Stream{
		fields: h2Req("POST", "/v1/otp", "content-type", "application/json",
			"trailer", "X-Forwarded-For, X_Real_Ip, X-Real-Ip, X-Http-Method-Override"),
		body: `{"phone":"+15550001"}`,
		trailers: [][2]string{
			{"x-forwarded-for", "6.6.6.6"},
			{"x_real_ip", "7.7.7.7"},
			{"x-real-ip", "8.8.8.8"},
			{"x-http-method-override", "DELETE"},
		},
	})
	if a.status != 200 {
		t.Fatalf("got %d, want 200", a.status)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, name := range []string{"X-Forwarded-For", "X_real_ip", "X-Real-Ip", "X-Http-Method-Override"} {
		if v := got.Values(name); len(v) > 0 && v[0] != "" {
			t.Errorf("upstream got trailer %s: %q from an untrusted client; sluice strips or drops this field as a header", name, v)
		}
	}
}

// TestH2MethodNotTokenIs400: over HTTP/1 net/http answers a
// method that is no token ("G(T", "GET\t") 400 itself, but over HTTP/2 it
// passes any :method to the handler. Such a request gets 400 too, before
// any route or limit, rather than a 502 that blames the upstream (and
// counts in sluice_upstream_errors_total) for a request that no transport
// could send.
func TestH2MethodNotTokenIs400(t *testing.T) {
	t.Parallel()
	up, hits := countingUpstream(t)
	srv := newTLSGateway(t, fmt.Sprintf("routes:\n  - name: all\n    upstream: %s\n", up.URL))
	for _, m := range []string{"G(T", "GET\t", "GET /admin HTTP/1.1"} {
		a := h2Do(t, srv.Listener.Addr().String(), h2Stream{fields: h2Req(m, "/")})
		if a.status != http.StatusBadRequest {
			t.Errorf(":method %q: got %d %s; want 400, as HTTP/1 gets", m, a.status, a.body)
		}
	}
	if n := hits(); n != 0 {
		t.Errorf("the upstream got %d requests, want none", n)
	}
}

// TestH2AbsolutePathIs400: HTTP/2's :path holds a path (RFC 9113
// §8.3.1), but net/http's server also takes an absolute URI there and
// leaves Host to :authority, or to nothing when neither :authority nor a
// Host field is sent. Routes then matched the URI's host while
// header:Host keys and X-Forwarded-Host had the empty host: a request
// for api.example.com without :authority matched api.example.com's
// route but was counted in a bucket of its own, shared by no one else,
// and the upstream read no host at all. With :authority present, the
// URI names a second host the gateway ignores. Such a request is
// answered 400, never forwarded.
func TestH2AbsolutePathIs400(t *testing.T) {
	t.Parallel()
	up, hits := countingUpstream(t)
	srv := newTLSGateway(t, fmt.Sprintf(`
routes:
  - name: tenant
    match: {host: api.example.com}
    upstream: %s
    limits:
      - {algorithm: fixed_window, limit: 1, window: 1h, key: [header:Host]}
`, up.URL))
	addr := srv.Listener.Addr().String()
	if a := h2Do(t, addr, h2Stream{fields: h2Req("GET", "/v1/otp")}); a.status != 404 {
		t.Fatalf("the route's own host: got %d, want 404 (acme.example.com is not api.example.com)", a.status)
	}
	ok := [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "api.example.com"}, {":path", "/v1/otp"}}
	if a := h2Do(t, addr, h2Stream{fields: ok}); a.status != 200 {
		t.Fatalf("spends the bucket: got %d, want 200", a.status)
	}
	for _, f := range [][][2]string{
		{{":method", "GET"}, {":scheme", "https"}, {":path", "https://api.example.com/v1/otp"}},
		{{":method", "GET"}, {":scheme", "https"}, {":authority", "api.example.com"}, {":path", "https://other.example.com/v1/otp"}},
		{{":method", "GET"}, {":scheme", "https"}, {":authority", "other.example.com"}, {":path", "https://api.example.com/v1/otp"}},
	} {
		if a := h2Do(t, addr, h2Stream{fields: f}); a.status != http.StatusBadRequest {
			t.Errorf("%q: got %d %s, want 400", f, a.status, a.body)
		}
	}
	if n := hits(); n != 1 {
		t.Errorf("the upstream got %d requests, want 1", n)
	}
}

// TestAsteriskTargetOnlyForOptions: "*" names no resource (RFC 9112
// §3.2.4, RFC 9113 §8.3.1) and only OPTIONS may use it; net/http answers
// OPTIONS * itself but hands any other method's "*" to the handler.
// Routes and path keys saw "*", which no path_prefix matches, while the
// upstream got "/%2A", a path the routes never saw. It is answered 400,
// over HTTP/2 and HTTP/1 alike.
func TestAsteriskTargetOnlyForOptions(t *testing.T) {
	t.Parallel()
	up, hits := countingUpstream(t)
	srv := newTLSGateway(t, fmt.Sprintf("routes:\n  - name: all\n    upstream: %s\n", up.URL))
	addr := srv.Listener.Addr().String()
	for _, m := range []string{"GET", "POST"} {
		if a := h2Do(t, addr, h2Stream{fields: h2Req(m, "*")}); a.status != http.StatusBadRequest {
			t.Errorf("HTTP/2 %s *: got %d %s, want 400", m, a.status, a.body)
		}
		c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "%s * HTTP/1.1\r\nHost: acme.example.com\r\nContent-Length: 0\r\n\r\n", m)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("HTTP/1.1 %s *: got %d, want 400", m, resp.StatusCode)
		}
	}
	if n := hits(); n != 0 {
		t.Errorf("the upstream got %d requests, want none", n)
	}
}

// countingUpstream is an upstream that answers 200 to every request, and
// hits the number it has had.
func countingUpstream(t *testing.T) (up *httptest.Server, hits func() int64) {
	t.Helper()
	var n atomic.Int64
	up = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
	}))
	t.Cleanup(up.Close)
	return up, n.Load
}

// h2Open dials addr over TLS with ALPN h2, sets the connection's deadline
// d from now, sends the client preface and settings, and returns the
// connection (closed when the test ends) and a framer on it.
func h2Open(t *testing.T, addr string, d time.Duration, settings ...http2.Setting) (*tls.Conn, *http2.Framer) {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(d))
	if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("negotiated %q, want h2", p)
	}
	c.Write([]byte(http2.ClientPreface))
	fr := http2.NewFramer(c, c)
	fr.WriteSettings(settings...)
	return c, fr
}
