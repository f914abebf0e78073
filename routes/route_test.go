package routes

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

const matchConfig = `
routes:
  - name: exact-host
    match: {host: api.example.com, path: /v1/ping}
    upstream: http://127.0.0.1:9000
  - name: wildcard
    match: {host: "*.example.com", path_prefix: /v1/}
    upstream: http://127.0.0.1:9000
  - name: post-only
    match: {path_prefix: /v2/orders, methods: [post, PUT]}
    upstream: http://127.0.0.1:9000
  - name: versioned
    match: {path_prefix: /v3, headers: {x-api-version: "2", X-Empty: ""}}
    upstream: http://127.0.0.1:9000
  - name: case-sensitive
    match: {path: /v4/Exact, case_sensitive: true}
    upstream: http://127.0.0.1:9000
  - name: case-sensitive-prefix
    match: {path_prefix: /v5/A/, case_sensitive: true}
    upstream: http://127.0.0.1:9000
  - name: get-only
    match: {path: /v6/search, methods: [GET]}
    upstream: http://127.0.0.1:9000
  - name: login
    match: {path_prefix: /v7/sms/login}
    upstream: http://127.0.0.1:9000
  - name: kick
    match: {path: /v8/kick}
    upstream: http://127.0.0.1:9000
  - name: cs-login
    match: {path: /v9/login, case_sensitive: true}
    upstream: http://127.0.0.1:9000
  - name: ipv6-host
    match: {host: "::1"}
    upstream: http://127.0.0.1:9000
  - name: catch-all
    upstream: http://127.0.0.1:9000
`

func TestMatch(t *testing.T) {
	t.Parallel()
	tab := mustParse(t, matchConfig, noEnv).Table
	for _, tc := range []struct {
		name, method, target, host string
		headers                    map[string][]string
		want                       string
	}{
		{"exact host and path", "GET", "/v1/ping", "api.example.com", nil, "exact-host"},
		{"host case and port ignored", "GET", "/v1/ping", "API.Example.COM:8443", nil, "exact-host"},
		{"host trailing dot ignored", "GET", "/v1/ping", "api.example.com.", nil, "exact-host"},
		{"exact path differs", "GET", "/v1/ping/x", "api.example.com", nil, "wildcard"},
		{"exact path with one trailing slash", "GET", "/v1/ping/", "api.example.com", nil, "exact-host"},
		{"exact path not with two", "GET", "/v1/ping//", "api.example.com", nil, "wildcard"},
		{"path case ignored", "GET", "/V1/PING", "api.example.com", nil, "exact-host"},
		{"segment parameters ignored", "GET", "/v1;x/ping;y=1", "api.example.com", nil, "exact-host"},
		{"escaped letters decoded", "GET", "/%76%31/ping", "api.example.com", nil, "exact-host"},
		{"escaped semicolon is no parameter", "GET", "/v1/ping%3Bx", "api.example.com", nil, "wildcard"},
		{"case-sensitive route", "GET", "/v4/Exact", "x", nil, "case-sensitive"},
		{"case-sensitive route differs", "GET", "/v4/exact", "x", nil, "catch-all"},
		{"case-sensitive prefix", "GET", "/v5/A/b", "x", nil, "case-sensitive-prefix"},
		{"case-sensitive prefix differs", "GET", "/v5/a/b", "x", nil, "catch-all"},
		{"wildcard one label", "GET", "/v1/x", "www.example.com", nil, "wildcard"},
		{"wildcard two labels", "GET", "/v1/x", "a.b.example.com:80", nil, "wildcard"},
		{"wildcard excludes apex", "GET", "/v1/x", "example.com", nil, "catch-all"},
		{"wildcard needs a dot boundary", "GET", "/v1/x", "badexample.com", nil, "catch-all"},
		// Fiber v2.52.15 serves /v1 from app.All("/v1/*"), with and
		// without StrictRouting, and so do gin 1.12.0 and echo 4.16.6
		// from a Group("/v1") and chi 5.5.0 from a router mounted at
		// /v1: a prefix that ends in a slash takes the path without it
		// too, or that path would pass by its limits.
		{"prefix ending in a slash takes the path without it", "GET", "/v1", "www.example.com", nil, "wildcard"},
		{"prefix ending in a slash, without it, with parameters", "GET", "/V1;x", "www.example.com", nil, "wildcard"},
		{"prefix ending in a slash needs the rest", "GET", "/v", "www.example.com", nil, "catch-all"},
		{"prefix ending in a slash is no plain prefix without it", "GET", "/v1x", "www.example.com", nil, "catch-all"},
		{"case-sensitive prefix without its slash", "GET", "/v5/A", "x", nil, "case-sensitive-prefix"},
		{"case-sensitive prefix without its slash differs", "GET", "/v5/a", "x", nil, "catch-all"},
		{"method upper-cased in config", "POST", "/v2/orders/7", "x", nil, "post-only"},
		{"second method", "PUT", "/v2/orders", "x", nil, "post-only"},
		{"plain prefix crosses segments", "POST", "/v2/ordersfoo", "x", nil, "post-only"},
		{"method not listed", "GET", "/v2/orders", "x", nil, "catch-all"},
		{"headers all equal", "GET", "/v3/a", "x", map[string][]string{"X-Api-Version": {"2"}, "X-Empty": {""}}, "versioned"},
		{"header any value", "GET", "/v3/a", "x", map[string][]string{"X-Api-Version": {"1", "2"}, "X-Empty": {""}}, "versioned"},
		{"header value differs", "GET", "/v3/a", "x", map[string][]string{"X-Api-Version": {"3"}, "X-Empty": {""}}, "catch-all"},
		{"header missing", "GET", "/v3/a", "x", map[string][]string{"X-Api-Version": {"2"}}, "catch-all"},
		{"HEAD on a GET route", "HEAD", "/v6/search", "x", nil, "get-only"},
		{"POST not on a GET route", "POST", "/v6/search", "x", nil, "catch-all"},
		{"HEAD not on a POST route", "HEAD", "/v2/orders", "x", nil, "catch-all"},
		{"dotless i is i", "GET", "/v7/sms/log%C4%B1n", "x", nil, "login"},
		{"dotted capital I is i", "GET", "/v7/sms/LOG%C4%B0N", "x", nil, "login"},
		{"long s is s", "GET", "/v7/%C5%BFms/login/x", "x", nil, "login"},
		{"raw long s is s", "GET", "/v7/\u017fms/login", "x", nil, "login"},
		{"Kelvin sign is k", "GET", "/v8/%E2%84%AAic%E2%84%AA", "x", nil, "kick"},
		{"exact path with a folded letter and a trailing slash", "GET", "/v6/%C5%BFearch/", "x", nil, "get-only"},
		{"other letters are not folded", "GET", "/v7/sms/log%C3%AFn", "x", nil, "catch-all"},
		{"case-sensitive route folds nothing", "GET", "/v4/Exact", "x", nil, "case-sensitive"},
		{"case-sensitive route takes no dotless i", "GET", "/v9/log%C4%B1n", "x", nil, "catch-all"},
		// restify 11.1.0 (find-my-way 7.7.0) ends the path at its first
		// ";" and served /v8/kick;x/x from its /v8/kick handler: an
		// exact path cannot follow it, as SPEC has routes match the
		// segments after ;parameters, but a plain prefix can, as README
		// advises in front of such an upstream.
		{"an exact path takes no segments after parameters", "GET", "/v8/kick;x/x", "x", nil, "catch-all"},
		{"a plain prefix takes what follows parameters", "GET", "/v7/sms/login;x/x", "x", nil, "login"},
		{"bracketed IPv6 host", "GET", "/", "[::1]:8080", nil, "ipv6-host"},
		{"bare IPv6 host", "GET", "/", "::1", nil, "ipv6-host"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest(tc.method, tc.target, nil)
			r.Host = tc.host
			for k, v := range tc.headers {
				r.Header[http.CanonicalHeaderKey(k)] = v
			}
			got := "<nil>"
			if rt := tab.Match(r); rt != nil {
				got = rt.Name
			}
			if got != tc.want {
				t.Errorf("got route %s, want %s", got, tc.want)
			}
		})
	}
}

func TestMatchNone(t *testing.T) {
	t.Parallel()
	tab := mustParse(t, `
routes:
  - {name: a, match: {path: /a}, upstream: http://127.0.0.1:9000}
`, noEnv).Table
	if rt := tab.Match(httptest.NewRequest("GET", "/b", nil)); rt != nil {
		t.Errorf("got route %s, want nil", rt.Name)
	}
}

func TestMatchAllocs(t *testing.T) {
	tab := mustParse(t, matchConfig, noEnv).Table
	r := httptest.NewRequest("GET", "/v3/a", nil)
	r.Host = "A.B.Example.com:443"
	r.Header.Set("X-Api-Version", "2")
	if got := testing.AllocsPerRun(100, func() { tab.Match(r) }); got != 0 {
		t.Errorf("got %v allocs per Match, want 0", got)
	}
}

func BenchmarkMatch(b *testing.B) {
	c, err := Parse("sluice.yaml", []byte(matchConfig), noEnv)
	if err != nil {
		b.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/nothing/special", nil)
	r.Host = "www.example.org"
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c.Table.Match(r)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				c.Table.Match(r)
			}
		})
	})
}

func TestRepeatedMatchHeader(t *testing.T) {
	t.Parallel()
	tab := mustParse(t, matchConfig, noEnv).Table
	for _, tc := range []struct {
		headers map[string][]string
		want    string
	}{
		{nil, ""},
		{map[string][]string{"X-Api-Version": {"2"}, "X-Empty": {""}}, ""},
		{map[string][]string{"X-Api-Version": {"2", "1"}}, "X-Api-Version"},
		{map[string][]string{"X-Empty": {"", ""}}, "X-Empty"},
		{map[string][]string{"X-Other": {"a", "b"}}, ""},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		for k, v := range tc.headers {
			r.Header[k] = v
		}
		if got := tab.RepeatedMatchHeader(r); got != tc.want {
			t.Errorf("%v: got %q, want %q", tc.headers, got, tc.want)
		}
	}
}

// TestStrippedMatchHeader: Tornado 6.2 and Django 3.2's runserver read
// "X-Api-Version: 2\xa0" as 2, which the route for 2 does not match.
func TestStrippedMatchHeader(t *testing.T) {
	t.Parallel()
	tab := mustParse(t, matchConfig, noEnv).Table
	for _, tc := range []struct {
		headers map[string][]string
		want    string
	}{
		{nil, ""},
		{map[string][]string{"X-Api-Version": {"2"}, "X-Empty": {""}}, ""},
		{map[string][]string{"X-Api-Version": {"2\xa0"}}, "X-Api-Version"},
		{map[string][]string{"X-Api-Version": {"\x852"}}, "X-Api-Version"},
		{map[string][]string{"X-Api-Version": {"1\xa02"}}, ""},
		{map[string][]string{"X-Other": {"a\xa0"}}, ""},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		for k, v := range tc.headers {
			r.Header[k] = v
		}
		if got := tab.StrippedMatchHeader(r); got != tc.want {
			t.Errorf("%q: got %q, want %q", tc.headers, got, tc.want)
		}
	}
}
