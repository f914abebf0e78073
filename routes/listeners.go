package routes

import (
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// listener is one address sluice binds: its field, the address in force
// (the default when the field is absent) and the field as written.
type listener struct {
	path string
	addr string
	v    val[string]
}

// listenersApart reports each listener that would bind an address and
// port another one binds already: validate would pass a file that run
// then fails on. Port 0 picks a free port and never collides. A host
// that is empty, 0.0.0.0 or :: binds every address (Go listens on both
// families for each), so it collides with any host on the same port;
// other hosts collide when they are the same address. Names are
// compared as written, since resolving them is the listener's business.
func (d *decoder) listenersApart(ls []listener) {
	for j := 1; j < len(ls); j++ {
		for i := 0; i < j; i++ {
			a, b := ls[i], ls[j]
			if a.addr == "" || b.addr == "" || !sameSocket(a.addr, b.addr) {
				continue
			}
			at, other := b, a
			if !b.v.set {
				at, other = a, b
			}
			if !at.v.set {
				continue // two defaults never collide
			}
			note := ""
			if !other.v.set {
				note = ", the default"
			}
			d.errorf(at.v.n, at.path, "%q overlaps %s (%q%s): two listeners cannot bind one address and port", at.addr, other.path, other.addr, note)
			break
		}
	}
}

// sameSocket reports whether listening on a and on b would collide.
// Both are valid host:port addresses.
func sameSocket(a, b string) bool {
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil {
		return false
	}
	// checkAddress took both ports: numbers up to 65535.
	p, _ := strconv.Atoi(pa)
	q, _ := strconv.Atoi(pb)
	return p != 0 && p == q && hostsCollide(ha, hb)
}

func hostsCollide(a, b string) bool {
	if wildcard(a) || wildcard(b) {
		return true
	}
	ia, erra := netip.ParseAddr(a)
	ib, errb := netip.ParseAddr(b)
	if erra == nil && errb == nil {
		return ia.Unmap() == ib.Unmap()
	}
	return strings.EqualFold(a, b)
}

func wildcard(host string) bool {
	if host == "" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsUnspecified()
}
