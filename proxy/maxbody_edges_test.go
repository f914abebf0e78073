package proxy

import (
	"bufio"
	"bytes"
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

	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
)

// maxBodyEdgesConfig has three routes with a max_body of 16 bytes: a
// plain one, one keyed by a JSON field that admits one request per key
// per hour, and one that queues in a leaky_bucket; %[1]s is the upstream.
const maxBodyEdgesConfig = `
policies:
  once: {algorithm: fixed_window, limit: 1, window: 1h, key: [json:id]}
  shaping: {algorithm: leaky_bucket, limit: 1, window: 300ms, queue: 5, key: [global]}
routes:
  - name: keyed
    match: {path_prefix: /keyed}
    upstream: %[1]s
    max_body: 16B
    limits: [once]
  - name: queued
    match: {path_prefix: /queued}
    upstream: %[1]s
    max_body: 16B
    limits: [shaping]
  - name: small
    upstream: %[1]s
    max_body: 16
`

// edgeGateway serves yaml (maxBodyEdgesConfig when empty; %[1]s is the
// upstream) over plain HTTP/1.1 and over TLS with HTTP/2, one gateway
// behind both, with its access lines and metrics at hand.
func edgeGateway(t *testing.T, upstream string, yaml ...string) (plain, tlsAddr string, access *lockedBuffer, m *metrics.Metrics) {
	t.Helper()
	y := maxBodyEdgesConfig
	if len(yaml) > 0 {
		y = yaml[0]
	}
	cfg, err := routes.Parse("test.yaml", []byte(fmt.Sprintf(y, upstream)), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	store := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{})
	t.Cleanup(func() { store.Close() })
	access, m = new(lockedBuffer), metrics.New()
	g := New(Options{Metrics: m, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), AccessLog: access})
	g.Load(cfg, store)
	srv := httptest.NewUnstartedServer(g)
	srv.Config.ConnContext = WithConn
	srv.Start()
	t.Cleanup(srv.Close)
	tsrv := httptest.NewUnstartedServer(g)
	tsrv.Config.ConnContext = WithConn
	tsrv.EnableHTTP2 = true
	tsrv.StartTLS()
	t.Cleanup(tsrv.Close)
	return srv.Listener.Addr().String(), tsrv.Listener.Addr().String(), access, m
}

// waitStatuses returns the statuses of the access lines once there are n
// of them, or what there is after 2s: a request's line, and its counts,
// follow its answer.
func waitStatuses(access *lockedBuffer, n int) []int {
	deadline := time.Now().Add(2 * time.Second)
	for {
		got := accessStatuses(access.lines())
		if len(got) >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// longest returns the most bytes the upstream read of any one body, cut
// or whole.
func (u *bodyUpstream) longest() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, b := range u.bodies {
		n = max(n, len(b))
	}
	return n
}

// exchange1 writes req on a new connection, reads one answer, and returns
// its status, Content-Type and body; the connection is returned for more.
func exchange1(t *testing.T, addr, req string) (int, string, string, *bufio.Reader, net.Conn) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, req)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b), br, c
}

// TestMaxBodyEdgesHTTP1: chunk extensions and trailers neither hide bytes
// from max_body nor count as body bytes; a body whose last chunk ends
// exactly at max_body passes whole, one whose last chunk ends a byte past
// it is 413 problem+json, and the upstream never reads more than max_body
// bytes of any body. A Content-Length under the bound followed by more
// bytes than it declares forwards the declared bytes only: the rest is the
// next request, limited as any other.
func TestMaxBodyEdgesHTTP1(t *testing.T) {
	t.Parallel()
	up := newBodyUpstream(t)
	addr, _, access, m := edgeGateway(t, up.URL)
	const head = "POST /small HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
	for _, tc := range []struct {
		name, req string
		want      int
		body      string // the body the upstream reads whole, for a 200
	}{
		{"extensions, exact", head + "8;ext=1\r\n01234567\r\n8;a=\"b;c\";d\r\n89abcdef\r\n0;end=1\r\n\r\n", 200, "0123456789abcdef"},
		{"trailers, exact", head + "10\r\n0123456789abcdef\r\n0\r\nX-Sum: 1\r\nX-More: 2\r\n\r\n", 200, "0123456789abcdef"},
		{"last chunk ends at the bound", head + "1\r\n0\r\nf\r\n123456789abcdef\r\n0\r\n\r\n", 200, "0123456789abcdef"},
		{"last chunk a byte past the bound", head + "8\r\n01234567\r\n9\r\n89abcdefg\r\n0\r\n\r\n", 413, ""},
		{"last chunk a byte past, with trailers", head + "8\r\n01234567\r\n9;x=y\r\n89abcdefg\r\n0\r\nX-Sum: 1\r\n\r\n", 413, ""},
		{"one chunk a byte past, extension", head + "11;x=" + strings.Repeat("e", 100) + "\r\n0123456789abcdefg\r\n0\r\n\r\n", 413, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(up.complete())
			code, ctype, body, _, _ := exchange1(t, addr, tc.req)
			if code != tc.want {
				t.Fatalf("got %d %s, want %d", code, body, tc.want)
			}
			if code == 413 && (ctype != "application/problem+json" || !strings.Contains(body, `"status":413`)) {
				t.Errorf("got Content-Type %q, body %s; want a 413 problem+json", ctype, body)
			}
			time.Sleep(50 * time.Millisecond) // the upstream's read of a cut body may end after the 413
			got := up.complete()[before:]
			if tc.want == 200 && (len(got) != 1 || got[0] != tc.body) {
				t.Errorf("the upstream read %q whole, want %q", got, tc.body)
			}
			if tc.want == 413 && len(got) != 0 {
				t.Errorf("the upstream read %q whole, want none", got)
			}
		})
	}

	t.Run("declared under, sent longer", func(t *testing.T) {
		before := up.seen()
		// 10 declared, then more: what follows the declared bytes is the
		// next request, here one over max_body.
		code, _, _, br, _ := exchange1(t, addr, "POST /small HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n0123456789"+
			"POST /small HTTP/1.1\r\nHost: x\r\nContent-Length: 17\r\n\r\n0123456789abcdefg")
		if code != 200 {
			t.Fatalf("got %d, want 200", code)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("reading the second answer: %v", err)
		}
		if resp.StatusCode != 413 {
			t.Errorf("the bytes past Content-Length, read as the next request: got %d, want 413", resp.StatusCode)
		}
		up.mu.Lock()
		got := up.bodies[before:]
		up.mu.Unlock()
		if len(got) != 1 || got[0] != "0123456789" {
			t.Errorf("the upstream read %q, want the 10 declared bytes once", got)
		}
	})

	if n := up.longest(); n > 16 {
		t.Errorf("the upstream read %d bytes of one body, over max_body 16", n)
	}
	var logged413 int
	for _, s := range waitStatuses(access, 8) {
		if s == 413 {
			logged413++
		}
	}
	if got := requestCodes(t, m)["413"]; got != 4 || logged413 != 4 {
		t.Errorf("413s counted %v, logged %d; want 4 and 4", got, logged413)
	}
}

// TestMaxBodyOnKeyedRoute: a body over max_body on a route whose limit
// reads a json: key is 413, whether it declares its length or streams,
// and even when it gives the key twice (which alone would be a 400): the
// key read stops at the bound, before the key is looked at. No unit of
// the key's limit is spent: the next request with the key is admitted.
func TestMaxBodyOnKeyedRoute(t *testing.T) {
	t.Parallel()
	up := newBodyUpstream(t)
	addr, _, _, m := edgeGateway(t, up.URL)
	for _, tc := range []struct{ name, framing, body string }{
		{"declared", "Content-Length: 29\r\n", `{"id":"a","id":"a","p":"xxx"}`},
		{"streamed", "Transfer-Encoding: chunked\r\n", "1d\r\n" + `{"id":"a","id":"a","p":"xxx"}` + "\r\n0\r\n\r\n"},
		{"streamed, key before the bound", "Transfer-Encoding: chunked\r\n", "9\r\n" + `{"id":"a"` + "\r\n14\r\n" + `,"p":"xxxxxxxxxxxx"}` + "\r\n0\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, body, _, _ := exchange1(t, addr, "POST /keyed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+tc.framing+"\r\n"+tc.body)
			if code != 413 {
				t.Errorf("got %d %s, want 413", code, body)
			}
		})
	}
	if got := counterBy(t, m, "sluice_ratelimit_decisions_total", "result"); len(got) != 0 {
		t.Errorf("decisions for bodies over max_body: got %v, want none", got)
	}
	code, _, body, _, _ := exchange1(t, addr, "POST /keyed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n"+`{"id":"a"}`)
	if code != 200 {
		t.Errorf("the key's first request within max_body: got %d %s, want 200 (its unit unspent)", code, body)
	}
	if n := up.longest(); n > 16 {
		t.Errorf("the upstream read %d bytes of one body, over max_body 16", n)
	}
}

// TestMaxBodyQueued: a request that waits in a leaky_bucket queue and
// whose streamed body goes past max_body once it leaves gets a 413
// problem+json with the limit fields (the limits admitted it), counted
// queued and logged 413; one that declares a length over max_body is
// answered before the queue and takes no place in it.
func TestMaxBodyQueued(t *testing.T) {
	t.Parallel()
	up := newBodyUpstream(t)
	addr, _, access, m := edgeGateway(t, up.URL)
	exchange1(t, addr, "GET /queued HTTP/1.1\r\nHost: x\r\n\r\n") // takes the bucket's place: the next one waits

	code, _, _, _, _ := exchange1(t, addr, "POST /queued HTTP/1.1\r\nHost: x\r\nContent-Length: 17\r\n\r\n0123456789abcdefg")
	if code != 413 {
		t.Errorf("declared over: got %d, want 413", code)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "POST /queued HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n11\r\n0123456789abcdefg\r\n0\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 413 || resp.Header.Get("Content-Type") != "application/problem+json" || resp.Header.Get("RateLimit-Policy") == "" {
		t.Errorf("streamed over, queued: got %d %q RateLimit-Policy %q %s, want 413 problem+json with the limit fields", resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("RateLimit-Policy"), b)
	}
	statuses := waitStatuses(access, 3)
	if got := counterBy(t, m, "sluice_ratelimit_decisions_total", "result"); got["queued"] != 1 {
		t.Errorf("decisions: got %v, want the streamed one queued once", got)
	}
	if got := statuses; fmt.Sprint(got) != "[200 413 413]" {
		t.Errorf("access lines' statuses: got %v, want [200 413 413]", got)
	}
	if n := up.longest(); n > 16 {
		t.Errorf("the upstream read %d bytes of one body, over max_body 16", n)
	}
}

// TestMaxBodyHTTP2Lengths: over HTTP/2 a stream that sends more DATA
// than its content-length declares is a protocol error of the stream,
// reset: the upstream never reads more than the declared bytes (it may
// have all of them, framed by the length, before the excess comes), and
// nothing at all of a first DATA frame that is itself too long. A
// declared length at the bound, with DATA to match, passes whole, and a
// stream without a length is cut at max_body and answered 413.
func TestMaxBodyHTTP2Lengths(t *testing.T) {
	t.Parallel()
	up := newBodyUpstream(t)
	_, addr, _, _ := edgeGateway(t, up.URL)
	for i, tc := range []struct {
		name   string
		length string
		data   []string
		want   string // the :status, or "reset"
	}{
		{"declared under, sent more", "10", []string{"0123456789", "abcdef"}, "reset"},
		{"declared under, sent past max_body at once", "10", []string{"0123456789abcdefg"}, "reset"},
		{"declared at the bound, sent past it", "16", []string{"0123456789abcdef", "g"}, "reset"},
		{"declared at the bound", "16", []string{"01234567", "89abcdef"}, "200"},
		{"no length, at the bound", "", []string{"01234567", "89abcdef"}, "200"},
		{"no length, past the bound", "", []string{"01234567", "89abcdefg"}, "413"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := up.seen()
			_, fr := h2Open(t, addr, 10*time.Second)
			var hb bytes.Buffer
			enc := hpack.NewEncoder(&hb)
			var fields []string
			if tc.length != "" {
				fields = []string{"content-length", tc.length}
			}
			for _, f := range h2Req("POST", fmt.Sprintf("/small/%d", i), fields...) {
				enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
			}
			if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
				t.Fatal(err)
			}
			for j, d := range tc.data {
				fr.WriteData(1, j == len(tc.data)-1, []byte(d))
				time.Sleep(20 * time.Millisecond)
			}
			dec := hpack.NewDecoder(4096, nil)
			got := ""
			for got == "" {
				f, err := fr.ReadFrame()
				if err != nil {
					t.Fatalf("no answer: %v", err)
				}
				switch f := f.(type) {
				case *http2.SettingsFrame:
					if !f.IsAck() {
						fr.WriteSettingsAck()
					}
				case *http2.RSTStreamFrame:
					got = "reset"
				case *http2.HeadersFrame:
					fs, err := dec.DecodeFull(f.HeaderBlockFragment())
					if err != nil {
						t.Fatal(err)
					}
					for _, hf := range fs {
						if hf.Name == ":status" {
							got = hf.Value
						}
					}
				}
			}
			if got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
			time.Sleep(50 * time.Millisecond) // the upstream's read of a cut body may end after the answer
			up.mu.Lock()
			bodies, errs := up.bodies[before:], up.errs[before:]
			up.mu.Unlock()
			for k, b := range bodies {
				if tc.want == "413" && errs[k] == nil {
					t.Errorf("the upstream read %q whole, want it cut", b)
				}
				if n, _ := strconv.Atoi(tc.length); n > 0 && len(b) > n {
					t.Errorf("the upstream read %d bytes, over the declared %s", len(b), tc.length)
				}
			}
		})
	}
	if n := up.longest(); n > 16 {
		t.Errorf("the upstream read %d bytes of one body, over max_body 16", n)
	}
}
