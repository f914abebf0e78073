package routes

import (
	"strings"
	"testing"
)

func TestClientKeyProblem(t *testing.T) {
	t.Parallel()
	cfg := mustParse(t, `
policies:
  by-ip: {algorithm: fixed_window, limit: 1, window: 1h, key: [ip]}
  by-user-ip: {algorithm: fixed_window, limit: 1, window: 1h, key: [header:X-User, ip]}
  unused: {algorithm: fixed_window, limit: 1, window: 1h, key: [ip]}
  by-host: {algorithm: fixed_window, limit: 1, window: 1h, key: [header:Host, ip]}
  by-ip-user: {algorithm: fixed_window, limit: 1, window: 1h, key: [ip, header:X-User]}
  by-host-user: {algorithm: fixed_window, limit: 1, window: 1h, key: [header:Host, header:X-User, ip]}
  by-two-ip: {algorithm: fixed_window, limit: 1, window: 1h, key: [header:A, ip, header:B]}
routes:
  - name: api
    upstream: http://127.0.0.1:9000
    limits: [by-ip, by-user-ip, by-host, {algorithm: fixed_window, limit: 1, window: 1h, key: [ip, route]}, by-ip-user, by-host-user, by-two-ip]
`, nil)
	for _, tc := range []struct {
		policy, key, want string // want: the key named in the problem, "" for none
	}{
		{"by-ip", "192.0.2.7", ""},
		{"by-ip", "2001:db8:1:2::/64", ""},
		{"by-ip", "2001:db8:1:2::5", "2001:db8:1:2::/64"},
		{"by-ip", "::ffff:192.0.2.7", "192.0.2.7"},
		{"by-ip", "2001:db8:1:2::/80", "2001:db8:1:2::/64"},
		{"by-ip", "abc", ""}, // no address: nothing to say what it should be
		{"by-ip", "", ""},
		{"by-user-ip", "alice|2001:db8::1", "alice|2001:db8::/64"},
		// A header's value may hold '|', an address never does: the
		// parts before the first source that may hold one, and after
		// the last, are known all the same.
		{"by-user-ip", "a|b|2001:db8::1", "a|b|2001:db8::/64"},
		{"by-user-ip", "a|b|192.0.2.7", ""},
		{"by-ip-user", "::ffff:192.0.2.7|a|b", "192.0.2.7|a|b"},
		{"by-ip-user", "192.0.2.7|a|b", ""},
		{"by-host-user", "ACME.example.com|a|b|2001:db8::1", "acme.example.com|a|b|2001:db8::/64"},
		{"by-host-user", "acme.example.com|a|b|192.0.2.7", ""},
		{"by-two-ip", "a|b|2001:db8::1|c", ""}, // the split is not known
		{"by-ip", "2001:db8::1|x", ""},         // names no bucket at all
		{"by-host", "a|b|2001:db8::1", ""},     // nor does this
		{"api#4", "::ffff:10.0.0.1|api", "10.0.0.1|api"},
		{"by-host", "acme.example.com|192.0.2.7", ""},
		{"by-host", "acme.example.com:8443|192.0.2.7", ""},
		{"by-host", "acme.example.com:443|192.0.2.7", ""}, // canonical for http
		{"by-host", "ACME.example.com|192.0.2.7", "acme.example.com|192.0.2.7"},
		{"by-host", "acme.example.com.|192.0.2.7", "acme.example.com|192.0.2.7"},
		{"by-host", "acme.example.com:80|192.0.2.7", ""}, // canonical for https
		{"by-host", "acme.example.com:080|192.0.2.7", "acme.example.com|192.0.2.7"},
		{"by-host", "acme.example.com|2001:db8::1", "acme.example.com|2001:db8::/64"},
		{"by-host", "|192.0.2.7", ""}, // HTTP/1.0 without a host
		{"unused", "2001:db8::1", ""}, // no route keys it
		{"nope", "2001:db8::1", ""},
	} {
		got := cfg.ClientKeyProblem(tc.policy, tc.key)
		switch {
		case tc.want == "" && got != "":
			t.Errorf("%s %q: got %q, want none", tc.policy, tc.key, got)
		case tc.want != "" && !strings.Contains(got, `as "`+tc.want+`"`):
			t.Errorf("%s %q: got %q, want one naming %q", tc.policy, tc.key, got, tc.want)
		}
	}
}
