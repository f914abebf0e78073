package proxy

// Requests whose bytes sluice keys as one consumer while a real framework
// behind it reads another. Each upstream below parses the way the named
// framework does (checked against the real framework, see each test), and
// reports the consumer it read. Every route allows 2 requests per key per
// hour; an attacker sending 6 requests for one victim, each spelled with a
// fresh value that sluice keys, must not get more than 2 of them to the
// upstream as the victim.

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"
	"unicode/utf16"
)

const frameworkLimit = 2

const frameworkConfig = `
routes:
  - name: otp
    match: {path: /v1/otp, methods: [POST]}
    upstream: %[1]s/utf7json
    limits:
      - {algorithm: fixed_window, limit: 2, window: 1h, key: [json:phone]}
  - name: cookieparser
    match: {path_prefix: /v1/cookie}
    upstream: %[1]s/cookieparser
    limits:
      - {algorithm: fixed_window, limit: 2, window: 1h, key: [cookie:sid]}
  - name: php
    match: {path_prefix: /v1/php}
    upstream: %[1]s/php
    limits:
      - {algorithm: fixed_window, limit: 2, window: 1h, key: [query:api_key]}
  - name: rack
    match: {path_prefix: /v1/rack}
    upstream: %[1]s/rack
    limits:
      - {algorithm: fixed_window, limit: 2, window: 1h, key: [query:api_key]}
  - name: rails
    match: {path: /v1/rails/otp}
    upstream: %[1]s/rails
    limits:
      - {algorithm: fixed_window, limit: 2, window: 1h, key: [json:phone]}
  - name: qs
    match: {path_prefix: /v1/qs}
    upstream: %[1]s/qs
    limits:
      - {algorithm: fixed_window, limit: 2, window: 1h, key: [query:api_key]}
  - name: aspnet
    match: {path_prefix: /v1/aspnet}
    upstream: %[1]s/aspnet
    limits:
      - {algorithm: fixed_window, limit: 2, window: 1h, key: [query:api_key]}
  - name: gostruct
    match: {path: /v1/go/otp, methods: [POST]}
    upstream: %[1]s/gostruct
    limits:
      - {algorithm: fixed_window, limit: 2, window: 1h, key: [json:phone]}
  - name: lodash
    match: {path: /v1/lodash/otp, methods: [POST]}
    upstream: %[1]s/lodash
    limits:
      - {algorithm: fixed_window, limit: 2, window: 1h, key: [json:user.phone]}
  - name: aspnetcookie
    match: {path_prefix: /v1/aspcookie}
    upstream: %[1]s/aspcookie
    limits:
      - {algorithm: fixed_window, limit: 2, window: 1h, key: [cookie:sid]}
  - name: phpheader
    match: {path_prefix: /v1/server-php}
    upstream: %[1]s/serverphp
    limits:
      - {algorithm: fixed_window, limit: 2, window: 1h, key: [header:X-Api-Key]}
  - name: werkzeug
    match: {path: /v1/werkzeug/otp, methods: [POST]}
    upstream: %[1]s/werkzeug
    limits:
      - {algorithm: fixed_window, limit: 2, window: 1h, key: [json:phone]}
  - name: flaskquery
    match: {path_prefix: /v1/flask-query}
    upstream: %[1]s/flaskquery
    limits:
      - {algorithm: fixed_window, limit: 2, window: 1h, key: [query:api_key]}
  - name: flaskcookie
    match: {path_prefix: /v1/flask-cookie}
    upstream: %[1]s/flaskcookie
    limits:
      - {algorithm: fixed_window, limit: 2, window: 1h, key: [cookie:sid]}
  - name: rackcookie
    match: {path_prefix: /v1/rk-cookie}
    upstream: %[1]s/rackcookie
    limits:
      - {algorithm: fixed_window, limit: 2, window: 1h, key: [cookie:sid]}
  - name: tornadoquery
    match: {path_prefix: /v1/tornado-query}
    upstream: %[1]s/tornadoquery
    limits:
      - {algorithm: fixed_window, limit: 2, window: 1h, key: [query:api_key]}
  - name: tornadoheader
    match: {path_prefix: /v1/tornado-header}
    upstream: %[1]s/tornadoheader
    limits:
      - {algorithm: fixed_window, limit: 2, window: 1h, key: [header:X-Api-Key]}
  - name: tornadov2
    match: {path_prefix: /v1/tornado-version, headers: {X-Api-Version: "2"}}
    upstream: %[1]s/tornadoversion
    limits:
      - {algorithm: fixed_window, limit: 2, window: 1h, key: [global]}
  - name: tornadoversion
    match: {path_prefix: /v1/tornado-version}
    upstream: %[1]s/tornadoversion
  - name: starletteotp
    match: {path: /v1/starlette/otp}
    upstream: %[1]s/starlette
    limits:
      - {algorithm: fixed_window, limit: 2, window: 1h, key: [global]}
  - name: starletteother
    match: {path_prefix: /v1/starlette/}
    upstream: %[1]s/starlette
`

// frameworkRig is a gateway in front of an upstream that answers with the
// consumer its framework reads, and counts how often each one got through.
type frameworkRig struct {
	addr string
	mu   sync.Mutex
	read map[string]int // consumer read upstream -> requests that reached it
}

func newFrameworkRig(t *testing.T) *frameworkRig {
	t.Helper()
	rig := &frameworkRig{read: map[string]int{}}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var who string
		switch {
		case strings.HasPrefix(r.URL.Path, "/utf7json"):
			who = readBodyParserJSON(r.Header.Get("Content-Type"), body, "phone")
		case strings.HasPrefix(r.URL.Path, "/cookieparser"):
			who = readCookieParser(r.Header.Values("Cookie"), "sid")
		case strings.HasPrefix(r.URL.Path, "/php"):
			who = readPHPQuery(r.URL.RawQuery, "api_key")
		case strings.HasPrefix(r.URL.Path, "/rack"):
			who = readRack2Query(r.URL.RawQuery, "api_key")
		case strings.HasPrefix(r.URL.Path, "/rails"):
			// Rails params: the JSON body merged with the query, the
			// query (parsed by Rack 2) winning.
			who = readRack2Query(r.URL.RawQuery, "phone")
			if who == "" {
				var m map[string]any
				json.Unmarshal(body, &m)
				who, _ = m["phone"].(string)
			}
		case strings.HasPrefix(r.URL.Path, "/qs"):
			who = readQS(r.URL.RawQuery, "api_key")
		case strings.HasPrefix(r.URL.Path, "/aspnet"):
			who = readASPNetQuery(r.URL.RawQuery, "api_key")
		case strings.HasPrefix(r.URL.Path, "/gostruct"):
			who = readGoStruct(body)
		case strings.HasPrefix(r.URL.Path, "/lodash"):
			who = readLodashGet(body, "user.phone")
		case strings.HasPrefix(r.URL.Path, "/aspcookie"):
			who = readASPNetCookies(r.Header.Values("Cookie"))["sid"]
		case strings.HasPrefix(r.URL.Path, "/serverphp"):
			who = readPHPServerHeader(r.Header, "HTTP_X_API_KEY")
		case strings.HasPrefix(r.URL.Path, "/werkzeug"):
			who = readWerkzeugJSON(r.Header.Get("Content-Type"), body, "phone")
		case strings.HasPrefix(r.URL.Path, "/flaskquery"):
			who = readWerkzeugQuery(werkzeugDevQuery(r.URL.RawQuery), "api_key")
		case strings.HasPrefix(r.URL.Path, "/flaskcookie"):
			who = readWerkzeugCookie(r.Header.Values("Cookie"), "sid")
		case strings.HasPrefix(r.URL.Path, "/rackcookie"):
			who = readRack2Cookie(r.Header.Values("Cookie"), "sid")
		case strings.HasPrefix(r.URL.Path, "/tornadoquery"):
			who = readTornadoArgument(r.URL.RawQuery, "api_key")
		case strings.HasPrefix(r.URL.Path, "/tornadoheader"):
			who = strings.Trim(r.Header.Get("X-Api-Key"), " \t\n\v\f\r\x1c\x1d\x1e\x1f\x85\xa0")
		case strings.HasPrefix(r.URL.Path, "/tornadoversion"):
			who = "v" + strings.Trim(r.Header.Get("X-Api-Version"), " \t\x85\xa0")
		case strings.HasPrefix(r.URL.Path, "/starlette"):
			who = starletteRoute(strings.TrimPrefix(r.URL.Path, "/starlette"))
		}
		rig.mu.Lock()
		rig.read[who]++
		rig.mu.Unlock()
		io.WriteString(w, who)
	}))
	t.Cleanup(up.Close)
	srv, _ := newTestGateway(t, frameworkConfig, up.URL)
	rig.addr = srv.Listener.Addr().String()
	return rig
}

func (rig *frameworkRig) send(t *testing.T, raw string) int {
	t.Helper()
	c, err := net.DialTimeout("tcp", rig.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the response to %q: %v", raw, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// attack sends each raw request and fails when the upstream read victim
// more than the limit allows.
func (rig *frameworkRig) attack(t *testing.T, victim string, raws []string) {
	t.Helper()
	var codes []int
	for _, raw := range raws {
		codes = append(codes, rig.send(t, raw))
	}
	rig.mu.Lock()
	got := rig.read[victim]
	rig.mu.Unlock()
	if got > frameworkLimit {
		t.Errorf("the upstream served %d requests as %q (limit %d per key); gateway answers %v; first request:\n%s",
			got, victim, frameworkLimit, codes, shortRaw(raws[0]))
	}
}

func postJSON(path, ctype, body string) string {
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: api.example.com\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", path, ctype, len(body), body)
}

func getRaw(target, extra string) string {
	return "GET " + target + " HTTP/1.1\r\nHost: api.example.com\r\n" + extra + "Connection: close\r\n\r\n"
}

// Express 4.22.3 (body-parser 1.20.9, iconv-lite 0.7.x) and Django REST
// framework 3.14.0 (Django 3.2.25) decode a JSON body in the charset its
// Content-Type names, UTF-7 included; sluice reads the bytes as UTF-8
// JSON. "+AHA-hone" is "phone" in UTF-7, and the later member wins.
func TestFrameworkJSONCharsetUTF7(t *testing.T) {
	rig := newFrameworkRig(t)
	var raws []string
	for i := 0; i < 6; i++ {
		body := fmt.Sprintf(`{"phone":"rot%d","+AHA-hone":"+-15550001"}`, i)
		raws = append(raws, postJSON("/v1/otp", "application/json; charset=utf-7", body))
	}
	rig.attack(t, "+15550001", raws)
}

// Express's cookie-parser 1.4.7 (the middleware express documents) parses a
// cookie value that starts with "j:" as JSON, once its escapes are decoded:
// j:%22victim%22 and j:%20%22victim%22 are both "victim" in req.cookies.
// (Raw quotes are refused: Hono takes such a value for no cookie.)
func TestFrameworkCookieParserJSONCookie(t *testing.T) {
	rig := newFrameworkRig(t)
	var raws []string
	for i := 0; i < 6; i++ {
		raws = append(raws, getRaw("/v1/cookie", "Cookie: sid=j:"+strings.Repeat("%20", i)+"%22victim%22\r\n"))
	}
	rig.attack(t, "victim", raws)
}

// PHP 8.2.36 ends a query parameter's name at an encoded NUL:
// api_key%00x=victim is $_GET['api_key'], and the last one wins.
func TestFrameworkPHPQueryNameNUL(t *testing.T) {
	rig := newFrameworkRig(t)
	var raws []string
	for i := 0; i < 6; i++ {
		raws = append(raws, getRaw(fmt.Sprintf("/v1/php?api_key=rot%d&api_key%%00=victim", i), ""))
	}
	rig.attack(t, "victim", raws)
}

// Rack 2.2.22 (Rails 6.x/7.0) reads a parameter name with its leading
// brackets and trailing "]" dropped: api_key], [api_key] and ]api_key are
// all params["api_key"], and the last one wins.
func TestFrameworkRack2BracketNames(t *testing.T) {
	for _, spelling := range []string{"api_key]", "[api_key]", "]api_key"} {
		t.Run(spelling, func(t *testing.T) {
			rig := newFrameworkRig(t)
			var raws []string
			for i := 0; i < 6; i++ {
				raws = append(raws, getRaw(fmt.Sprintf("/v1/rack?api_key=rot%d&%s=victim", i, spelling), ""))
			}
			rig.attack(t, "victim", raws)
		})
	}
}

// The same Rack 2 names reach Rails' params over a JSON body: the query
// wins, and sluice's check of the query for the json: source's name does
// not see "]phone".
func TestFrameworkRailsQueryOverJSONBracketName(t *testing.T) {
	rig := newFrameworkRig(t)
	var raws []string
	for i := 0; i < 6; i++ {
		raws = append(raws, postJSON("/v1/rails/otp?]phone=%2B15550001", "application/json", fmt.Sprintf(`{"phone":"rot%d"}`, i)))
	}
	rig.attack(t, "+15550001", raws)
}

// Express 4.22.3's query parser, qs 6.17.1, reads "[api_key]" as api_key
// and parses only the first 1000 parameters (parameterLimit), so the
// api_key sluice keys on, the 1001st, never reaches req.query.
func TestFrameworkQSBracketNameAndParameterLimit(t *testing.T) {
	rig := newFrameworkRig(t)
	var raws []string
	for i := 0; i < 6; i++ {
		q := "[api_key]=victim" + strings.Repeat("&a", 999) + fmt.Sprintf("&api_key=rot%d", i)
		raws = append(raws, getRaw("/v1/qs?"+q, ""))
	}
	rig.attack(t, "victim", raws)
}

// ASP.NET Core 8 keeps query parameters in a dictionary keyed with
// StringComparer.OrdinalIgnoreCase, and model binding takes a
// parameter's first value: API_KEY is its api_key.
func TestFrameworkASPNetQueryNameCase(t *testing.T) {
	rig := newFrameworkRig(t)
	var raws []string
	for i := 0; i < 6; i++ {
		raws = append(raws, getRaw(fmt.Sprintf("/v1/aspnet?API_KEY=victim&api_key=rot%d", i), ""))
	}
	rig.attack(t, "victim", raws)
}

// ASP.NET Core 8's RequestCookieCollection (CookieHeaderParserShared)
// keys cookies ignoring case, the last one winning; it ends a cookie at
// "," as at ";", and where a cookie does not parse it tries again from
// the next byte, finding cookies inside others.
func TestFrameworkASPNetCookies(t *testing.T) {
	for _, tc := range []struct{ name, cookie string }{
		{"letter case", "sid=rot%d; SID=victim"},
		{"comma", "sid=rot%d,sid=victim"},
		{"comma after the value", "sid=victim,%d"},
		{"inside a value after a quote", `sid=rot%d; a=x"sid=victim`},
		{"inside a name", "sid=rot%d; x@sid=victim"},
		{"inside a value after a blank beside =", "sid=rot%d; next =/?sid=victim"},
		{"after a blank", "sid=rot%d; a=x sid=victim"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rig := newFrameworkRig(t)
			if got := readASPNetCookies([]string{fmt.Sprintf(tc.cookie, 1)})["sid"]; got != "victim" {
				t.Fatalf("the model of ASP.NET Core reads sid %q, want victim", got)
			}
			var raws []string
			for i := 0; i < 6; i++ {
				raws = append(raws, getRaw("/v1/aspcookie", "Cookie: "+fmt.Sprintf(tc.cookie, i)+"\r\n"))
			}
			rig.attack(t, "victim", raws)
		})
	}
}

// A Go handler that decodes the body with json.NewDecoder into a struct
// (Go 1.26's encoding/json, the real one): it takes the body whatever its
// Content-Type, reads the first JSON value and ignores what follows, binds
// "phone" in any letter case, the last match winning, and takes invalid
// UTF-8 and unpaired surrogate escapes as U+FFFD. Each spelling either is
// refused, or keys the victim's bucket, or keys the one empty-value
// bucket: never a bucket of its own per request.
func TestFrameworkGoStructJSON(t *testing.T) {
	for _, tc := range []struct{ name, ctype, body, victim string }{
		{"name in another letter case after", "application/json", `{"phone":"rot%d","PHONE":"victim"}`, "victim"},
		{"name escaped in another letter case", "application/json", `{"phone":"rot%d","\u0050hone":"victim"}`, "victim"},
		{"exact duplicate", "application/json", `{"phone":"rot%d","phone":"victim"}`, "victim"},
		{"invalid UTF-8 elsewhere", "application/json", "{\"phone\":\"victim\",\"pad\":\"rot%d\xff\"}", "victim"},
		{"unpaired surrogate elsewhere", "application/json", `{"phone":"victim","pad":"rot%d\ud800"}`, "victim"},
		{"trailing data", "application/json", `{"phone":"victim"} rot%d`, "victim"},
		{"a second document", "application/json", `{"phone":"victim"}{"phone":"rot%d"}`, "victim"},
		{"form feed after the value", "application/json", "{\"phone\":\"victim\"}\f%d", "victim"},
		{"not a JSON Content-Type", "text/plain", `{"phone":"victim","pad":%d}`, "victim"},
		{"a number spelled six ways", "application/json", "%d", "15550001"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rig := newFrameworkRig(t)
			numbers := []string{"15550001", "15550001.0", "1.5550001e7", "155500010e-1", "0.15550001E+8", "15550001.000"}
			var raws []string
			for i := 0; i < 6; i++ {
				body := fmt.Sprintf(tc.body, i)
				if tc.body == "%d" {
					body = `{"phone":` + numbers[i] + `}`
				}
				raws = append(raws, postJSON("/v1/go/otp", tc.ctype, body))
			}
			rig.attack(t, tc.victim, raws)
		})
	}
}

// readGoStruct reads phone as a Go handler does that decodes the body
// with json.NewDecoder into a struct: numbers in their shortest form.
func readGoStruct(body []byte) string {
	var req struct {
		Phone any `json:"phone"`
	}
	if json.NewDecoder(bytes.NewReader(body)).Decode(&req) != nil {
		return ""
	}
	switch v := req.Phone.(type) {
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return ""
}

// lodash 4.17's _.get(req.body, "user.phone") reads the member named
// "user.phone" when the body has one (isKey: the whole path is a key of
// the object), and only otherwise goes down user, then phone.
func TestFrameworkLodashGetDottedName(t *testing.T) {
	rig := newFrameworkRig(t)
	var raws []string
	for i := 0; i < 6; i++ {
		raws = append(raws, postJSON("/v1/lodash/otp", "application/json", fmt.Sprintf(`{"user":{"phone":"rot%d"},"user.phone":"+15550001"}`, i)))
	}
	rig.attack(t, "+15550001", raws)
}

// readLodashGet reads path of a JSON body as lodash's _.get does with a
// string path: the whole path as one key first, then its dotted parts.
func readLodashGet(body []byte, path string) string {
	var v any
	if json.Unmarshal(body, &v) != nil {
		return ""
	}
	if m, ok := v.(map[string]any); ok {
		if x, ok := m[path]; ok {
			s, _ := x.(string)
			return s
		}
	}
	for _, p := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		v = m[p]
	}
	s, _ := v.(string)
	return s
}

// readBodyParserJSON reads field of a JSON body as body-parser and DRF do:
// decoded in the charset of the Content-Type (UTF-7 here), the last
// duplicate member winning.
func readBodyParserJSON(ctype string, body []byte, field string) string {
	s := string(body)
	if strings.Contains(strings.ToLower(ctype), "charset=utf-7") {
		s = decodeUTF7(s)
	}
	var m map[string]any
	if json.Unmarshal([]byte(s), &m) != nil {
		return ""
	}
	v, _ := m[field].(string)
	return v
}

// decodeUTF7 decodes RFC 2152 UTF-7, as iconv-lite and Python's codec do.
func decodeUTF7(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '+' {
			b.WriteByte(s[i])
			continue
		}
		j := i + 1
		for j < len(s) && strings.IndexByte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", s[j]) >= 0 {
			j++
		}
		if j == i+1 && j < len(s) && s[j] == '-' {
			b.WriteByte('+')
			i = j
			continue
		}
		enc := s[i+1 : j]
		if len(enc)%4 == 1 {
			enc = enc[:len(enc)-1]
		}
		raw, _ := base64.RawStdEncoding.DecodeString(enc)
		var u []uint16
		for k := 0; k+1 < len(raw); k += 2 {
			u = append(u, uint16(raw[k])<<8|uint16(raw[k+1]))
		}
		b.WriteString(string(utf16.Decode(u)))
		if j < len(s) && s[j] == '-' {
			j++
		}
		i = j - 1
	}
	return b.String()
}

// readCookieParser reads cookie name as Express's cookie-parser 1.4.7 does:
// the cookie module (split on ";", first wins, quotes stripped, %XX
// decoded), then a value starting with "j:" parsed as JSON.
func readCookieParser(lines []string, name string) string {
	found := false
	var val string
	for _, line := range lines {
		for _, part := range strings.Split(line, ";") {
			k, v, ok := strings.Cut(part, "=")
			if !ok || strings.TrimSpace(k) != name || found {
				continue
			}
			found, val = true, strings.TrimSpace(v)
		}
	}
	if len(val) > 1 && val[0] == '"' && val[len(val)-1] == '"' {
		val = val[1 : len(val)-1]
	}
	if u, err := url.PathUnescape(val); err == nil {
		val = u
	}
	if rest, ok := strings.CutPrefix(val, "j:"); ok {
		var s string
		if json.Unmarshal([]byte(rest), &s) == nil {
			return s
		}
		return ""
	}
	return val
}

// readPHPQuery reads $_GET[name] as PHP 8.2 does: names url-decoded and
// cut at a NUL, leading spaces dropped, " " and "." made "_", the last
// value winning.
func readPHPQuery(raw, name string) string {
	var val string
	for _, kv := range strings.Split(raw, "&") {
		k, v, _ := strings.Cut(kv, "=")
		k, _ = url.QueryUnescape(k)
		if i := strings.IndexByte(k, 0); i >= 0 {
			k = k[:i]
		}
		k = strings.TrimLeft(k, " ")
		k = strings.NewReplacer(" ", "_", ".", "_").Replace(k)
		if k == name {
			val, _ = url.QueryUnescape(v)
		}
	}
	return val
}

// readASPNetQuery reads Request.Query[name] as ASP.NET Core binds it to
// a string: names compared ignoring case, the first value winning.
func readASPNetQuery(raw, name string) string {
	for _, kv := range strings.Split(raw, "&") {
		k, v, _ := strings.Cut(kv, "=")
		k, _ = url.QueryUnescape(k)
		if strings.EqualFold(k, name) {
			v, _ = url.QueryUnescape(v)
			return v
		}
	}
	return ""
}

// readASPNetCookies reads the Cookie fields as ASP.NET Core's
// CookieHeaderParserShared.TryParseValues does: at each index, blanks and
// separators (";" or ",") skipped, a token, "=", a value of cookie-octets
// (optionally quoted), then blanks and a separator or the end; where that
// fails, again from the next index. Names compare ignoring case (here:
// lower-cased), the last value wins, %XX escapes are decoded.
func readASPNetCookies(lines []string) map[string]string {
	octet := func(c byte) bool {
		return c == 0x21 || 0x23 <= c && c <= 0x2b || 0x2d <= c && c <= 0x3a || 0x3c <= c && c <= 0x5b || 0x5d <= c && c <= 0x7e
	}
	token := func(c byte) bool {
		return c > ' ' && c < 0x7f && !strings.ContainsRune("()<>@,;:\\\"/[]?={}", rune(c))
	}
	blank := func(s string, i int) int {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
			i++
		}
		return i
	}
	skip := func(s string, i int) (int, bool) { // blanks and separators
		i = blank(s, i)
		sep := false
		for i < len(s) && (s[i] == ';' || s[i] == ',') {
			sep = true
			i = blank(s, i+1)
		}
		return i, sep
	}
	out := map[string]string{}
	for _, v := range lines {
		for index := 0; index < len(v); {
			cur, _ := skip(v, index)
			if cur == len(v) {
				break
			}
			n := cur
			for n < len(v) && token(v[n]) {
				n++
			}
			ok := n > cur && n < len(v) && v[n] == '='
			var name, val string
			if ok {
				name = v[cur:n]
				i := n + 1
				start := i
				quoted := i < len(v) && v[i] == '"'
				if quoted {
					i++
				}
				for i < len(v) && octet(v[i]) {
					i++
				}
				val = v[start:i]
				if quoted {
					if i < len(v) && v[i] == '"' {
						i++
						val = v[start:i]
					} else {
						val = "" // missing final quote
					}
				}
				var sep bool
				i, sep = skip(v, i)
				ok = sep || i == len(v)
				if ok {
					index = i
				}
			}
			if !ok {
				index++
				continue
			}
			if name != "" && val != "" {
				if u, err := url.PathUnescape(val); err == nil {
					val = u
				}
				out[strings.ToLower(name)] = val
			}
		}
	}
	return out
}

var rack2Name = regexp.MustCompile(`\A[\[\]]*([^\[\]]+)\]*\z`)

// readRack2Query reads params[name] as Rack 2.2's normalize_params does
// for a name without nesting: name =~ /\A[\[\]]*([^\[\]]+)\]*/, the last
// value winning.
func readRack2Query(raw, name string) string {
	var val string
	for _, kv := range strings.Split(raw, "&") {
		k, v, _ := strings.Cut(kv, "=")
		k, _ = url.QueryUnescape(k)
		if m := rack2Name.FindStringSubmatch(k); m != nil && m[1] == name {
			val, _ = url.QueryUnescape(v)
		}
	}
	return val
}

// readQS reads req.query[name] as qs 6 does with Express 4's options:
// only the first 1000 parameters; a name "[x]" is x; two values make an
// array, which is no consumer.
func readQS(raw, name string) string {
	parts := strings.SplitN(raw, "&", 1001)
	if len(parts) > 1000 {
		parts = parts[:1000]
	}
	var vals []string
	for _, kv := range parts {
		k, v, _ := strings.Cut(kv, "=")
		k, _ = url.QueryUnescape(k)
		if strings.HasPrefix(k, "[") && strings.HasSuffix(k, "]") {
			k = k[1 : len(k)-1]
		}
		if k == name {
			u, _ := url.QueryUnescape(v)
			vals = append(vals, u)
		}
	}
	if len(vals) != 1 {
		return ""
	}
	return vals[0]
}

func shortRaw(s string) string {
	if len(s) > 160 {
		return s[:80] + "..." + s[len(s)-80:]
	}
	return s
}

// PHP 8.2.36's built-in server names a request field in $_SERVER as
// HTTP_ and the name upper-cased with "-" made "_", and then, as for every
// variable it registers, "." made "_" too: X.Api.Key is
// $_SERVER['HTTP_X_API_KEY'], and beside X-Api-Key it won in either
// order. (PHP-FPM registers the FastCGI parameters a web server passes
// it the same way.) sluice keyed X-Api-Key, a new decoy each time.
func TestFrameworkPHPServerDottedHeader(t *testing.T) {
	for _, dotted := range []string{"X.Api.Key", "X-Api.Key", "X.Api-Key"} {
		t.Run(dotted, func(t *testing.T) {
			rig := newFrameworkRig(t)
			var raws []string
			for i := 0; i < 6; i++ {
				raws = append(raws, getRaw("/v1/server-php", fmt.Sprintf("X-Api-Key: rot%d\r\n%s: victim\r\n", i, dotted)))
			}
			rig.attack(t, "victim", raws)
		})
	}
}

// readPHPServerHeader reads the $_SERVER entry want as PHP's built-in
// server registers the fields h holds: a name PHP reached through "."
// wins over the one without.
func readPHPServerHeader(h http.Header, want string) string {
	var plain, dotted string
	for name, vs := range h {
		php := "HTTP_" + strings.NewReplacer("-", "_", ".", "_", " ", "_").Replace(strings.ToUpper(name))
		if php != want || len(vs) == 0 {
			continue
		}
		if strings.Contains(name, ".") {
			dotted = vs[0]
		} else {
			plain = vs[0]
		}
	}
	if dotted != "" {
		return dotted
	}
	return plain
}

// Flask 2.2.2 (Werkzeug 2.2.2) reads a body as JSON when the media type
// of its Content-Type is application/json or application/*+json, and
// takes as the media type what comes before the first ";", "," or blank:
// "application/json, text/plain" and "application/json text/plain" are
// JSON to request.get_json(). sluice read the body of neither, and keyed
// them the empty value: a bucket whose budget a guesser got on top of the
// victim's own.
func TestFrameworkWerkzeugContentTypeList(t *testing.T) {
	for _, ctype := range []string{"application/json, text/plain", "application/json text/plain", "application/json\t,x"} {
		t.Run(ctype, func(t *testing.T) {
			rig := newFrameworkRig(t)
			var raws []string
			for i := 0; i < 6; i++ {
				ct := ctype
				if i < frameworkLimit {
					ct = "application/json"
				}
				raws = append(raws, postJSON("/v1/werkzeug/otp", ct, `{"phone":"victim"}`))
			}
			rig.attack(t, "victim", raws)
		})
	}
}

// readWerkzeugJSON reads field of body as Flask's request.get_json does
// for the Content-Type ctype.
func readWerkzeugJSON(ctype string, body []byte, field string) string {
	ctype = strings.TrimLeft(ctype, " \t")
	mt := strings.ToLower(ctype[:len(ctype)-len(strings.TrimLeft(ctype, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$%&'*+-.^_`|~/"))])
	if mt != "application/json" && !(strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")) {
		return ""
	}
	var m map[string]any
	if json.Unmarshal(body, &m) != nil {
		return ""
	}
	s, _ := m[field].(string)
	return s
}

// Flask 2.2.2 (Werkzeug 2.2.2) finds a query parameter or a cookie by its
// exact name: API_KEY, api.key, api_key[] and [api_key] are no api_key to
// request.args, and SID, s%69d and a sid after a comma (x=1,sid=k is the
// cookie x, "1,sid=k") no sid to request.cookies. Django 3.2.25, Python
// 3.11's parse_qs and SimpleCookie, and for most of them PHP 8.2.36 and
// Rack 2.2.22, read them so too. Such a request is anonymous to the
// upstream, and must share the empty value's bucket, not be keyed on a
// fresh value each time.
func TestFrameworkWerkzeugAliasIsAbsent(t *testing.T) {
	for _, tc := range []struct{ name, target, cookie string }{
		{"query in another letter case", "/v1/flask-query?API_KEY=rot%d", ""},
		{"query as PHP names it", "/v1/flask-query?api.key=rot%d", ""},
		{"query as an array", "/v1/flask-query?api_key[]=rot%d", ""},
		{"query in brackets", "/v1/flask-query?[api_key]=rot%d", ""},
		{"cookie in another letter case", "/v1/flask-cookie", "SID=rot%d"},
		{"cookie name escaped", "/v1/flask-cookie", "s%%69d=rot%d"},
		{"cookie after a comma", "/v1/flask-cookie", "x=1,sid=rot%d"},
		{"cookie as an array", "/v1/flask-cookie", "sid[]=rot%d"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rig := newFrameworkRig(t)
			var raws []string
			for i := 0; i < 6; i++ {
				if tc.cookie != "" {
					raws = append(raws, getRaw(tc.target, "Cookie: "+fmt.Sprintf(tc.cookie, i)+"\r\n"))
				} else {
					raws = append(raws, getRaw(fmt.Sprintf(tc.target, i), ""))
				}
			}
			rig.attack(t, "", raws)
		})
	}
}

// readWerkzeugQuery reads the query parameter name as request.args.get
// does: the first parameter of exactly that name, escapes decoded.
func readWerkzeugQuery(raw, name string) string {
	for _, kv := range strings.Split(raw, "&") {
		k, v, _ := strings.Cut(kv, "=")
		if k, err := url.QueryUnescape(k); err == nil && k == name {
			v, _ = url.QueryUnescape(v)
			return strings.ToValidUTF8(v, "\uFFFD")
		}
	}
	return ""
}

// readWerkzeugCookie reads the cookie name as request.cookies.get does:
// cookies end at ";" only, but a value in double quotes runs to its
// closing quote (a backslash escaping the next byte), ";" or not; names
// are compared as sent, blanks around them aside.
func readWerkzeugCookie(lines []string, name string) string {
	for _, l := range lines {
		for l != "" {
			l = strings.TrimLeft(l, " \t;")
			i := strings.IndexAny(l, "=;")
			if i < 0 {
				break
			}
			k := strings.TrimSpace(l[:i])
			if l[i] == ';' {
				l = l[i:]
				continue
			}
			l = strings.TrimLeft(l[i+1:], " \t")
			var v string
			if strings.HasPrefix(l, `"`) {
				j := 1
				for j < len(l) && l[j] != '"' {
					if l[j] == '\\' {
						j++
					}
					j++
				}
				j = min(j+1, len(l))
				v, l = l[:j], l[j:]
				if e := strings.IndexByte(l, ';'); e >= 0 {
					l = l[e:]
				} else {
					l = ""
				}
			} else {
				v, l, _ = strings.Cut(l, ";")
			}
			if k == name {
				return strings.ToValidUTF8(strings.Trim(strings.TrimSpace(v), `"`), "\uFFFD")
			}
		}
	}
	return ""
}

// readRack2Cookie reads the cookie name as Rack 2.2.22's
// Request#cookies does: cookies end at ";" or ",", the blanks after
// either dropped; a name is all before the first "=", compared as sent
// ("sid " is no sid); the first one wins.
func readRack2Cookie(lines []string, name string) string {
	for _, l := range lines {
		for _, c := range regexp.MustCompile(`[;,] *`).Split(l, -1) {
			// "sid" alone is sid, with no value, and the
			// first sid wins.
			if k, v, _ := strings.Cut(c, "="); k == name {
				return v
			}
		}
	}
	return ""
}

// Flask 2.2.2 (Werkzeug 2.2.2) reads a cookie value in double quotes to
// its closing quote, past any ";": a="x; sid=k" is the one cookie a, and
// the request has no sid (Python's SimpleCookie agrees). Rack 2.2.22 and
// PHP 8.2.36 read "sid =k" as a cookie named "sid ", no sid either.
// sluice keyed k each time: a bucket per request that the upstream
// served as one without a session.
func TestFrameworkCookieNotSeenAsOne(t *testing.T) {
	for _, tc := range []struct{ name, path, cookie string }{
		{"in a quoted value", "/v1/flask-cookie", `a="x; sid=rot%d"`},
		{"in a quoted value with an escaped quote", "/v1/flask-cookie", `a="\"; sid=rot%d"`},
		{"in a quoted value on a later cookie", "/v1/flask-cookie", `b=1; a="x; c=2; sid=rot%d; d="`},
		{"blank before =", "/v1/rk-cookie", "sid =rot%d"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rig := newFrameworkRig(t)
			var raws []string
			for i := 0; i < 6; i++ {
				raws = append(raws, getRaw(tc.path, "Cookie: "+fmt.Sprintf(tc.cookie, i)+"\r\n"))
			}
			rig.attack(t, "", raws)
		})
	}
}

// Werkzeug 2.2.2's development server (Flask's "flask run"; Django's
// runserver and Python's wsgiref do the same) reads a byte of the query
// that is not ASCII as the Latin-1 character it codes, and passes that on
// as UTF-8: a raw "\xe9" is "%C3%A9" to request.args, so jos\xe9 and
// jos%C3%A9 were both "jos\u00e9" to it, and two buckets to sluice. A
// value not UTF-8 once decoded is refused anyway, so the case that still
// needs the query re-encoded is raw UTF-8: "jos\xc3\xa9" is
// "jos\u00c3\u00a9" to Werkzeug, as jos%C3%83%C2%A9 is, where the keys
// read "jos\u00e9" unless the bytes reach both as escapes.
func TestFrameworkWerkzeugRawQueryByte(t *testing.T) {
	for _, tc := range []struct{ name, escaped, raw, victim string }{
		{"Latin-1 byte", "jos%C3%A9", "jos\xe9", "jos\u00e9"},
		{"UTF-8 bytes", "jos%C3%83%C2%A9", "jos\xc3\xa9", "jos\u00c3\u00a9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rig := newFrameworkRig(t)
			var raws []string
			for i := 0; i < 6; i++ {
				v := tc.escaped
				if i >= frameworkLimit {
					v = tc.raw
				}
				raws = append(raws, getRaw("/v1/flask-query?api_key="+v, ""))
			}
			rig.attack(t, tc.victim, raws)
		})
	}
}

// werkzeugDevQuery is the query raw as Werkzeug's development server hands
// it to the application: each byte that is not ASCII made the UTF-8 of
// the Latin-1 character it codes.
func werkzeugDevQuery(raw string) string {
	var b strings.Builder
	for i := 0; i < len(raw); i++ {
		if c := raw[i]; c >= 0x80 {
			b.WriteRune(rune(c))
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// Flask 2.2.2 (Werkzeug 2.2.2), Django 3.2.25 and Python 3.11's parse_qs
// decode a query value, and Flask and Django a cookie value, as UTF-8
// with each bad sequence read as U+FFFD: k%F0 and k%F1 were both
// "k\ufffd" to them, and two buckets to sluice. PHP 8.2.36 and Rack
// 2.2.22 read the bytes as they are.
func TestFrameworkWerkzeugInvalidUTF8(t *testing.T) {
	for _, tc := range []struct{ name, target, cookie string }{
		{"query", "/v1/flask-query?api_key=k%%%X", ""},
		{"cookie", "/v1/flask-cookie", "sid=k%s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rig := newFrameworkRig(t)
			var raws []string
			for i := 0; i < 6; i++ {
				b := byte(0xf0 + i)
				if tc.cookie != "" {
					raws = append(raws, getRaw(tc.target, "Cookie: "+fmt.Sprintf(tc.cookie, string([]byte{b}))+"\r\n"))
				} else {
					raws = append(raws, getRaw(fmt.Sprintf(tc.target, b), ""))
				}
			}
			rig.attack(t, "k\uFFFD", raws)
		})
	}
}

// Starlette 0.26.1 and FastAPI 0.92.0 (under uvicorn 0.17.6) compile a
// route's path to a regular expression ending in "$" and match the
// decoded path with it; Python's "$" also matches before a final
// newline, so GET /v1/otp%0A reached their /v1/otp handler, while to
// sluice it was another path, /v1/otp and a newline, which the limited
// route does not match and a catch-all does.
func TestFrameworkStarletteNewlinePath(t *testing.T) {
	rig := newFrameworkRig(t)
	var raws []string
	for _, p := range []string{"/v1/starlette/otp", "/v1/starlette/otp"} {
		raws = append(raws, getRaw(p, ""))
	}
	for i := 0; i < 4; i++ {
		raws = append(raws, getRaw("/v1/starlette/otp%0A", ""))
	}
	rig.attack(t, "otp", raws)
}

// starletteRoute names the handler Starlette's router reaches for the
// decoded path: its /v1/starlette/otp route is ^/v1/starlette/otp$.
var starletteOTP = regexp.MustCompile(`^/v1/starlette/otp(\n)?\z`) // Python's "$"

func starletteRoute(path string) string {
	if starletteOTP.MatchString(path) {
		return "otp"
	}
	return "other"
}

// Tornado 6.2's get_query_argument (and get_argument) make the controls
// U+0000-U+0008 and U+000E-U+001F spaces and strip whitespace from both
// ends of the value, Unicode's as Python's str.strip knows it: behind
// sluice, victim%20, +victim, victim%09, victim%00, victim%C2%A0 and
// %E3%80%80victim were all "victim" to it.
func TestFrameworkTornadoArgumentStrip(t *testing.T) {
	rig := newFrameworkRig(t)
	var raws []string
	for _, v := range []string{"victim%20", "+victim", "victim%09", "victim%00", "victim%C2%A0", "%E3%80%80victim"} {
		raws = append(raws, getRaw("/v1/tornado-query?api_key="+v, ""))
	}
	rig.attack(t, "victim", raws)
}

// readTornadoArgument reads the query parameter name as Tornado's
// get_query_argument does: the last value of exactly that name, decoded,
// its controls made spaces and its ends stripped.
func readTornadoArgument(raw, name string) string {
	var val string
	for _, kv := range strings.Split(raw, "&") {
		k, v, _ := strings.Cut(kv, "=")
		if k, err := url.QueryUnescape(k); err == nil && k == name {
			val, _ = url.QueryUnescape(v)
		}
	}
	val = regexp.MustCompile("[\x00-\x08\x0e-\x1f]").ReplaceAllString(val, " ")
	return strings.TrimFunc(val, func(r rune) bool { return unicode.IsSpace(r) || 0x1c <= r && r <= 0x1f })
}

// Tornado 6.2 reads a field's value as Latin-1 and strips it with
// Python's str.strip, which takes 0x85 (NEL) and 0xA0 (NO-BREAK SPACE)
// too (the upstream above trims those bytes): behind sluice,
// "victim\xa0", "\xa0victim" and "victim\x85" were "victim" to it, as
// they were to Django 3.2's runserver (wsgiref strips each value).
func TestFrameworkTornadoHeaderStrip(t *testing.T) {
	rig := newFrameworkRig(t)
	var raws []string
	for _, v := range []string{"victim\xa0", "\xa0victim", "victim\x85", "\x85victim", "victim\xa0\xa0", "\xa0\x85victim"} {
		raws = append(raws, getRaw("/v1/tornado-header", "X-Api-Key: "+v+"\r\n"))
	}
	rig.attack(t, "victim", raws)
}

// Rack 2.2.22 under Rails 6.1.7's cookie jar (ActionDispatch) reads a
// cookie name without "=" as that cookie with no value, and keeps the
// first of a name: "sid; sid=k" has no sid to it, as to Symfony 5.4's
// cookie bag (PHP 8.2's $_COOKIE, where it is ""). sluice keyed k each
// time: a bucket per request that the upstream served without a session.
func TestFrameworkRackBareCookieName(t *testing.T) {
	rig := newFrameworkRig(t)
	var raws []string
	for i := 0; i < 6; i++ {
		raws = append(raws, getRaw("/v1/rk-cookie", fmt.Sprintf("Cookie: sid; sid=rot%d\r\n", i)))
	}
	rig.attack(t, "", raws)
}

// A route that matches on a header's value: Tornado 6.2 reads
// "X-Api-Version: 2\xa0" as 2 (see TestFrameworkTornadoHeaderStrip),
// which the limited route for version 2 did not match, so it went to the
// unlimited route for the other versions and reached version 2 there.
func TestFrameworkTornadoMatchHeaderStrip(t *testing.T) {
	rig := newFrameworkRig(t)
	var raws []string
	for _, v := range []string{"2", "2", "2\xa0", "\xa02", "2\x85", "\x852"} {
		raws = append(raws, getRaw("/v1/tornado-version", "X-Api-Version: "+v+"\r\n"))
	}
	rig.attack(t, "v2", raws)
}
