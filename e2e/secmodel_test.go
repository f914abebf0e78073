package e2e

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// bytesUpstream records every byte of each request it gets, head, body
// and trailers, as they came over the socket, and answers 200.
type bytesUpstream struct {
	URL  string
	mu   sync.Mutex
	reqs []string
}

func newBytesUpstream(t *testing.T) *bytesUpstream {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	u := &bytesUpstream{URL: "http://" + ln.Addr().String()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go u.serve(c)
		}
	}()
	return u
}

// serve reads requests off c one at a time. sluice sends the next request
// on a connection only after the answer to the last, so the bytes read
// before each answer are that request's.
func (u *bytesUpstream) serve(c net.Conn) {
	defer c.Close()
	var raw bytes.Buffer
	br := bufio.NewReader(io.TeeReader(c, &raw))
	for {
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		r, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			return
		}
		u.mu.Lock()
		u.reqs = append(u.reqs, raw.String())
		u.mu.Unlock()
		raw.Reset()
		if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"); err != nil {
			return
		}
	}
}

func (u *bytesUpstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.reqs)
}

func (u *bytesUpstream) last() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.reqs[len(u.reqs)-1]
}

// secCase is one request of TestSecurityModelRaw: the bytes a client
// sends, the status it must get, and what the bytes the upstream receives
// must and must not hold. A status other than 200 means nothing may reach
// the upstream.
type secCase struct {
	name    string
	raw     string
	status  int
	want    []string
	wantNot []string
}

// TestSecurityModelRaw sends, as raw bytes over real sockets through the
// real binary, the spellings an attacker would try against each guarantee
// of the README's Security model (and its Client address section), and
// checks the bytes the upstream gets: the request that routes and limits
// saw, or nothing.
func TestSecurityModelRaw(t *testing.T) {
	t.Parallel()
	up := newBytesUpstream(t)
	// Each route forwards under its own upstream path, so the request
	// line the upstream gets names the route that matched.
	cfg := "listen: 127.0.0.1:0\nadmin: \"\"\nroutes:\n" +
		"  - name: otp\n    match: {host: acme.example.com, path_prefix: /v1/otp}\n    upstream: " + up.URL + "/otp\n" +
		"    limits:\n      - {algorithm: fixed_window, limit: 1000, window: 1m, key: [header:X-API-Key, query:api_key]}\n" +
		"  - name: rest\n    upstream: " + up.URL + "/rest\n"
	untrusted := start(t, writeConfig(t, cfg))
	trusted := start(t, writeConfig(t, cfg+"trusted_proxies: [127.0.0.1/32]\n"))

	long := "X-Filler: " + strings.Repeat("a", 70<<10)
	run := func(t *testing.T, in *instance, cases []secCase) {
		addr := strings.TrimPrefix(in.HTTP, "http://")
		for _, tc := range cases {
			before := up.count()
			status := sendRaw(t, addr, tc.raw)
			if status != tc.status {
				t.Errorf("%s: got status %d, want %d", tc.name, status, tc.status)
			}
			if tc.status != 200 {
				if up.count() != before {
					t.Errorf("%s: upstream got %q, want nothing", tc.name, up.last())
				}
				continue
			}
			if up.count() == before {
				t.Errorf("%s: upstream got nothing", tc.name)
				continue
			}
			got := up.last()
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("%s: upstream got %q, want it to hold %q", tc.name, got, w)
				}
			}
			for _, w := range tc.wantNot {
				if strings.Contains(got, w) {
					t.Errorf("%s: upstream got %q, want no %q in it", tc.name, got, w)
				}
			}
		}
	}

	t.Run("untrusted peer", func(t *testing.T) {
		run(t, untrusted, []secCase{
			// Host
			{"absolute-form target: its host is the host", rawRequest("GET http://acme.example.com/v1/otp HTTP/1.1", "", "Host: other.example.com"), 200,
				[]string{"GET /otp/v1/otp HTTP/1.1\r\n", "X-Forwarded-Host: acme.example.com\r\n"}, []string{"other"}},
			{"absolute-form target of another host", rawRequest("GET http://other.example.com/v1/otp HTTP/1.1", ""), 200,
				[]string{"GET /rest/v1/otp HTTP/1.1\r\n", "X-Forwarded-Host: other.example.com\r\n"}, nil},
			{"host twice", rawRequest("GET /v1/otp HTTP/1.1", "", "Host: other.example.com", "Host: acme.example.com"), 400, nil, nil},
			{"host with a comma, first", rawRequest("GET /v1/otp HTTP/1.1", "", "Host: acme.example.com,x"), 400, nil, nil},
			{"host with a comma, last", rawRequest("GET /v1/otp HTTP/1.1", "", "Host: x,acme.example.com"), 400, nil, nil},
			{"host with a port that is no number", rawRequest("GET /v1/otp HTTP/1.1", "", "Host: acme.example.com:."), 400, nil, nil},
			{"host spelled otherwise", rawRequest("GET /v1/otp HTTP/1.1", "", "Host: ACME.Example.com.:080"), 200,
				[]string{"GET /otp/v1/otp HTTP/1.1\r\n", "X-Forwarded-Host: acme.example.com\r\n"}, nil},
			// Request target and method
			{"target with no path", rawRequest("GET a:b HTTP/1.1", ""), 400, nil, nil},
			{"asterisk for GET", rawRequest("GET * HTTP/1.1", ""), 400, nil, nil},
			{"CONNECT", rawRequest("CONNECT acme.example.com:443 HTTP/1.1", ""), 501, nil, nil},
			// Path
			{"escaped dot-dot, mixed case", rawRequest("GET /x/%2e%2E/v1/otp HTTP/1.1", ""), 400, nil, nil},
			{"half-escaped dot-dot", rawRequest("GET /x/.%2e/v1/otp HTTP/1.1", ""), 400, nil, nil},
			{"dot-dot with a parameter", rawRequest("GET /x/..;/v1/otp HTTP/1.1", ""), 400, nil, nil},
			{"dot-dot between encoded slashes in parameters", rawRequest("GET /x;%2F..%2Fv1%2Fotp HTTP/1.1", ""), 400, nil, nil},
			{"escaped backslash", rawRequest("GET /x/..%5Cv1/otp HTTP/1.1", ""), 400, nil, nil},
			{"encoded NUL", rawRequest("GET /v1/otp%00 HTTP/1.1", ""), 400, nil, nil},
			{"broken escape", rawRequest("GET /v1/otp%zz HTTP/1.1", ""), 400, nil, nil},
			{"repeated slashes", rawRequest("GET //v1//otp HTTP/1.1", ""), 200, []string{"GET /otp/v1/otp HTTP/1.1\r\n"}, nil},
			{"letter case and parameters kept", rawRequest("GET /V1;x=1/OTP HTTP/1.1", ""), 200, []string{"GET /otp/V1;x=1/OTP HTTP/1.1\r\n"}, nil},
			{"encoded slash kept", rawRequest("GET /v1/%2Fotp HTTP/1.1", ""), 200, []string{"GET /otp/v1/%2Fotp HTTP/1.1\r\n"}, nil},
			// Full-width letters are no ASCII spelling: another route, and
			// the upstream gets an escaping of the same bytes.
			{"full-width letter", rawRequest("GET /ｖ1/otp HTTP/1.1", ""), 200, []string{"GET /rest/%EF%BD%961/otp HTTP/1.1\r\n"}, nil},
			// Escapes reach the upstream as sent; a "+" in a path is a
			// plus to routes and upstreams alike.
			{"overlong UTF-8 dots kept as sent", rawRequest("GET /v1/%c0%ae%c0%ae/otp HTTP/1.1", ""), 200, []string{"GET /rest/v1/%c0%ae%c0%ae/otp HTTP/1.1\r\n"}, nil},
			{"plus in a path", rawRequest("GET /v1/ot+p HTTP/1.1", ""), 200, []string{"GET /rest/v1/ot+p HTTP/1.1\r\n"}, nil},
			// Query
			{"query with a fragment", rawRequest("GET /v1/otp?api_key=victim#1 HTTP/1.1", ""), 200,
				[]string{"GET /otp/v1/otp?api_key=victim%231 HTTP/1.1\r\n"}, nil},
			{"query with a semicolon", rawRequest("GET /v1/otp?api_key=a;api_key=b&x=1 HTTP/1.1", ""), 200,
				[]string{"GET /otp/v1/otp?x=1 HTTP/1.1\r\n"}, []string{"api_key"}},
			// Header syntax
			{"space before the colon", rawRequest("GET /v1/otp HTTP/1.1", "", "X-API-Key : victim"), 400, nil, nil},
			{"NUL in a value", rawRequest("GET /v1/otp HTTP/1.1", "", "X-API-Key: vic\x00tim"), 400, nil, nil},
			{"CR in a value", rawRequest("GET /v1/otp HTTP/1.1", "", "X-API-Key: vic\rtim"), 400, nil, nil},
			{"header over 64 KiB", rawRequest("GET /v1/otp HTTP/1.1", "", long), 431, nil, nil},
			{"line folded", rawRequest("GET /v1/otp HTTP/1.1", "", "X-API-Key: a\r\n victim"), 200, []string{"\r\nX-Api-Key: a victim\r\n"}, nil},
			{"line folded onto an empty one", rawRequest("GET /v1/otp HTTP/1.1", "", "X-API-Key:\r\n\tvictim "), 200, []string{"\r\nX-Api-Key: victim\r\n"}, nil},
			{"bare LF before a forwarding field", rawRequest("GET /v1/otp HTTP/1.1", "", "X-Filler: a\nX-Forwarded-For: 6.6.6.6"), 200,
				[]string{"\r\nX-Forwarded-For: 127.0.0.1\r\n", "\r\nX-Real-Ip: 127.0.0.1\r\n"}, []string{"6.6.6.6"}},
			// Forwarding fields of an untrusted peer
			{"forwarding fields", rawRequest("GET /v1/otp HTTP/1.1", "", "X-Forwarded-For: 6.6.6.6", "X-Real-IP: 6.6.6.6", "True-Client-IP: 6.6.6.6",
				"Forwarded: for=6.6.6.6", "X-Forwarded-Host: evil.example", "X-Forwarded-Proto: https", "X-Forwarded-Prefix: /admin",
				"X-Original-URL: /admin", "X-Rewrite-URL: /admin", "X-HTTP-Method-Override: DELETE", "X-Method-Override: DELETE", "X_Forwarded_For: 6.6.6.6",
				"X-Client-IP: 6.6.6.6", "CF-Connecting-IP: 6.6.6.6", "Fastly-Client-IP: 6.6.6.6", "X-Cluster-Client-IP: 6.6.6.6"), 200,
				[]string{"\r\nX-Forwarded-For: 127.0.0.1\r\n", "\r\nX-Real-Ip: 127.0.0.1\r\n", "\r\nX-Forwarded-Host: acme.example.com\r\n", "\r\nX-Forwarded-Proto: http\r\n"},
				[]string{"6.6.6.6", "evil", "admin", "DELETE", "Forwarded:", "https"}},
			{"forwarding fields in chunked trailers", "POST /v1/otp HTTP/1.1\r\nHost: acme.example.com\r\nTransfer-Encoding: chunked\r\n" +
				"Trailer: X-Forwarded-For, X-Real-IP, X-HTTP-Method-Override\r\nConnection: close\r\n\r\n" +
				"2\r\n{}\r\n0\r\nX-Forwarded-For: 6.6.6.6\r\nX-Real-IP: 6.6.6.6\r\nX-HTTP-Method-Override: DELETE\r\n\r\n", 200,
				[]string{"POST /otp/v1/otp HTTP/1.1\r\n", "{}"}, []string{"6.6.6.6", "DELETE"}},
			// Upgrade
			{"Upgrade that Connection does not name", rawRequest("GET /v1/otp HTTP/1.1", "", "Upgrade: websocket"), 200, nil, []string{"Upgrade"}},
			{"Upgrade in HTTP/1.0", rawRequest("GET /v1/otp HTTP/1.0", "", "Connection: Upgrade", "Upgrade: websocket"), 200, nil, []string{"Upgrade", "websocket"}},
			{"Upgrade to h2c", rawRequest("GET /v1/otp HTTP/1.1", "", "Connection: Upgrade, HTTP2-Settings", "Upgrade: h2c", "HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA"), 200,
				nil, []string{"Upgrade", "h2c", "Http2-Settings", "AAMAAABk"}},
			{"field named in Connection", rawRequest("GET /v1/otp HTTP/1.1", "", "X-API-Key: victim", "Connection: X-API-Key"), 200, nil, []string{"victim"}},
		})
	})

	// From a trusted peer, X-Real-Ip is the client sluice resolved, and
	// the peer is appended to X-Forwarded-For.
	xff := func(name, want string, fields ...string) secCase {
		return secCase{name, rawRequest("GET /v1/otp HTTP/1.1", "", fields...), 200, []string{"\r\nX-Real-Ip: " + want + "\r\n"}, nil}
	}
	t.Run("trusted peer", func(t *testing.T) {
		run(t, trusted, []secCase{
			xff("one hop", "198.51.100.1", "X-Forwarded-For: 198.51.100.1"),
			xff("hop with a port", "198.51.100.1", "X-Forwarded-For: 198.51.100.1:5555"),
			xff("IPv6 hop in brackets", "2001:db8::1", "X-Forwarded-For: [2001:db8::1]"),
			xff("IPv6 hop in brackets with a port", "2001:db8::1", "X-Forwarded-For: [2001:db8::1]:80"),
			xff("IPv4-mapped hop", "198.51.100.1", "X-Forwarded-For: ::ffff:198.51.100.1"),
			xff("trusted hop skipped", "198.51.100.1", "X-Forwarded-For: 192.0.2.1, 198.51.100.1, 127.0.0.1"),
			xff("unknown stops the walk", "127.0.0.1", "X-Forwarded-For: 198.51.100.1, unknown"),
			xff("obfuscated identifier stops the walk", "127.0.0.1", "X-Forwarded-For: _hidden"),
			xff("IPv6 zone stops the walk", "127.0.0.1", "X-Forwarded-For: fe80::1%eth0"),
			xff("IPv6 zone in brackets stops the walk", "127.0.0.1", "X-Forwarded-For: [fe80::1%25eth0]:80"),
			xff("empty element stops the walk", "127.0.0.1", "X-Forwarded-For: 198.51.100.1,,"),
			xff("two fields: the last one's last hop", "198.51.100.2", "X-Forwarded-For: 198.51.100.1", "X-Forwarded-For: 198.51.100.2"),
			xff("X-Real-IP without X-Forwarded-For", "198.51.100.3", "X-Real-IP: 198.51.100.3"),
			xff("X-Forwarded-For wins over X-Real-IP", "198.51.100.1", "X-Forwarded-For: 198.51.100.1", "X-Real-IP: 198.51.100.3"),
			xff("X-Real-IP with a zone", "127.0.0.1", "X-Real-IP: fe80::1%eth0"),
			xff("X-Forwarded-For named in Connection", "127.0.0.1", "X-Forwarded-For: 198.51.100.1", "Connection: X-Forwarded-For"),
			{"the peer is appended", rawRequest("GET /v1/otp HTTP/1.1", "", "X-Forwarded-For: 198.51.100.1:5555, 127.0.0.1"), 200,
				[]string{"\r\nX-Forwarded-For: 198.51.100.1:5555, 127.0.0.1, 127.0.0.1\r\n", "\r\nX-Real-Ip: 198.51.100.1\r\n"}, nil},
			{"a trusted proxy's scheme and host are kept", rawRequest("GET /v1/otp HTTP/1.1", "", "X-Forwarded-Proto: https", "X-Forwarded-Host: api.example.com"), 200,
				[]string{"\r\nX-Forwarded-Proto: https\r\n", "\r\nX-Forwarded-Host: api.example.com\r\n", "GET /otp/v1/otp HTTP/1.1\r\n"}, nil},
			{"names with _ are dropped from trusted peers too", rawRequest("GET /v1/otp HTTP/1.1", "", "X_Forwarded_For: 6.6.6.6"), 200,
				[]string{"\r\nX-Real-Ip: 127.0.0.1\r\n"}, []string{"6.6.6.6"}},
		})
	})
}

// TestLongKeyIsOneBucket: a key value past 256 bytes is kept as its
// digest, so a client cannot make each bucket cost kilobytes, and it is
// still one bucket: its requests share the budget, and /v1/limits finds
// that bucket by the value itself or by the digest the access log shows.
func TestLongKeyIsOneBucket(t *testing.T) {
	t.Parallel()
	up := newBytesUpstream(t)
	in := start(t, writeConfig(t, "listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\nroutes:\n  - name: api\n    upstream: "+up.URL+"\n"+
		"    limits:\n      - {algorithm: fixed_window, limit: 3, window: 1h, key: [header:X-API-Key]}\n"))
	long := strings.Repeat("k", 300)
	for i, want := range []int{200, 200, 200, 429} {
		resp, _ := do(t, nil, "GET", in.HTTP+"/v1/items", nil, map[string]string{"X-API-Key": long})
		if resp.StatusCode != want {
			t.Fatalf("request %d: got %d, want %d", i+1, resp.StatusCode, want)
		}
	}
	sum := sha256.Sum256([]byte(long))
	for _, key := range []string{long, "sha256:" + hex.EncodeToString(sum[:])} {
		resp, body := do(t, nil, "GET", in.Admin+"/v1/limits?policy=api%231&key="+key, nil, nil)
		var l struct {
			Remaining *int64 `json:"remaining"`
		}
		if resp.StatusCode != 200 || json.Unmarshal(body, &l) != nil || l.Remaining == nil || *l.Remaining != 0 {
			t.Errorf("GET /v1/limits with key %.20s...: got %d %s, want 200 and remaining 0", key, resp.StatusCode, body)
		}
	}
}
