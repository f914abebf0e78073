package certs

import (
	"net"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/problem"
)

// RedirectHTTPS returns a handler that answers a request for a host that
// serves reports true with 308 Permanent Redirect to the same host, path
// and query over https on httpsPort; the port is left out when it is 443
// or empty. 308 (not 301) keeps the method and body of a POST. The Host
// header is the client's to choose, so a redirect to any host it names
// would send users wherever a crafted link or a poisoned cache says (an
// open redirect); a host serves does not know gets 421 Misdirected
// Request instead, and a request without a Host gets 400. serves is
// called with the host lower-cased, without port, brackets or trailing
// dot; it must be safe for concurrent use. Manager.Serves is one.
func RedirectHTTPS(httpsPort string, serves func(host string) bool) http.Handler {
	if httpsPort == "443" {
		httpsPort = ""
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := normalize(hostWithoutPort(r.Host))
		if host == "" {
			problem.Write(w, problem.Details{Status: http.StatusBadRequest, Detail: "missing Host header"})
			return
		}
		if !serves(host) {
			problem.Write(w, problem.Details{Status: http.StatusMisdirectedRequest, Detail: "no https site is configured for this host"})
			return
		}
		authority := host
		if httpsPort != "" {
			authority = net.JoinHostPort(host, httpsPort)
		} else if strings.Contains(host, ":") {
			authority = "[" + host + "]" // IPv6 literal
		}
		http.Redirect(w, r, "https://"+authority+r.URL.RequestURI(), http.StatusPermanentRedirect)
	})
}

// hostWithoutPort returns the host of a Host header value such as
// "example.com:8080" or "[::1]:8080", without brackets.
func hostWithoutPort(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")
}
