package routes

import (
	"crypto/sha256"
	"encoding/hex"
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
// the query parameter or the cookie name; path the json: field path; text
// the source as written, which names it in errors.
type source struct {
	kind sourceKind
	name string
	path [][]byte
	text string
}

// DuplicateError reports a key source that a request gives more than once:
// a header sent twice, a query parameter or cookie given twice, a JSON
// field given twice in any letter case. The gateway and the upstream could
// pick different values, so such a request is refused.
type DuplicateError struct {
	// Source is the key source as configured, like "header:X-API-Key".
	Source string
}

func (e *DuplicateError) Error() string {
	return "key source " + e.Source + " is given more than once in the request"
}

// globalValue is the value of the global source: one bucket for everyone.
const globalValue = "global"

// parseSource compiles one entry of a policy's key list.
func parseSource(s string) (source, error) {
	src, err := parseSourceKind(s)
	src.text = s
	return src, err
}

func parseSourceKind(s string) (source, error) {
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
		var path [][]byte
		for _, p := range strings.Split(name, ".") {
			if p == "" {
				return source{}, fmt.Errorf("invalid JSON field %q in key source %q: want a name or a dotted path, like json:user.id", name, s)
			}
			path = append(path, []byte(p))
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
// policy's key list: the VALUE format of GET /v1/limits. r must be in
// canonical form (see package proxy): its method, host and path are what
// routes matched. client is the resolved client address; body is the
// request body when the route reads one and it is JSON, else nil. A
// missing source appends an empty value, so an absent key never escapes
// the limit. A source the request gives more than once is a
// *DuplicateError. Append allocates nothing for ip, header, query, cookie,
// route, method, path and global sources when dst has room.
func (k *Key) Append(dst []byte, r *http.Request, client netip.Addr, body *Body) ([]byte, error) {
	for i := range k.sources {
		s := &k.sources[i]
		if i > 0 {
			dst = append(dst, '|')
		}
		ok := true
		switch s.kind {
		case srcIP:
			dst = AppendClient(dst, client)
		case srcHeader:
			v := r.Header[s.name]
			ok = len(v) <= 1
			if len(v) == 1 {
				dst = append(dst, v[0]...)
			}
		case srcHost:
			dst = append(dst, r.Host...)
		case srcQuery:
			if r.URL != nil {
				dst, ok = appendQuery(dst, r.URL.RawQuery, s.name)
			}
		case srcCookie:
			dst, ok = appendCookie(dst, r.Header["Cookie"], s.name)
		case srcJSON:
			dst, ok = body.appendField(dst, s.path)
		case srcRoute:
			dst = append(dst, k.route...)
		case srcMethod:
			dst = append(dst, r.Method...)
		case srcPath:
			if r.URL != nil {
				dst = appendMatchPath(dst, r.URL)
			}
		case srcGlobal:
			dst = append(dst, globalValue...)
		}
		if !ok {
			return dst, &DuplicateError{Source: s.text}
		}
	}
	return dst, nil
}

// AppendClient writes an IPv4 client as itself and an IPv6 client as its
// /64, since one host usually holds a whole /64.
func AppendClient(dst []byte, a netip.Addr) []byte {
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

// appendQuery writes the value of parameter name in raw, decoding it only
// when it is escaped. It reports false when name occurs more than once.
func appendQuery(dst []byte, raw, name string) ([]byte, bool) {
	found := false
	var val string
	for raw != "" {
		var kv string
		kv, raw, _ = strings.Cut(raw, "&")
		k, v, _ := strings.Cut(kv, "=")
		if strings.ContainsAny(k, "%+") {
			if uk, err := url.QueryUnescape(k); err != nil || uk != name {
				continue
			}
		} else if k != name {
			continue
		}
		if found {
			return dst, false
		}
		found, val = true, v
	}
	if !found {
		return dst, true
	}
	if strings.ContainsAny(val, "%+") {
		uv, err := url.QueryUnescape(val)
		if err != nil {
			return dst, true
		}
		return append(dst, uv...), true
	}
	return append(dst, val...), true
}

// appendCookie writes the value of the cookie called name, without
// surrounding quotes. It reports false when name occurs more than once,
// in one Cookie line or across several.
func appendCookie(dst []byte, lines []string, name string) ([]byte, bool) {
	found := false
	var val string
	for _, line := range lines {
		for line != "" {
			var part string
			part, line, _ = strings.Cut(line, ";")
			k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
			if !ok || strings.TrimSpace(k) != name {
				continue
			}
			if found {
				return dst, false
			}
			v = strings.TrimSpace(v)
			if len(v) > 1 && v[0] == '"' && v[len(v)-1] == '"' {
				v = v[1 : len(v)-1]
			}
			found, val = true, v
		}
	}
	return append(dst, val...), true
}

// MaxKeyLen bounds the bucket key kept per consumer. Longer keys (a huge
// header, say) are replaced by their digest, so a client cannot make each
// tracked bucket cost kilobytes.
const MaxKeyLen = 256

// BoundKey replaces the key in dst[start:] by "sha256:" and its hex digest
// when it is longer than MaxKeyLen.
func BoundKey(dst []byte, start int) []byte {
	if len(dst)-start > MaxKeyLen {
		sum := sha256.Sum256(dst[start:])
		dst = append(dst[:start], "sha256:"...)
		dst = hex.AppendEncode(dst, sum[:])
	}
	return dst
}
