package routes

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/ratelimit"
)

// Config is a compiled configuration. It is immutable once Load or Parse
// returns it and safe for concurrent use; the zero value is not useful.
type Config struct {
	// Listen is the plain HTTP listener address. Default ":8080".
	Listen string
	// Admin is the admin listener address; "" turns it off. Default
	// "127.0.0.1:9091" when the field is absent.
	Admin string
	// TrustedProxies are the peers whose X-Forwarded-For and X-Real-IP are
	// believed. Bare addresses are single-address prefixes.
	TrustedProxies []netip.Prefix
	// ShutdownTimeout is how long SIGTERM lets requests drain. Default 15s.
	ShutdownTimeout time.Duration
	// ClientHeaderTimeout bounds reading a request's headers (and a TLS
	// handshake), and reading the part of a body that json: keys look at
	// before the limits decide. Default 10s.
	ClientHeaderTimeout time.Duration
	// ClientBodyTimeout bounds the pause between two reads of a request
	// body; a client silent for longer gets 408. Default 30s.
	ClientBodyTimeout time.Duration
	// KeepaliveTimeout is how long an idle keep-alive connection waits for
	// its next request before it is closed. Default 120s.
	KeepaliveTimeout time.Duration
	// SendTimeout bounds each write of an answer to the client: a client
	// that takes none of it for longer loses the connection (HTTP/1) or
	// the stream (HTTP/2). Default 60s.
	SendTimeout time.Duration
	// WebSocketIdleTimeout closes an upgraded connection (a WebSocket)
	// that no byte has crossed, in either direction, for this long.
	// Default 60s.
	WebSocketIdleTimeout time.Duration
	// TLS configures the HTTPS listener; nil when the section is absent.
	TLS *TLS
	// Store says where limiter state lives.
	Store Store
	// Policies holds every policy by name: the named ones and the inline
	// ones of routes, named "ROUTE#N".
	Policies map[string]*ratelimit.Policy
	// Overrides holds the overrides of every policy that has some, by
	// policy name.
	Overrides map[string]*Overrides
	// Table holds the routes in file order.
	Table *Table
	// AdminToken is the bearer token admin writes (DELETE /v1/limits)
	// need; "" refuses every write.
	AdminToken string
	// Log configures request logging.
	Log Log
}

// TLS configures the HTTPS listener.
type TLS struct {
	// Listen is the HTTPS listener address. Default ":8443".
	Listen string
	// RedirectHTTP makes the plain listener answer 308 to https.
	RedirectHTTP bool
	// MinVersion is the lowest TLS version accepted, a tls.VersionTLS1x
	// constant. Default tls.VersionTLS12.
	MinVersion uint16
	// Certificates are static certificate pairs, already checked to load.
	Certificates []CertPair
	// ACME obtains certificates automatically; nil when absent.
	ACME *ACME
}

// CertPair names a PEM certificate chain and its private key. Relative
// paths in the file are resolved against the config file's directory.
type CertPair struct {
	CertFile, KeyFile string
}

// ACME configures automatic certificates.
type ACME struct {
	// Domains are the names certificates are obtained for; at least one.
	Domains []string
	// Email is the ACME account contact; optional.
	Email string
	// CA is the ACME directory URL. Default Let's Encrypt production.
	CA string
	// CARoot is a PEM file of roots to trust the CA's own TLS with; "" uses
	// the system roots.
	CARoot string
	// Storage is the certificate storage directory. Default "data/certs".
	Storage string
	// Challenges are the ACME challenge types offered: "http-01" and/or
	// "tls-alpn-01". Default both.
	Challenges []string
}

// LetsEncrypt is the default ACME directory.
const LetsEncrypt = "https://acme-v02.api.letsencrypt.org/directory"

// Store says where limiter state lives.
type Store struct {
	// Type is "memory" (default) or "redis".
	Type   string
	Memory Memory
	Redis  Redis
}

// Memory configures the in-process store.
type Memory struct {
	// MaxKeys bounds the tracked buckets of each policy that sets no
	// max_keys of its own. Default 1,000,000.
	MaxKeys int
}

// Redis configures the Redis store.
type Redis struct {
	// Mode is "standalone" (default), "cluster" or "sentinel".
	Mode string
	// Addresses are host:port seeds (sentinels in sentinel mode). Default
	// ["127.0.0.1:6379"].
	Addresses []string
	// MasterName is the sentinel master; required in sentinel mode.
	MasterName string
	Username   string
	Password   string
	// DB is the database number; always 0 in cluster mode.
	DB int
	// KeyPrefix starts every key sluice writes. Default "sluice:".
	KeyPrefix string
	// Timeout bounds one decision. Default 50ms.
	Timeout time.Duration
	// OnError is what happens when Redis fails: "local" (default) falls
	// back to an in-process limiter, "allow" lets requests through, "deny"
	// rejects them.
	OnError string
}

// Log configures request logging.
type Log struct {
	// AccessLog writes one line per request. Default true.
	AccessLog bool
	// LogKeys adds consumer key values to access log lines. Default false,
	// since keys are often credentials.
	LogKeys bool
	// FlushInterval is the longest an access line waits in the buffer
	// before it is written; 0 writes each line at once. Default 100ms.
	FlushInterval time.Duration
}

// Load reads path and returns the compiled configuration. When the file is
// invalid the error is a Problems, one "FILE:LINE:COL: field: message" per
// line, FILE as given in path. Relative paths in the file are resolved
// against its directory.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	return Parse(path, data, os.LookupEnv)
}

// LoadAdmin reads only the admin listener's address from the config file
// at path, as Load would ("" when it is off; the default when the field is
// absent), and checks nothing else in the file. sluice health asks it: a
// running gateway keeps serving its last good config when a reload finds
// the file invalid, so a mistake elsewhere in the file must not report
// that gateway unhealthy (an orchestrator would replace it with one that
// cannot start).
func LoadAdmin(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading config: %w", err)
	}
	d := &decoder{file: path, env: os.LookupEnv}
	root := d.document(data)
	if root == nil {
		if len(d.probs) > 0 {
			return "", d.probs
		}
		return defaultAdmin, nil
	}
	d.probs = nil // a second document is no concern of the admin field's
	entries := d.entries(root, "")
	if deref(root).Kind == yaml.MappingNode {
		// Nor is another field's problem (a duplicate key, a bad
		// merge); without a mapping there is no admin field to find.
		d.probs = nil
	}
	addr := defaultAdmin
	for _, e := range entries {
		if e.key.Value != "admin" {
			continue
		}
		if s, ok := d.text(e.val, "admin"); ok {
			addr = s
		}
	}
	if len(d.probs) > 0 {
		return "", d.probs
	}
	return addr, nil
}

// Parse is Load on data already read: name is used in messages and its
// directory to resolve relative paths; env looks up ${NAME} (nil: every
// variable is unset).
func Parse(name string, data []byte, env func(string) (string, bool)) (*Config, error) {
	d := &decoder{file: name, env: env}
	root := d.document(data)
	var c *Config
	// After a syntax error there is nothing to check (root is nil); a
	// second document leaves the first one to check, so that one run
	// reports every problem.
	if root != nil || len(d.probs) == 0 {
		c = d.config(root, filepath.Dir(name))
	}
	if len(d.probs) > 0 {
		d.probs.sort()
		return nil, d.probs
	}
	return c, nil
}

// defaultAdmin is the admin listener's address when the config names none.
const defaultAdmin = "127.0.0.1:9091"

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parserErrors are the messages of the YAML parser, as opposed to its
// scanner. The decoder numbers a parser error's line from 0 and a
// scanner error's from 1; the line is that of the construct the parser
// was reading (the "[" of a list never closed), or of the problem when
// that construct starts the file.
var parserErrors = map[string]bool{
	"did not find expected <stream-start>":   true,
	"did not find expected <document start>": true,
	"did not find expected node content":     true,
	"did not find expected key":              true,
	"did not find expected '-' indicator":    true,
	"did not find expected ',' or '}'":       true,
	"did not find expected ',' or ']'":       true,
	"found undefined tag handle":             true,
	"found incompatible YAML document":       true,
	"found duplicate %YAML directive":        true,
	"found duplicate %TAG directive":         true,
}

// readerErrors are the messages of the YAML parser's reader, which
// decodes the input's characters; they name no line.
var readerErrors = map[string]bool{
	"invalid leading UTF-8 octet":        true,
	"incomplete UTF-8 octet sequence":    true,
	"invalid trailing UTF-8 octet":       true,
	"invalid length of a UTF-8 sequence": true,
	"invalid Unicode character":          true,
	"control characters are not allowed": true,
}

// badCharLine is the line of the first character of UTF-8 data that is
// not valid UTF-8 or not allowed in YAML, counting line breaks as YAML
// does (LF, CR, CR LF, NEL, LS, PS); 1 if there is none.
func badCharLine(data []byte) int {
	line := 1
	data = bytes.TrimPrefix(data, []byte("\ufeff"))
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			return line
		case r == '\r' && i+1 < len(data) && data[i+1] == '\n':
		case r == '\n' || r == '\r' || r == 0x85 || r == 0x2028 || r == 0x2029:
			line++
		case r == '\t', r >= 0x20 && r <= 0x7e, r >= 0xa0 && r <= 0xd7ff, r >= 0xe000 && r <= 0xfffd, r >= 0x10000:
		default:
			return line
		}
		i += size
	}
	return 1
}

// Scanner errors that a tab in a line's indentation causes.
const (
	tabViolation = "found a tab character that violates indentation"
	noTokenStart = "found character that cannot start any token"
)

// yamlLines splits data into lines as YAML breaks them (LF, CR, CR LF,
// NEL, LS, PS), without the breaks.
func yamlLines(data []byte) []string {
	data = bytes.TrimPrefix(data, []byte("\ufeff"))
	var out []string
	start := 0
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		switch {
		case r == '\r' && i+1 < len(data) && data[i+1] == '\n':
			out = append(out, string(data[start:i]))
			size = 2
			start = i + size
		case r == '\n' || r == '\r' || r == 0x85 || r == 0x2028 || r == 0x2029:
			out = append(out, string(data[start:i]))
			start = i + size
		}
		i += size
	}
	return append(out, string(data[start:]))
}

// tabInIndent reports whether the blanks that start line hold a tab.
func tabInIndent(line string) bool {
	indent := line[:len(line)-len(strings.TrimLeft(line, " \t"))]
	return strings.Contains(indent, "\t")
}

// tabIndented reports whether line n (from 1) of data has a tab in its
// indentation.
func tabIndented(data []byte, n int) bool {
	lines := yamlLines(data)
	return n >= 1 && n <= len(lines) && tabInIndent(lines[n-1])
}

// explainSyntax places and explains the parser's errors that a user of
// another YAML reader meets: a tab in the indentation, and a %YAML
// directive of version 1.2.
func explainSyntax(data []byte, line int, msg string) (int, string) {
	switch {
	case msg == tabViolation:
		// The parser names the line where the value before the tab
		// starts, or, on the first line, the tab's.
		if l := tabIndentedAfter(data, line); l > 0 && !tabIndented(data, line) {
			line = l
		}
	case msg == noTokenStart && tabIndented(data, line) && !reservedStart(data, line):
		msg += " (a tab indents this line: YAML indents with spaces only)"
	case msg == mappingValues:
		msg += mappingValuesHint(data, line)
	case msg == incompatibleVersion:
		if v, ok := yamlDirective(data, line); ok {
			msg += fmt.Sprintf(" (%%YAML %s: only 1.1 is read; leave the %%YAML line out)", v)
		}
	}
	return line, msg
}

// blockBreakers are the parser's errors for a line that fits in no block
// open at that point, mostly by its indentation, named after the kind of
// block the parser names the start of.
var blockBreakers = map[string]string{
	"did not find expected key":           "mapping",
	"did not find expected '-' indicator": "list",
}

// breakingLine moves a blockBreakers error from the line where the
// parser's block starts, which is all the parser names, to the line that
// broke it, and names both: in a long route the start alone leaves the
// reader searching. full is the parser's error text for data. The
// parser reads data in order, so the first lines of data fail with the
// same error as soon as they hold that line, and never before: a file
// cut short closes every block it opened.
func breakingLine(data []byte, full string, line int, msg string) (int, string) {
	kind, ok := blockBreakers[msg]
	if !ok {
		return line, msg
	}
	var ends []int // ends[k] is the length of data's first k+1 lines
	for i, c := range data {
		if c == '\n' {
			ends = append(ends, i+1)
		}
	}
	ends = append(ends, len(data))
	lo, hi := line, len(ends) // line numbers from 1; hi fails as data does
	for lo < hi {
		mid := (lo + hi) / 2
		if err := firstYAMLError(data[:ends[mid-1]]); err != nil && err.Error() == full {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	if lo <= line || lo > len(ends) {
		return line, msg
	}
	return lo, fmt.Sprintf("%s (check this line's indentation: the %s it breaks starts at line %d)", msg, kind, line)
}

// firstYAMLError is the first error of the parser reading every document
// of data; nil if there is none.
func firstYAMLError(data []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var n yaml.Node
		if err := dec.Decode(&n); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// mappingValues is the scanner's error for a ": " where no key may
// start: in a value that is not quoted, or on a line indented deeper than
// one whose value was already given, which YAML reads as more of it.
const mappingValues = "mapping values are not allowed in this context"

// mappingValuesHint says which of mappingValues' two causes line n (from
// 1) of data shows, or nothing when it shows neither plainly.
func mappingValuesHint(data []byte, n int) string {
	lines := yamlLines(data)
	if n < 1 || n > len(lines) {
		return ""
	}
	cur := lines[n-1]
	for i := n - 2; i >= 0; i-- {
		above, _, _ := strings.Cut(lines[i], " #")
		above = strings.TrimRight(above, " ")
		if t := strings.TrimSpace(above); t == "" || t[0] == '#' {
			continue
		}
		if contentColumn(cur) > contentColumn(above) && !strings.HasSuffix(above, ":") && !strings.HasSuffix(above, "-") {
			return fmt.Sprintf(" (this line is indented deeper than line %d, whose value is already given: check its indentation)", i+1)
		}
		break
	}
	if strings.Count(cur+" ", ": ") >= 2 {
		return ` (a value that holds ": " must be quoted)`
	}
	return ""
}

// contentColumn is where the text of line starts after its indentation
// and any "- " list markers.
func contentColumn(line string) int {
	col := 0
	for {
		rest := strings.TrimLeft(line[col:], " ")
		col = len(line) - len(rest)
		if !strings.HasPrefix(rest, "- ") {
			return col
		}
		col++
	}
}

// incompatibleVersion is the parser's error for a %YAML directive of a
// version other than 1.1, such as the current 1.2.
const incompatibleVersion = "found incompatible YAML document"

// yamlDirective returns the version a %YAML directive on line n (from 1)
// of data names.
func yamlDirective(data []byte, n int) (string, bool) {
	lines := yamlLines(data)
	if n < 1 || n > len(lines) {
		return "", false
	}
	f := strings.Fields(lines[n-1])
	if len(f) < 2 || f[0] != "%YAML" {
		return "", false
	}
	return f[1], true
}

// reservedStart reports whether line n (from 1) of data starts, after its
// blanks, with @ or `, which YAML reserves: that, not the tab (which flow
// context allows), may be what no token can start with.
func reservedStart(data []byte, n int) bool {
	lines := yamlLines(data)
	if n < 1 || n > len(lines) {
		return false
	}
	rest := strings.TrimLeft(lines[n-1], " \t")
	return rest != "" && (rest[0] == '@' || rest[0] == '`')
}

// tabIndentedAfter is the first line after line n (from 1) of data with a
// tab in its indentation; 0 if there is none.
func tabIndentedAfter(data []byte, n int) int {
	lines := yamlLines(data)
	for i := max(n, 0); i < len(lines); i++ {
		if tabInIndent(lines[i]) {
			return i + 1
		}
	}
	return 0
}

// unknownAnchor is the parser's error for an alias of an anchor never
// defined; unlike the others it names no line.
var unknownAnchor = regexp.MustCompile(`^yaml: unknown anchor '(.*)' referenced$`)

// aliasLine is the line of the first alias *name in data, 1 if there is
// none. It skips quoted text and comments, and takes a quote or an alias
// only where a node may start: after a space, a flow indicator or the
// line's start (an apostrophe inside a plain word quotes nothing).
func aliasLine(data []byte, name string) int {
	line := 1
	var quote byte
	for i := 0; i < len(data); i++ {
		c := data[i]
		// A node may start here: after a space, a flow indicator or at
		// the line's start.
		nodeStart := i == 0 || isYAMLSpace(data[i-1]) || strings.IndexByte("[{,", data[i-1]) >= 0
		switch {
		case c == '\n':
			line++
		case quote == '"' && c == '\\':
			i++ // an escaped byte, perhaps a quote
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case (c == '"' || c == '\'') && nodeStart:
			quote = c
		case c == '#' && (i == 0 || isYAMLSpace(data[i-1])):
			for i+1 < len(data) && data[i+1] != '\n' {
				i++
			}
		case c == '*' && nodeStart:
			rest := data[i+1:]
			if bytes.HasPrefix(rest, []byte(name)) && (len(rest) == len(name) || isYAMLSpace(rest[len(name)]) || strings.IndexByte(",[]{}", rest[len(name)]) >= 0) {
				return line
			}
		}
	}
	return 1
}

func isYAMLSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// document parses data as exactly one YAML document and returns its root;
// nil for an empty file.
func (d *decoder) document(data []byte) *yaml.Node {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []*yaml.Node
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			line, msg := 1, err.Error()
			if m := yamlLine.FindStringSubmatch(msg); m != nil {
				line, _ = strconv.Atoi(m[1])
				msg = m[2]
				if parserErrors[msg] {
					line++
				}
				line, msg = breakingLine(data, err.Error(), line, msg)
			} else if m := unknownAnchor.FindStringSubmatch(msg); m != nil {
				msg = strings.TrimPrefix(msg, "yaml: ")
				line = aliasLine(data, m[1])
			} else {
				// The parser names no line for a problem on the first
				// line, nor for one of its reader's, which are about a
				// character: the first one that is not valid UTF-8 or
				// that YAML does not allow.
				msg = strings.TrimPrefix(msg, "yaml: ")
				if readerErrors[msg] {
					line = badCharLine(data)
				}
			}
			line, msg = explainSyntax(data, line, msg)
			d.probs = append(d.probs, Problem{File: d.file, Line: line, Col: 1, Message: "syntax error: " + msg})
			return nil
		}
		docs = append(docs, &n)
	}
	if len(docs) == 0 || len(docs[0].Content) == 0 {
		return nil
	}
	if len(docs) > 1 {
		d.errorf(docs[1], "", "a config file holds one YAML document, not %d", len(docs))
	}
	return docs[0].Content[0]
}

func (d *decoder) config(root *yaml.Node, dir string) *Config {
	m := d.fields(root, "", "listen", "admin", "admin_token", "trusted_proxies", "shutdown_timeout",
		"client_header_timeout", "client_body_timeout", "keepalive_timeout", "send_timeout", "websocket_idle_timeout", "tls", "store", "policies", "routes", "log")
	listen := d.address(d.str(m, "listen", ""), "listen")
	c := &Config{
		Listen:               listen.or(":8080"),
		Admin:                defaultAdmin,
		ShutdownTimeout:      d.positive(d.duration(m, "shutdown_timeout", ""), "shutdown_timeout").or(15 * time.Second),
		ClientHeaderTimeout:  d.positive(d.duration(m, "client_header_timeout", ""), "client_header_timeout").or(10 * time.Second),
		ClientBodyTimeout:    d.positive(d.duration(m, "client_body_timeout", ""), "client_body_timeout").or(30 * time.Second),
		KeepaliveTimeout:     d.positive(d.duration(m, "keepalive_timeout", ""), "keepalive_timeout").or(120 * time.Second),
		SendTimeout:          d.positive(d.duration(m, "send_timeout", ""), "send_timeout").or(60 * time.Second),
		WebSocketIdleTimeout: d.positive(d.duration(m, "websocket_idle_timeout", ""), "websocket_idle_timeout").or(60 * time.Second),
	}
	admin := d.str(m, "admin", "")
	if admin.set {
		c.Admin = admin.v
		if admin.v != "" {
			admin = d.address(admin, "admin")
		}
	}
	trusted := d.strs(m, "trusted_proxies", "")
	c.TrustedProxies = d.prefixes(trusted, "trusted_proxies")
	d.noTrusted = len(trusted.v) == 0 // not when a listed one is broken: that is reported
	if e := m["tls"]; !isNull(e.val) {
		c.TLS = d.tls(e.val, "tls", dir)
	}
	ls := []listener{{"listen", c.Listen, listen}, {"admin", c.Admin, admin}}
	if c.TLS != nil {
		ls = append(ls, listener{"tls.listen", c.TLS.Listen, d.tlsListen})
	}
	d.listenersApart(ls)
	c.Store = d.store(m["store"].val, "store")
	d.maxKeys = max(c.Store.Memory.MaxKeys, 0) // an invalid one is reported already
	d.storeType = c.Store.Type
	policies := d.policies(m["policies"].val, "policies")
	c.Policies = make(map[string]*ratelimit.Policy, len(policies))
	for name, p := range policies {
		if p != nil && !p.broken {
			c.Policies[name] = p.pol
		}
	}
	c.Table = d.routes(m["routes"].val, "routes", policies, c.Policies)
	c.Overrides = map[string]*Overrides{}
	for name, p := range policies {
		if p != nil && !p.broken && p.overrides != nil {
			c.Overrides[name] = p.overrides
		}
	}
	for _, rt := range c.Table.Routes {
		for _, l := range rt.Limits {
			if l.Overrides != nil {
				c.Overrides[l.Policy.Name] = l.Overrides
			}
		}
	}
	if t := d.str(m, "admin_token", ""); t.set {
		// A header cannot carry such a byte (a secret read from a file
		// often ends in a newline), so no request could ever match.
		if strings.IndexFunc(t.v, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
			d.errorf(t.n, "admin_token", "must not hold spaces or control characters (a newline at the end of a secret read from a file?): no Authorization header could carry it")
		}
		c.AdminToken = t.v
	}
	lm := d.fields(m["log"].val, "log", "access_log", "log_keys", "flush_interval")
	c.Log = Log{
		AccessLog:     d.boolean(lm, "access_log", "log").or(true),
		LogKeys:       d.boolean(lm, "log_keys", "log").or(false),
		FlushInterval: d.nonNegative(d.duration(lm, "flush_interval", "log"), "log.flush_interval").or(100 * time.Millisecond),
	}
	return c
}

// address checks that v is host:port with a numeric port (0 picks any).
func (d *decoder) address(v val[string], path string) val[string] {
	if !v.set {
		return v
	}
	if err := checkAddress(v.v); err != nil {
		d.errorf(v.n, path, "%v", err)
		return val[string]{}
	}
	return v
}

func checkAddress(s string) error {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("invalid address %q: want host:port, like :8080 or 127.0.0.1:8080", s)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p > 65535 {
		return fmt.Errorf("invalid port in %q: want a number from 0 to 65535", s)
	}
	return nil
}

// positive reports a duration that is not > 0.
func (d *decoder) positive(v val[time.Duration], path string) val[time.Duration] {
	if v.set && v.v <= 0 {
		d.errorf(v.n, path, "must be > 0")
		return val[time.Duration]{}
	}
	return v
}

func (d *decoder) nonNegative(v val[time.Duration], path string) val[time.Duration] {
	if v.set && v.v < 0 {
		d.errorf(v.n, path, "must be >= 0")
		return val[time.Duration]{}
	}
	return v
}

func (d *decoder) prefixes(v val[[]val[string]], path string) []netip.Prefix {
	var out []netip.Prefix
	for i, s := range v.v {
		if !s.set {
			continue
		}
		p, err := parsePrefix(s.v)
		if err != nil {
			d.errorf(s.n, index(path, i), "%v", err)
			continue
		}
		out = append(out, p)
	}
	return out
}

// parsePrefix reads an address or CIDR of trusted_proxies or clients:. An
// IPv4-mapped IPv6 one (::ffff:10.0.0.0/104, ::ffff:10.0.0.1, as
// dual-stack servers show IPv4 peers) is read as the IPv4 range it maps
// (10.0.0.0/8, 10.0.0.1/32): client addresses are compared unmapped, so
// the mapped form would never match.
func parsePrefix(s string) (netip.Prefix, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("invalid address %q: zones are not allowed", s)
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("invalid CIDR %q: want an address or prefix, like 10.0.0.0/8 or 192.0.2.7", s)
	}
	if p != p.Masked() {
		return netip.Prefix{}, fmt.Errorf("invalid CIDR %q: host bits are set (did you mean %s?)", s, p.Masked())
	}
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p, nil
}

// resolvePath makes a relative path in the file relative to its directory.
func resolvePath(dir, p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(dir, p)
}
