package routes

import (
	"fmt"
	"strings"
)

// ClientKeyProblem reports why key, a VALUE of GET or DELETE /v1/limits
// for the policy called name, names no bucket a request could have made:
// at the place of an ip source it writes a client address otherwise than
// as the key holds it (an IPv6 client as its /64, an IPv4-mapped one as
// IPv4), as an address copied from the access log is written. It returns
// "" when key has no such value, and when the split of key into values is
// not known: a value holding "|", or a policy no route uses.
func (c *Config) ClientKeyProblem(name, key string) string {
	k := c.keyOf(name)
	if k == nil {
		return ""
	}
	parts := strings.Split(key, "|")
	if len(parts) != len(k.sources) {
		return ""
	}
	fixed := false
	for i, s := range k.sources {
		if s.kind != srcIP {
			continue
		}
		if want, ok := clientKey(parts[i]); ok && want != parts[i] {
			parts[i], fixed = want, true
		}
	}
	if !fixed {
		return ""
	}
	return fmt.Sprintf("key %q names no bucket: the key holds a client address as %q (an IPv6 client as its /64, an IPv4-mapped one as IPv4; key sources %s)",
		key, strings.Join(parts, "|"), k.String())
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
