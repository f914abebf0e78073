package routes

import (
	"net/netip"
	"testing"
)

// TestMappedPrefixesAreUnmapped: client addresses are compared unmapped
// (an IPv4 client on a dual-stack socket is 10.0.0.1, not
// ::ffff:10.0.0.1), so a range written in IPv4-mapped IPv6 form, as a
// dual-stack nginx or Envoy shows peers, is read as the IPv4 range it
// maps: ::ffff:10.0.0.0/104 is 10.0.0.0/8.
func TestMappedPrefixesAreUnmapped(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"::ffff:10.0.0.0/104", "10.0.0.0/8"},
		{"::ffff:10.0.0.1", "10.0.0.1/32"},
		{"::ffff:10.0.0.1/128", "10.0.0.1/32"},
		{"::ffff:0.0.0.0/96", "0.0.0.0/0"},
		{"10.0.0.0/8", "10.0.0.0/8"},
		{"2001:db8::/32", "2001:db8::/32"},
		{"::1", "::1/128"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			got, err := parsePrefix(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if want := netip.MustParsePrefix(tc.want); got != want {
				t.Errorf("got %v, want %v", got, want)
			}
		})
	}
}
