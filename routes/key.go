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
	"sync"
	"unicode"
	"unicode/utf8"
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
	// dotted is, for a json: path of more than one name, the path as one
	// name ("user.phone"), which some upstreams read as well (see
	// appendField).
	dotted [][]byte
	text   string
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

// AmbiguousError is a key source the request gives in a form that upstream
// frameworks may read otherwise than sluice: the gateway refuses the
// request rather than guess.
type AmbiguousError struct {
	Source string // as configured, like "query:api_key"
	Why    string
}

func (e *AmbiguousError) Error() string {
	return "key source " + e.Source + ": " + e.Why
}

// maxQueryParams is how many query parameters Express's qs and PHP
// (max_input_vars) read; they drop the rest, where a second value of a
// parameter could hide from them but not from sluice.
const maxQueryParams = 1000

// globalValue is the value of the global source: one bucket for everyone.
const globalValue = "global"

// holdsPipe reports whether the source's value may hold '|', the
// separator of composite key values: all but an address, a host (which
// CanonicalHost refuses with a '|'), a route's name (checkName) and the
// global value.
func (s source) holdsPipe() bool {
	return s.kind != srcIP && s.kind != srcHost && s.kind != srcRoute && s.kind != srcGlobal
}

// CheckKeySource returns the error a config gets for key source s, nil
// when a policy may key on it: sluice simulate's -key takes what the
// gateway takes.
func CheckKeySource(s string) error {
	_, err := parseSource(s)
	return err
}

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
		if DroppedField(name) {
			return source{}, fmt.Errorf("key source %q: %s, so its value would always be empty", s, underscored(name, "keying"))
		}
		c := textproto.CanonicalMIMEHeaderKey(name)
		if c == "Host" {
			return source{kind: srcHost}, nil
		}
		if err := HopByHop(c); err != nil {
			return source{}, fmt.Errorf("key source %q: %v", s, err)
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
		src := source{kind: srcJSON, path: path}
		if len(path) > 1 {
			src.dotted = [][]byte{[]byte(name)}
		}
		return src, nil
	}
	return source{}, unknownSource(s)
}

func unknownSource(s string) error {
	return fmt.Errorf("unknown key source %q (want ip, header:NAME, query:NAME, cookie:NAME, json:FIELD, route, method, path or global)", s)
}

// hopByHop are the fields a proxy removes before forwarding (those of
// httputil.ReverseProxy, Upgrade but for a WebSocket handshake aside), in
// canonical form: no upstream ever gets them.
var hopByHop = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true,
	"Proxy-Authenticate": true, "Proxy-Authorization": true, "Te": true,
	"Trailer": true, "Transfer-Encoding": true,
}

// IsHopByHop reports whether the field named name, in canonical form, is
// hop by hop: one a proxy removes before passing a message on.
func IsHopByHop(name string) bool { return hopByHop[name] }

// HopByHop refuses a header field, named in canonical form, that routes
// and keys may not read because the upstream never gets it: a route
// matching on it, or a limit keyed on it, would tell requests apart that
// the upstream serves alike. Upgrade is allowed: sluice keeps it only on
// a WebSocket handshake, which the upstream gets with it.
func HopByHop(name string) error {
	if IsHopByHop(name) {
		return fmt.Errorf("%s is a hop-by-hop field: the upstream never gets it", name)
	}
	return nil
}

// DroppedField reports whether sluice drops the header field called name
// before matching, keying and forwarding, as nginx drops it by default:
// its name contains "_" (WSGI and CGI upstreams read X_Forwarded_For as
// X-Forwarded-For) or "." (PHP makes "." in the name of every variable it
// registers "_", $_SERVER's too: X.Api.Key is its HTTP_X_API_KEY). It
// runs for every field of every request: two IndexByte scans take a
// third of the time ContainsAny does on usual names.
func DroppedField(name string) bool {
	return strings.IndexByte(name, '_') >= 0 || strings.IndexByte(name, '.') >= 0
}

// underscored says why a header field that DroppedField drops can be
// neither matched nor keyed on: the gateway drops such fields before it
// does either, so a route or a key naming one would never see it.
func underscored(name, doing string) string {
	c := "_"
	if strings.IndexByte(name, '_') < 0 {
		c = "."
	}
	return fmt.Sprintf("%s contains %q: sluice drops such fields before %s, as nginx does", name, c, doing)
}

// validToken reports whether s is an RFC 9110 token, the syntax of header
// and cookie names.
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !tokenByte(s[i]) {
			return false
		}
	}
	return true
}

// tokenByte reports whether c may appear in an RFC 9110 token.
func tokenByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// Key is a policy's compiled key list, bound to one route. It is immutable
// and safe for concurrent use.
type Key struct {
	sources []source
	route   string
	text    string
	// foldPath: the route ignores case, so the path source is keyed
	// folded as the route compares it (see appendPathKey).
	foldPath bool
}

// String returns the key list as configured, joined by '|', like
// "header:X-API-Key|ip".
func (k *Key) String() string { return k.text }

// Sources returns the key list as configured, one source a string, like
// ["header:X-API-Key", "ip"]. Unlike String it stays right for a source
// whose name holds a '|', as a query parameter's or a header's may.
func (k *Key) Sources() []string {
	out := make([]string, len(k.sources))
	for i, s := range k.sources {
		out[i] = s.text
	}
	return out
}

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
				if latin1Trimmed(v[0]) {
					return dst, &AmbiguousError{Source: s.text, Why: headerTrimmedWhy}
				}
				dst = append(dst, v[0]...)
			}
		case srcHost:
			dst = append(dst, r.Host...)
		case srcQuery:
			if r.URL != nil {
				if n := strings.Count(r.URL.RawQuery, "&") + 1; n > maxQueryParams {
					return dst, &AmbiguousError{Source: s.text, Why: fmt.Sprintf("the query has more than %d parameters, past which frameworks stop reading it", maxQueryParams)}
				}
				var why string
				if dst, ok, why = appendQuery(dst, r.URL.RawQuery, s.name); why != "" {
					return dst, &AmbiguousError{Source: s.text, Why: why}
				}
			}
		case srcCookie:
			var why string
			if dst, ok, why = appendCookie(dst, r.Header["Cookie"], s.name); why != "" {
				return dst, &AmbiguousError{Source: s.text, Why: why}
			}
		case srcJSON:
			if r.URL != nil && r.URL.RawQuery != "" && queryNames(r.URL.RawQuery, string(s.path[0])) {
				// Rails reads params as the body merged with the
				// query, the query winning: ?phone=victim with a
				// body of {"phone":"decoy"} is victim there.
				ok = false
				break
			}
			dst, ok = body.appendField(dst, s.path, s.dotted)
		case srcRoute:
			dst = append(dst, k.route...)
		case srcMethod:
			// HEAD is a GET to most upstreams, and to routes.
			dst = append(dst, KeyMethod(r.Method)...)
		case srcPath:
			if r.URL != nil {
				dst = appendPathKey(dst, r.URL, k.foldPath)
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
// when it is escaped. It reports false when name occurs more than once,
// counting every parameter that an upstream framework reads as name (see
// sameName). It reports why, and false, when the one such parameter is
// named otherwise than name, escapes decoded (API_KEY, api.key,
// api_key[]): frameworks that read it as name are as many as those that
// read no name at all (Flask, Django and Python's parse_qs read neither
// of those three as api_key), and to the latter the request is one
// without the parameter, which must share the empty value's bucket. It
// reports why, and false, too when the value is not UTF-8 once decoded,
// which frameworks read each their own way, as observed behind sluice:
// Express 5.3.0's and Koa 3.3.0's node:querystring and hapi 21.4.13's
// URLSearchParams read each bad sequence as U+FFFD, so that %FF, %FE and
// %EF%BF%BD are one value to them, and so do Flask 2.2, Django 3.2 and
// Python's parse_qs; Express's qs 6.17.1 and Fastify 5.12.8's
// fast-querystring keep a value with an escape that does not decode as it
// was sent, so that %FF and %25FF are one; PHP and Rack read the bytes.
// It reports why, and false, too for a value Tornado strips (see
// argumentTrimmed).
func appendQuery(dst []byte, raw, name string) (out []byte, ok bool, why string) {
	found, aliased := false, false
	var val string
	for raw != "" {
		var kv string
		kv, raw, _ = strings.Cut(raw, "&")
		k, v, ok := queryParam(kv)
		if !ok || !sameName(k, name) {
			continue
		}
		if found {
			return dst, false, ""
		}
		found, val, aliased = true, v, k != name
	}
	if !found {
		return dst, true, ""
	}
	start := len(dst)
	dst, ok = appendQueryUnescaped(dst, val)
	switch {
	case !ok:
		// A pair whose escapes do not parse is not forwarded (see
		// proxy's canonical query): no one reads it.
		return dst[:start], true, ""
	case aliased:
		return dst[:start], false, queryAliasedWhy
	case !utf8.Valid(dst[start:]):
		return dst[:start], false, queryNotUTF8Why
	case argumentTrimmed(dst[start:]):
		return dst[:start], false, queryTrimmedWhy
	}
	return dst, true, ""
}

// appendQueryUnescaped writes s decoded as url.QueryUnescape decodes it,
// "+" a space, without the string it would allocate for an escaped
// value; false where url.QueryUnescape fails, on a "%" that starts no
// escape.
func appendQueryUnescaped(dst []byte, s string) ([]byte, bool) {
	if !strings.ContainsAny(s, "%+") {
		return append(dst, s...), true
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '%':
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				return dst, false
			}
			dst = append(dst, unhex(s[i+1])<<4|unhex(s[i+2]))
			i += 2
		case c == '+':
			dst = append(dst, ' ')
		default:
			dst = append(dst, c)
		}
	}
	return dst, true
}

// argumentTrimmed reports whether Tornado's get_argument and
// get_query_argument read val as another value: as observed behind
// sluice (Tornado 6.2), they make each of the controls U+0000 to U+0008
// and U+000E to U+001F a space, then strip whitespace from both ends
// (Python's str.strip: U+001C to U+001F and every rune unicode.IsSpace
// takes), so victim%20, %09victim, victim%00 and victim%C2%A0 are all
// victim to them.
func argumentTrimmed(val []byte) bool {
	for _, c := range val {
		if c <= 0x08 || 0x0e <= c && c <= 0x1f {
			return true
		}
	}
	if len(val) == 0 {
		return false
	}
	first, _ := utf8.DecodeRune(val)
	last, _ := utf8.DecodeLastRune(val)
	return unicode.IsSpace(first) || unicode.IsSpace(last)
}

// headerTrimmedWhy is why a header source refuses a value that
// latin1Trimmed reports.
const headerTrimmedWhy = "the field's value starts or ends with a byte that some frameworks read as whitespace and strip"

// latin1Trimmed reports whether a framework that reads a field's value
// as Latin-1 and strips it as Python's str.strip does reads v as another
// value: as observed behind sluice, Tornado 6.2 (HTTPHeaders) and
// Django 3.2's runserver (wsgiref) read "victim\xa0", "\x85victim" and
// "victim" alike, 0x85 and 0xA0 being NEL and NO-BREAK SPACE in
// Latin-1 (a UTF-8 "à", C3 A0, ends in such a byte too). net/http has
// already trimmed spaces and tabs and refused other controls; the
// rest of what str.strip takes is checked all the same.
func latin1Trimmed(v string) bool {
	if v == "" {
		return false
	}
	return latin1Space(v[0]) || latin1Space(v[len(v)-1])
}

// latin1Space reports whether the Latin-1 character c is whitespace to
// Python's str.isspace.
func latin1Space(c byte) bool {
	return c == ' ' || '\t' <= c && c <= '\r' || 0x1c <= c && c <= 0x1f || c == 0x85 || c == 0xa0
}

// Reasons appendQuery gives for refusing a parameter.
const (
	queryAliasedWhy = "the query gives it only under another spelling of its name, which some frameworks read as it and others as no such parameter"
	queryNotUTF8Why = "the parameter's value is not UTF-8 once decoded, which frameworks read in different ways"
	queryTrimmedWhy = "the parameter's value starts or ends with whitespace or holds a control character, which some frameworks strip"
)

// queryParam splits one pair of a query into its name, decoded when it
// is escaped, and its value as sent; false for an empty pair or a name
// that does not decode.
func queryParam(kv string) (name, value string, ok bool) {
	if kv == "" {
		return "", "", false
	}
	k, v, _ := strings.Cut(kv, "=")
	if strings.ContainsAny(k, "%+") {
		uk, err := url.QueryUnescape(k)
		if err != nil {
			return "", "", false
		}
		k = uk
	}
	return k, v, true
}

// queryNames reports whether the query raw has a parameter that an
// upstream framework may read as the one called name (see sameName),
// letter case compared: only Rails merges the query over the body.
func queryNames(raw, name string) bool {
	for raw != "" {
		var kv string
		kv, raw, _ = strings.Cut(raw, "&")
		if k, _, ok := queryParam(kv); ok && sameNameCase(k, name) {
			return true
		}
	}
	return false
}

// sameName reports whether an upstream framework may read the parameter
// or cookie called k as the one called name: whether one of the names
// frameworks give k (see frameworkNames) is one they give name, letter
// case aside (see equalFoldName). Both sides are compared in those forms,
// so that "api.key=victim&api_key=decoy" or "API_KEY=victim&api_key=decoy"
// is api_key twice, a duplicate, rather than decoy here and victim
// upstream.
func sameName(k, name string) bool { return nameMatch(k, name, equalFoldName) }

// sameNameCase is sameName with letter case compared: the names Rails
// reads, and merges over a JSON body (see queryNames), are case-sensitive.
func sameNameCase(k, name string) bool {
	return nameMatch(k, name, func(a, b string) bool { return a == b })
}

func nameMatch(k, name string, equal func(a, b string) bool) bool {
	if k == name || equal(k, name) {
		return true
	}
	if !strings.ContainsAny(k, nameSpecials) && !strings.ContainsAny(name, nameSpecials) {
		return false
	}
	ks, ns := frameworkNames(k), frameworkNames(name)
	for _, a := range ks {
		for _, b := range ns {
			if a != "" && equal(a, b) {
				return true
			}
		}
	}
	return false
}

// equalFoldName reports whether a and b are one name to a framework that
// ignores case in names: ASP.NET Core finds query parameters, form fields
// and cookies by name with StringComparer.OrdinalIgnoreCase, so API_KEY
// is its api_key. Letters compare as foldedPrefixLen compares them (ASCII
// case, and the four other letters that fold to an ASCII one), erring
// towards taking two names for one.
func equalFoldName(a, b string) bool {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		x, n := a[i], 1
		if l, m := foldToASCII(a[i:]); m > 0 {
			x, n = l, m
		}
		y, m := b[j], 1
		if l, k := foldToASCII(b[j:]); k > 0 {
			y, m = l, k
		}
		if lowerByte(x) != lowerByte(y) {
			return false
		}
		i, j = i+n, j+m
	}
	return i == len(a) && j == len(b)
}

// nameSpecials are the bytes without which every framework reads a
// parameter's name as it is.
const nameSpecials = " .[]\x00"

// frameworkNames are the names upstream frameworks give the parameter or
// cookie k, in forms in which distinct names of one framework may be
// equal: they err towards taking two parameters for one.
//   - PHP (so Laravel, Symfony, WordPress) ends a name at a NUL byte,
//     drops its leading spaces, reads "a[]" and "a[x]" as a, an array,
//     turns spaces, dots and an unclosed "[" into "_" ("api.key" is its
//     api_key), and drops a parameter whose name starts with "[".
//   - Rack 2 (Rails, Sinatra) drops leading brackets and ends the name at
//     the next bracket: "[api_key]", "]api_key" and "api_key]" are its
//     api_key.
//   - Express's qs reads "[api_key]" as api_key and "api_key[x]" as
//     api_key, an object.
func frameworkNames(k string) [3]string {
	return [3]string{phpName(k), rackName(k), qsName(k)}
}

func phpName(k string) string {
	if i := strings.IndexByte(k, 0); i >= 0 {
		k = k[:i]
	}
	k = strings.TrimLeft(k, " ")
	if strings.HasPrefix(k, "[") {
		return "" // php_register_variable_ex drops a name that starts with "["
	}
	if i := strings.IndexByte(k, '['); i > 0 && strings.IndexByte(k[i:], ']') > 0 {
		k = k[:i]
	}
	if !strings.ContainsAny(k, " .[") {
		return k
	}
	b := []byte(k) // byte by byte: a name need not be UTF-8
	for i, c := range b {
		if c == ' ' || c == '.' || c == '[' {
			b[i] = '_'
		}
	}
	return string(b)
}

func rackName(k string) string {
	k = strings.TrimLeft(k, "[]")
	if i := strings.IndexAny(k, "[]"); i >= 0 {
		k = k[:i]
	}
	return k
}

// qsName is the name qs gives k: the part before its first bracket
// segment ("[...]" with no bracket inside), or, when k starts with one,
// what that segment holds.
func qsName(k string) string {
	for i := 0; i < len(k); i++ {
		if k[i] != '[' {
			continue
		}
		j := strings.IndexAny(k[i+1:], "[]")
		if j < 0 {
			break
		}
		if k[i+1+j] == ']' {
			if i == 0 {
				return k[1 : 1+j]
			}
			return k[:i]
		}
	}
	return k
}

// appendCookie writes the value of the cookie called name, without
// surrounding quotes. It reports false when name occurs more than once,
// in one Cookie line or across several, counting every cookie that an
// upstream framework reads as name: names are compared escapes decoded
// and as sameName does. Cookies end at a ";" and also at a ",", as
// ASP.NET Core splits them (so "sid=victim,x" is victim to it, and
// "sid=a,sid=b" two sids; a name without "=", as in "sid; sid=k", counts
// too). It reports why, whatever else, when a cookie holds name where
// only some frameworks see it (see hiddenName). It
// reports why, and false, when the one such cookie is named otherwise
// than name as sent (SID, s%69d, sid[], "sid "), follows a comma
// (x=1,sid=k) or is inside a quoted value (a="x; sid=k", see
// quoteOpen): Flask, Django, PHP, Rack or the Node frameworks read no
// cookie name in these, and to them the request is one without the
// cookie, which must share the empty value's bucket; likewise when the value of name starts
// with a double quote but is no quoted string that frameworks read alike
// (see quotedWhole), when it is cut at a comma, or when it holds a quote,
// a backslash or a control character, for which Hono reads no cookie. The value is written
// as the frameworks that decode it read it (see appendCookieValue).
func appendCookie(dst []byte, lines []string, name string) (out []byte, ok bool, why string) {
	found, twice, aliased, quoted, cut := false, false, false, false, false
	bare := false // name given without "=" (see below)
	var val string
	open := false // a double-quoted value is open (see quoteOpen)
	for _, line := range lines {
		afterComma := false
		for line != "" {
			var part string
			var sep byte
			comma := afterComma
			if i := strings.IndexAny(line, ";,"); i >= 0 {
				part, sep, line = line[:i], line[i], line[i+1:]
			} else {
				part, line = line, ""
			}
			afterComma = sep == ','
			inQuote := open
			open = quoteOpen(part, open)
			k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
			if !ok {
				// Rack 2.2 (Rails' cookie jar) reads "sid" as sid
				// with no value, and PHP (Symfony's cookie bag) as
				// sid, "": the first of them wins, so "sid;
				// sid=victim" is no sid to them. Beside a sid, it is
				// a second one.
				bare = bare || !inQuote && sameName(k, name)
				continue
			}
			if !cookieParses(part) && hiddenName(strings.TrimLeft(part, " \t"), name) {
				return dst, false, hiddenWhy
			}
			// As sent: "sid =k" is a cookie named "sid " to PHP and
			// Rack, and one inside a quoted value no cookie to Flask.
			exact := !comma && !inQuote && k == name
			if k = strings.TrimSpace(k); strings.ContainsAny(k, "%+") {
				var buf [64]byte
				k = string(appendUnescaped(buf[:0], k))
			}
			if !sameName(k, name) {
				continue
			}
			// A second one is refused, once the rest of the lines are
			// looked through for a hidden one.
			twice = twice || found
			found, val, aliased = true, strings.TrimSpace(v), !exact
			quoted = strings.HasPrefix(val, `"`) && !quotedWhole(part, sep)
			cut = sep == ','
		}
	}
	if twice || bare && found {
		return dst, false, ""
	}
	if aliased {
		return dst, false, aliasedWhy
	}
	if quoted {
		return dst, false, quotedWhy
	}
	if cut {
		// ASP.NET Core ends the value at the comma; Express 5.3.0,
		// Koa 3.3.0 and Fastify 5.12.8 read on to the ";", so that
		// sid=victim,x and sid=victim%2Cx are one value to them.
		return dst, false, commaWhy
	}
	for i := 0; i < len(val); i++ {
		if val[i] >= utf8.RuneSelf {
			// Node reads a Cookie field's bytes as Latin-1 (a raw
			// "é" is "Ã©" to Express 5.3.0, Koa 3.3.0, Fastify
			// 5.12.8 and hapi 21.4.13, as %C3%83%C2%A9 is), where
			// PHP and Go read the bytes.
			return dst, false, garbledWhy
		}
	}
	if in := unquoteCookie(val); strings.ContainsAny(in, "\"\\") || strings.ContainsFunc(in, isCookieControl) {
		// Hono 4.13.23's getCookie, as Go's r.Cookie, takes a value
		// with a double quote (past the pair around it), a backslash or
		// a control character for no cookie at all, where Express, Koa
		// and Fastify read it: sid=k1", sid=k2", ... would each be a
		// bucket of their own, and all one request without a session
		// to them. A quoted value's backslash is read apart besides:
		// Python's http.cookies (Django) decodes its escapes
		// ("vic\164im" is victim), Express, Koa and Fastify keep them.
		return dst, false, droppedWhy
	}
	if expressJSONCookie(val) {
		// Express's cookie-parser reads a value that starts with "j:"
		// as JSON, once the cookie module stripped its quotes and
		// decoded its %XX escapes ("+" stays): j:"victim", j: "victim"
		// and j:"\u0076ictim" are all victim to it. Such a value is
		// keyed as json: sources key a JSON value, when cookie-parser
		// takes it: valid JSON, and truthy (j:0, j:false, j:null and
		// j:"" it leaves as they are).
		// The JSON scanner keeps no pointer, but the compiler cannot
		// tell: the decoded text goes in a pooled buffer, not on the
		// stack, which it would move to the heap.
		// Where decodeURIComponent throws, the cookie module keeps the
		// value as sent, which is JSON only with a quote in it, refused
		// above, and garbledCookie refuses below.
		bp := cookieJSON.Get().(*[]byte)
		text, decoded := appendURIComponent((*bp)[:0], unquoteCookie(val))
		out, ok := dst, false
		if decoded && len(text) > 1 && text[0] == 'j' && text[1] == ':' {
			out, ok = appendJSONCookie(dst, text[2:])
		}
		*bp = text[:0]
		cookieJSON.Put(bp)
		if ok {
			return out, true, ""
		}
	}
	if garbledCookie(val) {
		return dst, false, garbledWhy
	}
	if len(val) > 2 && val[0] == '%' && val[1] == '2' && val[2] == '2' {
		// Fastify 5.12.8's cookie module (cookie 2.0.2) keeps the
		// quotes around a value: "victim" and %22victim%22 are both
		// "victim" to it, quotes and all, where sluice, as Express,
		// strips the quotes sent as they are.
		return dst, false, escapedQuoteWhy
	}
	return appendCookieValue(dst, val), true, ""
}

// isCookieControl reports whether r is a control character, which no
// cookie value holds (RFC 6265's cookie-octet), a tab included.
func isCookieControl(r rune) bool { return r < ' ' || r == 0x7f }

// garbledCookie reports whether frameworks read the escapes of cookie
// value v (quotes and all) in ways no one key can follow, as observed
// behind sluice. The cookie module of Express 5.3.0 (cookie 0.7.2) and
// Fastify 5.12.8 (cookie 2.0.2) decodes escapes with decodeURIComponent,
// all or nothing: %FF, which it cannot decode, it keeps as sent, as it
// keeps %25FF decoded, while PHP and Rack read the byte. A "%" that
// starts no escape, as in 100%, they keep, while gin 1.12.0's c.Cookie,
// which unescapes with url.QueryUnescape, reads any such value as the
// empty value: 100% and vic%zztim are "" to it, as an empty sid is.
func garbledCookie(v string) bool {
	return !uriComponentDecodes(unquoteCookie(v))
}

// uriComponentDecodes reports whether JavaScript's decodeURIComponent
// decodes s without throwing (see appendURIComponent), without building
// the result: every "%" starts an escape, and each run of escapes is
// UTF-8.
func uriComponentDecodes(s string) bool {
	var pend [utf8.UTFMax]byte
	n := 0
	for i := 0; i < len(s); {
		if s[i] != '%' {
			if n > 0 {
				return false // a run of escapes that ends inside a rune
			}
			i++
			continue
		}
		if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
			return false
		}
		pend[n] = unhex(s[i+1])<<4 | unhex(s[i+2])
		n++
		i += 3
		if utf8.FullRune(pend[:n]) {
			if r, size := utf8.DecodeRune(pend[:n]); r == utf8.RuneError && size == 1 {
				return false
			}
			n = 0
		}
	}
	return n == 0
}

// Reasons appendCookie gives for refusing a cookie.
const (
	aliasedWhy      = "the Cookie field gives it only under another spelling of its name, after a comma or inside a quoted value, which some frameworks read as it and others as no such cookie"
	garbledWhy      = "the cookie's value holds bytes that are not ASCII, or a % that is not one of escapes that decode to UTF-8, which frameworks read in different ways"
	commaWhy        = "the cookie's value holds a comma, where some frameworks end it and others do not"
	escapedQuoteWhy = "the cookie's value starts with an escaped double quote, which some frameworks read as the quote around a value that others strip"
	hiddenWhy       = "the Cookie field holds the cookie's name and \"=\" inside another cookie, where some frameworks read a cookie of its own"
	droppedWhy      = "the cookie's value holds a double quote, a backslash or a control character, which some frameworks read and others take for no cookie at all"
	quotedWhy       = "the cookie's value starts with a double quote but is not one quoted string without blanks at its ends, and Koa drops the first and last byte of such a value"
)

// quotedWhole reports whether part, a cookie whose value starts with a
// double quote (blanks aside), ended by sep (0 at the end of its line),
// holds a value that is one quoted string with nothing around it, ending
// the cookie at a ";". Koa's ctx.cookies.get (cookies 0.9.2) reads a
// value up to the next ";" and, when its first byte is a quote, drops its
// first and last byte, whatever they are: to it sid="victimX is victim,
// where the other frameworks, and sluice, read "victimX, one bucket for
// each last byte. Koa keeps the blanks around a value, which sluice
// trims, so sid="v " and sid=v ; are both "v " to it: a quoted string
// with a blank at either end of its text is refused too. Only a value
// that all read as the text inside its quotes is keyed.
func quotedWhole(part string, sep byte) bool {
	_, v, _ := strings.Cut(strings.TrimLeft(part, " \t"), "=")
	if sep == ',' || len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return false
	}
	in := v[1 : len(v)-1]
	return in == strings.Trim(in, " \t")
}

// quoteOpen reports whether a double-quoted cookie value is open after
// part, one cookie of a Cookie field, given whether one was open before
// it. Werkzeug (Flask) reads a value that starts with a double quote to
// its closing one (a backslash escaping the next byte), past ";" and
// ",": a="x; sid=k" is the one cookie a to it, and holds no sid. Cookies
// a client sent on several lines reach the upstream as one, so a value
// stays open from line to line. One that never closes is taken as open
// to the end, erring towards refusing.
func quoteOpen(part string, open bool) bool {
	i := 0
	if !open {
		_, v, ok := strings.Cut(part, "=")
		v = strings.TrimLeft(v, " \t")
		if !ok || v == "" || v[0] != '"' {
			return false
		}
		part, i = v, 1
	}
	for ; i < len(part); i++ {
		switch part[i] {
		case '\\':
			i++
		case '"':
			return false
		}
	}
	return true
}

// cookieParses reports whether part, one cookie of a Cookie line, is
// NAME=VALUE as RFC 6265 has it, blanks around it aside: NAME a token,
// "=" right after it, and VALUE cookie octets right after that, in double
// quotes or not. ASP.NET Core and Python's http.cookies read such a cookie
// whole; ASP.NET Core fails on a blank beside the "=" and tries again one
// byte further on.
func cookieParses(part string) bool {
	k, v, ok := strings.Cut(strings.Trim(part, " \t"), "=")
	if !ok || !validToken(k) {
		return false
	}
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = v[1 : len(v)-1]
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x21 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// hiddenName reports whether part, a cookie that does not parse (see
// cookieParses), holds name (as sameName compares it) followed by "=" as
// a token that starts after a byte no token holds, inside the cookie
// rather than at its start: a cookie appendCookie does not see but some
// framework does. Where a cookie does not parse, ASP.NET Core tries again
// one byte further on, so it reads "sid=victim" as a cookie in
// `a=x"sid=victim` and `x@sid=victim`, and Python's http.cookies
// (aiohttp) splits cookies at blanks, as in `a=x sid=victim`. A cookie
// that parses is read whole by both, so `next=https://example.com/?sid=1`
// holds no sid; nor does a token after "=" that itself follows a token,
// which every framework reads as a value (`next=sid=1`).
func hiddenName(part, name string) bool {
	for p := 1; p < len(part); p++ {
		c := part[p]
		switch {
		case tokenByte(part[p-1]) || !tokenByte(c):
			continue
		case part[p-1] == '=' && p >= 2 && tokenByte(part[p-2]):
			continue
		}
		e := p
		for e < len(part) && tokenByte(part[e]) {
			e++
		}
		q := e
		for q < len(part) && (part[q] == ' ' || part[q] == '\t') {
			q++
		}
		if q < len(part) && part[q] == '=' {
			k := part[p:e]
			if strings.ContainsAny(k, "%+") {
				var buf [64]byte
				k = string(appendUnescaped(buf[:0], k))
			}
			if sameName(k, name) {
				return true
			}
		}
		p = e - 1
	}
	return false
}

// cookieJSON lends appendCookie buffers for the JSON of "j:" cookies.
var cookieJSON = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

// unquoteCookie strips the double quotes around a cookie value, as the
// cookie modules of Express and Python do.
func unquoteCookie(v string) string {
	if len(v) > 1 && v[0] == '"' && v[len(v)-1] == '"' {
		return v[1 : len(v)-1]
	}
	return v
}

// expressJSONCookie reports whether the cookie value v is "j:..." to
// Express, its quotes stripped and %XX escapes decoded. It looks at the
// first two bytes of that only, so that a long value costs nothing.
func expressJSONCookie(v string) bool {
	v = unquoteCookie(v)
	first := func() (byte, bool) {
		switch {
		case v == "":
			return 0, false
		case v[0] == '%' && len(v) > 2 && isHex(v[1]) && isHex(v[2]):
			c := unhex(v[1])<<4 | unhex(v[2])
			v = v[3:]
			return c, true
		}
		c := v[0]
		v = v[1:]
		return c, true
	}
	j, ok1 := first()
	colon, ok2 := first()
	return ok1 && ok2 && j == 'j' && colon == ':'
}

// appendURIComponent writes s decoded as JavaScript's decodeURIComponent
// decodes it, "+" kept, and reports whether it could: decodeURIComponent
// throws on a "%" that starts no escape and on a run of escapes that is
// not UTF-8 on its own (bytes sent as they are take no part in it),
// decoding nothing then.
func appendURIComponent(dst []byte, s string) ([]byte, bool) {
	for i := 0; i < len(s); {
		if s[i] != '%' {
			dst = append(dst, s[i])
			i++
			continue
		}
		run := len(dst)
		for i < len(s) && s[i] == '%' {
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				return dst, false
			}
			dst = append(dst, unhex(s[i+1])<<4|unhex(s[i+2]))
			i += 3
		}
		if !utf8.Valid(dst[run:]) {
			return dst, false
		}
	}
	return dst, true
}

// appendCookieValue writes a cookie's value v as the frameworks that
// decode cookie values read it, so that spellings one of them reads as
// one value are one key here. Express, Rack and PHP decode %XX escapes
// (%76ictim is victim to them); Rack and PHP also read "+" as a space,
// which Express does not, so "+" and " " are one here, decoded or not.
// Express and Python's http.cookies, under Django, strip the quotes
// around a value. Values without any of these are written as they are.
// A quoted value with a backslash, which Python decodes and Node does
// not, never comes here (see appendCookie).
func appendCookieValue(dst []byte, v string) []byte {
	return appendUnescaped(dst, unquoteCookie(v))
}

// appendUnescaped writes s with its %XX escapes decoded and every "+"
// (as sent or decoded) written as a space. A "%" that starts no escape is
// kept, as PHP and Express keep it.
func appendUnescaped(dst []byte, s string) []byte {
	if !strings.ContainsAny(s, "%+") {
		return append(dst, s...)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			c = unhex(s[i+1])<<4 | unhex(s[i+2])
			i += 2
		}
		if c == '+' {
			c = ' '
		}
		dst = append(dst, c)
	}
	return dst
}

// appendPathKey writes the path source's value: the path routes match,
// without one trailing slash (Express and Rails serve /a/ as /a), and with
// its letters folded when the route ignores case, since the upstream that
// the route ignores case for reads /V1/Users/ALICE as /v1/users/alice.
func appendPathKey(dst []byte, u *url.URL, fold bool) []byte {
	start := len(dst)
	dst = appendMatchPath(dst, u)
	if fold {
		dst = dst[:start+len(foldInPlace(dst[start:]))]
	}
	if len(dst)-start > 1 && dst[len(dst)-1] == '/' {
		dst = dst[:len(dst)-1]
	}
	return dst
}

// AppendPathKeyOf writes the path source's value for a request whose
// canonical path is path, decoded, and rawPath, as sent ("" when only the
// decoded one is known, as in sluice's access log): what the simulator
// replays.
func AppendPathKeyOf(dst []byte, path, rawPath string, fold bool) []byte {
	u := &url.URL{Path: path}
	if rawPath != "" && u.EscapedPath() != rawPath {
		u.RawPath = rawPath // keeps escapes such as %2F as sent
	}
	return appendPathKey(dst, u, fold)
}

// AppendQueryKey writes the value of the query source name for the raw
// query, as the gateway reads it (see appendQuery and Key.Append). It
// reports false when the gateway answers 400: for a parameter given more
// than once or only under another spelling of its name, a value that is
// not UTF-8 once decoded or that Tornado strips, or a query of more than maxQueryParams
// parameters.
func AppendQueryKey(dst []byte, raw, name string) ([]byte, bool) {
	if strings.Count(raw, "&")+1 > maxQueryParams {
		return dst, false
	}
	dst, ok, why := appendQuery(dst, raw, name)
	return dst, ok && why == ""
}

// KeyMethod is the method source's value: HEAD is keyed GET.
func KeyMethod(m string) string {
	if m == http.MethodHead {
		return http.MethodGet
	}
	return m
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
