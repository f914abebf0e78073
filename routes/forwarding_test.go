package routes

import "testing"

// TestForwardingFieldBehindTrustedProxies: a key or match on a field that
// untrusted peers lose is fine once trusted_proxies lists the proxies
// that set it (see bad_untrusted_field.yaml for the config without).
func TestForwardingFieldBehindTrustedProxies(t *testing.T) {
	t.Parallel()
	mustParse(t, `
trusted_proxies: [173.245.48.0/20]
policies:
  per-client: {algorithm: fixed_window, limit: 100, window: 1m, key: [header:CF-Connecting-IP]}
routes:
  - name: r
    match: {headers: {X-Forwarded-Proto: https}}
    upstream: http://127.0.0.1:9000
    limits: [per-client]
`, nil)
}

func TestForwardingField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"X-Forwarded-For", true},
		{"x-forwarded-prefix", true},
		{"X-Forwarded", true},
		{"cf-connecting-ip", true},
		{"Client-Ip", true},
		{"True-Client-Ip", true},
		{"X-Api-Key", false},
		{"X-Forwarded-", false},
		{"", false},
	} {
		if got := ForwardingField(tc.name); got != tc.want {
			t.Errorf("ForwardingField(%q): got %v, want %v", tc.name, got, tc.want)
		}
	}
}
