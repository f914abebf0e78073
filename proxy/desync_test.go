package proxy

// Request smuggling and response desynchronisation: hostile upstreams,
// HTTP/1 framing, odd HTTP/2 request shapes.

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// closedBy reports, on ch, whether the gateway closed its side of c within
// d (the read gets EOF or a reset rather than timing out).
func closedBy(c net.Conn, br *bufio.Reader, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, br)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return true
}

// TestStatusBelow100IsBadGateway has the upstream answer a GET with a status
// below 100, which http.ReadResponse accepts ("099"). The client must get
// SPEC's 502 problem+json, and sluice must let go of the upstream
// connection, which holds an unread body.
func TestStatusBelow100IsBadGateway(t *testing.T) {
	t.Parallel()
	closed := make(chan bool, 1)
	up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 099 Weird\r\nContent-Length: 5\r\n\r\nhello")
		closed <- closedBy(c, br, 3*time.Second)
	})
	srv, _ := newTestGateway(t, "routes:\n  - name: up\n    upstream: %s\n", up.url())
	resp, err := testClient.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("status 099 from the upstream: client got %d %q, want 502 problem+json", resp.StatusCode, b)
	}
	if !<-closed {
		t.Errorf("sluice still held the upstream connection 3 s after the client got its answer")
	}
}

// TestRefusedBodilessAnswerLetsGo is TestStatusBelow100IsBadGateway for an
// answer that has no body to leave unread (Content-Length: 0, or any
// answer to HEAD), on both paths: the client gets 502, and the upstream's
// connection, which answered what sluice refuses, is closed all the same
// rather than kept for the next request.
func TestRefusedBodilessAnswerLetsGo(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, method, body string
	}{
		{"GET", "GET", ""},
		{"HEAD", "HEAD", ""},
		{"POST", "POST", "body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			closed := make(chan bool, 1)
			up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				io.Copy(io.Discard, req.Body)
				io.WriteString(c, "HTTP/1.1 099 Weird\r\nContent-Length: 0\r\n\r\n")
				select {
				case closed <- closedBy(c, br, 3*time.Second):
				default: // a connection after the first
				}
			})
			srv, _ := newTestGateway(t, "routes:\n  - name: up\n    upstream: %s\n", up.url())
			var body io.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
			}
			req, _ := http.NewRequest(tc.method, srv.URL+"/", body)
			resp, err := testClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadGateway {
				t.Errorf("got %d, want 502", resp.StatusCode)
			}
			if !<-closed {
				t.Errorf("sluice still held the upstream connection 3 s after answering 502")
			}
		})
	}
}

// TestUnaskedSwitchOnBodyPathLetsGo is TestGatewayUnaskedSwitchIsBadGateway
// for a request http.Transport carries (a POST with a body): the upstream
// switches protocols unasked. The client gets 502, and the upstream
// connection, which now speaks another protocol, must be closed.
func TestUnaskedSwitchOnBodyPathLetsGo(t *testing.T) {
	t.Parallel()
	closed := make(chan bool, 1)
	up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n")
		closed <- closedBy(c, br, 3*time.Second)
	})
	srv, _ := newTestGateway(t, "routes:\n  - name: up\n    upstream: %s\n", up.url())
	resp, err := testClient.Post(srv.URL+"/", "text/plain", strings.NewReader("body"))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("unasked 101 to a POST: got %d, want 502", resp.StatusCode)
	}
	if !<-closed {
		t.Errorf("sluice still held the switched upstream connection 3 s after answering 502")
	}
}

// TestH2RequestShapesFrameCleanly sends HTTP/2 requests of odd
// shapes and checks that the HTTP/1.1 upstream parses exactly the requests
// the routes saw: no path the gateway never routed, no unparsable bytes.
func TestH2RequestShapesFrameCleanly(t *testing.T) {
	t.Parallel()
	type seen struct{ line, body string }
	got := make(chan seen, 64)
	bad := make(chan string, 64)
	up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				if err != io.EOF && !strings.Contains(err.Error(), "closed") {
					bad <- err.Error()
				}
				return
			}
			b, _ := io.ReadAll(req.Body)
			got <- seen{req.Method + " " + req.RequestURI, string(b)}
			if _, err := io.WriteString(c, okAnswer); err != nil {
				return
			}
		}
	})
	srv := newTLSGateway(t, "routes:\n  - name: v1\n    match: {path_prefix: /v1}\n    upstream: "+up.url()+"\n")
	smuggled := "GET /admin HTTP/1.1\r\nHost: x\r\n\r\n"
	for _, s := range []h2Stream{
		{fields: h2Req("GET", "/v1/a", "content-length", "40")},
		{fields: h2Req("GET", "/v1/b", "content-length", "0"), body: ""},
		{fields: h2Req("GET", "/v1/c"), body: smuggled},
		{fields: h2Req("HEAD", "/v1/d"), body: smuggled},
		{fields: h2Req("OPTIONS", "/v1/e", "content-length", "33"), body: smuggled},
		{fields: h2Req("GET", "/v1/f?a=1 HTTP/1.1")},
		{fields: h2Req("GET", "/v1/g", "x-a", " v \t")},
	} {
		a := h2Do(t, srv.Listener.Addr().String(), s)
		t.Logf("%v -> %d %q", s.fields[3][1], a.status, a.body)
	}
	time.Sleep(200 * time.Millisecond)
	close(got)
	for s := range got {
		t.Logf("upstream got %q body %q", s.line, s.body)
		if !strings.HasPrefix(strings.Fields(s.line)[1], "/v1/") {
			t.Errorf("upstream got a request no route matched: %q", s.line)
		}
	}
	close(bad)
	for e := range bad {
		t.Errorf("upstream could not parse what it got: %s", e)
	}
}

// TestConcurrentMixedFramingNoCrossTalk drives the direct path
// through the gateway from many goroutines against an upstream that
// answers in every framing (Content-Length, chunked with trailers,
// Connection: close, read-to-close HTTP/1.0, 103 first, 204, HEAD), while
// some clients give up mid-body. Every answer must be its own request's.
func TestConcurrentMixedFramingNoCrossTalk(t *testing.T) {
	t.Parallel()
	up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			p := req.URL.Path
			var resp string
			switch p[len(p)-1] % 7 {
			case 0:
				resp = "HTTP/1.1 200 OK\r\nContent-Length: " + itoa(len(p)) + "\r\n\r\n" + p
			case 1:
				resp = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n" + hexLen(len(p)) + ";ext=1\r\n" + p + "\r\n0\r\nX-T: 1\r\n\r\n"
			case 2:
				resp = "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: " + itoa(len(p)) + "\r\n\r\n" + p
			case 3:
				io.WriteString(c, "HTTP/1.0 200 OK\r\n\r\n"+p)
				return
			case 4:
				resp = "HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: " + itoa(len(p)) + "\r\n\r\n" + p
			case 5:
				resp = "HTTP/1.1 204 No Content\r\nX-P: " + p + "\r\n\r\n"
			case 6:
				// a large body, to be cut by some clients
				body := p + strings.Repeat("x", 200<<10)
				resp = "HTTP/1.1 200 OK\r\nContent-Length: " + itoa(len(body)) + "\r\n\r\n" + body
			}
			if req.Method == "HEAD" && !strings.HasPrefix(resp, "HTTP/1.0") {
				resp = resp[:strings.Index(resp, "\r\n\r\n")+4]
				if strings.Contains(resp, "103") {
					resp += "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"
				}
			}
			if _, err := io.WriteString(c, resp); err != nil {
				return
			}
		}
	})
	srv, _ := newTestGateway(t, "routes:\n  - name: up\n    upstream: %s\n", up.url())
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()
	done := make(chan struct{})
	errs := make(chan string, 1000)
	for g := range 16 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 60 {
				p := "/g" + itoa(g) + "/r" + itoa(i) + string(rune('a'+(g*7+i)%26))
				method := "GET"
				if i%5 == 4 {
					method = "HEAD"
				}
				req, _ := http.NewRequest(method, srv.URL+p, nil)
				resp, err := client.Do(req)
				if err != nil {
					errs <- p + ": " + err.Error()
					continue
				}
				if p[len(p)-1]%7 == 6 && i%3 == 0 {
					buf := make([]byte, 100)
					io.ReadFull(resp.Body, buf)
					resp.Body.Close() // give up mid-body
					if method == "GET" && !strings.HasPrefix(string(buf), p) {
						errs <- p + ": got " + string(buf[:40])
					}
					continue
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					errs <- p + ": " + err.Error()
					continue
				}
				if resp.StatusCode >= 500 {
					errs <- p + ": status " + itoa(resp.StatusCode)
					continue
				}
				switch {
				case method == "HEAD":
				case p[len(p)-1]%7 == 5:
					if resp.Header.Get("X-P") != p {
						errs <- p + ": 204 of " + resp.Header.Get("X-P")
					}
				case !strings.HasPrefix(string(b), p) || (p[len(p)-1]%7 != 6 && string(b) != p):
					errs <- p + ": got body of " + string(b[:min(len(b), 40)])
				}
			}
		}()
	}
	for range 16 {
		<-done
	}
	close(errs)
	n := 0
	for e := range errs {
		if n++; n <= 10 {
			t.Error(e)
		}
	}
}

func itoa(n int) string   { return strconv.Itoa(n) }
func hexLen(n int) string { return strconv.FormatInt(int64(n), 16) }
