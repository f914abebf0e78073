package simulate

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"net/textproto"
	"strings"

	"github.com/sluicehq/sluice/routes"
)

// keySource is one entry of a policy's key list, read from a log line
// rather than a live request.
type keySource struct {
	text string // as written, for messages
	kind sourceKind
	name string // canonical header name, query parameter
}

type sourceKind uint8

const (
	srcIP sourceKind = iota + 1
	srcRoute
	srcMethod
	srcPath
	srcGlobal
	srcHeader
	srcQuery
	srcCookie
	srcJSON
)

// readKey compiles a policy's key list for ReadLog. The config has
// checked it already, so a source this package does not know (one the
// gateway gained since) is not an error: no log records it, and the
// report says so.
func readKey(list []string) ([]keySource, error) {
	if len(list) == 0 {
		return parseKey(list)
	}
	out := make([]keySource, 0, len(list))
	for _, s := range list {
		src, err := parseKey([]string{s})
		if err != nil {
			out = append(out, keySource{text: strings.TrimSpace(s)})
			continue
		}
		out = append(out, src[0])
	}
	return out, nil
}

// parseKey compiles a key list such as ["header:X-API-Key", "ip"], with the
// syntax the gateway's config takes, as -key gives it.
func parseKey(list []string) ([]keySource, error) {
	if len(list) == 0 {
		return nil, fmt.Errorf("no key sources, want a list like ip or header:X-API-Key,ip")
	}
	out := make([]keySource, 0, len(list))
	for _, s := range list {
		s = strings.TrimSpace(s)
		if err := routes.CheckKeySource(s); err != nil {
			return nil, err
		}
		src := keySource{text: s}
		switch s {
		case "ip":
			src.kind = srcIP
		case "route":
			src.kind = srcRoute
		case "method":
			src.kind = srcMethod
		case "path":
			src.kind = srcPath
		case "global":
			src.kind = srcGlobal
		default:
			typ, name, ok := strings.Cut(s, ":")
			if !ok || name == "" {
				return nil, unknownSource(s)
			}
			switch typ {
			case "header":
				src.kind, src.name = srcHeader, textproto.CanonicalMIMEHeaderKey(name)
			case "query":
				src.kind, src.name = srcQuery, name
			case "cookie":
				src.kind, src.name = srcCookie, name
			case "json":
				src.kind, src.name = srcJSON, name
			default:
				return nil, unknownSource(s)
			}
		}
		out = append(out, src)
	}
	return out, nil
}

func unknownSource(s string) error {
	return fmt.Errorf("unknown key source %q (want ip, header:NAME, query:NAME, cookie:NAME, json:FIELD, route, method, path or global)", s)
}

// logged is what one access log line says about a request, as far as key
// sources can use it. Strings may point into the line being read.
type logged struct {
	client    netip.Addr
	route     string
	method    string
	path      string
	rawPath   string // the path as sent, when the log has it (nginx's; sluice's raw_path)
	rawQuery  string
	userAgent string
	referer   string
	hasRoute  bool // the format records the route (sluice's log)
	hasQuery  bool // the format records the query string (nginx's $request)
	hasAgent  bool // the format records User-Agent and Referer (combined)
}

// readable reports whether a log of this kind records the source's value.
// Sources it does not record take the empty value, as a missing source does
// in the gateway.
func (s keySource) readable(l *logged) bool {
	switch s.kind {
	case srcIP, srcMethod, srcPath, srcGlobal:
		return true
	case srcRoute:
		return l.hasRoute
	case srcQuery:
		return l.hasQuery
	case srcHeader:
		return l.hasAgent && (s.name == "User-Agent" || s.name == "Referer")
	}
	return false
}

// appendKey appends the bucket's key values for l, joined by '|' in the
// order of the key list, as the gateway writes them: the VALUE format of
// GET /v1/limits and of the access log's keys. fold tells whether the
// route ignores the path's letter case. It reports false for a request
// the gateway answers 400 before any limit: one that gives a query
// source more than once, as the frameworks read its names.
func appendKey(dst []byte, key []keySource, l *logged, fold bool) ([]byte, bool) {
	start := len(dst)
	for i, s := range key {
		if i > 0 {
			dst = append(dst, '|')
		}
		switch s.kind {
		case srcIP:
			dst = routes.AppendClient(dst, l.client)
		case srcRoute:
			dst = append(dst, l.route...)
		case srcMethod:
			dst = append(dst, routes.KeyMethod(l.method)...)
		case srcPath:
			dst = routes.AppendPathKeyOf(dst, l.path, l.rawPath, fold)
		case srcGlobal:
			dst = append(dst, "global"...)
		case srcQuery:
			var ok bool
			if dst, ok = routes.AppendQueryKey(dst, l.rawQuery, s.name); !ok {
				return dst, false
			}
		case srcHeader:
			switch {
			case !l.hasAgent:
			case s.name == "User-Agent":
				dst = append(dst, l.userAgent...)
			case s.name == "Referer":
				dst = append(dst, l.referer...)
			}
		}
	}
	return routes.BoundKey(dst, start), true
}

// Digest is a short stable name for a consumer key that does not show the
// key: the first 12 hex digits of its SHA-256. Keys with few possible
// values, such as IPv4 addresses, can be found from it by trying them all.
func Digest(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:6])
}
