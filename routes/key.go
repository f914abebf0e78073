package routes

import (
	"fmt"
	"net/http"
	"net/netip"
	"net/textproto"
	"net/url"
	"strings"
)

type sourceKind uint8

const (
	srcIP sourceKind = iota + 1
	srcHeader
	srcHost
	srcQuery
	srcCookie
	srcJSON
	srcRoute
	srcMethod
	srcPath
	srcGlobal
)

// source is one compiled key source. name is the canonical header name,
// the query parameter or the cookie name; path the json: field path.
type source struct {
	kind sourceKind
	name string
	path []string
}

// globalValue is the value of the global source: one bucket for everyone.
const globalValue = "global"

// parseSource compiles one entry of a policy's key list.
func parseSource(s string) (source, error) {
	switch s {
	case "ip":
		return source{kind: srcIP}, nil
	case "route":
		return source{kind: srcRoute}, nil
	case "method":
		return source{kind: srcMethod}, nil
	case "path":
		return source{kind: srcPath}, nil
	case "global":
		return source{kind: srcGlobal}, nil
	}
	typ, name, ok := strings.Cut(s, ":")
	if !ok {
		return source{}, unknownSource(s)
	}
	switch typ {
	case "header":
		if !validToken(name) {
			return source{}, fmt.Errorf("invalid header name %q in key source %q", name, s)
		}
		c := textproto.CanonicalMIMEHeaderKey(name)
		if c == "Host" {
			return source{kind: srcHost}, nil
		}
		return source{kind: srcHeader, name: c}, nil
	case "query":
		if name == "" {
			return source{}, fmt.Errorf("key source %q needs a parameter name, like query:api_key", s)
		}
		return source{kind: srcQuery, name: name}, nil
	case "cookie":
		if !validToken(name) {
			return source{}, fmt.Errorf("invalid cookie name %q in key source %q", name, s)
		}
		return source{kind: srcCookie, name: name}, nil
	case "json":
		path := strings.Split(name, ".")
		for _, p := range path {
			if p == "" {
				return source{}, fmt.Errorf("invalid JSON field %q in key source %q: want a name or a dotted path, like json:user.id", name, s)
			}
		}
		return source{kind: srcJSON, path: path}, nil
	}
	return source{}, unknownSource(s)
}

func unknownSource(s string) error {
	return fmt.Errorf("unknown key source %q (want ip, header:NAME, query:NAME, cookie:NAME, json:FIELD, route, method, path or global)", s)
}

// validToken reports whether s is an RFC 9110 token, the syntax of header
// and cookie names.
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// Key is a policy's compiled key list, bound to one route. It is immutable
// and safe for concurrent use.
type Key struct {
	sources []source
	route   string
	text    string
}

// String returns the key list as configured, joined by '|', like
// "header:X-API-Key|ip".
func (k *Key) String() string { return k.text }

// ReadsBody reports whether some source is json: and so needs the body.
func (k *Key) ReadsBody() bool {
	for _, s := range k.sources {
		if s.kind == srcJSON {
			return true
		}
	}
	return false
}

// Append appends the bucket's key values, joined by '|' in the order of the
// policy's key list: the VALUE format of GET /v1/limits. client is the
// resolved client address; body is the request body when the route reads
// one, else nil. A missing source appends an empty value, so an absent key
// never escapes the limit. Append allocates nothing for ip, header, route,
// method, path and global sources when dst has room.
func (k *Key) Append(dst []byte, r *http.Request, client netip.Addr, body *Body) []byte {
	for i, s := range k.sources {
		if i > 0 {
			dst = append(dst, '|')
		}
		switch s.kind {
		case srcIP:
			dst = appendClient(dst, client)
		case srcHeader:
			if v := r.Header[s.name]; len(v) > 0 {
				dst = append(dst, v[0]...)
			}
		case srcHost:
			dst = append(dst, r.Host...)
		case srcQuery:
			if r.URL != nil {
				dst = appendQuery(dst, r.URL.RawQuery, s.name)
			}
		case srcCookie:
			dst = appendCookie(dst, r.Header["Cookie"], s.name)
		case srcJSON:
			dst = body.appendField(dst, s.path)
		case srcRoute:
			dst = append(dst, k.route...)
		case srcMethod:
			dst = append(dst, r.Method...)
		case srcPath:
			if r.URL != nil {
				dst = append(dst, r.URL.Path...)
			}
		case srcGlobal:
			dst = append(dst, globalValue...)
		}
	}
	return dst
}

// appendClient writes an IPv4 client as itself and an IPv6 client as its
// /64, since one host usually holds a whole /64.
func appendClient(dst []byte, a netip.Addr) []byte {
	a = a.Unmap().WithZone("")
	switch {
	case !a.IsValid():
		return dst
	case a.Is4():
		return a.AppendTo(dst)
	}
	p, _ := a.Prefix(64)
	return p.AppendTo(dst)
}

// appendQuery writes the first value of parameter name in raw, decoding it
// only when it is escaped.
func appendQuery(dst []byte, raw, name string) []byte {
	for raw != "" {
		var kv string
		kv, raw, _ = strings.Cut(raw, "&")
		k, v, _ := strings.Cut(kv, "=")
		if k != name {
			if !strings.ContainsAny(k, "%+") {
				continue
			}
			if uk, err := url.QueryUnescape(k); err != nil || uk != name {
				continue
			}
		}
		if strings.ContainsAny(v, "%+") {
			uv, err := url.QueryUnescape(v)
			if err != nil {
				return dst
			}
			return append(dst, uv...)
		}
		return append(dst, v...)
	}
	return dst
}

// appendCookie writes the value of the first cookie called name, without
// surrounding quotes.
func appendCookie(dst []byte, lines []string, name string) []byte {
	for _, line := range lines {
		for line != "" {
			var part string
			part, line, _ = strings.Cut(line, ";")
			k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
			if !ok || k != name {
				continue
			}
			if len(v) > 1 && v[0] == '"' && v[len(v)-1] == '"' {
				v = v[1 : len(v)-1]
			}
			return append(dst, v...)
		}
	}
	return dst
}
