package server

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestH2SchemeHTTPOverTLS: an HTTP/2 request's :scheme is the client's
// word, and the TLS listener's requests came over TLS whatever it says.
// One with :scheme http is keyed with 443 as the default port, as the
// same request with :scheme https is (SPEC §4: Host without the scheme's
// default port), so "api.example.test:443" is no second bucket for the
// host, and the upstream is told X-Forwarded-Proto: https, as nginx's
// $scheme is the connection's.
func TestH2SchemeHTTPOverTLS(t *testing.T) {
	t.Parallel()
	certFile, keyFile := writePair(t, t.TempDir(), "api.example.test")
	var mu sync.Mutex
	var protos []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		protos = append(protos, r.Header.Get("X-Forwarded-Proto")+" "+r.Header.Get("X-Forwarded-Host"))
		mu.Unlock()
	}))
	t.Cleanup(up.Close)
	r := serve(t, fmt.Sprintf("listen: 127.0.0.1:0\nadmin: \"\"\ntls:\n  listen: 127.0.0.1:0\n  certificates: [{cert_file: %s, key_file: %s}]\nroutes:\n  - name: r\n    upstream: %s\n    limits:\n      - {algorithm: fixed_window, limit: 2, window: 1h, key: [header:Host]}\n", certFile, keyFile, up.URL))
	c, fr := h2Dial(t, r.Addr("https").String())
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	var statuses []string
	for i, f := range []struct{ scheme, authority string }{
		{"https", "api.example.test"},
		{"http", "api.example.test"},
		{"http", "api.example.test:443"},
	} {
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		for _, hf := range [][2]string{{":method", "GET"}, {":scheme", f.scheme}, {":authority", f.authority}, {":path", "/"}} {
			enc.WriteField(hpack.HeaderField{Name: hf[0], Value: hf[1]})
		}
		id := uint32(2*i + 1)
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		statuses = append(statuses, f.scheme+" "+f.authority+": "+h2StatusOf(t, fr, id))
	}
	want := "[https api.example.test: 200 http api.example.test: 200 http api.example.test:443: 429]"
	if got := fmt.Sprint(statuses); got != want {
		t.Errorf("statuses: got %s, want %s", got, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if got, want := fmt.Sprint(protos), "[https api.example.test https api.example.test]"; got != want {
		t.Errorf("upstream got X-Forwarded-Proto and -Host %s, want %s", got, want)
	}
}

// h2StatusOf reads frames until stream id's response header block and
// returns its :status; it fails on a reset of the stream. fr must have
// ReadMetaHeaders set.
func h2StatusOf(t *testing.T, fr *http2.Framer, id uint32) string {
	t.Helper()
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("stream %d: %v", id, err)
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if f.StreamID == id {
				return f.PseudoValue("status")
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				t.Fatalf("stream %d reset: %v", id, f.ErrCode)
			}
		}
	}
}

// TestHostNotSNIRoutes: README › Static certificates: the SNI chooses the
// certificate only; the request is routed and keyed by its Host (HTTP/2:
// :authority), whichever name the handshake asked for, over HTTP/1.1 and
// HTTP/2 alike.
func TestHostNotSNIRoutes(t *testing.T) {
	t.Parallel()
	certFile, keyFile := writePair(t, t.TempDir(), "a.example.test")
	up := func(name string) string {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, name) }))
		t.Cleanup(s.Close)
		return s.URL
	}
	r := serve(t, fmt.Sprintf("listen: 127.0.0.1:0\nadmin: \"\"\ntls:\n  listen: 127.0.0.1:0\n  certificates: [{cert_file: %s, key_file: %s}]\nroutes:\n  - name: a\n    match: {host: a.example.test}\n    upstream: %s\n  - name: b\n    match: {host: b.example.test}\n    upstream: %s\n", certFile, keyFile, up("a"), up("b")))
	for _, h2 := range []bool{false, true} {
		tr := &http.Transport{TLSClientConfig: &tls.Config{ServerName: "a.example.test", InsecureSkipVerify: true}, ForceAttemptHTTP2: h2}
		if !h2 {
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
		defer tr.CloseIdleConnections()
		req, _ := http.NewRequest("GET", "https://"+r.Addr("https").String()+"/", nil)
		req.Host = "b.example.test"
		resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != "b" || resp.TLS.PeerCertificates[0].Subject.CommonName != "a.example.test" {
			t.Errorf("%s, SNI a.example.test, Host b.example.test: got %d %q with the certificate of %s, want 200 \"b\" with that of a.example.test", resp.Proto, resp.StatusCode, body, resp.TLS.PeerCertificates[0].Subject.CommonName)
		}
	}
}

// TestH2HeaderBytesBound: README's 64 KiB bound on a request's header
// fields holds over HTTP/2 on the TLS listener, counted as the upstream
// would get them: a few bytes on the wire that HPACK's dynamic table
// expands past it are answered 431 and reach no upstream, while 60 KiB
// pass.
func TestH2HeaderBytesBound(t *testing.T) {
	t.Parallel()
	certFile, keyFile := writePair(t, t.TempDir(), "api.example.test")
	var mu sync.Mutex
	var sizes []int
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := 0
		for k, vs := range r.Header {
			for _, v := range vs {
				n += len(k) + len(v)
			}
		}
		mu.Lock()
		sizes = append(sizes, n)
		mu.Unlock()
	}))
	t.Cleanup(up.Close)
	r := serve(t, fmt.Sprintf("listen: 127.0.0.1:0\nadmin: \"\"\ntls:\n  listen: 127.0.0.1:0\n  certificates: [{cert_file: %s, key_file: %s}]\nroutes:\n  - name: r\n    upstream: %s\n", certFile, keyFile, up.URL))
	c, fr := h2Dial(t, r.Addr("https").String())
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	send := func(id uint32, copies int) string {
		hb.Reset()
		for _, hf := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "api.example.test"}, {":path", "/"}} {
			enc.WriteField(hpack.HeaderField{Name: hf[0], Value: hf[1]})
		}
		// The first copy enters the dynamic table; each later one is a
		// one-byte reference to it.
		for range copies {
			enc.WriteField(hpack.HeaderField{Name: "x-big", Value: strings.Repeat("b", 3000)})
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		return h2StatusOf(t, fr, id)
	}
	wire := 0
	if got := send(1, 20); got != "200" { // 60 KB
		t.Errorf("20 x 3000 bytes of x-big: got %s, want 200", got)
	}
	wire = hb.Len()
	if got := send(3, 2000); got != "431" { // 6 MB from a few KB
		t.Errorf("2000 x 3000 bytes of x-big in %d bytes of header block: got %s, want 431", hb.Len(), got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sizes) != 1 {
		t.Errorf("upstream got requests with %v bytes of header fields, want only the first (%d bytes on the wire)", sizes, wire)
	}
}

// TestH2RejectionSameAsHTTP1: a 429 over HTTP/2 on the TLS listener
// carries the same fields and problem+json body as over HTTP/1.1 (SPEC
// §4), but for the fields HTTP/2 forbids.
func TestH2RejectionSameAsHTTP1(t *testing.T) {
	t.Parallel()
	// A token bucket, whose retry counts from each key's first request
	// (3600 s, rounded up, for a second request within the second), not a
	// fixed window, whose retry counts to the window's end and so differs
	// between the two keys when a second turns between them.
	certFile, keyFile := writePair(t, t.TempDir(), "api.example.test")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(up.Close)
	r := serve(t, fmt.Sprintf("listen: 127.0.0.1:0\nadmin: \"\"\ntls:\n  listen: 127.0.0.1:0\n  certificates: [{cert_file: %s, key_file: %s}]\nroutes:\n  - name: r\n    upstream: %s\n    limits:\n      - {algorithm: token_bucket, limit: 1, window: 1h, key: [header:X-Key]}\n", certFile, keyFile, up.URL))
	answer := func(h2 bool, key string) (string, string) {
		tr := &http.Transport{TLSClientConfig: &tls.Config{ServerName: "api.example.test", InsecureSkipVerify: true}, ForceAttemptHTTP2: h2}
		if !h2 {
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
		var head, body string
		for range 2 {
			req, _ := http.NewRequest("GET", "https://"+r.Addr("https").String()+"/", nil)
			req.Header.Set("X-Key", key)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if (resp.ProtoMajor == 2) != h2 {
				t.Fatalf("got %s, want HTTP/2 %v", resp.Proto, h2)
			}
			var names []string
			for k := range resp.Header {
				if k != "Date" && k != "X-Request-Id" && k != "Content-Length" {
					names = append(names, k+": "+strings.Join(resp.Header[k], ","))
				}
			}
			slices.Sort(names)
			head, body = fmt.Sprint(resp.StatusCode, names), string(b)
		}
		return head, body
	}
	h1Head, h1Body := answer(false, "one")
	h2Head, h2Body := answer(true, "two")
	if !strings.HasPrefix(h1Head, "429 ") || h2Head != h1Head || h2Body != h1Body {
		t.Errorf("second request:\nHTTP/2   got %s %s\nHTTP/1.1 got %s %s\nwant the same 429", h2Head, h2Body, h1Head, h1Body)
	}
}
