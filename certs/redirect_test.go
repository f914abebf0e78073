package certs

import (
	"net/http"
	"net/http/httptest"
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
		{"unknown host not followed", "8443", "GET", "evil.example:8080", "/login", 421, ""},
		{"unknown host on 443", "443", "GET", "evil.example", "/", 421, ""},
		{"unknown ip", "8443", "GET", "192.0.2.1", "/", 421, ""},
		{"host with userinfo trick", "8443", "GET", "api.example.com@evil.example", "/", 421, ""},
	}
	serves := func(host string) bool {
		switch host {
		case "api.example.com", "a.test", "::1":
			return true
		}
		return false
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest(tc.method, "http://placeholder"+tc.target, nil)
			r.Host = tc.host
			w := httptest.NewRecorder()
			RedirectHTTPS(tc.port, serves).ServeHTTP(w, r)
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

func TestManagerServes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	m, err := New(Config{Certificates: []Pair{
		writePair(t, dir, "api.example.test"),
		writePair(t, dir, "*.apps.example.test"),
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	for host, want := range map[string]bool{
		"api.example.test":      true,
		"API.example.test.":     true,
		"x.apps.example.test":   true,
		"apps.example.test":     false,
		"a.b.apps.example.test": false,
		"evil.example":          false,
		"":                      false,
	} {
		if got := m.Serves(host); got != want {
			t.Errorf("Serves(%q): got %v, want %v", host, got, want)
		}
	}
}

func TestManagerServesACMEDomains(t *testing.T) {
	t.Parallel()
	m, err := New(Config{ACME: &ACME{Domains: []string{"acme.example.test"}, Storage: t.TempDir()}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	for host, want := range map[string]bool{"acme.example.test": true, "other.example.test": false} {
		if got := m.Serves(host); got != want {
			t.Errorf("Serves(%q): got %v, want %v", host, got, want)
		}
	}
}
