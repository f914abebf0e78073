package certs

import (
	"net"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/problem"
)

// RedirectHTTPS returns a handler that answers every request with 308
// Permanent Redirect to the same host, path and query over https on
// httpsPort; the port is left out when it is 443 or empty. 308 (not 301)
// keeps the method and body of a POST. A request without a Host gets 400.
func RedirectHTTPS(httpsPort string) http.Handler {
	if httpsPort == "443" {
		httpsPort = ""
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := hostWithoutPort(r.Host)
		if host == "" {
			problem.Write(w, problem.Details{Status: http.StatusBadRequest, Detail: "missing Host header"})
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
