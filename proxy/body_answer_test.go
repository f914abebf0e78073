package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// onlyReader hides a reader's type, so that the client sends its body
// chunked, with no length.
type onlyReader struct{ io.Reader }

// TestOversizeBodyGets413: a client that writes its whole body before it
// reads the answer (net/http's client does, as Python's http.client) must
// read the 413 of a body over max_body, not a reset: the server lingers
// before it closes a connection with a body left unread, when it knows
// the body went past its limit. With a declared length and without.
func TestOversizeBodyGets413(t *testing.T) {
	t.Parallel()
	up := newBodyUpstream(t)
	srv, _ := newTestGateway(t, "routes:\n  - name: upload\n    upstream: %s\n    max_body: 1KiB\n", up.URL)
	for _, tc := range []struct {
		name string
		body func() io.Reader
	}{
		{"content-length", func() io.Reader { return bytes.NewReader(make([]byte, 4<<20)) }},
		{"chunked", func() io.Reader { return onlyReader{bytes.NewReader(make([]byte, 4<<20))} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for i := range 10 {
				req, _ := http.NewRequest("POST", srv.URL+"/", tc.body())
				resp, err := testClient.Do(req)
				if err != nil {
					t.Fatalf("attempt %d: POST of 4 MiB over max_body 1KiB: %v, want 413 problem+json", i, err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusRequestEntityTooLarge {
					t.Fatalf("attempt %d: got status %d, want 413", i, resp.StatusCode)
				}
			}
		})
	}
}

// TestExpectContinueAnsweredAtOnce: a client that sends Expect:
// 100-continue waits for the 100 before it sends its body (RFC 9110
// §10.1.1). An answer sluice gives without the body (404, 429, 502) must
// reach it at once, not after client_body_timeout spent waiting for a body
// the client will not send unasked.
func TestExpectContinueAnsweredAtOnce(t *testing.T) {
	t.Parallel()
	up := newBodyUpstream(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String()
	ln.Close()
	srv, _ := newTestGateway(t, `
client_body_timeout: 3s
routes:
  - name: down
    match: {path_prefix: /down}
    upstream: `+down+`
  - name: limited
    match: {path_prefix: /limited}
    upstream: %s
    limits:
      - {algorithm: fixed_window, limit: 1, window: 1h, key: [global]}
`, up.URL)
	if resp, err := testClient.Get(srv.URL + "/limited"); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close() // spends the only unit
	}
	for _, tc := range []struct {
		path string
		want int
	}{{"/limited", 429}, {"/nowhere", 404}, {"/down", 502}} {
		t.Run(tc.path, func(t *testing.T) {
			t.Parallel()
			c, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			start := time.Now()
			io.WriteString(c, "POST "+tc.path+" HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 10\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if took := time.Since(start); resp.StatusCode != tc.want || took > 2*time.Second {
				t.Errorf("got %d after %v, want %d at once (the client waits for 100 Continue before its body)", resp.StatusCode, took.Round(time.Millisecond), tc.want)
			}
		})
	}
}

// TestOversizeBodyWhileTheUpstreamAnswers: a streamed body that goes past
// max_body while the upstream is already answering (early hints, then its
// headers, without reading the body) is cut, and the connection is closed
// after the answer. Finding the body too large on the transport's
// goroutine used to write the answer's header map there (net/http's
// MaxBytesReader does) while the handler wrote the same map: a data race
// the race detector reports, and a concurrent map write that ends the
// process.
func TestOversizeBodyWhileTheUpstreamAnswers(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for range 20 {
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
		}
		for i := range 20 {
			w.Header().Set(fmt.Sprintf("X-Answer-%d", i), "yes")
		}
		w.WriteHeader(http.StatusUnauthorized)
		io.Copy(io.Discard, r.Body)
	}))
	t.Cleanup(up.Close)
	srv, _ := newTestGateway(t, "routes:\n  - name: upload\n    upstream: %s\n    max_body: 1KiB\n", up.URL)
	addr := srv.Listener.Addr().String()
	for i := range 30 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
		go func() {
			chunk := "100\r\n" + strings.Repeat("a", 256) + "\r\n"
			for range 64 { // 16 KiB, past max_body
				if _, err := io.WriteString(c, chunk); err != nil {
					return
				}
			}
			io.WriteString(c, "0\r\n\r\n")
		}()
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		for err == nil && resp.StatusCode < 200 {
			resp, err = http.ReadResponse(br, nil)
		}
		if err != nil {
			t.Fatalf("attempt %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("attempt %d: got %d, want the upstream's 401 or a 413", i, resp.StatusCode)
		}
		if resp.StatusCode == http.StatusRequestEntityTooLarge && !resp.Close {
			t.Errorf("attempt %d: a 413 that keeps the connection open", i)
		}
		c.Close()
	}
}
