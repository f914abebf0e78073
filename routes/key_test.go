package routes

import (
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

// keyOf compiles sources into a Key bound to route.
func keyOf(t testing.TB, route string, sources ...string) *Key {
	t.Helper()
	k := &Key{route: route, text: strings.Join(sources, "|")}
	for _, s := range sources {
		src, err := parseSource(s)
		if err != nil {
			t.Fatalf("parsing %q: %v", s, err)
		}
		k.sources = append(k.sources, src)
	}
	return k
}

func TestKeyAppend(t *testing.T) {
	t.Parallel()
	const body = `{"phone":"+15550100","user":{"id":42,"admin":true,"name":"a|b","tags":["x","y"],"none":null,"o":{}},"n":1.50e3}`
	v4 := netip.MustParseAddr("192.0.2.7")
	for _, tc := range []struct {
		name    string
		sources []string
		target  string
		headers map[string]string
		client  netip.Addr
		body    *Body
		want    string
	}{
		{"ipv4", []string{"ip"}, "/", nil, v4, nil, "192.0.2.7"},
		{"ipv6 grouped by /64", []string{"ip"}, "/", nil, netip.MustParseAddr("2001:db8:1:2:aaaa:bbbb:cccc:dddd"), nil, "2001:db8:1:2::/64"},
		{"ipv6 zone dropped", []string{"ip"}, "/", nil, netip.MustParseAddr("fe80::1:2:3:4%eth0"), nil, "fe80::/64"},
		{"ipv4-mapped ipv6 is ipv4", []string{"ip"}, "/", nil, netip.MustParseAddr("::ffff:192.0.2.7"), nil, "192.0.2.7"},
		{"no client", []string{"ip"}, "/", nil, netip.Addr{}, nil, ""},
		{"header", []string{"header:x-api-key"}, "/", map[string]string{"X-Api-Key": "abc"}, v4, nil, "abc"},
		{"header missing", []string{"header:X-API-Key"}, "/", nil, v4, nil, ""},
		{"host header", []string{"header:host"}, "/", nil, v4, nil, "api.example.com"},
		{"query", []string{"query:api_key"}, "/x?a=1&api_key=k1&b=2", nil, v4, nil, "k1"},
		{"query escaped", []string{"query:api key"}, "/x?api+key=a%7Cb", nil, v4, nil, "a|b"},
		{"query no value", []string{"query:flag"}, "/x?flag", nil, v4, nil, ""},
		{"query missing", []string{"query:api_key"}, "/x?other=1", nil, v4, nil, ""},
		{"cookie", []string{"cookie:session"}, "/", map[string]string{"Cookie": `theme=dark; session="s1"; sessions=s2`}, v4, nil, "s1"},
		{"cookie missing", []string{"cookie:session"}, "/", map[string]string{"Cookie": "sessionx=1"}, v4, nil, ""},
		{"json string", []string{"json:phone"}, "/", nil, v4, NewBody([]byte(body)), "+15550100"},
		{"json nested number", []string{"json:user.id"}, "/", nil, v4, NewBody([]byte(body)), "42"},
		{"json number canonical", []string{"json:n"}, "/", nil, v4, NewBody([]byte(body)), "1500"},
		{"json bool", []string{"json:user.admin"}, "/", nil, v4, NewBody([]byte(body)), "true"},
		{"json array index", []string{"json:user.tags.1"}, "/", nil, v4, NewBody([]byte(body)), "y"},
		{"json array out of range", []string{"json:user.tags.2"}, "/", nil, v4, NewBody([]byte(body)), ""},
		{"json object is empty", []string{"json:user.o"}, "/", nil, v4, NewBody([]byte(body)), ""},
		{"json array is empty", []string{"json:user.tags"}, "/", nil, v4, NewBody([]byte(body)), ""},
		{"json null is empty", []string{"json:user.none"}, "/", nil, v4, NewBody([]byte(body)), ""},
		{"json missing", []string{"json:user.email"}, "/", nil, v4, NewBody([]byte(body)), ""},
		{"json through a scalar", []string{"json:phone.x"}, "/", nil, v4, NewBody([]byte(body)), ""},
		{"json no body", []string{"json:phone"}, "/", nil, v4, nil, ""},
		{"json not JSON", []string{"json:phone"}, "/", nil, v4, NewBody([]byte("phone=1")), ""},
		{"json trailing garbage", []string{"json:phone"}, "/", nil, v4, NewBody([]byte(`{"phone":"1"} x`)), ""},
		{"json body too large", []string{"json:phone"}, "/", nil, v4, NewBody([]byte(`{"phone":"1","pad":"` + strings.Repeat("x", MaxKeyBody) + `"}`)), ""},
		{"json body at the limit", []string{"json:phone"}, "/", nil, v4, NewBody([]byte(`{"phone":"1","pad":"` + strings.Repeat("x", MaxKeyBody-22) + `"}`)), "1"},
		{"route", []string{"route"}, "/", nil, v4, nil, "orders"},
		{"method", []string{"method"}, "/", nil, v4, nil, "POST"},
		{"path", []string{"path"}, "/v1/orders/7?x=1", nil, v4, nil, "/v1/orders/7"},
		{"global", []string{"global"}, "/", nil, v4, nil, "global"},
		{"composite in key order", []string{"header:X-API-Key", "ip", "json:user.name", "route"}, "/", map[string]string{"X-Api-Key": "abc"}, v4, NewBody([]byte(body)), "abc|192.0.2.7|a|b|orders"},
		{"composite with empties", []string{"header:X-A", "query:q", "ip"}, "/", nil, netip.Addr{}, nil, "||"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			k := keyOf(t, "orders", tc.sources...)
			r := httptest.NewRequest("POST", tc.target, nil)
			r.Host = "api.example.com"
			for name, v := range tc.headers {
				r.Header.Set(name, v)
			}
			got, err := k.Append(nil, r, tc.client, tc.body)
			if err != nil || string(got) != tc.want {
				t.Errorf("got key %q, %v; want %q, nil", got, err, tc.want)
			}
		})
	}
}

func TestKeyString(t *testing.T) {
	t.Parallel()
	c := mustParse(t, `
policies:
  p: {algorithm: fixed_window, limit: 1, window: 1s, key: [header:X-API-Key, ip, json:a.b]}
routes:
  - {name: r, upstream: http://127.0.0.1:9000, limits: [p]}
`, noEnv)
	rt := c.Table.Routes[0]
	if got, want := rt.Limits[0].Key.String(), "header:X-API-Key|ip|json:a.b"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if !rt.ReadsBody || !rt.Limits[0].Key.ReadsBody() {
		t.Errorf("got ReadsBody false, want true for a json: source")
	}
}

func TestKeyAppendAllocs(t *testing.T) {
	k := keyOf(t, "orders", "ip", "header:X-API-Key", "route", "method", "path", "global", "query:k", "cookie:s")
	buf := make([]byte, 0, 256)
	// A plain query value and an escaped one.
	for _, target := range []string{"/v1/orders?k=v", "/v1/orders?k=a%40b.c+d"} {
		r := httptest.NewRequest("GET", target, nil)
		r.Header.Set("X-API-Key", "abc")
		// A plain cookie, one that is JSON to Express (j:), and a long one.
		for _, cookie := range []string{"a=1; s=2", `a=1; s=j:%22victim%22`, "s=" + strings.Repeat("x", 1000)} {
			r.Header.Set("Cookie", cookie)
			for _, client := range []netip.Addr{netip.MustParseAddr("192.0.2.7"), netip.MustParseAddr("2001:db8::1")} {
				if got := testing.AllocsPerRun(100, func() { buf, _ = k.Append(buf[:0], r, client, nil) }); got != 0 {
					t.Errorf("%s, cookie %.20q, client %v: got %v allocs per Append, want 0", target, cookie, client, got)
				}
			}
		}
	}
}

func BenchmarkKeyAppend(b *testing.B) {
	k := keyOf(b, "orders", "header:X-API-Key", "ip")
	r := httptest.NewRequest("GET", "/v1/orders", nil)
	r.Header.Set("X-API-Key", "abc")
	client := netip.MustParseAddr("2001:db8::1")
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 128)
		for b.Loop() {
			buf, _ = k.Append(buf[:0], r, client, nil)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			buf := make([]byte, 0, 128)
			for pb.Next() {
				buf, _ = k.Append(buf[:0], r, client, nil)
			}
		})
	})
	b.Run("query_cookie", func(b *testing.B) {
		// A query parameter and a cookie among a browser's usual
		// others: the readers every request on such a route runs.
		b.ReportAllocs()
		kc := keyOf(b, "orders", "query:api_key", "cookie:sid")
		rc := httptest.NewRequest("GET", "/v1/orders?page=2&api_key=k3y%2Dabc&sort=desc", nil)
		rc.Header.Set("Cookie", "_ga=GA1.2.123456789.1700000000; theme=dark; sid=Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA%3D%3D; lang=en-US")
		buf := make([]byte, 0, 128)
		for b.Loop() {
			buf, _ = kc.Append(buf[:0], rc, client, nil)
		}
	})
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		kj := keyOf(b, "otp", "json:user.phone")
		raw := []byte(`{"user":{"phone":"+15550100","name":"x"},"code":"123456"}`)
		buf := make([]byte, 0, 128)
		for b.Loop() {
			buf, _ = kj.Append(buf[:0], r, client, NewBody(raw))
		}
	})
}

// TestPathKey: the path source is the path the route matched, without one
// trailing slash, folded as the route compares paths: /V1/Users/ALICE/ is
// /v1/users/alice to an upstream that ignores case, as the route does.
func TestPathKey(t *testing.T) {
	t.Parallel()
	c := mustParse(t, `
routes:
  - name: folds
    match: {path_prefix: /v1/users/}
    upstream: http://127.0.0.1:9000
    limits: [{algorithm: fixed_window, limit: 1, window: 1s, key: [path]}]
  - name: exact
    match: {path_prefix: /v2/users/, case_sensitive: true}
    upstream: http://127.0.0.1:9000
    limits: [{algorithm: fixed_window, limit: 1, window: 1s, key: [path]}]
`, noEnv)
	for _, tc := range []struct{ target, want string }{
		{"/v1/users/alice", "/v1/users/alice"},
		{"/V1/Users/ALICE/", "/v1/users/alice"},
		{"/v1/users;x/al%C4%B1ce;y", "/v1/users/alice"},
		{"/v1/users/%C5%BFam/%E2%84%AAim", "/v1/users/sam/kim"},
		{"/v1/users/%C3%A9", "/v1/users/\u00e9"},
		{"/v2/users/ALICE/", "/v2/users/ALICE"},
		{"/v2/users/al%C4%B1ce", "/v2/users/al\u0131ce"},
		{"/", "/"},
	} {
		r := httptest.NewRequest("GET", tc.target, nil)
		rt := c.Table.Match(r)
		if rt == nil {
			rt = c.Table.Routes[0]
		}
		got, err := rt.Limits[0].Key.Append(nil, r, netip.Addr{}, nil)
		if err != nil || string(got) != tc.want {
			t.Errorf("%s on route %s: got %q, %v; want %q", tc.target, rt.Name, got, err, tc.want)
		}
	}
}

// TestJSONSourceInTheQuery: Rails merges the query over the body, so a
// json: source whose first name the query also gives (as Rails, PHP or
// qs read names) is given twice.
func TestJSONSourceInTheQuery(t *testing.T) {
	t.Parallel()
	k := keyOf(t, "otp", "json:user.phone")
	for _, tc := range []struct {
		query string
		dup   bool
	}{
		{"", false},
		{"other=1", false},
		{"user[phone]=%2B15550001", true},
		{"user=x", true},
		{"us%65r[phone]=1", true},
		{"User[phone]=1", false},
		{"phone=1", false},
	} {
		r := httptest.NewRequest("POST", "/v1/otp?"+tc.query, nil)
		_, err := k.Append(nil, r, netip.Addr{}, NewBody([]byte(`{"user":{"phone":"decoy"}}`)))
		if got := err != nil; got != tc.dup {
			t.Errorf("query %q: got error %v, want a duplicate %v", tc.query, err, tc.dup)
		}
	}
}
