package proxy

import (
	"net/http"
	"net/netip"
	"strings"
)

// Trust decides which peers may tell sluice who the client is. The zero
// value trusts nobody. It is immutable and safe for concurrent use.
type Trust struct {
	prefixes []netip.Prefix
}

// NewTrust returns a Trust for the given networks.
func NewTrust(prefixes []netip.Prefix) Trust {
	return Trust{prefixes: prefixes}
}

// Contains reports whether a is a trusted proxy.
func (t Trust) Contains(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range t.prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// peerAddr is the address of the connection's other end, without the
// zone of a link-local IPv6 peer (the interface it came in on), which no
// key, range or forwarded field has a use for.
func peerAddr(r *http.Request) netip.Addr {
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		return ap.Addr().Unmap().WithZone("")
	}
	if a, err := netip.ParseAddr(r.RemoteAddr); err == nil {
		return a.Unmap().WithZone("")
	}
	return netip.Addr{}
}

// ClientAddr resolves the client address of r and reports whether the peer
// is trusted. From an untrusted peer the client is the peer. From a trusted
// one, X-Forwarded-For is walked right to left past trusted hops and the
// first untrusted address is the client (the leftmost when all are trusted);
// X-Real-IP counts only when there is no X-Forwarded-For.
func (t Trust) ClientAddr(r *http.Request) (client netip.Addr, trusted bool) {
	peer := peerAddr(r)
	if !peer.IsValid() || !t.Contains(peer) {
		return peer, false
	}
	xff := r.Header["X-Forwarded-For"]
	if len(xff) == 0 {
		if real := strings.TrimSpace(r.Header.Get("X-Real-Ip")); real != "" {
			if a, ok := parseHop(real); ok {
				return a, true
			}
		}
		return peer, true
	}
	var leftmost netip.Addr
	for i := len(xff) - 1; i >= 0; i-- {
		// A field of blanks holds no hop, as an empty one does; it is
		// empty once canonicalize has trimmed it.
		list := strings.Trim(xff[i], " \t")
		for list != "" {
			var hop string
			if j := strings.LastIndexByte(list, ','); j >= 0 {
				hop, list = list[j+1:], list[:j]
			} else {
				hop, list = list, ""
			}
			a, ok := parseHop(hop)
			if !ok {
				// A hop that is not an address cannot be walked past:
				// what lies left of it is the client's own claim.
				if leftmost.IsValid() {
					return leftmost, true
				}
				return peer, true
			}
			if !t.Contains(a) {
				return a, true
			}
			leftmost = a
		}
	}
	if leftmost.IsValid() {
		return leftmost, true
	}
	return peer, true
}

// parseHop reads one X-Forwarded-For element: an address, optionally with a
// port, IPv6 optionally in brackets. An IPv6 zone ("fe80::1%eth0") makes
// it no address: a zone names an interface of the host that wrote it, no
// client has one across a proxy, and netip takes any bytes as a zone, so
// one would carry the client's own text into the access log, X-Real-IP
// and keys.
func parseHop(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	var a netip.Addr
	if v, err := netip.ParseAddr(s); err == nil {
		a = v
	} else if ap, err := netip.ParseAddrPort(s); err == nil {
		a = ap.Addr()
	} else if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		if v, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil {
			a = v
		}
	}
	if !a.IsValid() || a.Zone() != "" {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}
