package tlsversion

import (
	"crypto/tls"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want uint16
		ok   bool
	}{
		{"1.0", tls.VersionTLS10, true},
		{"1.1", tls.VersionTLS11, true},
		{"1.2", tls.VersionTLS12, true},
		{"1.3", tls.VersionTLS13, true},
		{"1.4", 0, false},
		{"TLS1.2", 0, false},
		{"", 0, false},
	}
	for _, tc := range tests {
		got, ok := Parse(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Parse(%q): got %#x, %v; want %#x, %v", tc.in, got, ok, tc.want, tc.ok)
		}
		if ok && !Known(got) {
			t.Errorf("Known(%#x): got false, want true", got)
		}
	}
	if Known(0) || Known(tls.VersionSSL30) || Known(0x0305) {
		t.Errorf("Known accepts a version Parse never returns")
	}
}

// TestNamesListsEveryVersion keeps the error message's list in step with
// the table.
func TestNamesListsEveryVersion(t *testing.T) {
	t.Parallel()
	for _, e := range versions {
		if !strings.Contains(Names, e.name) {
			t.Errorf("Names %q lacks %s", Names, e.name)
		}
	}
}
