package certs

import (
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/sluicehq/sluice/problem"
)

// RedirectHTTPS returns a handler that answers a request with 308
// Permanent Redirect to the same host, path and query over https on
// httpsPort; the port is left out when it is 443 or empty. 308 (not 301)
// keeps the method and body of a POST. Any host is redirected, as nginx's
// "return 308 https://$host$request_uri" does: the client asked for that
// host, and a name without a certificate here fails its handshake. A
// request without a Host, or with one that is neither a DNS name nor an
// IP address (userinfo, a path, a space), gets 400: such a value must
// not become a Location.
func RedirectHTTPS(httpsPort string) http.Handler {
	if httpsPort == "443" {
		httpsPort = ""
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := normalize(hostWithoutPort(r.Host))
		if host == "" {
			problem.Write(w, problem.Details{Status: http.StatusBadRequest, Detail: "missing Host header"})
			return
		}
		if !validHost(host) {
			problem.Write(w, problem.Details{Status: http.StatusBadRequest, Detail: "the Host header is not a host name or an IP address"})
			return
		}
		authority := host
		if httpsPort != "" {
			authority = net.JoinHostPort(host, httpsPort)
		} else if strings.Contains(host, ":") {
			authority = "[" + host + "]" // IPv6 literal
		}
		// The target must be a path: Go reads "http:@evil.example/x" as
		// an opaque one, and "*" is a target too; either, written after
		// the authority, would make another host of it.
		target := r.URL.RequestURI()
		if r.URL.Opaque != "" || !strings.HasPrefix(target, "/") {
			problem.Write(w, problem.Details{Status: http.StatusBadRequest, Detail: "the request target is not a path"})
			return
		}
		http.Redirect(w, r, "https://"+authority+target, http.StatusPermanentRedirect)
	})
}

// validHost reports whether host, lower-cased and without port, brackets
// or trailing dot, is an IP address or a DNS name: labels of letters,
// digits, "-" and "_" (which some internal names carry), none empty, 253
// bytes at most.
func validHost(host string) bool {
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Zone() == ""
	}
	if len(host) > 253 {
		return false
	}
	for label := range strings.SplitSeq(host, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for i := 0; i < len(label); i++ {
			if c := label[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// hostWithoutPort returns the host of a Host header value such as
// "example.com:8080" or "[::1]:8080", without brackets.
func hostWithoutPort(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")
}
