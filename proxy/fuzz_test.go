package proxy

import (
	"bufio"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/routes"
)

// readRaw parses a request as the server would; false when it refuses it.
func readRaw(method, target, host string) (*http.Request, bool) {
	raw := method + " " + target + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n"
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
	if err != nil {
		return nil, false
	}
	r.RemoteAddr = "192.0.2.1:5000"
	return r, true
}

// FuzzCanonicalRequest: canonicalising the canonical request again
// changes nothing, and the canonical method, host and path have the
// promised shape.
func FuzzCanonicalRequest(f *testing.F) {
	for _, p := range []string{"/v1/otp", "/v1/otp/", "//v1/otp", "/V1/OTP", "/v1/otp;x=1", "/v1;x/otp", "/x/..;/v1/otp", `/x\..\v1/otp`, "/a%2Fb", "/v1/otp%00", "/v1/otp?api_key=a&api_key=b", "/v1/otp?api_key=a;api_key=b", "/v1/otp?api_key=a#1", "/v1/otp?api_key=a\x01", "*"} {
		f.Add("POST", "acme.example.com", p)
	}
	for _, h := range []string{"ACME.example.com", "acme.example.com.", "acme.example.com:80", "[::1]:80", "acme.example.com:0080"} {
		f.Add("post", h, "/v1/otp")
	}
	trust := NewTrust(nil)
	f.Fuzz(func(t *testing.T, method, host, target string) {
		r, ok := readRaw(method, target, host)
		if !ok {
			return
		}
		if _, _, err := trust.canonicalize(r); err != nil {
			return
		}
		if strings.ContainsAny(r.Method, "abcdefghijklmnopqrstuvwxyz") || strings.ContainsAny(r.Host, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") || strings.HasSuffix(r.Host, ".") || hasPort80(r.Host) {
			t.Fatalf("canonical method %q host %q: not upper-case method, lower-case host without trailing dot and port 80", r.Method, r.Host)
		}
		esc := r.URL.EscapedPath()
		if strings.Contains(esc, "//") || strings.ContainsRune(esc, '\\') {
			t.Fatalf("canonical path %q has // or a backslash", esc)
		}
		if strings.ContainsFunc(r.URL.RawQuery, func(c rune) bool { return c == '#' || c <= ' ' || c == 0x7f }) {
			t.Fatalf("canonical query %q has a #, a space or a control character", r.URL.RawQuery)
		}
		again, ok := readRaw(r.Method, r.URL.RequestURI(), r.Host)
		if !ok {
			t.Fatalf("the canonical request %s %s (host %q) does not parse", r.Method, r.URL.RequestURI(), r.Host)
		}
		if _, _, err := trust.canonicalize(again); err != nil {
			t.Fatalf("canonicalising %s %s again: %v", r.Method, r.URL.RequestURI(), err)
		}
		if again.Method != r.Method || again.Host != r.Host || again.URL.EscapedPath() != esc || again.URL.RawQuery != r.URL.RawQuery || routes.MatchPath(again.URL) != routes.MatchPath(r.URL) {
			t.Fatalf("twice is not once: %s %s %s %q then %s %s %s %q", r.Method, r.Host, r.URL.RequestURI(), routes.MatchPath(r.URL), again.Method, again.Host, again.URL.RequestURI(), routes.MatchPath(again.URL))
		}
	})
}

func hasPort80(host string) bool {
	_, port, err := net.SplitHostPort(host)
	return err == nil && port == "80"
}

// FuzzClientAddr: the client is the peer unless the peer is trusted, and
// otherwise an address the peer or its headers named; untrusted peers'
// forwarding headers never reach the upstream.
func FuzzClientAddr(f *testing.F) {
	f.Add("203.0.113.5:4000", "198.51.100.1", "", "198.51.100.2")
	f.Add("10.0.0.1:4000", "192.0.2.1, 198.51.100.1, 10.0.0.7", "10.0.0.9", "")
	f.Add("10.0.0.1:4000", "198.51.100.1, junk, 10.0.0.7", "", "")
	f.Add("[::1]:4000", "[2001:db8::1]", "198.51.100.1:5555", "")
	f.Add("10.0.0.1:4000", "", "", "198.51.100.3")
	trust := NewTrust([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")})
	f.Fuzz(func(t *testing.T, peer, xff1, xff2, realIP string) {
		r, _ := http.NewRequest("GET", "http://x/", nil)
		r.RemoteAddr = peer
		for _, v := range []string{xff1, xff2} {
			if v != "" {
				r.Header.Add("X-Forwarded-For", v)
			}
		}
		if realIP != "" {
			r.Header.Set("X-Real-Ip", realIP)
		}
		p := peerAddr(r)
		got, trusted := trust.ClientAddr(r)
		if trusted != (p.IsValid() && trust.Contains(p)) {
			t.Fatalf("peer %q: got trusted %v", peer, trusted)
		}
		if !trusted && got != p {
			t.Fatalf("untrusted peer %q: got client %v, want the peer", peer, got)
		}
		named := false
		for _, hop := range strings.Split(xff1+","+xff2+","+realIP, ",") {
			if a, ok := parseHop(hop); ok && a == got {
				named = true
			}
		}
		if got != p && !named {
			t.Fatalf("client %v is neither the peer %q nor named in the headers", got, peer)
		}
		if got2, _ := trust.ClientAddr(r); got2 != got {
			t.Fatalf("got %v then %v for one request", got, got2)
		}
		c, tr, err := trust.canonicalize(r)
		if err != nil || c != got || tr != trusted {
			t.Fatalf("canonicalize: got %v %v %v, want %v %v", c, tr, err, got, trusted)
		}
		if !trusted && (len(r.Header["X-Forwarded-For"]) > 0 || len(r.Header["X-Real-Ip"]) > 0) {
			t.Fatalf("untrusted peer: forwarding headers kept: %v", r.Header)
		}
	})
}
