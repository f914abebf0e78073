package routes

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/ratelimit"
)

// StatusSet is a set of HTTP status codes, as count_status lists them. It
// is immutable and safe for concurrent use.
type StatusSet struct {
	bits [10]uint64 // bit c set: code c is in the set, for c < 640
}

// Has reports whether code is in the set.
func (s *StatusSet) Has(code int) bool {
	return code >= 0 && code < 640 && s.bits[code/64]&(1<<(code%64)) != 0
}

func (s *StatusSet) add(from, to int) {
	for c := from; c <= to; c++ {
		s.bits[c/64] |= 1 << (c % 64)
	}
}

// parseStatus reads one count_status entry: a code from 100 to 599, or a
// class from 1xx to 5xx.
func parseStatus(v string) (from, to int, err error) {
	if len(v) == 3 && (v[1:] == "xx" || v[1:] == "XX") && v[0] >= '1' && v[0] <= '5' {
		c := int(v[0]-'0') * 100
		return c, c + 99, nil
	}
	c, err := strconv.Atoi(v)
	if err != nil || c < 100 || c > 599 || len(v) != 3 {
		return 0, 0, fmt.Errorf("invalid status %q: want a code from 100 to 599 or a class like 4xx", v)
	}
	return c, c, nil
}

// countStatus decodes a policy's count_status list.
func (d *decoder) countStatus(m map[string]entry, path string, alg ratelimit.Algorithm) *StatusSet {
	v := d.strs(m, "count_status", path)
	if !v.set {
		return nil
	}
	p := field(path, "count_status")
	if alg == ratelimit.LeakyBucket {
		d.errorf(v.n, p, "not allowed on leaky_bucket: a request that left the queue cannot be undone")
		return nil
	}
	if len(v.v) == 0 {
		d.errorf(v.n, p, "must list at least one status, like [401, 403] or [4xx]")
		return nil
	}
	s := &StatusSet{}
	for i, e := range v.v {
		if !e.set {
			continue
		}
		from, to, err := parseStatus(e.v)
		if err != nil {
			d.errorf(e.n, index(p, i), "%v", err)
			continue
		}
		s.add(from, to)
	}
	return s
}

// Overrides are a policy's overrides, tried in order, the first match
// winning. Matching costs a map lookup for keys and one per distinct
// prefix length for clients, whatever the number of overrides. It is
// immutable and safe for concurrent use.
type Overrides struct {
	list  []*Override
	byKey map[string]int // key value to the first override that lists it
	// byDigest holds the keys longer than MaxKeyLen by their bounded
	// form (BoundKey), for MatchBounded; nil when there are none.
	byDigest map[string]int
	// Client prefixes to the first override that lists them, keyed by
	// the masked address and the prefix length, which hash faster than
	// a netip.Prefix.
	by4   map[uint64]int
	by6   map[prefix6]int
	lens4 []int // distinct IPv4 prefix lengths in by4, longest first
	lens6 []int // the same for IPv6

	// ipAt is where the policy's ip source is among its key values, and
	// sources how many there are; ipAt is -1 when it has none. With them
	// ForKey finds a clients: override from a key alone.
	ipAt, sources int
}

// prefix6 is an IPv6 prefix as a map key: the masked address and length.
type prefix6 struct {
	hi, lo uint64
	bits   int
}

func key4(a netip.Addr, bits int) uint64 {
	b := a.As4()
	v := uint64(b[0])<<24 | uint64(b[1])<<16 | uint64(b[2])<<8 | uint64(b[3])
	if bits < 32 {
		v &^= 1<<(32-bits) - 1
	}
	return uint64(bits)<<32 | v
}

func key6(a netip.Addr, bits int) prefix6 {
	b := a.As16()
	var hi, lo uint64
	for i := range 8 {
		hi = hi<<8 | uint64(b[i])
		lo = lo<<8 | uint64(b[8+i])
	}
	switch {
	case bits == 0:
		hi, lo = 0, 0
	case bits < 64:
		hi &^= 1<<(64-bits) - 1
		lo = 0
	case bits < 128:
		lo &^= 1<<(128-bits) - 1
	}
	return prefix6{hi, lo, bits}
}

// Override is one entry of a policy's overrides.
type Override struct {
	// Policy limits the matching consumers: the policy's settings with the
	// override's. Its buckets are its own (its Name is OverrideName's),
	// but it is shown under the policy's name. Nil when Exempt.
	Policy *ratelimit.Policy
	// Exempt means the policy neither limits nor charges the request.
	Exempt bool
}

// Match returns the first override that matches a request whose key
// values are key (joined by '|') from client, or nil when none does. It
// allocates nothing.
func (o *Overrides) Match(key []byte, client netip.Addr) *Override {
	best := len(o.list)
	if i, ok := o.byKey[string(key)]; ok {
		best = i
	}
	return o.matchClient(best, client)
}

// MatchBounded is Match for key values already bounded by BoundKey, as
// bucket keys and the access log's keys hold them: a listed key longer
// than MaxKeyLen matches by its digest. The simulator matches this way,
// since a log keeps no longer key; the gateway matches with Match, before
// it bounds the key, so there a key value that is itself such a digest
// matches no override.
func (o *Overrides) MatchBounded(key []byte, client netip.Addr) *Override {
	best := len(o.list)
	if i, ok := o.byKey[string(key)]; ok {
		best = i
	}
	if i, ok := o.byDigest[string(key)]; ok && i < best {
		best = i
	}
	return o.matchClient(best, client)
}

// matchClient returns the first override among the one at best (none
// when best is len(o.list)) and those matching client.
func (o *Overrides) matchClient(best int, client netip.Addr) *Override {
	if client.IsValid() {
		a := client.Unmap()
		if a.Is4() {
			for _, l := range o.lens4 {
				if i, ok := o.by4[key4(a, l)]; ok && i < best {
					best = i
				}
			}
		} else {
			for _, l := range o.lens6 {
				if i, ok := o.by6[key6(a, l)]; ok && i < best {
					best = i
				}
			}
		}
	}
	if best == len(o.list) {
		return nil
	}
	return o.list[best]
}

// List returns the overrides in the policy's order.
func (o *Overrides) List() []*Override { return o.list }

// ForKey returns the override whose bucket the consumer of key (the key
// values joined by '|', as /v1/limits takes them) uses, or nil: the first
// that lists key among its keys or, when the policy keys on ip, whose
// clients hold that address. An IPv6 client's key is its /64, which
// stands here for the /64's first address, so an override of a longer
// IPv6 prefix is not found by key.
//
// key may be given whole or bounded (see BoundKey), as the access log
// shows a long one: an override that lists a long key is found by either.
func (o *Overrides) ForKey(key string) *Override {
	if o == nil {
		return nil
	}
	return o.MatchBounded(BoundKey([]byte(key), 0), o.clientOf(key))
}

// clientOf reads the client address out of key, the zero Addr when the
// policy has no ip source or key holds none where it should. Values of
// other sources may hold '|', the address never does: it is read from the
// end of key that it is nearer to when the parts do not count out.
func (o *Overrides) clientOf(key string) netip.Addr {
	if o.ipAt < 0 {
		return netip.Addr{}
	}
	parts := strings.Split(key, "|")
	var part string
	switch {
	case len(parts) == o.sources:
		part = parts[o.ipAt]
	case o.ipAt == 0:
		part = parts[0]
	case o.ipAt == o.sources-1:
		part = parts[len(parts)-1]
	default:
		return netip.Addr{}
	}
	if a, err := netip.ParseAddr(part); err == nil {
		return a
	}
	if p, err := netip.ParsePrefix(part); err == nil {
		return p.Addr()
	}
	return netip.Addr{}
}

// keyOn tells o the policy's key sources (see ipAt).
func (o *Overrides) keyOn(sources []source) {
	if o == nil {
		return
	}
	o.ipAt, o.sources = -1, len(sources)
	for i, s := range sources {
		if s.kind == srcIP {
			o.ipAt = i
			break
		}
	}
}

var overrideFields = []string{"keys", "clients", "limit", "window", "burst", "queue", "max_wait", "exempt"}

// overrides decodes a policy's overrides list; base is the policy as
// written, before NewPolicy filled in its defaults, and sources its key
// list as written.
func (d *decoder) overrides(n *yaml.Node, path string, base ratelimit.Policy, sources []string, compiled bool) *Overrides {
	items := d.items(n, path)
	if len(items) == 0 {
		return nil
	}
	o := &Overrides{byKey: map[string]int{}, by4: map[uint64]int{}, by6: map[prefix6]int{}, ipAt: -1}
	piped := 0             // sources whose values may hold '|'
	var ipAt, hostAt []int // where the key holds the client address, the host
	srcs := make([]source, len(sources))
	for i, t := range sources {
		src, err := parseSource(t)
		if err != nil || src.holdsPipe() {
			piped++
			src = source{kind: srcHeader} // a value that may hold '|'
		}
		srcs[i] = src
		if err == nil && src.kind == srcIP {
			ipAt = append(ipAt, i)
		}
		if err == nil && src.kind == srcHost {
			hostAt = append(hostAt, i)
		}
	}
	for i, in := range items {
		p := index(path, i)
		if deref(in).Kind != yaml.MappingNode {
			d.errorf(in, p, "must be a mapping with keys or clients, not %s", kindName(in))
			continue
		}
		m := d.fields(in, p, overrideFields...)
		keys, clients := d.strs(m, "keys", p), d.strs(m, "clients", p)
		switch {
		case keys.set && clients.set:
			d.errorf(m["clients"].key, field(p, "clients"), "set keys or clients, not both")
		case !keys.set && !clients.set:
			d.errorf(in, p, "needs keys (key values) or clients (addresses or CIDRs)")
		case keys.set && len(keys.v) == 0:
			d.errorf(keys.n, field(p, "keys"), "must list at least one key value")
		case clients.set && len(clients.v) == 0:
			d.errorf(clients.n, field(p, "clients"), "must list at least one address or CIDR")
		}
		for j, k := range keys.v {
			if !k.set {
				continue
			}
			parts := strings.Split(k.v, "|")
			switch {
			case slices.Contains(parts, ""):
				// A missing source is the empty value: "" would give
				// every request without the key this override, exempt
				// perhaps, and ${PARTNER_KEY} set to nothing is "".
				d.errorf(k.n, index(field(p, "keys"), j), "an empty key value (or an empty part of one) matches the requests that lack that key source; is a ${VARIABLE} in it empty?")
			case len(sources) > 1 && len(parts) < len(sources):
				d.errorf(k.n, index(field(p, "keys"), j), "want %d values joined by \"|\", one per key source (%s), got %d: no request would match it", len(sources), strings.Join(sources, "|"), len(parts))
			case len(parts) > len(sources) && piped > 1:
				// Key values are joined by '|' as they come, so a
				// listed "svc|ci|runner" on two sources is matched by
				// "svc|ci" with "runner" and by "svc" with "ci|runner"
				// alike: a guesser could take an exempt consumer's
				// override to another account. With one part per
				// source, only values without '|' join to it; with a
				// single source that may hold '|' the split is known.
				d.errorf(k.n, index(field(p, "keys"), j), "want %d values joined by \"|\", one per key source (%s), got %d: with more than one source that may hold \"|\", other values would match it", len(sources), strings.Join(sources, "|"), len(parts))
			case len(parts) > len(sources) && piped == 0:
				d.errorf(k.n, index(field(p, "keys"), j), "want %d values joined by \"|\", one per key source (%s), got %d: no request would match it", len(sources), strings.Join(sources, "|"), len(parts))
			default:
				// With one source that may hold '|', the values before
				// and after it still have a known place (valueAt).
				for _, at := range ipAt {
					v := valueAt(srcs, at, len(parts))
					if v < 0 {
						continue
					}
					if want, ok := clientKey(parts[v]); !ok {
						d.errorf(k.n, index(field(p, "keys"), j), "%q is no client address, as the key holds one there (%s): no request would match it; list ranges under clients:", parts[v], sources[at])
					} else if want != parts[v] {
						as := "an IPv6 client as its /64"
						if !strings.Contains(want, "/") {
							as = "an IPv4-mapped address as IPv4"
						}
						d.errorf(k.n, index(field(p, "keys"), j), "the key holds the client %q as %q (%s): write that, or list the address under clients:", parts[v], want, as)
					}
				}
				for _, at := range hostAt {
					v := valueAt(srcs, at, len(parts))
					if v < 0 {
						continue
					}
					if want, ok := hostKey(parts[v]); !ok {
						d.errorf(k.n, index(field(p, "keys"), j), "%q is no host, as the key holds one there (%s): no request would match it", parts[v], sources[at])
					} else if want != parts[v] {
						d.errorf(k.n, index(field(p, "keys"), j), "the key holds the host %q as %q (lower case, without a trailing dot or the scheme's default port): write that", parts[v], want)
					}
				}
			}
		}
		var prefixes []netip.Prefix
		for j, c := range clients.v {
			if !c.set {
				continue
			}
			pre, err := parsePrefix(c.v)
			if err != nil {
				d.errorf(c.n, index(field(p, "clients"), j), "%v", err)
				continue
			}
			prefixes = append(prefixes, netip.PrefixFrom(pre.Addr().Unmap(), bitsUnmapped(pre)))
		}
		ov := d.override(in, m, p, base, i, compiled)
		if !compiled || ov == nil {
			continue
		}
		o.list = append(o.list, ov)
		at := len(o.list) - 1
		for _, k := range keys.v {
			if _, dup := o.byKey[k.v]; k.set && !dup {
				o.byKey[k.v] = at
				if len(k.v) > MaxKeyLen {
					if o.byDigest == nil {
						o.byDigest = map[string]int{}
					}
					o.byDigest[string(BoundKey([]byte(k.v), 0))] = at
				}
			}
		}
		for _, pre := range prefixes {
			if pre.Addr().Is4() {
				k := key4(pre.Addr(), pre.Bits())
				if _, dup := o.by4[k]; !dup {
					o.by4[k] = at
					o.lens4 = append(o.lens4, pre.Bits())
				}
			} else {
				k := key6(pre.Addr(), pre.Bits())
				if _, dup := o.by6[k]; !dup {
					o.by6[k] = at
					o.lens6 = append(o.lens6, pre.Bits())
				}
			}
		}
	}
	for _, l := range []*[]int{&o.lens4, &o.lens6} {
		slices.Sort(*l)
		*l = slices.Compact(*l)
		slices.Reverse(*l)
	}
	if len(o.list) == 0 {
		return nil
	}
	return o
}

// bitsUnmapped is the prefix length of p once an IPv4-mapped address is
// written as IPv4, as client addresses are matched.
func bitsUnmapped(p netip.Prefix) int {
	if p.Addr().Is4In6() {
		return max(p.Bits()-96, 0)
	}
	return p.Bits()
}

// override decodes the settings of entry i and compiles its policy;
// compiled says whether the policy itself compiled.
func (d *decoder) override(n *yaml.Node, m map[string]entry, path string, base ratelimit.Policy, i int, compiled bool) *Override {
	before := len(d.probs)
	exempt := d.boolean(m, "exempt", path)
	limit := d.integer(m, "limit", path)
	window := d.span(m, "window", path)
	burst := d.integer(m, "burst", path)
	queue := d.integer(m, "queue", path)
	maxWait := d.span(m, "max_wait", path)
	set := map[string]*yaml.Node{}
	for _, f := range []struct {
		name string
		set  bool
		n    *yaml.Node
	}{{"limit", limit.set, limit.n}, {"window", window.set, window.n}, {"burst", burst.set, burst.n}, {"queue", queue.set, queue.n}, {"max_wait", maxWait.set, maxWait.n}} {
		if f.set {
			set[f.name] = f.n
		}
	}
	if exempt.v {
		for _, f := range []string{"limit", "window", "burst", "queue", "max_wait"} {
			if nd := set[f]; nd != nil {
				d.errorf(nd, field(path, f), "not allowed beside exempt: true")
			}
		}
		if len(d.probs) > before {
			return nil
		}
		return &Override{Exempt: true}
	}
	if len(set) == 0 {
		if len(d.probs) == before {
			d.errorf(n, path, "sets nothing: give limit, window, burst, queue or max_wait, or exempt: true")
		}
		return nil
	}
	p := base
	p.Name = base.Name + "#override" + strconv.Itoa(i+1) // until compiled: see below
	if limit.set {
		p.Limit = limit.v
	}
	if window.set {
		p.Window = window.v
	}
	if burst.set {
		p.Burst = burst.v
	}
	if queue.set {
		p.Queue = queue.v
	}
	if maxWait.set {
		p.MaxWait = maxWait.v
	}
	reported := map[string]bool{}
	if compiled {
		for _, f := range onlyFor(burst.set, queue.set, maxWait.set) {
			if p.Algorithm != f.alg {
				d.errorf(set[f.name], field(path, f.name), "only %s has a %s", f.alg, f.name)
				reported[f.name] = true
			}
		}
	}
	// As on the policy itself, an explicit zero is not the default.
	if burst.set && burst.v <= 0 && p.Algorithm == ratelimit.TokenBucket {
		d.errorf(burst.n, field(path, "burst"), "must be > 0; leave it out for the policy's")
		reported["burst"] = true
	}
	if maxWait.set && maxWait.v <= 0 && p.Algorithm == ratelimit.LeakyBucket {
		d.errorf(maxWait.n, field(path, "max_wait"), "must be > 0; leave it out for the policy's")
		reported["max_wait"] = true
	}
	pol, err := ratelimit.NewPolicy(p)
	for _, e := range unjoin(err) {
		f, msg, _ := strings.Cut(e.Error(), ": ")
		if f == "queue" && !queue.set && maxWait.set {
			f, msg = "max_wait", "only leaky_bucket has a max_wait"
		}
		switch nd := set[f]; {
		case reported[f]:
		case nd != nil:
			d.errorf(nd, field(path, f), "%s", msg)
		case compiled:
			// A field the override leaves to the policy, valid there
			// but not with the override's numbers: burst x interval
			// too long once the override's window is longer.
			d.errorf(n, field(path, f), "%s (with this override's numbers)", msg)
		}
		// Otherwise the complaint is about the policy's own fields,
		// which is filed there.
	}
	if len(d.probs) > before || pol == nil {
		return nil
	}
	// The buckets are named after the override's settings, not its place
	// in the list: an entry added or removed before it would otherwise
	// rename it, and a reload would start its consumers afresh, lifting
	// their blocks, though nothing of theirs changed.
	p.Name = OverrideName(base.Name, pol)
	if pol, err = ratelimit.NewPolicy(p); err != nil {
		d.errorf(n, path, "%v", err)
		return nil
	}
	return &Override{Policy: pol}
}

// OverrideName is the name of the buckets of an override of policy base
// whose compiled policy is p: base, "#override:" and p's numbers
// (limit/window, then burst for a token_bucket, queue/max_wait for a
// leaky_bucket). Overrides of one policy with the same numbers share
// their buckets, as a consumer that moves from one to the other keeps its
// budget; the algorithm and sync are the policy's own.
func OverrideName(base string, p *ratelimit.Policy) string {
	name := base + "#override:" + strconv.FormatInt(p.Limit, 10) + "/" + p.Window.String()
	switch p.Algorithm {
	case ratelimit.TokenBucket:
		name += "/" + strconv.FormatInt(p.Burst, 10)
	case ratelimit.LeakyBucket:
		name += "/" + strconv.FormatInt(p.Queue, 10) + "/" + p.MaxWait.String()
	}
	return name
}

// clientKey is the key value an ip source gives the client v names, an
// address or an IPv6 /64 as written in a key, and whether v names one.
func clientKey(v string) (string, bool) {
	if a, err := netip.ParseAddr(v); err == nil {
		return string(AppendClient(nil, a)), true
	}
	if pre, err := netip.ParsePrefix(v); err == nil && pre.Addr().Unmap().Is6() && pre.Bits() >= 64 {
		return string(AppendClient(nil, pre.Addr())), true
	}
	return "", false
}
