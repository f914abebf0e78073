package routes

import (
	"errors"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

// TestFrameworkNames: a query parameter or cookie that PHP, Rack 2 or
// Express's qs reads as api_key counts as api_key, so that a second
// spelling beside it is a duplicate rather than a value sluice keys while
// the upstream reads the other.
func TestFrameworkNames(t *testing.T) {
	t.Parallel()
	for _, k := range []string{
		"api_key", "api.key", " api_key", "api key", "api_key[]", "api_key[x]", "api[key", // PHP
		"api_key\x00", "api_key\x00junk", // PHP ends a name at NUL
		"api_key]", "[api_key]", "]api_key", "[[api_key", // Rack 2
		"API_KEY", "Api_Key", "api_KEY[]", "API.KEY", // ASP.NET Core ignores case
	} {
		if !sameName(k, "api_key") {
			t.Errorf("sameName(%q, api_key): got false, want true", k)
		}
	}
	for _, k := range []string{"api_keys", "xapi_key", "api", "key", "[api]_key", "APIKEY"} {
		if sameName(k, "api_key") {
			t.Errorf("sameName(%q, api_key): got true, want false", k)
		}
	}
}

// TestKeyReadsAsFrameworksDo: what a key source makes of spellings that
// frameworks read as one value, or cannot be sure to read as sluice does.
func TestKeyReadsAsFrameworksDo(t *testing.T) {
	t.Parallel()
	v4 := netip.MustParseAddr("192.0.2.7")
	for _, tc := range []struct {
		name, source, target, cookie string
		want, wantErr                string // wantErr: a substring of the error
	}{
		// Express's cookie-parser reads the JSON once the cookie module
		// has decoded the %XX escapes; a raw quote or backslash is
		// refused (see "cookie quote inside").
		{"cookie j: string", "cookie:sid", "/", `sid=j:%22victim%22`, "victim", ""},
		{"cookie j: spaced", "cookie:sid", "/", `sid=j:%20%22victim%22 `, "victim", ""},
		{"cookie j: escaped", "cookie:sid", "/", `sid=j:%22%5Cu0076ictim%22`, "victim", ""},
		{"cookie j: string in raw quotes", "cookie:sid", "/", `sid=j:"victim"`, "", "double quote"},
		{"cookie j: percent-encoded", "cookie:sid", "/", `sid=j%3A%22victim%22`, "victim", ""},
		{"cookie j: number", "cookie:sid", "/", `sid=j:1.0e1`, "10", ""},
		{"cookie j: object is the empty value", "cookie:sid", "/", `sid=j:{%22a%22:1}`, "", ""},
		{"cookie j: not JSON stays", "cookie:sid", "/", `sid=j:victim`, "j:victim", ""},
		{"cookie j: escaped prefix", "cookie:sid", "/", `sid=%6A%3A%22victim%22`, "victim", ""},
		// Django decodes the backslashes, Express keeps them: refused.
		{"cookie j: quoted, with backslashes", "cookie:sid", "/", `sid="j:\"victim\""`, "", "backslash"},
		{"cookie j: plus stays a plus", "cookie:sid", "/", `sid=j:1e+2`, "100", ""},
		{"cookie j: plus stays a plus too", "cookie:sid", "/", `sid=j:0.1e+3`, "100", ""},
		{"cookie j: zero is left as it is", "cookie:sid", "/", `sid=j:0`, "j:0", ""},
		{"cookie j: false is left as it is", "cookie:sid", "/", `sid=j:false`, "j:false", ""},
		{"cookie j: null is left as it is", "cookie:sid", "/", `sid=j:null`, "j:null", ""},
		{"cookie j: empty string is left as it is", "cookie:sid", "/", `sid=j:%22%22`, `j:""`, ""},
		// decodeURIComponent decodes all or nothing: one bad escape and
		// the value stays as sent, its good escapes too, and is no JSON
		// once its quotes are escaped.
		{"cookie j: a bad escape keeps the value as sent", "cookie:sid", "/", `sid=j:%22%41%`, "", "not one of escapes"},
		{"cookie j: the same text, escaped well", "cookie:sid", "/", `sid=j:%22%2541%25%22`, "%41%", ""},
		{"cookie j: escapes that are not UTF-8 keep it as sent", "cookie:sid", "/", `sid=j:%22%76ictim%FF%22`, "", "not one of escapes"},
		// Node reads the raw byte as Latin-1 (Express reads "%C3©",
		// as it reads j:"%25C3%C2%A9"), PHP as a byte: refused.
		{"cookie j: an escape that needs a raw byte to be UTF-8 is refused", "cookie:sid", "/", "sid=j:\"%C3\xa9\"", "", "not ASCII"},
		{"cookie j: the same character escaped whole", "cookie:sid", "/", `sid=j:%22%C3%A9%22`, "\u00e9", ""},
		{"query NUL name", "query:api_key", "/?api_key=a&api_key%00=b", "", "", "more than once"},
		{"query rack bracket", "query:api_key", "/?api_key=a&api_key]=b", "", "", "more than once"},
		{"query qs bracket", "query:api_key", "/?[api_key]=a&api_key=b", "", "", "more than once"},
		// ASP.NET Core finds query parameters and cookies by name ignoring
		// case, the first value of a parameter and the last of a cookie
		// winning: "API_KEY" is a second api_key, and "SID" a second sid.
		// Alone, each is refused: Flask, Django, PHP and Rack read no
		// api_key or sid in them at all.
		{"query in another letter case", "query:api_key", "/?API_KEY=victim", "", "", "another spelling"},
		{"query twice in two letter cases", "query:api_key", "/?API_KEY=victim&api_key=rot1", "", "", "more than once"},
		{"cookie in another letter case", "cookie:sid", "/", "SID=victim", "", "another spelling"},
		{"cookie escaped name", "cookie:sid", "/", "s%69d=victim", "", "another spelling"},
		{"cookie after a comma alone", "cookie:sid", "/", "x=1,sid=victim", "", "after a comma"},
		// Express, Koa and Fastify read sid=victim,x=1 as the value
		// "victim,x=1" (see "cookie value cut at a comma").
		{"cookie before a comma", "cookie:sid", "/", "sid=victim,x=1", "", "holds a comma"},
		{"cookie twice in two letter cases", "cookie:sid", "/", "sid=rot1; SID=victim", "", "more than once"},
		// Rack 2.2 (Rails 6.1's cookie jar) reads "sid" alone as sid
		// with no value, PHP 8.2 (Symfony 5.4) as sid, "", and both
		// keep the first: beside a sid=, it is a second sid.
		{"cookie name without = first", "cookie:sid", "/", "sid; sid=victim", "", "more than once"},
		{"cookie name without = last", "cookie:sid", "/", "sid=victim; sid", "", "more than once"},
		{"cookie name without = as an array", "cookie:sid", "/", "sid[]; sid=victim", "", "more than once"},
		{"cookie name without = alone", "cookie:sid", "/", "sid; a=1", "", ""},
		{"cookie name without = inside a quoted value", "cookie:sid", "/", `a="x; sid; y"; sid=k`, "k", ""},
		// ASP.NET Core also ends a cookie at a comma, and, where a
		// cookie does not parse, tries again one byte further on, so
		// it finds "sid=victim" inside another cookie; aiohttp's
		// http.cookies splits cookies at spaces.
		{"cookie after a comma", "cookie:sid", "/", "sid=rot1,sid=victim", "", "more than once"},
		// Express, Koa and Fastify read on past the comma: a value cut
		// at one is refused, and a cookie after another's comma is the
		// value of that other to them, as to Flask, Django and Rack.
		{"cookie value cut at a comma", "cookie:sid", "/", "sid=victim,x", "", "comma"},
		{"cookie value cut at a comma after blanks", "cookie:sid", "/", "sid=victim ,x", "", "comma"},
		{"cookie after another's comma", "cookie:sid", "/", "a=1,sid=victim", "", "after a comma"},
		{"cookie hidden after a quote", "cookie:sid", "/", `sid=rot1; a=x"sid=victim`, "", "inside another"},
		{"cookie hidden in a name", "cookie:sid", "/", `sid=rot1; x@sid=victim`, "", "inside another"},
		{"cookie hidden after a space", "cookie:sid", "/", `sid=rot1; a=x sid=victim`, "", "inside another"},
		{"cookie hidden alone", "cookie:sid", "/", `a=x"SID=victim`, "", "inside another"},
		{"cookie value holding name= is no cookie", "cookie:sid", "/", `next=sid=1; sid=k`, "k", ""},
		{"cookie value holding &name= is no cookie", "cookie:sid", "/", `next=/a?x=1&sid=1; sid=k`, "k", ""},
		// A cookie that parses is read whole by ASP.NET Core and
		// http.cookies alike: a URL in its value holds no cookie.
		{"cookie value holding ?name= is no cookie", "cookie:sid", "/", `next=https://example.com/?sid=1; sid=k`, "k", ""},
		{"cookie value holding /name= is no cookie", "cookie:sid", "/", `sid=k; next=/a/sid=1`, "k", ""},
		{"quoted cookie value holding name= is no cookie", "cookie:sid", "/", `next="/?sid=1"; sid=k`, "k", ""},
		// A blank beside the "=" fails ASP.NET Core's parse, which then
		// finds the sid inside.
		{"cookie hidden after a blank before =", "cookie:sid", "/", `sid=rot1; next =/?sid=victim`, "", "inside another"},
		{"cookie hidden after a blank after =", "cookie:sid", "/", `sid=rot1; next= /?sid=victim`, "", "inside another"},
		// Tornado 6.2's get_argument and get_query_argument make
		// U+0000-U+0008 and U+000E-U+001F spaces, then strip
		// whitespace (Python's str.strip) from both ends: each of
		// these is "victim" to it, so they are refused.
		{"query value ending in a space", "query:api_key", "/?api_key=victim%20", "", "", "whitespace"},
		{"query value starting with a plus", "query:api_key", "/?api_key=+victim", "", "", "whitespace"},
		{"query value ending in a tab", "query:api_key", "/?api_key=victim%09", "", "", "whitespace"},
		{"query value ending in a NBSP", "query:api_key", "/?api_key=victim%C2%A0", "", "", "whitespace"},
		{"query value starting with an ideographic space", "query:api_key", "/?api_key=%E3%80%80victim", "", "", "whitespace"},
		{"query value ending in a line separator", "query:api_key", "/?api_key=victim%E2%80%A8", "", "", "whitespace"},
		{"query value holding a NUL", "query:api_key", "/?api_key=vic%00tim", "", "", "control"},
		{"query value holding a unit separator", "query:api_key", "/?api_key=vic%1Ftim", "", "", "control"},
		{"query value with a space inside", "query:api_key", "/?api_key=vic+tim", "", "vic tim", ""},
		{"query value with a tab inside", "query:api_key", "/?api_key=vic%09tim", "", "vic\ttim", ""},
		{"query value with a zero-width space", "query:api_key", "/?api_key=victim%E2%80%8B", "", "victim\u200b", ""},
		{"query of 1000 parameters", "query:api_key", "/?" + strings.Repeat("a=1&", 999) + "api_key=k", "", "k", ""},
		{"query of 1001 parameters", "query:api_key", "/?" + strings.Repeat("a=1&", 1000) + "api_key=k", "", "", "more than 1000 parameters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest("GET", tc.target, nil)
			if tc.cookie != "" {
				r.Header["Cookie"] = []string{tc.cookie}
			}
			got, err := keyOf(t, "r", tc.source).Append(nil, r, v4, nil)
			if tc.wantErr != "" {
				var dup *DuplicateError
				var amb *AmbiguousError
				if err == nil || !errors.As(err, &dup) && !errors.As(err, &amb) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("got %q, %v; want an error saying %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Errorf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestKeyHeaderLatin1Strip: Tornado 6.2 and Django 3.2's runserver read
// a field's value as Latin-1 and strip it with Python's str.strip, which
// takes 0x85 (NEL) and 0xA0 (NO-BREAK SPACE): "victim\xa0" is "victim"
// to them, and is refused rather than keyed apart.
func TestKeyHeaderLatin1Strip(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ value, want string }{
		{"victim\xa0", ""},
		{"\xa0victim", ""},
		{"victim\x85", ""},
		{"\x85\xa0victim", ""},
		{"voil\xc3\xa0", ""}, // "voilà" in UTF-8 ends in 0xA0
		{"vic\xa0tim", "vic\xa0tim"},
		{"victim", "victim"},
		{"", ""},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header["X-Api-Key"] = []string{tc.value}
		got, err := keyOf(t, "r", "header:X-API-Key").Append(nil, r, netip.Addr{}, nil)
		var amb *AmbiguousError
		if refuse := tc.value != "" && tc.want == ""; refuse != errors.As(err, &amb) || string(got) != tc.want {
			t.Errorf("header %q: got %q, %v; want %q, refused %v", tc.value, got, err, tc.want, refuse)
		}
	}
}

// TestJSONEncodingProblem (JSONCharsetProblem, then EncodingProblem): a JSON body an upstream may decode as other
// than UTF-8 is refused on routes with json: keys.
func TestJSONEncodingProblem(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ctype, body string
		refused     bool
	}{
		{"application/json", `{"phone":"1"}`, false},
		{"application/json; charset=utf-8", `{"phone":"1"}`, false},
		{`application/json; charset="UTF-8"`, `{"phone":"1"}`, false},
		{"application/json;charset=utf8", `{"phone":"1"}`, false},
		{"application/json; charset=utf-7", `{"phone":"1"}`, true},
		{"application/json; charset=utf-8; charset=utf-7", `{"phone":"1"}`, true},
		{"application/json; CHARSET=utf-7; x", `{"phone":"1"}`, true},
		{"application/json; charset*=utf-8''utf-7", `{"phone":"1"}`, true},
		{"application/json; charset*=UTF-8''utf-16le", `{"phone":"1"}`, true},
		{"application/json; charset*0=utf-7", `{"phone":"1"}`, true},
		{"application/json; charset=utf-8; charset*=utf-7", `{"phone":"1"}`, true},
		{"application/json; charset*=utf-8''utf-8", `{"phone":"1"}`, false},
		{"application/json; charset=utf-16le", `{"phone":"1"}`, true},
		{"application/json; charset=iso-8859-1", `{"phone":"1"}`, true},
		{"application/json", "\xef\xbb\xbf{\"phone\":\"1\"}", true},
		{"application/json", "\xff\xfe{\x00\"\x00", true},
		{"application/json", "{\x00\"\x00p\x00", true},
		{"application/json", "\x00\x00\x00{", true},
	} {
		why := JSONCharsetProblem(tc.ctype)
		if why == "" {
			why = NewBody([]byte(tc.body)).EncodingProblem()
		}
		if (why != "") != tc.refused {
			t.Errorf("%q with %q: got %q, want refused %v", tc.ctype, tc.body, why, tc.refused)
		}
	}
}
