package routes

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestShadowedRouteEdges: a route is refused as never matched only when
// an earlier path_prefix takes every request it matches. Where the later
// route still matches some request, the probe reaches it: refusing that
// config would take a working route away.
func TestShadowedRouteEdges(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		first, second string // match mappings
		refused       bool
		// missed: the second route is never matched, but the check
		// does not look that far; the probe reaches the first.
		missed bool
		// probe, when the config parses, is a request the second route
		// takes: method, target, host and a header (name: value) or "".
		method, target, host, header string
	}{
		{name: "same prefix", first: `{path_prefix: /v1/}`, second: `{path_prefix: /v1/}`, refused: true},
		{name: "longer prefix", first: `{path_prefix: /v1/}`, second: `{path_prefix: /v1/a/}`, refused: true},
		{name: "plain prefix takes a longer name", first: `{path_prefix: /v1/otp}`, second: `{path: /v1/otpx}`, refused: true},
		{name: "prefix with its slash takes the bare path", first: `{path_prefix: /v1/otp/}`, second: `{path: /v1/otp}`, refused: true},
		{name: "prefix with its slash leaves a plain prefix without it", first: `{path_prefix: /v1/otp/}`, second: `{path_prefix: /v1/otp}`,
			method: "GET", target: "/v1/otpx"},
		{name: "prefix with its slash leaves a shorter path", first: `{path_prefix: /v1/otp/}`, second: `{path: /v1/ot}`,
			method: "GET", target: "/v1/ot"},
		{name: "prefix is no exact path", first: `{path: /v1/}`, second: `{path_prefix: /v1/}`,
			method: "GET", target: "/v1/x"},

		{name: "GET route leaves POST", first: `{path_prefix: /v1/, methods: [GET]}`, second: `{path: /v1/x, methods: [GET, POST]}`,
			method: "POST", target: "/v1/x"},
		{name: "GET route leaves any method", first: `{path_prefix: /v1/, methods: [GET]}`, second: `{path: /v1/x}`,
			method: "DELETE", target: "/v1/x"},
		{name: "HEAD route leaves GET", first: `{path_prefix: /v1/, methods: [HEAD]}`, second: `{path: /v1/x, methods: [GET]}`,
			method: "GET", target: "/v1/x"},
		{name: "more methods take fewer", first: `{path_prefix: /v1/, methods: [GET, POST]}`, second: `{path: /v1/x, methods: [POST]}`, refused: true},
		{name: "methods in any letter case", first: `{path_prefix: /v1/, methods: [get, post]}`, second: `{path: /v1/x, methods: [POST]}`, refused: true},
		// A GET route takes HEAD too: the later HEAD route is never
		// matched, but that is missed, not refused wrongly.
		{name: "HEAD after GET is not compared", first: `{path_prefix: /v1/, methods: [GET]}`, second: `{path: /v1/x, methods: [HEAD]}`,
			method: "HEAD", target: "/v1/x", missed: true},

		{name: "header route leaves requests without it", first: `{path_prefix: /v1/, headers: {X-Api-Version: "2"}}`, second: `{path: /v1/x}`,
			method: "GET", target: "/v1/x"},
		{name: "header route leaves another value", first: `{path_prefix: /v1/, headers: {X-Api-Version: "2"}}`, second: `{path: /v1/x, headers: {X-Api-Version: "3"}}`,
			method: "GET", target: "/v1/x", header: "X-Api-Version: 3"},
		{name: "empty header value leaves a value", first: `{path_prefix: /v1/, headers: {X-Flag: ""}}`, second: `{path: /v1/x, headers: {X-Flag: "1"}}`,
			method: "GET", target: "/v1/x", header: "X-Flag: 1"},
		{name: "fewer headers take more", first: `{path_prefix: /v1/, headers: {x-api-version: "2"}}`, second: `{path: /v1/x, headers: {X-Api-Version: "2", X-B: "1"}}`, refused: true},

		{name: "host route leaves other hosts", first: `{host: a.example.com, path_prefix: /v1/}`, second: `{path: /v1/x}`,
			method: "GET", target: "/v1/x", host: "b.example.com"},
		{name: "wildcard leaves the apex", first: `{host: "*.example.com", path_prefix: /v1/}`, second: `{host: example.com, path: /v1/x}`,
			method: "GET", target: "/v1/x", host: "example.com"},
		{name: "wildcard over a name below it is not compared", first: `{host: "*.example.com", path_prefix: /v1/}`, second: `{host: a.example.com, path: /v1/x}`,
			method: "GET", target: "/v1/x", host: "a.example.com", missed: true},
		{name: "same wildcard", first: `{host: "*.example.com", path_prefix: /v1/}`, second: `{host: "*.Example.com.", path: /v1/x}`, refused: true},
		{name: "same host in another case", first: `{host: A.example.com, path_prefix: /v1/}`, second: `{host: a.example.com, path: /v1/x}`, refused: true},

		{name: "case-sensitive prefix leaves other cases", first: `{path_prefix: /v1/, case_sensitive: true}`, second: `{path: /v1/x}`,
			method: "GET", target: "/V1/x"},
		{name: "case-sensitive prefix leaves a bare path in another case", first: `{path_prefix: /v1/otp/, case_sensitive: true}`, second: `{path: /v1/otp}`,
			method: "GET", target: "/V1/OTP"},
		{name: "case-sensitive both, another case", first: `{path_prefix: /v1/, case_sensitive: true}`, second: `{path: /V1/x, case_sensitive: true}`,
			method: "GET", target: "/V1/x"},
		{name: "case-sensitive both", first: `{path_prefix: /v1/, case_sensitive: true}`, second: `{path: /v1/x, case_sensitive: true}`, refused: true},
		{name: "prefix ignoring case over a case-sensitive path", first: `{path_prefix: /v1/}`, second: `{path: /V1/X, case_sensitive: true}`, refused: true},
		{name: "prefix ignoring case over a case-sensitive bare path", first: `{path_prefix: /V1/OTP/}`, second: `{path: /v1/otp, case_sensitive: true}`, refused: true},
		{name: "folded letter in the later path", first: `{path_prefix: /v1/login}`, second: `{path: /v1/logın}`, refused: true},
		{name: "folded letter in the earlier prefix", first: `{path_prefix: /v1/logın}`, second: `{path: /v1/login}`,
			method: "GET", target: "/v1/login"},

		{name: "strip_prefix changes no match", first: `{path_prefix: /v1/}
    strip_prefix: /v1`, second: `{path: /v1/x}`, refused: true},
		{name: "strip_prefix of the later route changes no match", first: `{path_prefix: /v1/}`, second: `{path: /v1/x}
    strip_prefix: /v1`, refused: true},
		{name: "no path condition is not compared", first: `{path_prefix: /}`, second: `{host: a.example.com}`,
			method: "GET", target: "/x", host: "a.example.com", missed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := "routes:\n" +
				"  - name: first\n    upstream: http://127.0.0.1:9000\n    match: " + tc.first + "\n" +
				"  - name: second\n    upstream: http://127.0.0.1:9000\n    match: " + tc.second + "\n"
			c, err := Parse("sluice.yaml", []byte(cfg), noEnv)
			if tc.refused {
				if err == nil || !strings.Contains(err.Error(), "routes[1].match.") || !strings.Contains(err.Error(), "never matched: routes[0] (first)") {
					t.Errorf("got error %v, want routes[1] never matched", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("got error\n%v\nwant none", err)
			}
			r := httptest.NewRequest(tc.method, tc.target, nil)
			r.Host = tc.host
			if name, value, ok := strings.Cut(tc.header, ": "); ok {
				r.Header[http.CanonicalHeaderKey(name)] = []string{value}
			}
			got := "<nil>"
			if rt := c.Table.Match(r); rt != nil {
				got = rt.Name
			}
			want := "second"
			if tc.missed {
				want = "first"
			}
			if got != want {
				t.Errorf("%s %s (host %q): got route %s, want %s", tc.method, tc.target, tc.host, got, want)
			}
		})
	}
}
