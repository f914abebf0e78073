package proxy

import (
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"
)

func TestClientAddr(t *testing.T) {
	t.Parallel()
	trust := NewTrust([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")})
	cases := []struct {
		name    string
		peer    string
		xff     []string
		realIP  string
		want    string
		trusted bool
	}{
		{"untrusted peer ignores headers", "203.0.113.5:4000", []string{"198.51.100.1"}, "198.51.100.2", "203.0.113.5", false},
		{"trusted peer, one hop", "10.0.0.1:4000", []string{"198.51.100.1"}, "", "198.51.100.1", true},
		{"walk right to left past trusted", "10.0.0.1:4000", []string{"192.0.2.1, 198.51.100.1, 10.0.0.7"}, "", "198.51.100.1", true},
		{"several header lines", "10.0.0.1:4000", []string{"192.0.2.1", "198.51.100.1, 10.0.0.7"}, "", "198.51.100.1", true},
		{"all trusted: leftmost", "10.0.0.1:4000", []string{"10.0.0.9, 10.0.0.7"}, "", "10.0.0.9", true},
		{"real ip without xff", "10.0.0.1:4000", nil, "198.51.100.3", "198.51.100.3", true},
		{"xff wins over real ip", "10.0.0.1:4000", []string{"198.51.100.1"}, "198.51.100.3", "198.51.100.1", true},
		{"no headers: the peer", "10.0.0.1:4000", nil, "", "10.0.0.1", true},
		{"garbage hop stops the walk", "10.0.0.1:4000", []string{"198.51.100.1, junk, 10.0.0.7"}, "", "10.0.0.7", true},
		{"hop with port", "10.0.0.1:4000", []string{"198.51.100.1:5555"}, "", "198.51.100.1", true},
		{"ipv6 hop in brackets", "[::1]:4000", []string{"[2001:db8::1]"}, "", "2001:db8::1", true},
		{"ipv4-mapped peer", "[::ffff:10.0.0.1]:4000", []string{"198.51.100.1"}, "", "198.51.100.1", true},
		// netip takes any bytes after "%" as a zone: no client address
		// has one across a proxy, and its text would reach the log.
		{"zoned hop stops the walk", "10.0.0.1:4000", []string{`fe80::1%x"}{"forged":"`}, "", "10.0.0.1", true},
		{"zoned hop in brackets", "10.0.0.1:4000", []string{"198.51.100.1, [fe80::1%eth0]:80"}, "", "10.0.0.1", true},
		{"zoned real ip ignored", "10.0.0.1:4000", nil, `fe80::1%x","route":"forged`, "10.0.0.1", true},
		{"link-local peer without its zone", "[fe80::1%eth0]:4000", nil, "", "fe80::1", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tc.peer
			for _, v := range tc.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			if tc.realIP != "" {
				r.Header.Set("X-Real-IP", tc.realIP)
			}
			got, trusted := trust.ClientAddr(r)
			if got.String() != tc.want || trusted != tc.trusted {
				t.Errorf("got %s (trusted %v), want %s (trusted %v)", got, trusted, tc.want, tc.trusted)
			}
		})
	}
}

func TestSeconds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want int64
	}{{"0s", 0}, {"1ns", 1}, {"1s", 1}, {"1.001s", 2}, {"-1s", 0}, {"10m", 600}} {
		d, _ := time.ParseDuration(tc.in)
		if got := seconds(d); got != tc.want {
			t.Errorf("seconds(%s): got %d, want %d", tc.in, got, tc.want)
		}
	}
}
