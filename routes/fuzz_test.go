package routes

import (
	"encoding/json"
	"errors"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

func keyErr(t *testing.T, err error, source string) bool {
	t.Helper()
	if err == nil {
		return false
	}
	var de *DuplicateError
	if !errors.As(err, &de) || de.Source != source {
		t.Fatalf("got error %v, want a DuplicateError naming %s", err, source)
	}
	return true
}

// FuzzKeyHeader: a header given once is its value, given twice an error.
func FuzzKeyHeader(f *testing.F) {
	f.Add("k1", "", false)
	f.Add("a", "b", true)
	f.Add("", "", true)
	f.Fuzz(func(t *testing.T, v1, v2 string, twice bool) {
		k := keyOf(t, "r", "header:X-API-Key")
		r := httptest.NewRequest("GET", "/", nil)
		r.Header["X-Api-Key"] = []string{v1}
		if twice {
			r.Header["X-Api-Key"] = append(r.Header["X-Api-Key"], v2)
		}
		got, err := k.Append(nil, r, netip.Addr{}, nil)
		if !twice && latin1Stripped(v1) != v1 {
			var ae *AmbiguousError
			if !errors.As(err, &ae) || ae.Source != "header:X-API-Key" {
				t.Fatalf("value %q, which Tornado strips: got %q, %v; want an AmbiguousError", v1, got, err)
			}
			return
		}
		if keyErr(t, err, "header:X-API-Key") != twice {
			t.Fatalf("got %v for %d values, want an error only for two", err, len(r.Header["X-Api-Key"]))
		}
		if !twice && string(got) != v1 {
			t.Fatalf("got %q, want %q", got, v1)
		}
	})
}

// latin1Stripped is v as Tornado 6.2 reads a field's value: each byte a
// Latin-1 character, stripped as Python's str.strip strips, and written
// back as bytes.
func latin1Stripped(v string) string {
	rs := make([]rune, len(v))
	for i := 0; i < len(v); i++ {
		rs[i] = rune(v[i])
	}
	rs = []rune(strings.TrimFunc(string(rs), func(r rune) bool { return unicode.IsSpace(r) || 0x1c <= r && r <= 0x1f }))
	b := make([]byte, len(rs))
	for i, r := range rs {
		b[i] = byte(r)
	}
	return string(b)
}

// FuzzKeyQuery: where net/url parses the query, the key is its one value
// of the parameter, and a parameter it holds twice is an error. A
// parameter counts when PHP, Rack or qs may read it as the one named:
// "api.key", " api_key" and "api_key[]" are api_key too, and given alone
// under such a name, where Flask reads none, it is refused as well.
func FuzzKeyQuery(f *testing.F) {
	for _, q := range []string{"api_key=a", "api_key=a&api_key=b", "api_key=a;api_key=b", "api%5Fkey=a&api_key=b", "x=1&api_key=a%7Cb", "api_key", "api+key=1",
		"api.key=victim&api_key=decoy", "api%2Ekey=a", "api[key=a", "api_key[]=a&api_key=b", "+api_key=a", "api_key[x]=a"} {
		f.Add(q, "api_key")
	}
	f.Fuzz(func(t *testing.T, raw, name string) {
		if name == "" {
			return
		}
		k := keyOf(t, "r", "query:"+name)
		r := httptest.NewRequest("GET", "/", nil)
		r.URL.RawQuery = raw
		got, err := k.Append(nil, r, netip.Addr{}, nil)
		if strings.Count(raw, "&")+1 > maxQueryParams {
			// Past what qs and PHP read: refused whatever it holds.
			var ae *AmbiguousError
			if !errors.As(err, &ae) || ae.Source != "query:"+name {
				t.Fatalf("query of %d parameters: got %v, want an AmbiguousError naming query:%s", strings.Count(raw, "&")+1, err, name)
			}
			return
		}
		vals, perr := url.ParseQuery(raw)
		if perr != nil {
			return // canonicalize re-encodes such a query before keys see it
		}
		var same []string
		aliased := false
		for k, vs := range vals {
			if foldName(k) == foldName(name) || oneOf(k, name) {
				same = append(same, vs...)
				aliased = aliased || k != name
			}
		}
		if len(same) == 1 && (aliased || !utf8.ValidString(same[0]) || tornadoReadsApart(same[0])) {
			if err == nil && len(got) == 0 && same[0] == "" {
				// oneOf errs towards more names than sameName
				// gives ("[[]" for "."), where only the empty
				// value could tell them apart.
				return
			}
			var ae *AmbiguousError
			if !errors.As(err, &ae) || ae.Source != "query:"+name {
				t.Fatalf("query %q gives %s only under another name, not as UTF-8 or as Tornado strips it: got %v, want an AmbiguousError naming query:%s", raw, name, err, name)
			}
			return
		}
		dup := keyErr(t, err, "query:"+name)
		switch n := len(same); {
		case n > 1 && !dup:
			t.Fatalf("query %q holds %s %d times, got key %q and no error", raw, name, n, got)
		case n <= 1 && dup:
			t.Fatalf("query %q holds %s %d times, got a duplicate error", raw, name, n)
		case n == 1 && string(got) != same[0]:
			t.Fatalf("query %q: got %q, want %q", raw, got, same[0])
		case n == 0 && len(got) != 0:
			t.Fatalf("query %q has no %s, got %q", raw, name, got)
		}
	})
}

// tornadoReadsApart reports whether Tornado 6.2's get_argument reads v
// as another value: it replaces [\x00-\x08\x0e-\x1f] with spaces and
// strips what Python's str.isspace takes from both ends.
func tornadoReadsApart(v string) bool {
	b := []rune(v)
	for i, r := range b {
		if r <= 0x08 || 0x0e <= r && r <= 0x1f {
			b[i] = ' '
		}
	}
	return strings.TrimFunc(string(b), func(r rune) bool {
		return unicode.IsSpace(r) || 0x1c <= r && r <= 0x1f
	}) != v
}

// oneOf reports whether PHP, Rack 2 or qs may read parameters k and name
// as one: a name one of them gives k is one one of them gives name,
// letter case aside (ASP.NET Core ignores it).
func oneOf(k, name string) bool {
	for _, a := range []string{phpBase(k), rackBase(k), qsBase(k)} {
		for _, b := range []string{phpBase(name), rackBase(name), qsBase(name)} {
			if a != "" && foldName(a) == foldName(b) {
				return true
			}
		}
	}
	return false
}

// foldName is k in the form names compare in ignoring case: ASCII
// letters lower-cased, and ı, İ, ſ and K as i, i, s and k.
func foldName(k string) string {
	for _, f := range [][2]string{{"\u0131", "i"}, {"\u0130", "i"}, {"\u017f", "s"}, {"\u212a", "k"}} {
		k = strings.ReplaceAll(k, f[0], f[1])
	}
	b := []byte(k) // byte by byte: a name need not be UTF-8
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// rackParam is Rack 2's rule for a parameter's name (Utils#normalize_params).
var rackParam = regexp.MustCompile(`\A[\[\]]*([^\[\]]+)\]*`)

// rackBase is the name Rack 2 gives the parameter k.
func rackBase(k string) string {
	if m := rackParam.FindStringSubmatch(k); m != nil {
		return m[1]
	}
	return ""
}

// qsSegment is qs's bracket segment (parseKeys).
var qsSegment = regexp.MustCompile(`\[[^\[\]]*\]`)

// qsBase is the name qs gives the parameter k: its parent, before the
// first segment, or the first segment's inside when there is no parent.
func qsBase(k string) string {
	loc := qsSegment.FindStringIndex(k)
	switch {
	case loc == nil:
		return k
	case loc[0] > 0:
		return k[:loc[0]]
	}
	return k[1 : loc[1]-1]
}

// phpBase is the name PHP registers for the variable k, or the base of an
// array: leading spaces gone, then the part before a "[" that a "]"
// closes, with spaces, dots and other "[" made "_". A name that starts
// with "[" PHP drops (php_register_variable_ex: an empty name), so it is
// no name at all: "[[]" is not ".".
func phpBase(k string) string {
	var b strings.Builder
	if i := strings.IndexByte(k, 0); i >= 0 {
		k = k[:i] // PHP's names end at a NUL
	}
	k = strings.TrimLeft(k, " ")
	if strings.HasPrefix(k, "[") {
		return ""
	}
	for i, c := range []byte(k) {
		if c == '[' && i > 0 && strings.Contains(k[i+1:], "]") {
			break
		}
		if c == ' ' || c == '.' || c == '[' {
			c = '_'
		}
		b.WriteByte(c)
	}
	return b.String()
}

// FuzzKeyCookie: a cookie given twice is an error; one given once is a
// value from the header without separators, as it was sent when it holds
// nothing that frameworks decode.
func FuzzKeyCookie(f *testing.F) {
	for _, c := range []string{"sid=a", "sid=a; sid=b", `sid="a"`, "theme=dark; sid=s1", " sid = x ;", "sid", "sid=a;sid=b",
		"sid=%76ictim", `sid="\166ictim"`, "s%69d=a; sid=b", "sid[]=a; sid=b", "sid=a+b"} {
		f.Add(c, "")
	}
	f.Add("sid=a", "sid=b")
	f.Fuzz(func(t *testing.T, line1, line2 string) {
		k := keyOf(t, "r", "cookie:sid")
		r := httptest.NewRequest("GET", "/", nil)
		r.Header["Cookie"] = []string{line1, line2}
		got, err := k.Append(nil, r, netip.Addr{}, nil)
		// Names compare ignoring case, as ASP.NET Core compares them.
		named := strings.Count(string(foldInPlace([]byte(unescapeAll(line1+";"+line2)))), "sid")
		var amb *AmbiguousError
		if errors.As(err, &amb) && amb.Source == "cookie:sid" {
			// sid= inside another cookie (see hiddenName).
			if named < 1 {
				t.Fatalf("cookies %q, %q: %v with sid named nowhere", line1, line2, err)
			}
			return
		}
		if keyErr(t, err, "cookie:sid") {
			if named < 2 {
				t.Fatalf("cookies %q, %q: duplicate error with sid named once", line1, line2)
			}
			return
		}
		if strings.ContainsRune(string(got), ';') && !strings.Contains(line1+line2, "%3") && !strings.Contains(line1+line2, "\\") {
			t.Fatalf("cookies %q, %q: got %q, with a separator", line1, line2, got)
		}
		if !strings.ContainsAny(line1+line2, "%+\\") && !strings.Contains(line1+line2, string(got)) {
			t.Fatalf("cookies %q, %q: got %q, not one value of the header", line1, line2, got)
		}
	})
}

// unescapeAll decodes every %XX escape in s.
func unescapeAll(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(n))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// FuzzKeyJSON: a json: source keys what encoding/json reads, unless it
// refuses the body for a duplicate. Decoded into a struct field tagged with
// the name, as Go upstreams bind it (any letter case, the last match
// winning), and into a map, as decoders that match names exactly read it
// (JSON.parse, Python's json, PHP's json_decode; the last duplicate
// winning): an exact name also matches in any letter case, so when the map
// holds it and the source refused nothing, it is the one member on the
// path. encoding/json also takes bodies that are not JSON to the scanner,
// strings with invalid UTF-8 or an escaped unpaired surrogate (read as
// U+FFFD): those key the empty value.
func FuzzKeyJSON(f *testing.F) {
	for _, b := range []string{
		`{"phone":"+15550001"}`, `{"phone":"r1","Phone":"+15550001"}`, `{"phone":1}`, `{"phone":1.0}`, `{"phone":1e0}`,
		`{"ph\u006fne":"x"}`, `{"user":{"phone":"a"}}`, `phone=%2B15550001`, `[{"phone":"a"}]`, `{"phone":"a"} x`,
		`{"phone":"\ud800"}`, `{"phone":"victim","pad":"\udc00\ud800"}`, "{\"phone\":\"victim\",\"pad\":\"\xff\"}",
		"{\"phone\":\"r1\",\"phon\xc1\xa5\":\"victim\"}", `{"PHONE":"victim"}`, `{"phone":"victim","PHONE":"r1"}`,
		"{\"phone\":\"r1\",\"phon\xc4\xb1\":\"victim\"}", `{"phone":"r1","phone\u0000":"victim"}`, `{"phone":"victim\u0000"}`,
		`{"phone":["victim"]}`, `{"phone":"victim","x":NaN}`, `{"phone":1e400}`, `{"phone":-0}`,
	} {
		f.Add(b, "phone")
	}
	f.Add(`{"a":{"b":{"c":"x"}}}`, "a.b.c")
	f.Add(`{"a":[{"b":1}]}`, "a.0.b")
	f.Add(`{"-":"x"}`, "-")
	f.Fuzz(func(t *testing.T, body, path string) {
		src, err := parseSource("json:" + path)
		if err != nil {
			return
		}
		k := &Key{sources: []source{src}, text: src.text}
		got, err := k.Append(nil, httptest.NewRequest("POST", "/", nil), netip.Addr{}, NewBody([]byte(body)))
		if keyErr(t, err, src.text) || strings.Contains(path, ".") {
			return
		}
		var m map[string]any
		if json.Unmarshal([]byte(body), &m) != nil {
			return
		}
		if !jsontext.Value(body).IsValid(jsontext.AllowDuplicateNames(true)) {
			if len(got) != 0 {
				t.Fatalf("body %q, json:%s: got %q, want the empty value for a body with invalid UTF-8 or surrogates", body, path, got)
			}
			return
		}
		if x, ok := m[path]; ok && string(got) != goKeyText(x) {
			t.Fatalf("body %q, json:%s: got %q, want %q (as encoding/json reads it into a map)", body, path, got, goKeyText(x))
		}
		// One level: encoding/json decoding into a struct field tagged
		// with the name matches it as leniently as upstreams do.
		for _, c := range path {
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
				return // encoding/json would ignore such a tag
			}
		}
		if path == "-" {
			return // the tag that leaves the field out
		}
		typ := reflect.StructOf([]reflect.StructField{{Name: "F", Type: reflect.TypeFor[any](), Tag: reflect.StructTag(`json:"` + path + `"`)}})
		v := reflect.New(typ)
		if json.Unmarshal([]byte(body), v.Interface()) != nil {
			return
		}
		if want := goKeyText(v.Elem().Field(0).Interface()); string(got) != want {
			t.Fatalf("body %q, json:%s: got %q, want %q (as encoding/json reads it into a struct)", body, path, got, want)
		}
	})
}

// goKeyText is the key text of a value encoding/json decoded into an any.
func goKeyText(x any) string {
	switch x := x.(type) {
	case string:
		return x
	case float64:
		return string(appendNumber(nil, []byte(strconv.FormatFloat(x, 'g', -1, 64))))
	case bool:
		return strconv.FormatBool(x)
	}
	return ""
}

// FuzzParseConfig: any input is a config or a list of problems, each with
// the file, a line and a column.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte("routes:\n  - {name: a, match: {path: /v1/otp, case_sensitive: true}, upstream: http://127.0.0.1:9000}\n"))
	f.Add([]byte("routes:\n  - {name: a, match: {path: /v1//otp}, upstream: http://127.0.0.1:9000}\n"))
	f.Add([]byte("policies:\n  p: {algorithm: fixed_window, limit: 1, window: 1s, key: [json:a.b.c, header:X-API-Key, query:api_key, cookie:sid]}\n"))
	f.Add([]byte("store: {type: redis, redis: {key_prefix: \"a{b}\"}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("fuzz.yaml", data, func(string) (string, bool) { return "", false })
		if err == nil {
			if c == nil || c.Table == nil {
				t.Fatal("got no config and no error")
			}
			return
		}
		var ps Problems
		if !errors.As(err, &ps) || len(ps) == 0 {
			t.Fatalf("got %T %v, want Problems", err, err)
		}
		for _, p := range ps {
			if p.File != "fuzz.yaml" || p.Line < 1 || p.Col < 1 || p.Message == "" {
				t.Fatalf("problem without a position or message: %q", p.String())
			}
		}
	})
}
