package server

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
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

// clientHello returns the first flight of a TLS client for name: its
// ClientHello record, as a client writes it before it reads anything.
func clientHello(t *testing.T, name string) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go tls.Client(a, &tls.Config{ServerName: name, InsecureSkipVerify: true, NextProtos: []string{"h2", "http/1.1"}}).Handshake()
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	var hdr [5]byte
	if _, err := io.ReadFull(b, hdr[:]); err != nil {
		t.Fatal(err)
	}
	rec := make([]byte, int(hdr[3])<<8|int(hdr[4]))
	if _, err := io.ReadFull(b, rec); err != nil {
		t.Fatal(err)
	}
	return append(hdr[:], rec...)
}

// closedAfter waits for the server to close c, reading and dropping what
// it sends meanwhile, and returns how long that took from since; false
// when c was still open at since+limit.
func closedAfter(c net.Conn, since time.Time, limit time.Duration) (time.Duration, bool) {
	c.SetReadDeadline(since.Add(limit))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return time.Since(since), false
	}
	return time.Since(since), true
}

// TestTLSHandshakeWithinClientHeaderTimeout: README (Slow and idle
// clients) bounds the TLS handshake by client_header_timeout, counted
// from the accept: a client that opens the connection and sends nothing,
// trickles its ClientHello a byte at a time, or sends a whole ClientHello
// and never its Finished, loses the connection when the bound (1s here)
// is up, not later.
func TestTLSHandshakeWithinClientHeaderTimeout(t *testing.T) {
	t.Parallel()
	addr := h2SlowHeaderGateway(t, "")
	hello := clientHello(t, "api.example.test")
	for _, tc := range []struct {
		name string
		send func(c net.Conn, stop <-chan struct{})
	}{
		{"silent", func(net.Conn, <-chan struct{}) {}},
		{"ClientHello trickled", func(c net.Conn, stop <-chan struct{}) {
			for i := range len(hello) - 1 {
				if _, err := c.Write(hello[i : i+1]); err != nil {
					return
				}
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
		}},
		{"ClientHello, then no Finished", func(c net.Conn, _ <-chan struct{}) { c.Write(hello) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			opened := time.Now()
			stop := make(chan struct{})
			defer close(stop)
			go tc.send(c, stop)
			d, closed := closedAfter(c, opened, 5*time.Second)
			if !closed || d < 800*time.Millisecond {
				t.Errorf("connection closed %v after %v; want it closed at client_header_timeout (1s)", closed, d.Round(10*time.Millisecond))
			}
		})
	}
}

// TestIdleKeepAliveOverTLS: an idle keep-alive connection is closed at
// keepalive_timeout (1s here), over TLS too, with HTTP/1.1 and with
// HTTP/2 (whose server has its own idle timer), and not before it.
func TestIdleKeepAliveOverTLS(t *testing.T) {
	t.Parallel()
	addr := h2SlowHeaderGateway(t, "keepalive_timeout: 1s\n")
	t.Run("HTTP/1.1", func(t *testing.T) {
		t.Parallel()
		c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: api.example.test\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		d, closed := closedAfter(c, time.Now(), 5*time.Second)
		if !closed || d < 800*time.Millisecond || d > 3*time.Second {
			t.Errorf("idle connection closed %v after %v; want at keepalive_timeout (1s)", closed, d.Round(10*time.Millisecond))
		}
	})
	t.Run("HTTP/2", func(t *testing.T) {
		t.Parallel()
		c, fr := h2Dial(t, addr)
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "api.example.test"}, {":path", "/"}} {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true})
		waitStreamEnd(t, fr, 1)
		closed, d := closedWithin(t, c, fr, 5*time.Second, nil)
		if !closed || d < 800*time.Millisecond || d > 3*time.Second {
			t.Errorf("idle connection closed %v after %v; want at keepalive_timeout (1s)", closed, d.Round(10*time.Millisecond))
		}
	})
	t.Run("HTTP/2 header block left unfinished", func(t *testing.T) {
		// After a first request, a second stream's header block begun and
		// never ended, with no other stream open: the idle bound.
		t.Parallel()
		c, fr := h2Dial(t, addr)
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "api.example.test"}, {":path", "/"}, {"x-pad", strings.Repeat("a", 100)}} {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true})
		waitStreamEnd(t, fr, 1)
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: hb.Bytes()[:10], EndStream: true, EndHeaders: false})
		closed, d := closedWithin(t, c, fr, 5*time.Second, nil)
		if !closed || d > 3*time.Second {
			t.Errorf("connection with an unfinished header block closed %v after %v; want at keepalive_timeout (1s)", closed, d.Round(10*time.Millisecond))
		}
	})
}

// waitStreamEnd reads fr until stream id's answer ends.
func waitStreamEnd(t *testing.T, fr *http2.Framer, id uint32) {
	t.Helper()
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("no answer on stream %d: %v", id, err)
		}
		if f.Header().StreamID == id && f.Header().Flags.Has(http2.FlagDataEndStream) {
			if _, ok := f.(*http2.DataFrame); ok {
				return
			}
			if h, ok := f.(*http2.HeadersFrame); ok && h.StreamEnded() {
				return
			}
		}
	}
}

// TestHealthUnderSlowClients: SPEC §10 has slow and idle clients starve
// no one. The admin listener's /healthz and /readyz go on answering, and
// quickly, while the main listeners hold hundreds of connections that
// trickle their headers, never finish a TLS handshake, or send an HTTP/2
// preface and nothing more; a real request on the main listener is
// answered too.
func TestHealthUnderSlowClients(t *testing.T) {
	certFile, keyFile := writePair(t, t.TempDir(), "api.example.test")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "upstream") }))
	t.Cleanup(up.Close)
	r := serve(t, fmt.Sprintf("listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\nclient_header_timeout: 3s\nlog: {access_log: false}\ntls:\n  listen: 127.0.0.1:0\n  certificates: [{cert_file: %s, key_file: %s}]\nroutes:\n  - name: r\n    upstream: %s\n", certFile, keyFile, up.URL))
	plain, tlsAddr, admin := r.Addr("http").String(), r.Addr("https").String(), "http://"+r.Addr("admin").String()
	hello := clientHello(t, "api.example.test")

	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	probe := func() (time.Duration, error) {
		start := time.Now()
		for _, p := range []string{"/healthz", "/readyz"} {
			resp, err := client.Get(admin + p)
			if err != nil {
				return 0, err
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				return 0, fmt.Errorf("%s: got %d, want 200", p, resp.StatusCode)
			}
		}
		resp, err := client.Get("http://" + plain + "/real")
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return 0, fmt.Errorf("real request: got %d, want 200", resp.StatusCode)
		}
		return time.Since(start), nil
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var conns []net.Conn
	defer func() {
		close(stop)
		for _, c := range conns {
			c.Close()
		}
		wg.Wait()
	}()
	dial := func(addr string) net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("opening a slow connection: %v", err)
		}
		conns = append(conns, c)
		return c
	}
	var trickle []net.Conn
	for range 200 {
		trickle = append(trickle, dial(plain))
	}
	var hellos []net.Conn
	for range 100 {
		hellos = append(hellos, dial(tlsAddr))
	}
	for range 50 {
		c, err := tls.Dial("tcp", tlsAddr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
		if err != nil {
			t.Fatalf("opening an HTTP/2 connection: %v", err)
		}
		c.Write([]byte(http2.ClientPreface))
		conns = append(conns, c)
	}
	wg.Go(func() {
		head := "GET /slow HTTP/1.1\r\nHost: x\r\nX-Pad: " + strings.Repeat("p", 1000)
		for i := 0; ; i++ {
			for _, c := range trickle {
				c.SetWriteDeadline(time.Now().Add(time.Second))
				c.Write([]byte{head[i%len(head)]})
			}
			for _, c := range hellos {
				if i < len(hello)-1 {
					c.SetWriteDeadline(time.Now().Add(time.Second))
					c.Write(hello[i : i+1])
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	})

	var took []time.Duration
	for range 10 {
		d, err := probe()
		if err != nil {
			t.Fatalf("with 350 slow connections open: %v", err)
		}
		took = append(took, d)
		time.Sleep(50 * time.Millisecond)
	}
	slices.Sort(took)
	t.Logf("/healthz, /readyz and a real request with 350 slow connections: median %v, max %v", took[len(took)/2], took[len(took)-1])
	if med := took[len(took)/2]; med > 500*time.Millisecond {
		t.Errorf("/healthz, /readyz and a real request took %v (median) with slow connections open, want under 500ms", med)
	}
}

// TestHeaderDeadlineAnswer: README (Slow and idle clients) says what a
// client whose headers did not come within client_header_timeout gets as
// its connection is closed. net/http takes the part of a line that the
// deadline cut for a whole line: when that part is malformed on its own
// (a request line, or a field name, cut short) the client gets
// net/http's plain-text 400; when it reads as a line (a field cut in its
// value), or the deadline finds the client between two lines or before
// any byte, the connection is closed without an answer. Whether the bytes
// were still trickling in at the deadline does not matter. Either way the
// connection ends at the bound.
func TestHeaderDeadlineAnswer(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "upstream") }))
	t.Cleanup(up.Close)
	r := serve(t, fmt.Sprintf("listen: 127.0.0.1:0\nadmin: \"\"\nclient_header_timeout: 1s\nroutes:\n  - name: r\n    upstream: %s\n", up.URL))
	addr := r.Addr("http").String()
	const fields = "GET / HTTP/1.1\r\nHost: x\r\n"
	for _, tc := range []struct {
		name, sent string
		trickle    string // sent after sent, a byte each 50ms
		want       string // the status line's start, "" for no answer
	}{
		{"nothing", "", "", ""},
		{"part of the request line", "GE", "", "HTTP/1.1 400 "},
		{"the request line", "GET / HTTP/1.1\r\n", "", ""},
		{"part of a field name", fields + "X-Pa", "", "HTTP/1.1 400 "},
		{"part of a field value", fields + "X-Pad: aa", "", ""},
		{"whole fields, no blank line", fields, "", ""},
		{"request target trickled past the bound", "GET /", strings.Repeat("a", 100), "HTTP/1.1 400 "},
		{"field value trickled past the bound", fields + "X-Pad: ", strings.Repeat("a", 100), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			opened := time.Now()
			stop := make(chan struct{})
			defer close(stop)
			go func() {
				io.WriteString(c, tc.sent)
				for i := range len(tc.trickle) {
					if _, err := c.Write([]byte{tc.trickle[i]}); err != nil {
						return
					}
					select {
					case <-stop:
						return
					case <-time.After(50 * time.Millisecond):
					}
				}
			}()
			c.SetReadDeadline(opened.Add(5 * time.Second))
			got, err := io.ReadAll(c)
			d := time.Since(opened)
			if err != nil || d < 800*time.Millisecond || d > 3*time.Second {
				t.Errorf("connection ended after %v with %v; want it closed at client_header_timeout (1s)", d.Round(10*time.Millisecond), err)
			}
			if tc.want == "" && len(got) != 0 || tc.want != "" && !strings.HasPrefix(string(got), tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestNextRequestHeaderBound: on a keep-alive connection, net/http waits
// for the next request's first four bytes under keepalive_timeout and
// starts client_header_timeout from the fourth, as README (Slow and idle
// clients) says. So a next request's headers are bounded by the two
// together: three bytes sent at once keep the connection until
// keepalive_timeout (2s here), not client_header_timeout (1s); a request
// whose fourth byte comes 1.5s after its first is still read whole when
// the rest follows within client_header_timeout of it; four bytes and
// silence end the connection at client_header_timeout.
func TestNextRequestHeaderBound(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "upstream") }))
	t.Cleanup(up.Close)
	r := serve(t, fmt.Sprintf("listen: 127.0.0.1:0\nadmin: \"\"\nclient_header_timeout: 1s\nkeepalive_timeout: 2s\nroutes:\n  - name: r\n    upstream: %s\n", up.URL))
	addr := r.Addr("http").String()
	for _, tc := range []struct {
		name     string
		first    string        // sent at once after the first answer
		rest     string        // sent after pause, "" for none
		pause    time.Duration // before rest
		want     string        // the second answer's status line start, "" for none
		min, max time.Duration // when the connection ends (or the answer comes), from the first answer
	}{
		{"three bytes, then silent", "GET", "", 0, "", 1800 * time.Millisecond, 3 * time.Second},
		{"four bytes, then silent", "GET ", "", 0, "HTTP/1.1 400 ", 800 * time.Millisecond, 1900 * time.Millisecond},
		{"three bytes, the rest 1.5s later", "GET", " / HTTP/1.1\r\nHost: x\r\n\r\n", 1500 * time.Millisecond, "HTTP/1.1 200 ", 1400 * time.Millisecond, 2500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			answered := time.Now()
			io.WriteString(c, tc.first)
			if tc.rest != "" {
				time.AfterFunc(tc.pause, func() { io.WriteString(c, tc.rest) })
			}
			line, _ := br.ReadString('\n')
			d := time.Since(answered)
			if tc.want == "" && line != "" || !strings.HasPrefix(line, tc.want) {
				t.Errorf("got %q, want %q", line, tc.want)
			}
			if d < tc.min || d > tc.max {
				t.Errorf("ended or answered after %v, want between %v and %v", d.Round(10*time.Millisecond), tc.min, tc.max)
			}
		})
	}
}
