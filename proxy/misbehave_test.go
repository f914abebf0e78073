package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// gatewaySend writes req to the gateway at addr on a new connection and
// reads the answer, its body too, passing informational answers over; it
// gives up after 10s.
func gatewaySend(t *testing.T, addr, req string) (*http.Response, string, error) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	for n := 0; err == nil && resp.StatusCode < 200 && resp.StatusCode != 101 && n < 10000; n++ {
		resp, err = http.ReadResponse(br, nil) // informational answers passed on
	}
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b), err
}

// The three ways a request leaves the gateway: a GET and a held JSON
// body on the direct path, a streamed body through http.Transport.
var misbehaveRequests = []struct{ name, req string }{
	{"GET", "GET /r HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"held POST", "POST /keyed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 9\r\n\r\n{\"id\":1} "},
	{"streamed POST", "POST /r HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"},
}

const misbehaveConfig = `
routes:
  - name: keyed
    match: {path_prefix: /keyed}
    upstream: %[1]s
    timeout: 500ms
    limits:
      - {algorithm: token_bucket, limit: 1000000, window: 1s, key: [json:id]}
  - name: r
    upstream: %[1]s
    timeout: 500ms
`

// TestMalformedAnswerHeadIsProblem: an upstream whose answer head cannot
// be read, or never comes whole, gets the client a 502 or 504
// problem+json, on every path and within the route's timeout.
func TestMalformedAnswerHeadIsProblem(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		serve func(c net.Conn)
		want  int
	}{
		{"bad status line", func(c net.Conn) { io.WriteString(c, "HTTP/1.1 2OO OK\r\nContent-Length: 0\r\n\r\n") }, 502},
		{"not HTTP", func(c net.Conn) { io.WriteString(c, "SSH-2.0-OpenSSH_9.6\r\n\r\n") }, 502},
		{"status over 999", func(c net.Conn) { io.WriteString(c, "HTTP/1.1 1000 Big\r\nContent-Length: 0\r\n\r\n") }, 502},
		{"NUL in a field value", func(c net.Conn) { io.WriteString(c, "HTTP/1.1 200 OK\r\nX-A: a\x00b\r\nContent-Length: 0\r\n\r\n") }, 502},
		{"conflicting lengths", func(c net.Conn) {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nokk")
		}, 502},
		{"negative length", func(c net.Conn) { io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n") }, 502},
		{"unknown coding", func(c net.Conn) { io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nx") }, 502},
		{"closed mid-head", func(c net.Conn) { io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Le") }, 502},
		{"closed with no answer", func(c net.Conn) {}, 502},
		{"1xx flood", func(c net.Conn) {
			for range 1000 {
				if _, err := io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"); err != nil {
					return
				}
				time.Sleep(time.Millisecond)
			}
		}, 0},
		{"stalls", func(c net.Conn) { time.Sleep(3 * time.Second) }, 504},
		{"trickles its head", func(c net.Conn) {
			for _, b := range []byte("HTTP/1.1 200 OK\r\nX-Slow: " + strings.Repeat("a", 100)) {
				if _, err := c.Write([]byte{b}); err != nil {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}, 504},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				io.Copy(io.Discard, req.Body)
				tc.serve(c)
			})
			srv, _ := newTestGateway(t, misbehaveConfig, up.url())
			for _, r := range misbehaveRequests {
				start := time.Now()
				resp, body, err := gatewaySend(t, srv.Listener.Addr().String(), r.req)
				took := time.Since(start)
				if err != nil && resp == nil {
					t.Errorf("%s: got no answer (%v), want %d problem+json", r.name, err, tc.want)
					continue
				}
				ok := resp.StatusCode == tc.want || tc.want == 0 && (resp.StatusCode == 502 || resp.StatusCode == 504)
				if !ok || err != nil || resp.Header.Get("Content-Type") != "application/problem+json" {
					t.Errorf("%s: got %d %q %q, %v; want %d problem+json", r.name, resp.StatusCode, resp.Header.Get("Content-Type"), body, err, tc.want)
				}
				if took > 2*time.Second {
					t.Errorf("%s: answered after %v, want within the route's 500ms timeout", r.name, took)
				}
			}
		})
	}
}

// TestBrokenAnswerBodyIsCut: once an answer's head has gone to the client,
// a body the upstream breaks (shorter than its length, bad chunked
// framing, a close mid-chunk) must reach the client as a cut connection,
// never as a whole answer, on every path.
func TestBrokenAnswerBodyIsCut(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, answer string }{
		{"shorter than its length", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"},
		{"bad chunk size", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\nZZ\r\n"},
		{"chunk longer than said", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcdef\r\n0\r\n\r\n"},
		{"closed mid-chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nabc"},
		{"closed before the last chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
				answer(c, br, tc.answer) // and close
			})
			srv, _ := newTestGateway(t, misbehaveConfig, up.url())
			for _, r := range misbehaveRequests {
				resp, body, err := gatewaySend(t, srv.Listener.Addr().String(), r.req)
				// The head may have gone out or not (it waits in the
				// server's write buffer); either way no whole answer.
				if err == nil {
					t.Errorf("%s: got a whole %d answer %q, want the connection cut", r.name, resp.StatusCode, body)
				}
			}
		})
	}
}

// TestTransportBodilessAnswerWithBody: an answer that may carry no body
// (204, 304, any answer to HEAD) but is followed by one leaves those bytes
// on the connection, where the next request would read them as its
// answer: the connection is not used again, whether the bytes came with
// the head or a moment after.
func TestTransportBodilessAnswerWithBody(t *testing.T) {
	t.Parallel()
	const forged = "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nforged"
	for _, tc := range []struct {
		name, method, head string
	}{
		{"204", "GET", "HTTP/1.1 204 No Content\r\n\r\n"},
		{"304", "GET", "HTTP/1.1 304 Not Modified\r\nContent-Length: 40\r\n\r\n"},
		{"HEAD", "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 40\r\n\r\n"},
		{"HEAD chunked", "HEAD", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"},
	} {
		for _, late := range []bool{false, true} {
			name := tc.name
			if late {
				name += "/later"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				var answered atomic.Bool
				// wrote is closed once the bytes after the bodiless
				// answer are on the connection: the next request is
				// sent only then, as it would be on a real upstream
				// that sent them a moment before (on a loaded machine
				// the upstream's write may come later than any fixed
				// pause).
				wrote := make(chan struct{})
				up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
					for {
						req, err := http.ReadRequest(br)
						if err != nil {
							return
						}
						io.Copy(io.Discard, req.Body)
						if answered.Swap(true) {
							io.WriteString(c, okAnswer)
							continue
						}
						io.WriteString(c, tc.head)
						if late {
							time.Sleep(50 * time.Millisecond)
						}
						io.WriteString(c, forged)
						close(wrote)
					}
				})
				tr := newTestTransport()
				defer tr.CloseIdleConnections()
				req, _ := http.NewRequest(tc.method, up.url()+"/", nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				select {
				case <-wrote:
				case <-time.After(10 * time.Second):
					t.Fatal("the upstream did not send what follows the bodiless answer within 10s")
				}
				if _, body := get(t, tr, up.url()+"/"); body != "ok" {
					t.Errorf("the next GET got %q, want ok: it read what followed the bodiless answer", body)
				}
				if n := up.accepted.Load(); n != 2 {
					t.Errorf("got %d connections, want 2", n)
				}
			})
		}
	}
}

// TestTransportNoContentWithBody: a 204 that announces a body (which RFC
// 9110 forbids) is read as bodiless, so the body the upstream then sends,
// however late, would be read as the answer to the next request on the
// connection, another client's maybe. Its connection is not used again.
// The upstream here sends that body only once the next request came on
// the same connection, so no timing decides the outcome.
func TestTransportNoContentWithBody(t *testing.T) {
	t.Parallel()
	const forged = "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nforged"
	for _, tc := range []struct{ name, head string }{
		{"length", "HTTP/1.1 204 No Content\r\nContent-Length: 42\r\n\r\n"},
		{"chunked", "HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n"},
	} {
		head := tc.head
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var answered atomic.Bool
			up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
				first := false
				for {
					if _, err := http.ReadRequest(br); err != nil {
						return
					}
					switch {
					case first:
						// The next request came on this connection: what
						// the 204 announced goes first.
						io.WriteString(c, forged+okAnswer)
					case answered.Swap(true):
						io.WriteString(c, okAnswer)
					default:
						first = true
						io.WriteString(c, head)
					}
				}
			})
			tr := newTestTransport()
			defer tr.CloseIdleConnections()
			if resp, _ := get(t, tr, up.url()+"/"); resp.StatusCode != 204 {
				t.Fatalf("got %d, want 204", resp.StatusCode)
			}
			if _, body := get(t, tr, up.url()+"/"); body != "ok" {
				t.Errorf("the next GET got %q, want ok: it read the body the 204 announced", body)
			}
		})
	}
}
