package routes

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/ratelimit"
)

// Table is the compiled list of routes. It is immutable and safe for
// concurrent use.
type Table struct {
	Routes []*Route

	matchHeaders []string // the headers some route matches on, canonical
}

// RepeatedMatchHeader returns the name of a header that some route
// matches on and r gives more than once, or "". Such a request is
// answered 400, as a key source given twice is: a route matches a header
// on any of its values, while Go's Header.Get and a servlet's getHeader
// read the first, so "X-Api-Version: 2" then "X-Api-Version: 1" could
// match an unlimited route for version 1 and reach the version 2 handler.
func (t *Table) RepeatedMatchHeader(r *http.Request) string {
	if t == nil {
		return ""
	}
	for _, h := range t.matchHeaders {
		if len(r.Header[h]) > 1 {
			return h
		}
	}
	return ""
}

// StrippedMatchHeader returns the name of a header that some route
// matches on and whose value r gives with a byte at either end that
// Tornado and Django's runserver strip as a Latin-1 space (see
// latin1Trimmed), or "". Such a request is answered 400: a route matches
// "X-Api-Version: 2\xa0" as no "2", while those upstreams read 2 and
// would reach the version 2 handler past its route's limits.
func (t *Table) StrippedMatchHeader(r *http.Request) string {
	if t == nil {
		return ""
	}
	for _, h := range t.matchHeaders {
		for _, v := range r.Header[h] {
			if latin1Trimmed(v) {
				return h
			}
		}
	}
	return ""
}

// Match returns the first route in file order matching r, or nil. r must
// be in canonical form (see package proxy); routes see its MatchPath.
func (t *Table) Match(r *http.Request) *Route {
	if t == nil || len(t.Routes) == 0 {
		return nil
	}
	p := MatchPath(r.URL)
	for _, rt := range t.Routes {
		if rt.matches(r, p) {
			return rt
		}
	}
	return nil
}

// UnmatchedRoute is the route label, in metrics and the access log, of
// requests that matched no route; no route may take it as its name.
const UnmatchedRoute = "(unmatched)"

// Route is one compiled route. It is immutable and safe for concurrent use.
type Route struct {
	// Name identifies the route in metrics, logs and inline policy names.
	Name string
	// Upstreams are the backends, tried round robin; at least one.
	Upstreams []*url.URL
	// StripPrefix is removed from the request path before forwarding.
	StripPrefix string
	// Timeout bounds the wait for the upstream's response headers, counted
	// from the end of the request body (the time the upstream spends, not
	// the client's upload). Default 30s.
	Timeout time.Duration
	// MaxBody is the largest request body in bytes the route forwards; 0
	// means no limit.
	MaxBody int64
	// Limits are the route's limits in route order.
	Limits []*Limit
	// ReadsBody reports whether some limit's key has a json: source, so
	// the body must be read (up to MaxKeyBody) before deciding.
	ReadsBody bool

	host       string // lower case; "" matches any host
	wildcard   bool   // host is a suffix like ".example.com"
	path       string
	pathPrefix string
	caseSens   bool // paths compare exactly, not ignoring case
	methods    []string
	headers    []headerMatch
}

type headerMatch struct {
	name, value string // name canonical
}

// Limit is one limit of a route: a policy and the key that picks its bucket.
type Limit struct {
	Policy *ratelimit.Policy
	Key    *Key
	// CountStatus, when not nil, lists the response statuses that spend
	// budget: an admitted request whose client receives another status
	// gets its unit back.
	CountStatus *StatusSet
	// Overrides are the policy's overrides; nil when it has none.
	Overrides *Overrides
}

// Matches reports whether the canonical request r satisfies every
// condition of the route's match: host (port and a trailing dot ignored,
// case-insensitive; "*.example.com" matches any name below example.com but
// not example.com itself), exact path (also with one trailing slash) or
// plain path prefix (one that ends in a slash also taking the path
// without it, see prefixDir), compared to MatchPath ignoring case (see
// foldedPrefixLen) unless the route is case-sensitive, method (HEAD
// included in GET), and headers.
func (rt *Route) Matches(r *http.Request) bool { return rt.matches(r, MatchPath(r.URL)) }

func (rt *Route) matches(r *http.Request, p string) bool {
	if rt.host != "" {
		h := requestHost(r)
		if rt.wildcard {
			if len(h) <= len(rt.host) || !strings.EqualFold(h[len(h)-len(rt.host):], rt.host) {
				return false
			}
		} else if !strings.EqualFold(h, rt.host) {
			return false
		}
	}
	if rt.path != "" {
		// The whole path, or all of it but one trailing slash.
		if n := rt.prefixLen(p, rt.path); n != len(p) && (n != len(p)-1 || p[n] != '/') {
			return false
		}
	}
	if rt.pathPrefix != "" && rt.prefixLen(p, rt.pathPrefix) < 0 && !rt.prefixDir(p) {
		return false
	}
	if len(rt.methods) > 0 && !contains(rt.methods, r.Method) && !(r.Method == http.MethodHead && contains(rt.methods, http.MethodGet)) {
		// A HEAD is a GET to most frameworks (Go's ServeMux, Express,
		// Rails, Spring, Django run the GET handler for it), so a route
		// for GET takes HEAD too, as nginx's limit_except GET does.
		return false
	}
	for _, h := range rt.headers {
		if !contains(r.Header[h.name], h.value) {
			return false
		}
	}
	return true
}

// CaseSensitive reports whether the route compares paths exactly
// (match.case_sensitive) rather than ignoring case.
func (rt *Route) CaseSensitive() bool { return rt.caseSens }

// prefixLen returns the length of the prefix of p that is prefix, as the
// route compares paths, or -1.
func (rt *Route) prefixLen(p, prefix string) int {
	if rt.caseSens {
		if strings.HasPrefix(p, prefix) {
			return len(prefix)
		}
		return -1
	}
	return foldedPrefixLen(p, prefix)
}

// prefixDir reports whether p is the route's path_prefix without the
// slash it ends in: Fiber v2.52.15 serves /v1/otp from a handler for
// "/v1/otp/*", gin and echo from a Group("/v1/otp"), chi from a router
// mounted there, so a path_prefix of /v1/otp/ that left it to another
// route would let it pass by its limits.
func (rt *Route) prefixDir(p string) bool {
	n := len(rt.pathPrefix) - 1
	return n > 0 && rt.pathPrefix[n] == '/' && rt.prefixLen(p, rt.pathPrefix[:n]) == len(p)
}

// shadows reports whether route e, coming first, takes every request
// later route rt matches by path, so that rt is never matched: e has a
// path_prefix that takes rt's path (and so the path with a slash after
// it) or every path that starts with rt's path_prefix, in every letter
// case rt takes, and its other conditions (host, methods, headers) ask
// no more than rt's do. It looks at paths only: routes without a path
// condition, or a host wildcard that covers rt's host, are not compared.
func shadows(e, rt *Route) bool {
	if e.pathPrefix == "" || (rt.path == "" && rt.pathPrefix == "") || (e.caseSens && !rt.caseSens) {
		return false
	}
	if rt.path != "" && e.prefixLen(rt.path, e.pathPrefix) < 0 && !e.prefixDir(rt.path) {
		return false
	}
	if rt.pathPrefix != "" && e.prefixLen(rt.pathPrefix, e.pathPrefix) < 0 {
		return false
	}
	if e.host != "" && (e.host != rt.host || e.wildcard != rt.wildcard) {
		return false
	}
	if len(e.methods) > 0 {
		if len(rt.methods) == 0 {
			return false
		}
		for _, m := range rt.methods {
			if !contains(e.methods, m) {
				return false
			}
		}
	}
	for _, h := range e.headers {
		if !slices.Contains(rt.headers, h) {
			return false
		}
	}
	return true
}

// pathField is the name of rt's path condition.
func pathField(rt *Route) string {
	if rt.path != "" {
		return "path"
	}
	return "path_prefix"
}

// childNode is the value of key in mapping n, or nil.
func childNode(n *yaml.Node, key string) *yaml.Node {
	if n == nil {
		return nil
	}
	m := deref(n)
	if m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// requestHost returns the request's host without port or trailing dot.
func requestHost(r *http.Request) string {
	h := r.Host
	if h == "" && r.URL != nil {
		h = r.URL.Host
	}
	if strings.HasPrefix(h, "[") {
		if i := strings.IndexByte(h, ']'); i > 0 {
			h = h[1:i]
		}
	} else if i := strings.LastIndexByte(h, ':'); i >= 0 && strings.IndexByte(h, ':') == i {
		h = h[:i]
	}
	return strings.TrimSuffix(h, ".")
}

// routes compiles the route list against the named policies; inline
// policies are added to all.
func (d *decoder) routes(n *yaml.Node, path string, named map[string]*policyDef, all map[string]*ratelimit.Policy) *Table {
	t := &Table{}
	names := map[string]*yaml.Node{}
	var before []int // index in the file of each of t.Routes
	for i, rn := range d.items(n, path) {
		p := index(path, i)
		rt, nameNode := d.route(rn, p, named, all)
		if rt == nil {
			continue
		}
		for j, e := range t.Routes {
			if shadows(e, rt) {
				bare := ""
				if rt.path != "" && e.prefixDir(rt.path) {
					bare = " (a path_prefix that ends in / also takes the path without it)"
				}
				d.errorf(orNode(childNode(childNode(rn, "match"), pathField(rt)), rn), field(p, "match."+pathField(rt)),
					"never matched: %s (%s) comes first, and its path_prefix %s takes every request this route matches%s: put this route before it",
					index(path, before[j]), e.Name, e.pathPrefix, bare)
				break
			}
		}
		before = append(before, i)
		if rt.Name != "" {
			if first, dup := names[rt.Name]; dup {
				d.errorf(nameNode, field(p, "name"), "duplicate route name %q (first at line %d)", rt.Name, first.Line)
			} else {
				names[rt.Name] = nameNode
			}
		}
		t.Routes = append(t.Routes, rt)
		for _, h := range rt.headers {
			if !slices.Contains(t.matchHeaders, h.name) {
				t.matchHeaders = append(t.matchHeaders, h.name)
			}
		}
	}
	return t
}

var routeFields = []string{"name", "match", "upstream", "upstreams", "strip_prefix", "timeout", "max_body", "limits"}

// route compiles one route; it also returns the node of its name, for the
// duplicate check.
func (d *decoder) route(n *yaml.Node, path string, named map[string]*policyDef, all map[string]*ratelimit.Policy) (*Route, *yaml.Node) {
	if deref(n).Kind != yaml.MappingNode {
		d.errorf(n, path, "must be a mapping, not %s", kindName(n))
		return nil, nil
	}
	m := d.fields(n, path, routeFields...)
	rt := &Route{
		Timeout: d.positive(d.duration(m, "timeout", path), field(path, "timeout")).or(30 * time.Second),
		MaxBody: d.size(m, "max_body", path).or(0),
	}
	name := d.str(m, "name", path)
	if !name.set {
		if isNull(m["name"].val) {
			d.errorf(n, field(path, "name"), "required")
		}
	} else if err := checkName(name.v); err != nil {
		d.errorf(name.n, field(path, "name"), "%v", err)
	} else if name.v == UnmatchedRoute {
		d.errorf(name.n, field(path, "name"), "%q is the route label of requests no route matched: choose another name", name.v)
	} else {
		rt.Name = name.v
	}
	if v := d.str(m, "strip_prefix", path); v.set {
		if v.v != "" && !strings.HasPrefix(v.v, "/") {
			d.errorf(v.n, field(path, "strip_prefix"), "must start with /")
		}
		rt.StripPrefix = v.v
	}
	d.match(m["match"].val, field(path, "match"), rt)
	d.upstreams(n, m, path, rt)

	lp := field(path, "limits")
	var leaky string
	used := map[string]string{}
	limits := []*yaml.Node{m["limits"].val} // one policy name, as key: ip is [ip]
	if isNull(limits[0]) || deref(limits[0]).Kind != yaml.ScalarNode {
		limits = d.items(m["limits"].val, lp)
	}
	for i, ln := range limits {
		p := index(lp, i)
		var def *policyDef
		if ref := deref(ln); ref.Kind == yaml.ScalarNode {
			name, ok := d.text(ln, p)
			if !ok {
				if isNull(ln) {
					d.errorf(ln, p, "must be a policy name or a policy mapping")
				}
				continue
			}
			var known bool
			def, known = named[name]
			if !known {
				d.errorf(ln, p, "unknown policy %q%s", name, nearestField(name, slices.Sorted(maps.Keys(named))))
				continue
			}
			if first, dup := used[name]; dup {
				d.errorf(ln, p, "policy %q is already listed as %s", name, first)
				continue
			}
			used[name] = p
		} else {
			def = d.policy(ln, p, rt.Name+"#"+strconv.Itoa(i+1))
		}
		if def == nil {
			continue
		}
		if def.algorithm == ratelimit.LeakyBucket {
			if leaky != "" {
				d.errorf(ln, p, "a route has at most one leaky_bucket limit (the first is %s)", leaky)
				continue
			}
			leaky = p
		}
		if def.broken {
			continue
		}
		if deref(ln).Kind != yaml.ScalarNode {
			all[def.pol.Name] = def.pol
		}
		key := &Key{sources: def.sources, route: rt.Name, text: def.text, foldPath: !rt.caseSens}
		rt.Limits = append(rt.Limits, &Limit{
			Policy:      def.pol,
			Key:         key,
			CountStatus: def.countStatus,
			Overrides:   def.overrides,
		})
		rt.ReadsBody = rt.ReadsBody || key.ReadsBody()
	}
	return rt, name.n
}

func (d *decoder) upstreams(n *yaml.Node, m map[string]entry, path string, rt *Route) {
	one, many := m["upstream"], m["upstreams"]
	switch {
	case !isNull(one.val) && !isNull(many.val):
		d.errorf(many.key, field(path, "upstreams"), "set upstream or upstreams, not both")
		return
	case isNull(one.val) && isNull(many.val):
		d.errorf(n, field(path, "upstream"), "required (or upstreams)")
		return
	}
	if !isNull(one.val) {
		if v := d.str(m, "upstream", path); v.set {
			if u, err := parseUpstream(v.v); err != nil {
				d.errorf(v.n, field(path, "upstream"), "%v", err)
			} else {
				rt.Upstreams = append(rt.Upstreams, u)
			}
		}
		return
	}
	list := d.strs(m, "upstreams", path)
	for i, v := range list.v {
		if !v.set {
			continue
		}
		if u, err := parseUpstream(v.v); err != nil {
			d.errorf(v.n, index(field(path, "upstreams"), i), "%v", err)
		} else {
			rt.Upstreams = append(rt.Upstreams, u)
		}
	}
	if list.set && len(list.v) == 0 {
		d.errorf(list.n, field(path, "upstreams"), "must list at least one upstream")
	}
}

func parseUpstream(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	switch {
	// host:port without a scheme is the usual slip: url.Parse refuses
	// 127.0.0.1:9000 and takes localhost:9000 for scheme "localhost".
	case !strings.Contains(s, "://") && (err != nil || u.Scheme == "" || u.Opaque != ""):
		return nil, fmt.Errorf("invalid upstream URL %q: no scheme: want http:// or https:// before the host, like http://127.0.0.1:9000", s)
	case err != nil:
		// The reason alone: the *url.Error around it repeats s.
		return nil, fmt.Errorf("invalid upstream URL %q: %v", s, errors.Unwrap(err))
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("invalid upstream URL %q: scheme must be http or https", s)
	case u.Hostname() == "":
		return nil, fmt.Errorf("invalid upstream URL %q: no host", s)
	case u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		return nil, fmt.Errorf("invalid upstream URL %q: only scheme, host and path are allowed", s)
	}
	// url.Parse takes any digits for a port; no request could reach
	// one out of range, and every one would be a 502.
	if port := u.Port(); port != "" {
		if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
			return nil, fmt.Errorf("invalid upstream URL %q: want a port from 1 to 65535", s)
		}
	}
	return u, nil
}

func (d *decoder) match(n *yaml.Node, path string, rt *Route) {
	m := d.fields(n, path, "host", "path", "path_prefix", "case_sensitive", "methods", "headers")
	rt.caseSens = d.boolean(m, "case_sensitive", path).or(false)
	if h := d.str(m, "host", path); h.set {
		host := strings.ToLower(strings.TrimSuffix(h.v, "."))
		if rest, ok := strings.CutPrefix(host, "*."); ok {
			host, rt.wildcard = "."+rest, true
		}
		ip, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
		if err == nil && ip.Zone() == "" && !rt.wildcard {
			host = ip.String()
		} else if !validHostname(strings.TrimPrefix(host, ".")) || strings.Contains(host, "*") {
			d.errorf(h.n, field(path, "host"), "invalid host %q: want a name like api.example.com or *.example.com, without port", h.v)
		}
		rt.host = host
	}
	p, pp := d.str(m, "path", path), d.str(m, "path_prefix", path)
	if p.set && pp.set {
		d.errorf(m["path_prefix"].key, field(path, "path_prefix"), "set path or path_prefix, not both")
	}
	for _, v := range []struct {
		v    val[string]
		name string
		dst  *string
	}{{p, "path", &rt.path}, {pp, "path_prefix", &rt.pathPrefix}} {
		if !v.v.set {
			continue
		}
		if !strings.HasPrefix(v.v.v, "/") {
			d.errorf(v.v.n, field(path, v.name), "must start with /")
		} else if c, err := CanonicalPath(v.v.v); err != nil || c != v.v.v || strings.ContainsRune(c, ';') {
			// Requests are matched in canonical form; this one could
			// never match.
			d.errorf(v.v.n, field(path, v.name), "must be a canonical path, without //, . or .. segments, ; or \\")
		}
		*v.dst = v.v.v
	}
	for i, v := range d.strs(m, "methods", path).v {
		if !v.set {
			continue
		}
		if !validToken(v.v) {
			d.errorf(v.n, index(field(path, "methods"), i), "invalid method %q", v.v)
			continue
		}
		if strings.EqualFold(v.v, "CONNECT") {
			d.errorf(v.n, index(field(path, "methods"), i), "sluice does not forward CONNECT (it answers 501)")
			continue
		}
		rt.methods = append(rt.methods, strings.ToUpper(v.v))
	}
	hp := field(path, "headers")
	seen := map[string]bool{}
	for _, e := range d.entries(m["headers"].val, hp) {
		name := textproto.CanonicalMIMEHeaderKey(e.key.Value)
		p := field(hp, e.key.Value)
		switch {
		case !validToken(e.key.Value):
			d.errorf(e.key, p, "invalid header name %q", e.key.Value)
			continue
		case name == "Host":
			d.errorf(e.key, p, "match the host with match.host")
			continue
		case HopByHop(name) != nil:
			d.errorf(e.key, p, "%v, so no route may match on it", HopByHop(name))
			continue
		case DroppedField(e.key.Value):
			d.errorf(e.key, p, "%s, so no route may match on it", underscored(e.key.Value, "matching"))
			continue
		case d.noTrusted && ForwardingField(name):
			d.errorf(e.key, p, "%s, so no route may match on it", untrustedOnly(e.key.Value))
			continue
		case seen[name]:
			d.errorf(e.key, p, "header %s is listed twice", name)
			continue
		}
		seen[name] = true
		v, ok := d.text(e.val, p)
		if !ok && isNull(e.val) {
			ok = true // an empty value: the header must be present and empty
		}
		if ok {
			rt.headers = append(rt.headers, headerMatch{name, v})
		}
	}
}
