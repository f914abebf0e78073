package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
)

// h2Block is one header block of an answer as it went on the wire: a 1xx
// or the final answer (status set), or the trailers (status 0).
type h2Block struct {
	status int
	header http.Header
}

// h2Blocks sends fields (and body, when not empty) as stream 1 of a new
// HTTP/2 connection to addr and returns every header block the stream
// got, in order, until it ended.
func h2Blocks(t *testing.T, addr string, fields [][2]string, body string) []h2Block {
	t.Helper()
	_, fr := h2Open(t, addr, 10*time.Second)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	var hb bytes.Buffer
	e := hpack.NewEncoder(&hb)
	for _, f := range fields {
		e.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: body == "", EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	if body != "" {
		fr.WriteData(1, true, []byte(body))
	}
	var blocks []h2Block
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("stream not ended: %v (blocks so far %v)", err, blocks)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.RSTStreamFrame:
			t.Fatalf("stream reset: %v", f.ErrCode)
		case *http2.GoAwayFrame:
			t.Fatalf("GOAWAY: %v", f.ErrCode)
		case *http2.MetaHeadersFrame:
			b := h2Block{header: http.Header{}}
			b.status, _ = strconv.Atoi(f.PseudoValue("status"))
			for _, hf := range f.RegularFields() {
				b.header.Add(hf.Name, hf.Value)
			}
			blocks = append(blocks, b)
			if f.StreamEnded() {
				return blocks
			}
		case *http2.DataFrame:
			if f.StreamEnded() {
				return blocks
			}
		}
	}
}

// checkGatewayFields reports what of the gateway's fields h, a 1xx or the
// final answer of an admitted request on a route of one limit of 5, lacks
// or holds beside them.
func checkGatewayFields(t *testing.T, what string, h http.Header) {
	t.Helper()
	for k, want := range map[string]string{
		"X-Request-Id":          "client-1",
		"X-Ratelimit-Remaining": "4",
		"X-Ratelimit-Limit":     "5",
		"Ratelimit-Policy":      `"up#1";q=5;w=60`,
	} {
		if got := h.Values(k); len(got) != 1 || got[0] != want {
			t.Errorf("%s: %s %q, want [%q]", what, k, got, want)
		}
	}
	if got := h.Values("Ratelimit"); len(got) != 1 || !strings.HasPrefix(got[0], `"up#1";r=4;`) {
		t.Errorf("%s: Ratelimit %q, want sluice's alone", what, got)
	}
	if got := h.Values("X-Ratelimit-Retry-After"); len(got) != 0 {
		t.Errorf("%s: X-Ratelimit-Retry-After %q, want none on an admitted request", what, got)
	}
}

// checkHints checks the 1xx blocks and the final answer's header of
// blocks: two 103s, each with the upstream's Link, and each, as the final
// answer, with the gateway's fields alone.
func checkHints(t *testing.T, blocks []h2Block) {
	t.Helper()
	var hints int
	for _, b := range blocks {
		if b.status == 0 {
			continue // trailers
		}
		what := "final answer"
		if b.status < 200 {
			hints++
			what = fmt.Sprintf("%d #%d", b.status, hints)
			if got := b.header.Get("Link"); got != "</a.css>" {
				t.Errorf("%s: Link %q, want the upstream's", what, got)
			}
		}
		checkGatewayFields(t, what, b.header)
	}
	if hints != 2 {
		t.Errorf("got %d 1xx answers, want 2: %v", hints, blocks)
	}
}

// TestH2InformationalCarriesGatewayFieldsAlone is
// TestInformationalCarriesGatewayFieldsAlone for a client over HTTP/2,
// whose server sends a 1xx as a HEADERS frame of the header map as it is
// at WriteHeader, and does not clear it after.
func TestH2InformationalCarriesGatewayFieldsAlone(t *testing.T) {
	t.Parallel()
	const hint = "HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\nX-Ratelimit-Remaining: 999\r\nX-Ratelimit-Retry-After: 7\r\nRatelimit: \"up\";r=999;t=1\r\nX-Request-Id: upstream-103\r\n\r\n"
	up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		for answer(c, br, hint+hint+okAnswer) {
		}
	})
	srv := newTLSGateway(t, fmt.Sprintf(`
routes:
  - name: up
    upstream: %s
    limits:
      - {algorithm: fixed_window, limit: 5, window: 1m, key: [ip]}
`, up.url()))
	blocks := h2Blocks(t, srv.Listener.Addr().String(), h2Req("GET", "/", "x-request-id", "client-1"), "")
	checkHints(t, blocks)
	if n := len(blocks); n != 3 {
		t.Errorf("got %d header blocks, want two 103s and the answer: %v", n, blocks)
	}
}

// TestH2UpstreamTrailerFieldsNotKept is TestUpstreamTrailerFieldsNotKept
// for a client over HTTP/2, whose server sends as trailers what the
// header map holds under a name announced in Trailer, or under
// http.TrailerPrefix, once the handler returns.
func TestH2UpstreamTrailerFieldsNotKept(t *testing.T) {
	t.Parallel()
	up := newTrailerUpstream(t)
	srv := newTLSGateway(t, fmt.Sprintf(trailerRoutes, up.url()))
	for _, method := range []string{"GET", "POST"} {
		for _, path := range []string{"/limited", "/shadowed"} {
			t.Run(method+path, func(t *testing.T) {
				body := ""
				if method == "POST" {
					body = "{}"
				}
				blocks := h2Blocks(t, srv.Listener.Addr().String(), h2Req(method, path), body)
				if len(blocks) != 2 || blocks[0].status != 200 || blocks[1].status != 0 {
					t.Fatalf("got %v, want a 200 and its trailers", blocks)
				}
				checkTrailers(t, path == "/shadowed", blocks[0].header, blocks[1].header)
			})
		}
	}
}

// checkTrailers checks the header and trailers of an answer whose
// upstream sent X-Ratelimit-Remaining: 999, RateLimit, X-Upstream: yes and
// X-Request-Id as trailers.
func checkTrailers(t *testing.T, shadowed bool, header, trailer http.Header) {
	t.Helper()
	if got := trailer.Get("X-Upstream"); got != "yes" {
		t.Errorf("trailer X-Upstream %q, want the upstream's other trailers passed", got)
	}
	if got := trailer.Values("X-Request-Id"); len(got) != 0 {
		t.Errorf("trailer X-Request-Id %q, want none", got)
	}
	got := trailer.Values("X-Ratelimit-Remaining")
	if shadowed {
		// A route of shadow limits alone passes the upstream's limit
		// fields, trailers too.
		if len(got) != 1 || got[0] != "999" {
			t.Errorf("trailer X-Ratelimit-Remaining %q, want the upstream's [999]", got)
		}
		return
	}
	if len(got) != 0 {
		t.Errorf("trailer X-Ratelimit-Remaining %q, want none", got)
	}
	if got := trailer.Values("Ratelimit"); len(got) != 0 {
		t.Errorf("trailer Ratelimit %q, want none", got)
	}
	if got := header.Values("X-Ratelimit-Remaining"); len(got) != 1 || got[0] != "4" && got[0] != "3" {
		t.Errorf("header X-Ratelimit-Remaining %q, want sluice's alone", got)
	}
}

// TestH2UpstreamFieldsOwn: an upstream over HTTP/2 (https), whose 1xx and
// trailers come to ReverseProxy from the HTTP/2 transport, gets the
// client, over HTTP/2 or HTTP/1, the gateway's fields alone on each 1xx
// and none of its own in the trailers, announced or not.
func TestH2UpstreamFieldsOwn(t *testing.T) {
	t.Parallel()
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 {
			http.Error(w, "not over HTTP/2", http.StatusHTTPVersionNotSupported)
			return
		}
		h := w.Header()
		h.Set("Link", "</a.css>")
		h.Set("X-Ratelimit-Remaining", "999")
		h.Set("X-Ratelimit-Retry-After", "7")
		h.Set("Ratelimit", `"up";r=999;t=1`)
		h.Set("X-Request-Id", "upstream-103")
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(http.StatusEarlyHints)
		clear(h)
		h.Set("Trailer", "X-Ratelimit-Remaining, Ratelimit")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "ok")
		// Flushed, the answer has no Content-Length (for one with it,
		// see TestTrailersOfAnAnswerWithALength).
		w.(http.Flusher).Flush()
		h.Set("X-Ratelimit-Remaining", "999")
		h.Set("Ratelimit", `"up";r=999;t=1`)
		h.Set(http.TrailerPrefix+"X-Upstream", "yes")
		h.Set(http.TrailerPrefix+"X-Request-Id", "upstream-trailer")
	}))
	up.EnableHTTP2 = true
	up.StartTLS()
	t.Cleanup(up.Close)
	tr := NewTransport()
	tr.base.(*http.Transport).TLSClientConfig = up.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	t.Cleanup(tr.CloseIdleConnections)
	// A gateway each, for the budget each request is checked against.
	gateway := func() string {
		srv := newTLSGatewayVia(t, fmt.Sprintf(`
routes:
  - name: up
    upstream: %s
    limits:
      - {algorithm: fixed_window, limit: 5, window: 1m, key: [ip]}
`, up.URL), tr)
		return srv.Listener.Addr().String()
	}

	t.Run("client over HTTP/2", func(t *testing.T) {
		addr := gateway()
		blocks := h2Blocks(t, addr, h2Req("GET", "/", "x-request-id", "client-1"), "")
		if n := len(blocks); n != 4 || blocks[2].status != 200 {
			t.Fatalf("got %v, want two 103s, a 200 and its trailers", blocks)
		}
		checkHints(t, blocks)
		checkTrailers(t, false, blocks[2].header, blocks[3].header)
	})
	t.Run("client over HTTP/1", func(t *testing.T) {
		addr := gateway()
		c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: example.com\r\nX-Request-Id: client-1\r\nConnection: close\r\n\r\n")
		br := bufio.NewReader(c)
		var blocks []h2Block
		for {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			blocks = append(blocks, h2Block{status: resp.StatusCode, header: resp.Header})
			if resp.StatusCode >= 200 {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				checkHints(t, blocks)
				checkTrailers(t, false, resp.Header, resp.Trailer)
				return
			}
		}
	})
}

// newTLSGatewayVia is newTLSGateway reaching the upstreams through tr.
func newTLSGatewayVia(t *testing.T, yaml string, tr http.RoundTripper) *httptest.Server {
	t.Helper()
	cfg, err := routes.Parse("test.yaml", []byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	store := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{})
	t.Cleanup(func() { store.Close() })
	g := New(Options{Logger: slog.New(slog.DiscardHandler), Transport: tr})
	g.Load(cfg, store)
	srv := httptest.NewUnstartedServer(g)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// TestTrailersOfAnAnswerWithALength: an HTTP/2 upstream may send a
// Content-Length and trailers both (Go's server adds the length to an
// answer its handler never flushed). An HTTP/1.1 client gets trailers only
// after a chunked body, so the answer goes to it chunked, trailers and
// all, rather than framed by the length with its trailers dropped.
func TestTrailersOfAnAnswerWithALength(t *testing.T) {
	t.Parallel()
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Checksum")
		io.WriteString(w, "ok")
		w.Header().Set("X-Checksum", "abc")
	}))
	addr := h2UpstreamGateway(t, up)
	for _, method := range []string{"GET", "POST"} {
		t.Run(method, func(t *testing.T) {
			resp := http1Exchange(t, addr, method+" / HTTP/1.1\r\nHost: example.com\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", nil)
			b, err := io.ReadAll(resp.Body)
			if err != nil || string(b) != "ok" {
				t.Fatalf("body %q, %v; want ok", b, err)
			}
			if got := resp.Trailer.Get("X-Checksum"); got != "abc" {
				t.Errorf("trailer X-Checksum %q (Content-Length %d, Transfer-Encoding %q), want abc", got, resp.ContentLength, resp.TransferEncoding)
			}
		})
	}
}

// TestTrailersOfAHeadAnswerKeepTheLength: the answer to a HEAD keeps the
// Content-Length that tells the length of the body it does not have, even
// when the upstream announces trailers, and so does a HEAD spelled "head",
// which the gateway forwards and net/http answers as a HEAD.
func TestTrailersOfAHeadAnswerKeepTheLength(t *testing.T) {
	t.Parallel()
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodHead {
			http.Error(w, "want HEAD, got "+r.Method, http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Trailer", "X-Checksum")
		w.Header().Set("Content-Length", "2")
	}))
	addr := h2UpstreamGateway(t, up)
	for _, method := range []string{"HEAD", "head"} {
		t.Run(method, func(t *testing.T) {
			resp := http1Exchange(t, addr, method+" / HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n", &http.Request{Method: http.MethodHead})
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d, want 200", resp.StatusCode)
			}
			if got := resp.Header.Get("Content-Length"); got != "2" {
				t.Errorf("Content-Length %q, want 2", got)
			}
		})
	}
}

// h2UpstreamGateway starts up over TLS with HTTP/2 on and returns the
// address of a TLS gateway with one route to it.
func h2UpstreamGateway(t *testing.T, up *httptest.Server) string {
	t.Helper()
	up.EnableHTTP2 = true
	up.StartTLS()
	t.Cleanup(up.Close)
	tr := NewTransport()
	tr.base.(*http.Transport).TLSClientConfig = up.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	t.Cleanup(tr.CloseIdleConnections)
	return newTLSGatewayVia(t, fmt.Sprintf("routes:\n  - name: up\n    upstream: %s\n", up.URL), tr).Listener.Addr().String()
}

// http1Exchange sends raw, one HTTP/1.1 request, to the TLS gateway at
// addr and reads its answer (to req's method, nil for GET); the answer's
// body reads from a connection closed when the test ends.
func http1Exchange(t *testing.T, addr, raw string, req *http.Request) *http.Response {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, raw)
	resp, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestUnannouncedTrailerFieldsNotKept: trailers the upstream never
// announced in a Trailer field reach the client under
// http.TrailerPrefix, and still none of them repeats the gateway's
// fields.
func TestUnannouncedTrailerFieldsNotKept(t *testing.T) {
	t.Parallel()
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
		w.(http.Flusher).Flush()
		w.Header().Set(http.TrailerPrefix+"X-Request-Id", "upstream-trailer")
		w.Header().Set(http.TrailerPrefix+"X-Upstream", "yes")
	}))
	addr := h2UpstreamGateway(t, up)
	resp := http1Exchange(t, addr, "GET / HTTP/1.1\r\nHost: example.com\r\nX-Request-Id: client-1\r\nConnection: close\r\n\r\n", nil)
	if b, err := io.ReadAll(resp.Body); err != nil || string(b) != "ok" {
		t.Fatalf("body %q, %v; want ok", b, err)
	}
	if got := resp.Trailer.Get("X-Upstream"); got != "yes" {
		t.Errorf("trailer X-Upstream %q, want yes (the upstream's own trailer passes)", got)
	}
	if got, ok := resp.Trailer["X-Request-Id"]; ok {
		t.Errorf("trailer X-Request-Id %q, want none: the answer's header had the gateway's", got)
	}
}
