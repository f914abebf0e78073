package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestExpectContinueMaxBody: a client that sends Expect: 100-continue
// gets no 100 for a declared length over max_body, only the 413; given
// its 100 for a body it streams, it gets 413 problem+json once the body
// grows past max_body, and the upstream never reads the cut body whole.
// Plain and keyed routes alike.
func TestExpectContinueMaxBody(t *testing.T) {
	t.Parallel()
	up := newBodyUpstream(t)
	srv, _ := newTestGateway(t, maxBodyConfig, up.URL)
	for _, tc := range []struct {
		name, path, framing string
		body                string
		want100             bool
	}{
		{"declared over", "/small", "Content-Length: 17", "", false},
		{"declared over, keyed", "/keyed", "Content-Length: 17", "", false},
		{"streamed over", "/small", "Transfer-Encoding: chunked", "0123456789abcdef!", true},
		{"streamed over, keyed", "/keyed", "Transfer-Encoding: chunked", `{"id":1,"pad":"xxxxxxxx"}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(up.complete())
			c, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\n%s\r\n\r\n", tc.path, tc.framing)
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got100 := resp.StatusCode == 100; got100 != tc.want100 {
				t.Fatalf("got %d first, want a 100 Continue: %v", resp.StatusCode, tc.want100)
			}
			if tc.want100 {
				for _, p := range []string{tc.body[:len(tc.body)/2], tc.body[len(tc.body)/2:]} {
					fmt.Fprintf(c, "%x\r\n%s\r\n", len(p), p)
					time.Sleep(20 * time.Millisecond)
				}
				io.WriteString(c, "0\r\n\r\n")
				if resp, err = http.ReadResponse(br, nil); err != nil {
					t.Fatal(err)
				}
			}
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 413 || resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(string(b), "max_body") {
				t.Errorf("got %d %q %s, want 413 problem+json", resp.StatusCode, resp.Header.Get("Content-Type"), b)
			}
			time.Sleep(50 * time.Millisecond)
			if got := up.complete()[before:]; len(got) != 0 {
				t.Errorf("the upstream read %q as whole bodies, want none", got)
			}
		})
	}
}

// TestOneContinuePerRequest: a client that sends Expect: 100-continue gets
// one 100 Continue, however many the upstream sends. The server writes the
// client's 100 when the transport first reads the body, which it does once
// the upstream's 100 came; passing the upstream's 100s on as well sent
// the client two or more, and a client that reads one interim answer took
// the second for its answer (RFC 9110 §15.2: a proxy need not pass on a
// 100 it did not ask for, and here the client had its own already).
func TestOneContinuePerRequest(t *testing.T) {
	t.Parallel()
	bodies := make(chan string, 8)
	up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			// Two 100s, one before and one after the body came:
			// both may go to a client that read none.
			io.WriteString(c, "HTTP/1.1 100 Continue\r\nX-Interim: 1\r\n\r\n")
			b, err := io.ReadAll(req.Body)
			if err != nil {
				return
			}
			io.WriteString(c, "HTTP/1.1 100 Continue\r\nX-Interim: 2\r\n\r\n")
			bodies <- string(b)
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	srv, _ := newTestGateway(t, "routes:\n  - name: upload\n    upstream: %s\n", up.url())
	for _, tc := range []struct{ name, framing, body string }{
		{"length", "Content-Length: 10", "0123456789"},
		{"chunked", "Transfer-Encoding: chunked", "a\r\n0123456789\r\n0\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintf(c, "POST /up HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n%s\r\n\r\n", tc.framing)
			br := bufio.NewReader(c)
			continues := 0
			for {
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode == 100 {
					if continues++; continues == 1 {
						io.WriteString(c, tc.body)
					}
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != 200 || string(b) != "ok" {
					t.Fatalf("got %d %q, want 200 ok", resp.StatusCode, b)
				}
				break
			}
			if continues != 1 {
				t.Errorf("got %d interim 100 answers, want 1", continues)
			}
			if got := <-bodies; got != "0123456789" {
				t.Errorf("the upstream read %q", got)
			}
		})
	}
}

// TestExpectContinueUpstreamAnswersFromHead: an upstream that answers from
// the head alone, sending no 100, has its answer reach a client that sent
// Expect: 100-continue at once, with no 100 before it and no body asked
// of the client.
func TestExpectContinueUpstreamAnswersFromHead(t *testing.T) {
	t.Parallel()
	read := make(chan int64, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, io.LimitReader(r.Body, 0))
		read <- n
		http.Error(w, "who are you", http.StatusUnauthorized)
	}))
	t.Cleanup(up.Close)
	srv, _ := newTestGateway(t, "routes:\n  - name: upload\n    upstream: %s\n", up.URL)
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "POST /up HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 1000000\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("got %d first, want the upstream's 401", resp.StatusCode)
	}
	if n := <-read; n != 0 {
		t.Errorf("the upstream read %d bytes", n)
	}
}
