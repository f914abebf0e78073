package routes

import (
	"errors"
	"net/netip"
	"net/url"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// Errors of CanonicalPath. Each answers 400: an upstream framework could
// resolve such a path to another route's endpoint, past this route's
// limits.
var (
	ErrDotSegment  = errors.New("path has a . or .. segment")
	ErrBackslash   = errors.New("path has a backslash")
	ErrEncodedNUL  = errors.New("path has an encoded NUL")
	ErrEncodedCtl  = errors.New("path has an encoded control character")
	ErrPathEscape  = errors.New("path has an invalid % escape")
	ErrNotAbsolute = errors.New("path must start with /")
	ErrHostPort    = errors.New("host has a port that is not a number")
	ErrHostChar    = errors.New("host has a byte no host may hold")
	ErrMethod      = errors.New("method is not a token")
)

// CanonicalPath returns the canonical form of an escaped request path:
// repeated slashes merged into one, everything else (escapes, letter case,
// ";parameters", a trailing slash) kept as sent. It refuses a path with a
// "." or ".." segment (also as "..;", or escaped), a backslash (also as
// %5C), an encoded NUL or other control character (%0A: a route pattern
// that ends in "$" matches before a final newline in Python, so
// Starlette and FastAPI serve /v1/otp%0A from their /v1/otp handler,
// which no route here matches) or a broken escape. It returns escaped
// itself when nothing changes, and canonicalising its result again
// changes nothing.
// "*" (as in OPTIONS *) is canonical.
func CanonicalPath(escaped string) (string, error) {
	if escaped == "" {
		return "/", nil
	}
	if escaped == "*" {
		return escaped, nil
	}
	if escaped[0] != '/' {
		return "", ErrNotAbsolute
	}
	merge := false
	for i := 0; i < len(escaped); i++ {
		switch c := escaped[i]; c {
		case '\\':
			return "", ErrBackslash
		case '%':
			if i+2 >= len(escaped) || !isHex(escaped[i+1]) || !isHex(escaped[i+2]) {
				return "", ErrPathEscape
			}
			switch b := unhex(escaped[i+1])<<4 | unhex(escaped[i+2]); {
			case b == 0:
				return "", ErrEncodedNUL
			case b < ' ' || b == 0x7f:
				return "", ErrEncodedCtl
			case b == '\\':
				return "", ErrBackslash
			}
			i += 2
		case '/':
			if i+1 < len(escaped) && escaped[i+1] == '/' {
				merge = true
			}
		}
	}
	for rest := escaped[1:]; ; {
		seg, tail, more := strings.Cut(rest, "/")
		name, _, _ := strings.Cut(seg, ";")
		// The whole segment too: an upstream that reads ";" as a plain
		// byte (nginx) decodes "x;%2F..%2Fv1" to "x;/../v1" and
		// resolves the "..".
		if dotSegment(name) || len(name) < len(seg) && dotSegment(seg) {
			return "", ErrDotSegment
		}
		if !more {
			break
		}
		rest = tail
	}
	if !merge {
		return escaped, nil
	}
	var b strings.Builder
	b.Grow(len(escaped))
	for i := 0; i < len(escaped); i++ {
		if escaped[i] == '/' && i > 0 && escaped[i-1] == '/' {
			continue
		}
		b.WriteByte(escaped[i])
	}
	return b.String(), nil
}

// dotSegment reports whether the escaped segment name, decoded, is "." or
// "..", or holds one between encoded slashes (an upstream that decodes
// %2F before resolving would see it).
func dotSegment(name string) bool {
	n, dots := 0, true
	for i := 0; i <= len(name); i++ {
		c := byte('/')
		if i < len(name) {
			c = name[i]
			if c == '%' && i+2 < len(name) {
				c = unhex(name[i+1])<<4 | unhex(name[i+2])
				i += 2
			}
		}
		if c == '/' {
			if dots && (n == 1 || n == 2) {
				return true
			}
			n, dots = 0, true
			continue
		}
		n++
		dots = dots && c == '.'
	}
	return false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10
	}
	return 0
}

// CanonicalMethod returns the method upper-cased (ASCII), as it is matched
// and forwarded: "post" is POST. A method that is no RFC 9110 token is
// ErrMethod: net/http answers such a request line 400 over HTTP/1, but
// passes any HTTP/2 :method on, which no upstream could be sent.
func CanonicalMethod(m string) (string, error) {
	if !validToken(m) {
		return "", ErrMethod
	}
	return upperASCII(m), nil
}

// CanonicalHost returns the request host as it is matched and keyed:
// lower-cased (ASCII), without trailing dots, without the scheme's default
// port (80, or 443 when tls), and without an empty port. Canonicalising
// its result again changes nothing. A port that is not a number (":.",
// "[::1]x") is ErrHostPort: the gateway and an upstream could split such
// a host differently. A byte that net/http's server refuses in a Host
// field (a space, a control, anything not ASCII) is ErrHostChar: "a .",
// with its dot dropped, would end in a space the next parser trims, so
// the gateway would key one host and the upstream read another. So is a
// comma, which net/http lets through: the host reaches the upstream in
// X-Forwarded-Host, a list to Express, Spring and Symfony (which read its
// first element) and Rails (its last), so "acme.example.com,x" would be
// acme.example.com to them and another host to routes and keys. So is a
// "%" outside an IPv6 literal's brackets (where it escapes a zone):
// WHATWG's URL parser (under Node) decodes escapes in a host, so to an
// upstream that parses X-Forwarded-Host "api%2eexample.com" is
// api.example.com. So are the other bytes RFC 3986 allows in a host and
// no DNS name holds, "!$&'()*+;=~".
func CanonicalHost(host string, tls bool) (string, error) {
	if !httpguts.ValidHostHeader(host) || strings.IndexByte(host, ',') >= 0 {
		return "", ErrHostChar
	}
	if !strings.HasPrefix(host, "[") && strings.ContainsAny(host, "%!$&'()*+;=~") {
		// A name is letters, digits, "-", "." and "_"; RFC 3986 lets a
		// host hold the sub-delims too, which no DNS name does, and
		// which upstreams read apart ("a.example;x" is a.example to a
		// parser that takes ";" for a parameter), so they answer 400
		// as the escape does.
		return "", ErrHostChar
	}
	name, port := host, ""
	if strings.HasPrefix(host, "[") {
		// An IP literal, the one place a "%" may stand (an IPv6 zone):
		// it must be closed and hold an IPv6 address, or an escaped name
		// ("[api%2eexample.com]") would pass as one.
		i := strings.IndexByte(host, ']')
		if i < 0 {
			return "", ErrHostChar
		}
		if a, err := netip.ParseAddr(host[1:i]); err != nil || !a.Is6() {
			return "", ErrHostChar
		}
		name, port = host[:i+1], host[i+1:]
	} else if i := strings.LastIndexByte(host, ':'); i >= 0 && strings.IndexByte(host, ':') == i {
		name, port = host[:i], host[i:]
	}
	for strings.HasSuffix(name, ".") {
		name = name[:len(name)-1]
	}
	p, ok := strings.CutPrefix(port, ":")
	if port != "" && (!ok || p != "" && !allDigits(p)) {
		return "", ErrHostPort
	}
	if ok {
		digits := strings.TrimLeft(p, "0")
		if digits == "" && p != "" {
			digits = "0"
		}
		switch {
		case p == "", tls && digits == "443", !tls && digits == "80":
			port = ""
		case allDigits(p):
			port = ":" + digits
		}
	}
	if len(name)+len(port) != len(host) || port != "" && port != host[len(host)-len(port):] {
		host = name + port
	}
	return lowerASCII(host), nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

func upperASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if 'a' <= s[i] && s[i] <= 'z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if 'a' <= b[j] && b[j] <= 'z' {
					b[j] -= 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if 'A' <= b[j] && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

// foldedPrefixLen returns the length of the prefix of p that equals
// prefix ignoring case, or -1 when p does not start with it. Case is
// ignored as upstream frameworks ignore it: ASCII letters, and the four
// other letters whose simple case mapping is an ASCII one, which Java's
// equalsIgnoreCase takes for that letter (and Unicode case folding, as
// Go's strings.EqualFold, for the last two): "ı" and "İ" are i, "ſ" is s
// and the Kelvin sign "K" is k, so "/logın" is a spelling of "/login" to
// such an upstream.
func foldedPrefixLen(p, prefix string) int {
	i := 0
	for j := 0; j < len(prefix); j++ {
		if i >= len(p) {
			return -1
		}
		if x, y := p[i], prefix[j]; x == y || lowerByte(x) == lowerByte(y) {
			i++
			continue
		}
		if l, n := foldToASCII(p[i:]); n > 0 && l == lowerByte(prefix[j]) {
			i += n
			continue
		}
		return -1
	}
	return i
}

// foldToASCII returns the ASCII letter that s starts with a non-ASCII
// spelling of, as foldedPrefixLen takes it (U+0131 and U+0130 for i,
// U+017F for s, U+212A for k), and that spelling's length; 0, 0 when s
// starts with none.
func foldToASCII[T string | []byte](s T) (byte, int) {
	switch {
	case len(s) >= 2 && s[0] == 0xc4 && (s[1] == 0xb1 || s[1] == 0xb0):
		return 'i', 2
	case len(s) >= 2 && s[0] == 0xc5 && s[1] == 0xbf:
		return 's', 2
	case len(s) >= 3 && s[0] == 0xe2 && s[1] == 0x84 && s[2] == 0xaa:
		return 'k', 3
	}
	return 0, 0
}

// foldInPlace folds the letters of b as foldedPrefixLen compares them,
// ASCII lower case and the four others as their ASCII letter, and returns
// it, as long or shorter.
func foldInPlace(b []byte) []byte {
	w := 0
	for i := 0; i < len(b); i++ {
		c := b[i]
		if l, n := foldToASCII(b[i:]); n > 0 {
			c = l
			i += n - 1
		}
		b[w] = lowerByte(c)
		w++
	}
	return b[:w]
}

// MatchPath returns the path routes match against for a canonical URL:
// decoded, each segment's ";parameters" removed, and the empty segments
// that leaves merged. It allocates only when the path has parameters.
func MatchPath(u *url.URL) string {
	if u.RawPath == "" && strings.IndexByte(u.Path, ';') < 0 {
		return u.Path
	}
	return string(appendMatchPath(nil, u))
}

// appendMatchPath appends MatchPath(u) to dst.
func appendMatchPath(dst []byte, u *url.URL) []byte {
	if u.RawPath == "" {
		if strings.IndexByte(u.Path, ';') < 0 {
			return append(dst, u.Path...)
		}
		return appendStripped(dst, u.Path, false)
	}
	return appendStripped(dst, u.RawPath, true)
}

// appendStripped appends path without its segments' ";parameters" and
// without the empty segments they leave, decoding escapes when escaped.
// A trailing slash stays. Slashes decoded from %2F merge with their
// neighbours as repeated slashes do ("/v1/%2Fotp" is "/v1/otp"), as an
// upstream that decodes %2F (nginx) merges them.
func appendStripped(dst []byte, path string, escaped bool) []byte {
	start := len(dst)
	dst = appendSegments(dst, path, escaped)
	if !escaped {
		return dst
	}
	w := start
	for i := start; i < len(dst); i++ {
		if dst[i] == '/' && w > start && dst[w-1] == '/' {
			continue
		}
		dst[w] = dst[i]
		w++
	}
	return dst[:w]
}

func appendSegments(dst []byte, path string, escaped bool) []byte {
	if !strings.HasPrefix(path, "/") {
		return append(dst, path...)
	}
	wrote := false
	for rest := path[1:]; ; {
		seg, tail, more := strings.Cut(rest, "/")
		name, _, _ := strings.Cut(seg, ";")
		if escaped && strings.IndexByte(name, '%') >= 0 {
			if s, err := url.PathUnescape(name); err == nil {
				name = s
			}
		}
		if name != "" {
			dst = append(dst, '/')
			dst = append(dst, name...)
			wrote = true
		}
		if !more {
			if name == "" || !wrote {
				dst = append(dst, '/')
			}
			return dst
		}
		rest = tail
	}
}

// StripPrefix removes prefix from u's canonical path as routes see it:
// escapes decoded, case ignored when fold (see foldedPrefixLen), and
// ";parameters" of the segments it removes dropped with them. A path
// without the prefix, or in which it ends inside a segment, is left as it
// is.
func StripPrefix(u *url.URL, prefix string, fold bool) {
	esc := u.EscapedPath()
	i, j := 0, 0
	for j < len(prefix) {
		if i >= len(esc) {
			return
		}
		c, n := esc[i], 1
		switch {
		case c == ';' && prefix[j] != ';':
			for i < len(esc) && esc[i] != '/' {
				i++
			}
			continue
		case c == '%' && i+2 < len(esc):
			c, n = unhex(esc[i+1])<<4|unhex(esc[i+2]), 3
		}
		if p := prefix[j]; c != p && !(fold && lowerByte(c) == lowerByte(p)) {
			if !fold || c < 0x80 {
				return
			}
			// A letter that folds to p (see foldToASCII), escaped
			// byte by byte as EscapedPath writes it.
			l, m := foldEscaped(esc[i:])
			if m == 0 || l != lowerByte(p) {
				return
			}
			n = m
		}
		i, j = i+n, j+1
	}
	rest := esc[i:]
	if !strings.HasSuffix(prefix, "/") && rest != "" && rest[0] != '/' && rest[0] != ';' && !strings.HasPrefix(rest, "%2F") && !strings.HasPrefix(rest, "%2f") {
		// The prefix ends inside a segment: "/api" is no prefix of
		// "/apiv1/otp" to strip, whose rest would be "/v1/otp", another
		// route's path (or "/../v1/otp" from "/api../v1/otp").
		return
	}
	if strings.HasPrefix(rest, ";") {
		if k := strings.IndexByte(rest, '/'); k >= 0 {
			rest = rest[k:]
		} else {
			rest = ""
		}
	}
	if !strings.HasPrefix(rest, "/") {
		rest = "/" + rest
	}
	p, err := url.PathUnescape(rest)
	if err != nil {
		return
	}
	u.Path, u.RawPath = p, ""
	if u.EscapedPath() != rest {
		u.RawPath = rest
	}
}

// foldEscaped is foldToASCII for the escaped path esc, its bytes raw or
// %XX-escaped: the letter and the length of its spelling in esc.
func foldEscaped(esc string) (byte, int) {
	var b [3]byte  // foldToASCII's spellings are at most 3 bytes
	var end [3]int // where in esc each byte of b ends
	n := 0
	for i := 0; n < len(b) && i < len(esc); n++ {
		if esc[i] == '%' && i+2 < len(esc) {
			b[n], i = unhex(esc[i+1])<<4|unhex(esc[i+2]), i+3
		} else {
			b[n], i = esc[i], i+1
		}
		end[n] = i
	}
	l, size := foldToASCII(b[:n])
	if size == 0 {
		return 0, 0
	}
	return l, end[size-1]
}

func lowerByte(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}
