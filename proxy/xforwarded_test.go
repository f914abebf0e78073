package proxy

import (
	"crypto/tls"
	"net/http"
	"net/http/httputil"
	"reflect"
	"testing"
)

// TestSetXForwardedMatchesHttputil holds setXForwarded to what
// httputil.ProxyRequest.SetXForwarded sets, field for field.
func TestSetXForwardedMatchesHttputil(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		remote string
		host   string
		tls    bool
		prior  []string // X-Forwarded-For already on the outbound request
	}{
		{"plain peer", "203.0.113.5:4000", "api.example", false, nil},
		{"tls", "203.0.113.5:4000", "api.example:8443", true, nil},
		{"ipv6 peer", "[2001:db8::1]:4000", "api.example", false, nil},
		{"prior list", "10.0.0.1:4000", "api.example", false, []string{"198.51.100.1"}},
		{"prior lines", "10.0.0.1:4000", "api.example", true, []string{"192.0.2.1", "198.51.100.1, 10.0.0.7"}},
		{"empty prior", "10.0.0.1:4000", "", false, []string{}},
		{"peer without port", "10.0.0.1", "api.example", false, []string{"198.51.100.1"}},
		{"no peer", "", "api.example", false, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in, err := http.NewRequest("GET", "http://"+tc.host+"/", nil)
			if err != nil {
				t.Fatal(err)
			}
			in.Host, in.RemoteAddr = tc.host, tc.remote
			if tc.tls {
				in.TLS = &tls.ConnectionState{}
			}
			outHeader := func() http.Header {
				h := http.Header{"Accept": {"*/*"}}
				if tc.prior != nil {
					h[hXForwardedFor] = append([]string(nil), tc.prior...)
				}
				return h
			}
			want := outHeader()
			(&httputil.ProxyRequest{In: in, Out: &http.Request{Header: want}}).SetXForwarded()
			got := outHeader()
			setXForwarded(got, in, &exchange{})
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got %q, want %q", got, want)
			}
		})
	}
}
