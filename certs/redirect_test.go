package certs

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

func TestRedirectHTTPS(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, port, method, host, target string
		wantCode                         int
		wantLocation                     string
	}{
		{"other port", "8443", "GET", "api.example.com:8080", "/v1/orders?id=7&x=a%20b", 308, "https://api.example.com:8443/v1/orders?id=7&x=a%20b"},
		{"443 dropped", "443", "GET", "api.example.com:8080", "/v1/orders?id=7", 308, "https://api.example.com/v1/orders?id=7"},
		{"empty port dropped", "", "GET", "api.example.com", "/", 308, "https://api.example.com/"},
		{"host without port", "8443", "GET", "api.example.com", "/a", 308, "https://api.example.com:8443/a"},
		{"POST keeps 308", "8443", "POST", "api.example.com", "/v1/otp", 308, "https://api.example.com:8443/v1/otp"},
		{"ipv6 with port", "8443", "GET", "[::1]:8080", "/x", 308, "https://[::1]:8443/x"},
		{"ipv6 on 443", "443", "GET", "[::1]:8080", "/x", 308, "https://[::1]/x"},
		{"escaped path kept", "443", "GET", "a.test", "/a%2Fb/c", 308, "https://a.test/a%2Fb/c"},
		{"no host", "8443", "GET", "", "/", 400, ""},
		{"upper case and trailing dot", "8443", "GET", "API.Example.COM.:8080", "/a", 308, "https://api.example.com:8443/a"},
		{"any host", "8443", "GET", "other.example:8080", "/login", 308, "https://other.example:8443/login"},
		{"any host on 443", "443", "GET", "other.example", "/", 308, "https://other.example/"},
		{"ipv4", "8443", "GET", "192.0.2.1:8080", "/", 308, "https://192.0.2.1:8443/"},
		{"underscore", "8443", "GET", "svc_a.internal", "/", 308, "https://svc_a.internal:8443/"},
		{"userinfo trick", "8443", "GET", "api.example.com@evil.example", "/", 400, ""},
		{"path in host", "8443", "GET", "evil.example/x", "/", 400, ""},
		{"empty label", "8443", "GET", "api..example.com", "/", 400, ""},
		{"ipv6 zone", "8443", "GET", "[fe80::1%25eth0]", "/", 400, ""},
		{"label too long", "8443", "GET", strings.Repeat("a", 64) + ".example", "/", 400, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest(tc.method, "http://placeholder"+tc.target, nil)
			r.Host = tc.host
			w := httptest.NewRecorder()
			RedirectHTTPS(tc.port).ServeHTTP(w, r)
			if w.Code != tc.wantCode {
				t.Errorf("status: got %d, want %d", w.Code, tc.wantCode)
			}
			if got := w.Header().Get("Location"); got != tc.wantLocation {
				t.Errorf("Location: got %q, want %q", got, tc.wantLocation)
			}
			if tc.wantCode >= http.StatusBadRequest {
				if got := w.Header().Get("Content-Type"); got != "application/problem+json" {
					t.Errorf("Content-Type: got %q, want application/problem+json", got)
				}
			}
		})
	}
}

// TestRedirectTargetIsAPath: Go reads a request target such as
// "http:@evil.example/x" as an opaque URL, and takes "*" for any method;
// written after the authority, either would make the Location another
// host ("https://api.example.test:8443@evil.example/x"). They get 400.
func TestRedirectTargetIsAPath(t *testing.T) {
	t.Parallel()
	for _, target := range []string{"http:@evil.example/x", "http:.evil.example/x", "*"} {
		r := httptest.NewRequest("GET", "/", nil)
		u, err := url.ParseRequestURI(target)
		if err != nil {
			t.Fatalf("%q: %v", target, err)
		}
		r.URL, r.RequestURI, r.Host = u, target, "api.example.test"
		w := httptest.NewRecorder()
		RedirectHTTPS("8443").ServeHTTP(w, r)
		if w.Code != http.StatusBadRequest || w.Header().Get("Location") != "" {
			t.Errorf("GET %s: got %d, Location %q; want 400 and none", target, w.Code, w.Header().Get("Location"))
		}
	}
}
