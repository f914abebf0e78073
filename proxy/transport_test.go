package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// rawUpstream serves each accepted connection with serve, on 127.0.0.1,
// until the test ends; it counts the connections accepted.
type rawUpstream struct {
	ln       net.Listener
	accepted atomic.Int64
	mu       sync.Mutex
	conns    []net.Conn
	wg       sync.WaitGroup
}

func newRawUpstream(t *testing.T, serve func(c net.Conn, br *bufio.Reader)) *rawUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &rawUpstream{ln: ln}
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.accepted.Add(1)
			u.mu.Lock()
			u.conns = append(u.conns, c)
			u.mu.Unlock()
			u.wg.Add(1)
			go func() {
				defer u.wg.Done()
				defer c.Close()
				serve(c, bufio.NewReader(c))
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		u.mu.Lock()
		for _, c := range u.conns {
			c.Close()
		}
		u.mu.Unlock()
		u.wg.Wait()
	})
	return u
}

func (u *rawUpstream) url() string { return "http://" + u.ln.Addr().String() }

// answer reads one request from br and writes resp; it reports whether a
// request came.
func answer(c net.Conn, br *bufio.Reader, resp string) bool {
	req, err := http.ReadRequest(br)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, req.Body)
	_, err = io.WriteString(c, resp)
	return err == nil
}

const okAnswer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

func newTestTransport() *Transport {
	t := NewTransport()
	t.base = &http.Transport{DisableCompression: true}
	return t
}

// get sends a GET to url through rt and returns the body it read to its
// end.
func get(t *testing.T, rt http.RoundTripper, url string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("GET %s: reading the body: %v", url, err)
	}
	return resp, string(b)
}

func TestTransportKeepsConnectionsAlive(t *testing.T) {
	t.Parallel()
	var conns atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("hello " + r.URL.Path))
	}))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	up.Start()
	defer up.Close()
	tr := newTestTransport()
	defer tr.CloseIdleConnections()
	for i := range 20 {
		path := "/n" + string(rune('a'+i))
		if _, body := get(t, tr, up.URL+path); body != "hello "+path {
			t.Fatalf("got body %q, want %q", body, "hello "+path)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("20 requests in turn took %d connections, want 1", n)
	}
}

// TestTransportSendsWhatHTTPTransportSends holds the direct path to the
// bytes http.Transport writes for the same request.
func TestTransportSendsWhatHTTPTransportSends(t *testing.T) {
	t.Parallel()
	b, want := sentBoth(t, func(url string) *http.Request {
		req, _ := http.NewRequest("OPTIONS", url+"/a/b%2Fc;x=1?q=1&q=2", nil)
		req.Host = "api.example.com"
		req.Header["X-Two"] = []string{"a", "b"}
		req.Header.Set("User-Agent", "")
		req.Header.Set("Accept-Encoding", "br")
		return req
	})
	if !bytes.Equal(b, want) {
		t.Errorf("direct path sent\n%q\nhttp.Transport sent\n%q", b, want)
	}
}

// sentBoth sends the request that newReq makes for an upstream at url
// through http.Transport and then through the direct path, and returns
// what the upstream read each time: the direct path's bytes, then
// http.Transport's.
func sentBoth(t *testing.T, newReq func(url string) *http.Request) (direct, base []byte) {
	t.Helper()
	got := make(chan []byte, 2)
	up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		var buf bytes.Buffer
		req.Write(&buf) // normalises nothing the tests compare
		got <- buf.Bytes()
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
	})
	send := func(rt http.RoundTripper) []byte {
		resp, err := rt.RoundTrip(newReq(up.url()))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return <-got
	}
	tr := &http.Transport{DisableCompression: true}
	defer tr.CloseIdleConnections()
	base = send(tr)
	return send(newTestTransport()), base
}

func TestTransportRetriesStaleConnection(t *testing.T) {
	t.Parallel()
	for _, peek := range []bool{true, false} {
		// Each connection answers one request, as if kept alive, and is
		// then closed by the upstream: the next request finds it stale,
		// before it is used when the platform can peek, or when it is.
		up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
			answer(c, br, okAnswer)
		})
		tr := newTestTransport()
		for range 3 {
			if !peek {
				forgetQuietChecks(tr)
			}
			if _, body := get(t, tr, up.url()+"/"); body != "ok" {
				t.Fatalf("peek %v: got body %q, want ok", peek, body)
			}
		}
		if n := up.accepted.Load(); n != 3 {
			t.Errorf("peek %v: got %d connections, want 3", peek, n)
		}
	}
}

// forgetQuietChecks makes the idle connections of tr those of a platform
// that cannot peek.
func forgetQuietChecks(tr *Transport) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, l := range tr.idle {
		for _, c := range l {
			c.quiet = nil
		}
	}
}

// TestTransportIgnoresWhatCameWhileIdle has the upstream send a forged
// answer on a connection after its answer was read, while it is idle: the
// next request must not get it.
func TestTransportIgnoresWhatCameWhileIdle(t *testing.T) {
	t.Parallel()
	forged := make(chan struct{})
	var first atomic.Bool
	up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		if !first.CompareAndSwap(false, true) {
			for answer(c, br, okAnswer) {
			}
			return
		}
		if !answer(c, br, okAnswer) {
			return
		}
		time.Sleep(20 * time.Millisecond) // the gateway has read the answer
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nforged")
		close(forged)
		for answer(c, br, okAnswer) {
		}
	})
	tr := newTestTransport()
	defer tr.CloseIdleConnections()
	get(t, tr, up.url()+"/")
	<-forged
	if _, body := get(t, tr, up.url()+"/"); body != "ok" {
		t.Fatalf("got body %q, want ok", body)
	}
	if n := up.accepted.Load(); n != 2 {
		t.Errorf("got %d connections, want 2", n)
	}
}

func TestTransportNewConnectionIsNotRetried(t *testing.T) {
	t.Parallel()
	up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		http.ReadRequest(br) // and close without an answer
	})
	tr := newTestTransport()
	req, _ := http.NewRequest("GET", up.url()+"/", nil)
	if _, err := tr.RoundTrip(req); err == nil || errors.Is(err, errStaleConn) {
		t.Fatalf("got error %v, want the connection's own", err)
	}
	if n := up.accepted.Load(); n != 1 {
		t.Errorf("got %d connections, want 1: a new connection is not retried", n)
	}
}

// newDroppingUpstream answers every request okAnswer, on kept-alive
// connections, except one to /drop: it reads that one whole, counts it in
// dropped and closes the connection without an answer.
func newDroppingUpstream(t *testing.T, dropped *atomic.Int32) *rawUpstream {
	return newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			if req.URL.Path == "/drop" {
				dropped.Add(1)
				return
			}
			if _, err := io.WriteString(c, okAnswer); err != nil {
				return
			}
		}
	})
}

// TestTransportRetriesOnceOnANewConnection has an upstream that drops the
// connection, without an answer, on one request (a handler that panics, a
// filter that resets): the request was sent on a kept-alive connection, so
// it looks stale, and a GET goes again. It must go again once, on a new
// connection: sent again on each idle one in turn, the one request the
// limits counted would reach the upstream once per idle connection, and
// every one of them would be lost.
func TestTransportRetriesOnceOnANewConnection(t *testing.T) {
	t.Parallel()
	var dropped atomic.Int32
	up := newDroppingUpstream(t, &dropped)
	tr := newTestTransport()
	defer tr.CloseIdleConnections()
	const idle = 8
	fillPool(t, tr, up.url()+"/", idle)
	req, _ := http.NewRequest("GET", up.url()+"/drop", nil)
	if _, err := tr.RoundTrip(req); err == nil {
		t.Fatal("got an answer from an upstream that gave none")
	}
	if n := dropped.Load(); n != 2 {
		t.Errorf("one GET reached the upstream %d times, want 2: once, and once again on a new connection", n)
	}
	if n := up.accepted.Load(); n != idle+1 {
		t.Errorf("got %d connections, want %d: the retry on a new one", n, idle+1)
	}
	tr.mu.Lock()
	n := len(tr.idle[up.ln.Addr().String()])
	tr.mu.Unlock()
	if n != idle-1 {
		t.Errorf("%d idle connections left, want %d: only the one the request went on is lost", n, idle-1)
	}
}

// TestTransportReusesOnlyCleanConnections: each answer but a clean one
// leaves its connection unfit for the next request, for a GET and for a
// POST whose body the gateway holds.
func TestTransportReusesOnlyCleanConnections(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, answer string
		body         string
		readHalf     bool // close the body after one byte
		clean        bool // the connection is fit to reuse
	}{
		{name: "clean", answer: okAnswer, body: "ok", clean: true},
		{name: "connection close", answer: "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", body: "ok"},
		{name: "HTTP/1.0", answer: "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", body: "ok"},
		{name: "bytes after the answer", answer: okAnswer + "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nforged", body: "ok"},
		{name: "body not read to its end", answer: "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789", body: "0", readHalf: true},
		// Whatever follows a switch of protocols is not HTTP; it must
		// never be read as the answer to the next request.
		{name: "switching protocols unasked", answer: "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"},
		// Framing another reader could take differently (RFC 9112 §6.1,
		// §6.3): http.ReadResponse goes by Transfer-Encoding when both
		// are given, by Content-Length in HTTP/1.0, and what the
		// upstream meant by the other may be left on the connection.
		{name: "content-length beside transfer-encoding", answer: "HTTP/1.1 200 OK\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", body: "ok"},
		{name: "transfer-encoding beside content-length", answer: "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 3\r\n\r\n2\r\nok\r\n0\r\n\r\n", body: "ok"},
		{name: "transfer-encoding in HTTP/1.0", answer: "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\nok", body: "ok"},
		// A head longer than the read buffer cannot be checked so.
		{name: "head too long to check", answer: "HTTP/1.1 200 OK\r\nX-Long: " + strings.Repeat("a", 40<<10) + "\r\nContent-Length: 2\r\n\r\nok", body: "ok"},
	} {
		for _, method := range []string{"GET", "POST"} {
			t.Run(tc.name+"/"+method, func(t *testing.T) {
				t.Parallel()
				up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
					for answer(c, br, tc.answer) {
					}
				})
				tr := newTestTransport()
				defer tr.CloseIdleConnections()
				for range 2 {
					req, _ := http.NewRequest("GET", up.url()+"/", nil)
					if method == "POST" {
						req = heldRequest("POST", up.url()+"/", `{"phone":"1"}`)
					}
					resp, err := tr.RoundTrip(req)
					if err != nil {
						t.Fatal(err)
					}
					var b []byte
					if tc.readHalf {
						b = make([]byte, 1)
						_, err = io.ReadFull(resp.Body, b)
					} else {
						b, err = io.ReadAll(resp.Body)
					}
					resp.Body.Close()
					if err != nil || string(b) != tc.body {
						t.Fatalf("got body %q, %v; want %q", b, err, tc.body)
					}
				}
				if n := up.accepted.Load(); tc.clean && n != 1 {
					t.Errorf("got %d connections, want 1: the first was fit to reuse", n)
				} else if !tc.clean && n != 2 {
					t.Errorf("got %d connections, want 2: the first was not fit to reuse", n)
				}
			})
		}
	}
}

func TestTransportChunkedTrailersAndHead(t *testing.T) {
	t.Parallel()
	up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if req.Method == "HEAD" {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
				continue
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n"+
				"3\r\nabc\r\n2\r\nde\r\n0\r\nX-Sum: 5\r\n\r\n")
		}
	})
	tr := newTestTransport()
	defer tr.CloseIdleConnections()
	resp, body := get(t, tr, up.url()+"/")
	if body != "abcde" || resp.Trailer.Get("X-Sum") != "5" {
		t.Errorf("got body %q and trailer %q, want abcde and 5", body, resp.Trailer.Get("X-Sum"))
	}
	req, _ := http.NewRequest("HEAD", up.url()+"/", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ContentLength != 1000 {
		t.Errorf("HEAD: got Content-Length %d, want 1000", resp.ContentLength)
	}
	if _, body := get(t, tr, up.url()+"/"); body != "abcde" {
		t.Errorf("after HEAD: got body %q, want abcde", body)
	}
	if n := up.accepted.Load(); n != 1 {
		t.Errorf("got %d connections, want 1", n)
	}
}

func TestTransportBoundsTheHead(t *testing.T) {
	t.Parallel()
	up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\n")
		line := "X-Filler: " + strings.Repeat("a", 1000) + "\r\n"
		for range 100 {
			if _, err := io.WriteString(c, line); err != nil {
				return
			}
		}
	})
	tr := newTestTransport()
	tr.maxHeadBytes = 16 << 10
	req, _ := http.NewRequest("GET", up.url()+"/", nil)
	if _, err := tr.RoundTrip(req); !errors.Is(err, errHeadTooLarge) {
		t.Fatalf("got error %v, want %v", err, errHeadTooLarge)
	}
}

func TestTransportInformational(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		n       int
		wantErr error
	}{{n: 2}, {n: 5, wantErr: errTooMany1xx}} {
		up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
			answer(c, br, strings.Repeat("HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n", tc.n)+okAnswer)
		})
		tr := newTestTransport()
		var hints []string
		trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			hints = append(hints, h.Get("Link"))
			return nil
		}}
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", up.url()+"/", nil)
		resp, err := tr.RoundTrip(req)
		if tc.wantErr != nil {
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("%d hints: got error %v, want %v", tc.n, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || len(hints) != tc.n || hints[0] != "</a.css>" {
			t.Errorf("got status %d and hints %q, want 200 and %d of </a.css>", resp.StatusCode, hints, tc.n)
		}
	}
}

func TestTransportCancel(t *testing.T) {
	t.Parallel()
	cause := errors.New("route time is up")
	t.Run("waiting for the head", func(t *testing.T) {
		t.Parallel()
		up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
			http.ReadRequest(br)
			io.Copy(io.Discard, br) // never answers
		})
		tr := newTestTransport()
		ctx, cancel := context.WithCancelCause(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", up.url()+"/", nil)
		time.AfterFunc(50*time.Millisecond, func() { cancel(cause) })
		if _, err := tr.RoundTrip(req); !errors.Is(err, cause) {
			t.Fatalf("got error %v, want %v", err, cause)
		}
	})
	t.Run("before it is sent", func(t *testing.T) {
		t.Parallel()
		// A request whose context ended before the round trip (its
		// client gone while it waited in a queue) is not written, on a
		// kept-alive connection either, as http.Transport writes none.
		var got atomic.Int32
		up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
			for {
				if _, err := http.ReadRequest(br); err != nil {
					return
				}
				got.Add(1) // before the answer, which the client waits for
				if _, err := io.WriteString(c, okAnswer); err != nil {
					return
				}
			}
		})
		tr := newTestTransport()
		defer tr.CloseIdleConnections()
		for range 20 {
			get(t, tr, up.url()+"/")
			ctx, cancel := context.WithCancelCause(context.Background())
			cancel(cause)
			req, _ := http.NewRequestWithContext(ctx, "GET", up.url()+"/", nil)
			if _, err := tr.RoundTrip(req); !errors.Is(err, cause) {
				t.Fatalf("got error %v, want %v", err, cause)
			}
		}
		get(t, tr, up.url()+"/")
		if n := got.Load(); n != 21 {
			t.Errorf("the upstream got %d requests, want the 21 not cancelled", n)
		}
	})
	t.Run("reading the body", func(t *testing.T) {
		t.Parallel()
		up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
			http.ReadRequest(br)
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
			io.Copy(io.Discard, br) // and no more
		})
		tr := newTestTransport()
		ctx, cancel := context.WithCancelCause(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", up.url()+"/", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		time.AfterFunc(50*time.Millisecond, func() { cancel(cause) })
		b, err := io.ReadAll(resp.Body)
		if string(b) != "0123456789" || !errors.Is(err, cause) {
			t.Fatalf("got %q, %v; want the 10 bytes sent and %v", b, err, cause)
		}
	})
}

func TestTransportClosesIdleConnections(t *testing.T) {
	t.Parallel()
	closed := make(chan struct{})
	up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		for answer(c, br, okAnswer) {
		}
		close(closed) // the gateway closed its side
	})
	tr := newTestTransport()
	tr.idleTimeout = 50 * time.Millisecond
	get(t, tr, up.url()+"/")
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("an idle connection was still open 5 s after its idle timeout")
	}
	tr.mu.Lock()
	n := len(tr.idle)
	tr.mu.Unlock()
	if n != 0 {
		t.Errorf("the pool still holds connections to %d upstreams", n)
	}
}

func TestTransportMaxIdlePerHost(t *testing.T) {
	t.Parallel()
	up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		for answer(c, br, okAnswer) {
		}
	})
	tr := newTestTransport()
	defer tr.CloseIdleConnections()
	tr.maxIdlePerHost = 2
	fillPool(t, tr, up.url()+"/", 4)
	tr.mu.Lock()
	n := len(tr.idle[up.ln.Addr().String()])
	tr.mu.Unlock()
	if n != 2 {
		t.Errorf("the pool kept %d connections, want 2", n)
	}
}

// recordingTransport answers every request itself and counts them.
type recordingTransport struct{ n atomic.Int64 }

func (r *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r.n.Add(1)
	return &http.Response{StatusCode: 299, Body: http.NoBody, Request: req}, nil
}

// tookDirectPath sends req through a Transport whose http.Transport only
// counts, and reports whether the direct path carried it.
func tookDirectPath(t *testing.T, req *http.Request) bool {
	t.Helper()
	base := &recordingTransport{}
	tr := NewTransport()
	tr.base = base
	defer tr.CloseIdleConnections()
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	io.ReadAll(resp.Body)
	resp.Body.Close()
	return base.n.Load() == 0
}

func TestTransportLeavesTheRestToHTTPTransport(t *testing.T) {
	t.Parallel()
	up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		for answer(c, br, okAnswer) {
		}
	})
	for _, tc := range []struct {
		name   string
		req    func() *http.Request
		direct bool
	}{
		{"GET", func() *http.Request { r, _ := http.NewRequest("GET", up.url(), nil); return r }, true},
		{"HEAD", func() *http.Request { r, _ := http.NewRequest("HEAD", up.url(), nil); return r }, true},
		// http.Transport does not send these again on a stale
		// connection; the direct path, which would, leaves them to it.
		{"PUT with no body", func() *http.Request { r, _ := http.NewRequest("PUT", up.url(), nil); return r }, false},
		{"DELETE with no body", func() *http.Request { r, _ := http.NewRequest("DELETE", up.url(), nil); return r }, false},
		{"POST with no body", func() *http.Request { r, _ := http.NewRequest("POST", up.url(), nil); return r }, false},
		{"PUT with a body", func() *http.Request { r, _ := http.NewRequest("PUT", up.url(), strings.NewReader("x")); return r }, false},
		{"https", func() *http.Request { r, _ := http.NewRequest("GET", "https://127.0.0.1:1/", nil); return r }, false},
		{"upgrade", func() *http.Request {
			r, _ := http.NewRequest("GET", up.url(), nil)
			r.Header.Set("Connection", "Upgrade")
			r.Header.Set("Upgrade", "websocket")
			return r
		}, false},
		{"a field value with a line break", func() *http.Request {
			r, _ := http.NewRequest("GET", up.url(), nil)
			r.Header.Set("X-Bad", "a\r\nX-Injected: 1")
			return r
		}, false},
		{"a field name with a space", func() *http.Request {
			r, _ := http.NewRequest("GET", up.url(), nil)
			r.Header["X Bad"] = []string{"1"}
			return r
		}, false},
		{"close", func() *http.Request { r, _ := http.NewRequest("GET", up.url(), nil); r.Close = true; return r }, false},
	} {
		if direct := tookDirectPath(t, tc.req()); direct != tc.direct {
			t.Errorf("%s: took the direct path %v, want %v", tc.name, direct, tc.direct)
		}
	}
}

func TestTransportConcurrent(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.URL.Path)
	}))
	defer up.Close()
	tr := newTestTransport()
	defer tr.CloseIdleConnections()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				path := "/" + string(rune('a'+g)) + "/" + string(rune('a'+i%26))
				req, _ := http.NewRequest("GET", up.URL+path, nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Error(err)
					return
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || string(b) != path {
					t.Errorf("got %q, %v; want %q", b, err, path)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// An upstream that switches protocols on a request that asked for no
// upgrade gets the client a 502, and what it sends next on that connection
// never reaches the next client.
func TestGatewayUnaskedSwitchIsBadGateway(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		if n.Add(1) == 1 {
			// What the switched connection sends is the upstream's
			// business, even when it looks like an answer.
			answer(c, br, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n")
			for answer(c, br, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nforged") {
			}
			return
		}
		for answer(c, br, okAnswer) {
		}
	})
	srv, _ := newTestGateway(t, "routes:\n  - name: up\n    upstream: %s\n", up.url())
	resp, err := testClient.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("unasked 101: got %d %q, want 502 problem+json", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	resp, err = testClient.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(b) != "ok" {
		t.Fatalf("next request: got %d %q, want 200 ok", resp.StatusCode, b)
	}
}

// fillPool has tr open n connections to url, one a request: each answer
// is held unread until all have come, so that the next request needs a
// connection of its own; then all are read, and their connections go back
// to the pool as it keeps them.
func fillPool(t *testing.T, tr *Transport, url string, n int) {
	t.Helper()
	var resps []*http.Response
	for range n {
		req, _ := http.NewRequest("GET", url, nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resps = append(resps, resp)
	}
	for _, resp := range resps {
		io.ReadAll(resp.Body)
		resp.Body.Close()
	}
}

// TestDirectChecksEveryFieldValue puts a byte that makes a field value
// invalid, or one that does not, at every place of a value's first blocks
// of eight: the direct path takes only a request http.Transport would
// send (httpguts.ValidHeaderFieldValue).
func TestDirectChecksEveryFieldValue(t *testing.T) {
	t.Parallel()
	for k := range 18 {
		for _, tc := range []struct {
			b    string
			want bool
		}{{"\r", false}, {"\n", false}, {"\x00", false}, {"\x1f", false}, {"\x7f", false}, {"\t", true}, {"é", true}, {"\xff", true}, {" ", true}} {
			v := strings.Repeat("v", k) + tc.b + strings.Repeat("w", 17-k)
			r, _ := http.NewRequest("GET", "http://127.0.0.1:1/", nil)
			r.Header["X-Value"] = []string{"plain", v}
			if got := direct(r); got != tc.want && canPeek {
				t.Errorf("value %q: got direct %v, want %v", v, got, tc.want)
			}
		}
	}
}
