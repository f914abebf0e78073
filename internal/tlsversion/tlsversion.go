// Package tlsversion names the TLS versions sluice accepts as a minimum,
// so the configuration and the certificate manager share one table.
package tlsversion

import "crypto/tls"

// versions lists the accepted versions by their configuration name, oldest
// first.
var versions = []struct {
	name string
	v    uint16
}{
	{"1.0", tls.VersionTLS10},
	{"1.1", tls.VersionTLS11},
	{"1.2", tls.VersionTLS12},
	{"1.3", tls.VersionTLS13},
}

// Names is the list of accepted names as an error message gives it.
const Names = "1.0, 1.1, 1.2 or 1.3"

// Parse returns the version called name ("1.2"), and false for a name
// that is not one of Names.
func Parse(name string) (uint16, bool) {
	for _, e := range versions {
		if e.name == name {
			return e.v, true
		}
	}
	return 0, false
}

// Known reports whether v is one of the versions Parse returns.
func Known(v uint16) bool {
	for _, e := range versions {
		if e.v == v {
			return true
		}
	}
	return false
}
