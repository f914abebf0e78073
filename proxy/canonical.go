package proxy

import (
	"errors"
	"net/http"
	"net/netip"
	"net/textproto"
	"net/url"
	"strings"

	"github.com/sluicehq/sluice/routes"
)

// canonicalize puts r into the one form that routes, key sources and the
// upstream all see (SPEC §4, "The request the limits see is the request
// the upstream gets"): method upper-cased, path with repeated slashes
// merged, host lower-cased without trailing dot and default port, header
// names with "_" and headers named in Connection removed, forwarding
// headers of an untrusted peer removed, and the query reduced to the
// pairs that parse. It resolves the client address from what remains. An
// error is the reason to answer 400; r is then left partly canonical.
//
// It changes r in place and allocates only for a request that is not
// canonical already.
func (t Trust) canonicalize(r *http.Request) (client netip.Addr, trusted bool, err error) {
	m, err := routes.CanonicalMethod(r.Method)
	if err != nil {
		return netip.Addr{}, false, err
	}
	r.Method = m
	if r.ProtoMajor == 2 && m != http.MethodConnect && (r.URL.Scheme != "" || r.URL.Host != "") {
		// HTTP/2's :path is a path (RFC 9113 §8.3.1), but net/http takes
		// an absolute URI there too and leaves Host to :authority, or
		// empty: routes would match the URI's host while header:Host
		// keys, X-Forwarded-Host and the upstream had another, or none.
		// (A CONNECT's URL holds its :authority; it is answered 501.)
		return netip.Addr{}, false, errAbsolutePath
	}
	if err := canonicalPath(r.URL); err != nil {
		return netip.Addr{}, false, err
	}
	given := r.Host != ""
	if r.Host, err = routes.CanonicalHost(r.Host, r.TLS != nil); err != nil {
		return netip.Addr{}, false, err
	}
	if (r.Host == "" || r.Host[0] == ':') && (given || r.ProtoAtLeast(1, 1)) {
		// An http(s) request names its host, and not empty (RFC 9113
		// §8.3.1, RFC 9110 §4.2); net/http takes an HTTP/2 one without,
		// and an empty Host field (or one such as "." that is empty once
		// canonical) in HTTP/1.1. Routes would match no host while the
		// upstream, given an empty X-Forwarded-Host, reads its own Host
		// field instead. A port alone (":8443") names no host either
		// (RFC 9110 §4.2.1): a canonical host starts with ':' only then.
		// HTTP/1.0 predates Host, so it may go without, or send it empty,
		// which net/http cannot tell apart; but a host it gives, in the
		// field or the request target, must name one: "." would
		// otherwise pass as no host at all.
		return netip.Addr{}, false, errNoHost
	}
	peer := peerAddr(r)
	trusted = peer.IsValid() && t.Contains(peer)
	if !r.ProtoAtLeast(1, 1) {
		// RFC 9110 §7.8: a server must ignore Upgrade in an HTTP/1.0
		// request; forwarded, it would open a tunnel that a 1.0 proxy
		// in front does not expect.
		delete(r.Header, "Upgrade")
	}
	cleanHeaders(r.Header, trusted)
	r.URL.RawQuery = cleanQuery(r.URL.RawQuery)
	if !trusted {
		return peer, false, nil
	}
	client, _ = t.ClientAddr(r)
	return client, true, nil
}

// reresolve is the client address and trust of r, already canonical
// under another configuration that trusted the peer or not (wasTrusted),
// under t. A peer t no longer trusts loses the forwarding fields the
// other kept for it; one t trusts now had them removed already, so it is
// its own client.
func (t Trust) reresolve(r *http.Request, wasTrusted bool) (netip.Addr, bool) {
	peer := peerAddr(r)
	if !peer.IsValid() || !t.Contains(peer) {
		if wasTrusted {
			cleanHeaders(r.Header, false)
		}
		return peer, false
	}
	client, _ := t.ClientAddr(r)
	return client, true
}

// errAbsolutePath answers an HTTP/2 request whose :path is an absolute
// URI.
var errAbsolutePath = errors.New(":path must be a path, not an absolute URI")

// errNoHost answers an HTTP/1.1 or HTTP/2 request whose host is missing
// or empty, and a request of any version whose host names none.
var errNoHost = errors.New("request has no host, or an empty one")

// canonicalPath rewrites u's path to its canonical form.
func canonicalPath(u *url.URL) error {
	if u.Opaque != "" || u.Path == "*" {
		// "GET a:b HTTP/1.1" names no path; the upstream could read it
		// as one the routes never saw. Nor does "*", which only OPTIONS
		// may use and net/http answers itself: any other method's "*"
		// reached the handler, matched no path_prefix, and went to the
		// upstream as "/%2A", a path the routes never saw.
		return routes.ErrNotAbsolute
	}
	esc := u.EscapedPath()
	if u.RawPath != "" && u.RawPath != esc {
		// The client's spelling is no valid escaping ("/a\";%2Fb" has a
		// raw quote), so what is forwarded is Path escaped anew, where
		// the %2F is a real slash. Routes must read that, not RawPath.
		u.RawPath = ""
	}
	c, err := routes.CanonicalPath(esc)
	if err != nil || c == esc {
		return err
	}
	p, err := url.PathUnescape(c)
	if err != nil {
		return routes.ErrPathEscape
	}
	u.Path, u.RawPath = p, ""
	if u.EscapedPath() != c {
		u.RawPath = c // keeps escapes such as %2F as sent
	}
	return nil
}

// cleanHeaders drops the fields that must reach neither the matcher nor
// the upstream: names containing "_" or "." (see routes.DroppedField:
// WSGI and CGI upstreams read X_Forwarded_For as X-Forwarded-For, PHP
// X.Forwarded.For), fields named in Connection (hop by
// hop: the upstream never gets them, so neither do routes and keys), an
// Upgrade to anything but WebSocket, and from an untrusted peer the
// forwarding fields. It trims the spaces and tabs around every value, as
// the upstream gets it: HTTP/2 leaves them in (" victim" and "victim\t"
// would be keys of their own), and so does an HTTP/1 continuation line.
func cleanHeaders(h http.Header, trusted bool) {
	for name, vs := range h {
		if routes.DroppedField(name) || !trusted && routes.ForwardingField(name) {
			delete(h, name)
			continue
		}
		for i, v := range vs {
			if v != "" && (isBlank(v[0]) || isBlank(v[len(v)-1])) {
				vs[i] = strings.Trim(v, " \t")
			}
		}
	}
	dropConnectionNamed(h)
	// Only a WebSocket handshake may switch protocols through sluice.
	// After a 101 the connection is a tunnel whose requests no limit
	// sees: an upstream that took "Upgrade: h2c" would serve HTTP/2 on
	// it, as many requests as the client sends. Any other upgrade is
	// ignored, as RFC 9110 lets a server do, and the request goes on as
	// HTTP/1.1; HTTP2-Settings means nothing without one. Upgrade also
	// stays only where ReverseProxy forwards it, on a handshake whose
	// Connection names it (upgradeType): elsewhere the upstream never
	// gets it, and a route matching "Upgrade: websocket" would take a
	// plain request past the limits of the route the upstream serves it
	// as.
	if up := h["Upgrade"]; up != nil {
		if len(up) != 1 || !strings.EqualFold(up[0], "websocket") || upgradeType(h) == "" { // trimmed above
			delete(h, "Upgrade")
		}
		delete(h, "Http2-Settings")
	}
}

// joinCookies makes the Cookie lines of a request one, joined with "; ",
// each line stripped of the ";" and blanks it starts or ends with, and
// those left empty left out: as RFC 9113 §8.2.3 has an HTTP/2 request's
// cookie crumbs joined before an HTTP/1.1 hop (net/http's server does it
// for those), and as RFC 6265 §5.4 has a user agent send them. cookie:
// keys read every line; an upstream that reads only the first or the
// last, or joins them with "," as WSGI servers do (to a parser that
// splits at ";", "a=1,sid=x" is one cookie, a), would miss a cookie the
// key saw. Joined as it came, a line that ends in ";" would leave an
// empty cookie in the middle ("a=1;; sid=x"), where Python's
// http.cookies (aiohttp's parser) stops reading.
//
// rewrite joins them on the way out. Routes and keys see the lines the
// client sent: a cookie: key reads them as it reads the joined line (a
// line's end ends a cookie, as ";" does), and a header:Cookie key or a
// route matching on Cookie answers 400 to several, as to any field sent
// twice.
func joinCookies(lines []string) []string {
	var b strings.Builder
	for _, l := range lines {
		if l = strings.Trim(l, "; \t"); l == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		b.WriteString(l)
	}
	return []string{b.String()}
}

// dropConnectionNamed removes the fields h's Connection names, but for
// Upgrade and TE: ReverseProxy itself needs them to pass a WebSocket
// upgrade and trailers on, and removes them from what it forwards all the
// same (and Connection, which names itself).
func dropConnectionNamed(h http.Header) {
	for _, line := range h["Connection"] {
		for line != "" {
			var tok string
			tok, line, _ = strings.Cut(line, ",")
			tok = strings.TrimSpace(tok)
			if tok == "" || strings.EqualFold(tok, "Upgrade") || strings.EqualFold(tok, "Te") || strings.EqualFold(tok, "Connection") {
				continue
			}
			deleteField(h, tok)
		}
	}
}

// deleteField removes the field named tok in any letter case. The server
// stores names canonical, so one lookup of tok's canonical form, built on
// the stack, finds it without a scan of every field.
func deleteField(h http.Header, tok string) {
	var buf [64]byte
	if len(tok) > len(buf) {
		// Rare, so allocating is fine; a scan of every field per token
		// would let one request of long tokens and many fields cost
		// seconds of CPU.
		delete(h, textproto.CanonicalMIMEHeaderKey(tok))
		return
	}
	b := buf[:len(tok)]
	upper := true
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		switch {
		case upper && 'a' <= c && c <= 'z':
			c -= 'a' - 'A'
		case !upper && 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		b[i] = c
		upper = c == '-'
	}
	if _, ok := h[string(b)]; ok {
		delete(h, string(b))
	}
}

// cleanQuery returns raw reduced to the pairs that parse, as
// httputil.ReverseProxy would reduce it on the way out: a query with a
// ";" or a broken escape is re-encoded from what url.ParseQuery keeps, and
// so is one with a "#", a space, a control character or a byte that is
// not ASCII.
// Doing it here means the keys read the query the upstream receives.
func cleanQuery(raw string) string {
	if strings.Count(raw, "&") >= maxQueryParams {
		return reencodeQuery(raw)
	}
	for i := 0; i < len(raw); i++ {
		switch raw[i] {
		case ';', '#', ' ', '\x7f':
			// A ';' separates pairs for some upstreams; a '#' starts
			// a fragment for most, which drop what follows ("?k=v#1"
			// is k=v there, a key of its own here); spaces and control
			// characters, which HTTP/2 lets through, would break the
			// request line. Re-encoded, each is data to both sides.
			return reencodeQuery(raw)
		case '%':
			if i+2 >= len(raw) || !isHex(raw[i+1]) || !isHex(raw[i+2]) {
				return reencodeQuery(raw)
			}
			i += 2
		default:
			if raw[i] < ' ' || raw[i] >= 0x80 {
				// Werkzeug's development server and wsgiref (under
				// Django's runserver) read a raw byte that is not
				// ASCII as the Latin-1 character it codes: "\xe9" is "%C3%A9" to
				// them, "%E9" to the keys. Escaped, it is "%E9" to both.
				return reencodeQuery(raw)
			}
		}
	}
	return raw
}

// isBlank reports whether c is the optional whitespace around a field
// value: a space or a tab.
func isBlank(c byte) bool { return c == ' ' || c == '\t' }

// maxQueryParams is the number of query parameters net/url parses (and
// httputil.ReverseProxy keeps) by default.
const maxQueryParams = 10000

func reencodeQuery(raw string) string {
	v, _ := url.ParseQuery(raw)
	return v.Encode()
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
