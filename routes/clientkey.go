package routes

import (
	"fmt"
	"strings"
)

// ClientKeyProblem reports why key, a VALUE of GET or DELETE /v1/limits
// for the policy called name, names no bucket a request could have made:
// at the place of an ip source it writes a client address otherwise than
// as the key holds it (an IPv6 client as its /64, an IPv4-mapped one as
// IPv4), as an address copied from the access log is written, or at the
// place of header:Host a host that is not canonical. It returns
// "" when key has no such value, when the place of the value in key is
// not known (see valueAt), and for a policy no route uses.
func (c *Config) ClientKeyProblem(name, key string) string {
	k := c.keyOf(name)
	if k == nil {
		return ""
	}
	parts := strings.Split(key, "|")
	fixed := false
	for i, s := range k.sources {
		j := valueAt(k.sources, i, len(parts))
		if j < 0 {
			continue
		}
		var want string
		var ok bool
		switch s.kind {
		case srcIP:
			want, ok = clientKey(parts[j])
		case srcHost:
			want, ok = hostKey(parts[j])
		default:
			continue
		}
		if ok && want != parts[j] {
			parts[j], fixed = want, true
		}
	}
	if !fixed {
		return ""
	}
	return fmt.Sprintf("key %q names no bucket: the key holds it as %q (an IPv6 client as its /64, an IPv4-mapped one as IPv4, a host in lower case without a trailing dot or the scheme's default port; key sources %s)",
		key, strings.Join(parts, "|"), k.String())
}

// valueAt is the index, among the n '|'-separated parts of a key, of
// the value of sources[i], or -1 when it is not known. With one part per
// source it is i. A value that may hold '|' (holdsPipe) can span more
// than one part, so with more parts than sources only the values before
// the first such source and after the last have a known place: counted
// from the start of the key, or from its end. With fewer, or with more
// and no source whose value may hold '|', the key names no bucket of the
// policy, and no part is its value.
func valueAt(sources []source, i, n int) int {
	if n == len(sources) {
		return i
	}
	first, last := -1, -1
	for j, s := range sources {
		if s.holdsPipe() {
			if first < 0 {
				first = j
			}
			last = j
		}
	}
	switch {
	case n < len(sources) || first < 0:
		return -1
	case i < first:
		return i
	case i > last:
		return n - (len(sources) - i)
	}
	return -1
}

// hostKey is the key value a header:Host source gives the host v names,
// and whether v names one: v itself when it is canonical for http or
// https, else its canonical form for http.
func hostKey(v string) (string, bool) {
	c, err := CanonicalHost(v, false)
	if err != nil {
		return "", false
	}
	if c == v {
		return v, true
	}
	if t, err := CanonicalHost(v, true); err == nil && t == v {
		return v, true
	}
	return c, true
}

// keyOf is the key list of the policy called name, as the first route that
// lists it binds it; nil when no route does. Every route that lists a
// policy keys it with the same sources.
func (c *Config) keyOf(name string) *Key {
	if c.Table == nil {
		return nil
	}
	for _, rt := range c.Table.Routes {
		for _, l := range rt.Limits {
			if l.Policy != nil && l.Policy.Name == name {
				return l.Key
			}
		}
	}
	return nil
}
