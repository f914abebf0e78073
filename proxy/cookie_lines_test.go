package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestCookieLinesJoined: the upstream gets a request's cookies in one
// Cookie line, joined with "; ", whether an HTTP/2 client split them into
// crumbs (RFC 9113 §8.2.3 has them joined so before an HTTP/1.1 hop) or
// an HTTP/1.1 client sent several Cookie lines, and every such form of
// sid=s1 spends s1's bucket. With several lines an upstream that reads
// only the first or the last (or joins them with ",", as WSGI servers
// do, so that "a=1,sid=s1" is one cookie a to a parser that splits at
// ";") would not see the sid the limit was keyed on: a client could spend
// a new bucket on each request while the upstream read no sid at all,
// the request that cookie:sid keys with the empty value. Routes and keys
// see the lines as sent: a header:Cookie key, and a route that matches
// on Cookie, answer 400 to several, as to any field sent twice.
func TestCookieLinesJoined(t *testing.T) {
	t.Parallel()
	got := make(chan []string, 16) // the Cookie lines of each request, as sent
	up := newRawUpstream(t, func(c net.Conn, _ *bufio.Reader) {
		var raw bytes.Buffer
		br := bufio.NewReader(io.TeeReader(c, &raw))
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		var lines []string
		for _, l := range strings.Split(raw.String(), "\r\n") {
			if len(l) > 7 && strings.EqualFold(l[:7], "cookie:") {
				lines = append(lines, l)
			}
		}
		got <- lines
		io.WriteString(c, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok")
	})
	srv := newTLSGateway(t, fmt.Sprintf(`
routes:
  - name: whole
    match: {path: /whole}
    upstream: %[1]s
    limits:
      - {algorithm: fixed_window, limit: 1, window: 1h, key: [header:Cookie]}
  - name: session
    upstream: %[1]s
    limits:
      - {algorithm: fixed_window, limit: 4, window: 1h, key: [cookie:sid]}
`, up.url()))
	addr := srv.Listener.Addr().String()
	h1At := func(path string, lines ...string) int {
		raw := "GET " + path + " HTTP/1.1\r\nHost: acme.example.com\r\n"
		for _, l := range lines {
			raw += "Cookie: " + l + "\r\n"
		}
		resp := http1Exchange(t, addr, raw+"Connection: close\r\n\r\n", nil)
		resp.Body.Close()
		return resp.StatusCode
	}
	h1 := func(lines ...string) int { return h1At("/", lines...) }
	h2 := func(crumbs ...string) int {
		var fs []string
		for _, c := range crumbs {
			fs = append(fs, "cookie", c)
		}
		return h2Do(t, addr, h2Stream{fields: h2Req("GET", "/", fs...)}).status
	}
	const want = "Cookie: a=1; sid=s1; b=2"
	for _, tc := range []struct {
		name   string
		status int
		want   string // the one Cookie line the upstream gets
	}{
		{"HTTP/2, three crumbs", h2("a=1", "sid=s1", "b=2"), want},
		{"HTTP/1.1, three lines", h1("a=1", "sid=s1", "b=2"), want},
		{"HTTP/1.1, two lines and an empty one", h1("a=1; sid=s1", "", "b=2"), want},
		{"HTTP/1.1, one line", h1("a=1; sid=s1; b=2"), want},
	} {
		var lines []string
		select {
		case lines = <-got:
		case <-time.After(5 * time.Second):
		}
		if tc.status != 200 || len(lines) != 1 || lines[0] != tc.want {
			t.Errorf("%s: got %d, upstream Cookie lines %q; want 200 and [%q]", tc.name, tc.status, lines, tc.want)
		}
	}
	// The four above were one bucket, s1's: it is spent.
	if s := h2("sid=s1"); s != http.StatusTooManyRequests {
		t.Errorf("sid=s1 after four requests keyed s1: got %d, want 429", s)
	}
	if s := h1("sid=s1", "sid=s2"); s != http.StatusBadRequest {
		t.Errorf("sid in two lines: got %d, want 400", s)
	}
	// Two Cookie lines are the field sent twice (SPEC), whatever line
	// the upstream would get: a header:Cookie key, and a route that
	// matches on Cookie, answer 400 to them, and spend nothing.
	if s := h1At("/whole", "a=1", "b=2"); s != http.StatusBadRequest {
		t.Errorf("header:Cookie, two lines: got %d, want 400", s)
	}
	beta := newTLSGateway(t, fmt.Sprintf(`
routes:
  - name: beta
    match: {path: /beta, headers: {Cookie: beta=1}}
    upstream: %s
`, up.url()))
	raw := "GET /beta HTTP/1.1\r\nHost: acme.example.com\r\nCookie: beta=1\r\nCookie: b=2\r\nConnection: close\r\n\r\n"
	resp := http1Exchange(t, beta.Listener.Addr().String(), raw, nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a route matching Cookie, two lines: got %d, want 400", resp.StatusCode)
	}
	if s := h1At("/whole", "a=1; b=2"); s != 200 {
		t.Errorf("header:Cookie, one line: got %d, want 200", s)
	}
	select {
	case <-got: // the one request since the loop that reaches it
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream got no request")
	}
	if s := h1At("/whole", "a=1; b=2"); s != http.StatusTooManyRequests {
		t.Errorf("header:Cookie, one line again: got %d, want 429", s)
	}
}

// TestCookieLinesJoinedWithoutEmptyCookies: a Cookie line may start or
// end with ";" (a client that writes "a=1;"), or hold nothing else.
// Joined as they came, "a=1;" and "sid=s1" would be "a=1;; sid=s1", an
// empty cookie between the two, where Python's http.cookies (aiohttp's
// parser) stops reading: the upstream would see no sid while cookie:sid
// keys s1. The upstream gets the RFC 6265 form, "a=1; sid=s1".
func TestCookieLinesJoinedWithoutEmptyCookies(t *testing.T) {
	t.Parallel()
	got := make(chan string, 4) // the upstream's Cookie lines, one string per request
	up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		got <- fmt.Sprintf("%q", req.Header["Cookie"])
		io.WriteString(c, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok")
	})
	srv := newTLSGateway(t, fmt.Sprintf(`
routes:
  - name: session
    upstream: %s
    limits:
      - {algorithm: fixed_window, limit: 10, window: 1h, key: [cookie:sid]}
`, up.url()))
	addr := srv.Listener.Addr().String()
	for _, tc := range []struct {
		lines []string
		want  string
	}{
		{[]string{"a=1;", "sid=s1"}, `["a=1; sid=s1"]`},
		{[]string{"a=1", "; sid=s1 ;", ";", "b=2;;"}, `["a=1; sid=s1; b=2"]`},
	} {
		raw := "GET / HTTP/1.1\r\nHost: acme.example.com\r\n"
		for _, l := range tc.lines {
			raw += "Cookie: " + l + "\r\n"
		}
		resp := http1Exchange(t, addr, raw+"Connection: close\r\n\r\n", nil)
		resp.Body.Close()
		var lines string
		select {
		case lines = <-got:
		case <-time.After(5 * time.Second):
		}
		if resp.StatusCode != 200 || lines != tc.want {
			t.Errorf("lines %q: got %d, upstream Cookie %s; want 200 and %s", tc.lines, resp.StatusCode, lines, tc.want)
		}
	}
}
