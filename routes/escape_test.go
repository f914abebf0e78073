package routes

import (
	"fmt"
	"net/http/httptest"
	"net/netip"
	"testing"
)

// TestOneValueOneBucket: spellings that a framework, running behind
// sluice, read as one value must be one bucket, or one of them refused:
// otherwise each spelling is a budget of its own for that value.
func TestOneValueOneBucket(t *testing.T) {
	t.Parallel()
	type spelling struct{ query, cookie string }
	pairs := []struct {
		name string // the framework and what it read
		a, b spelling
	}{
		// node:querystring (Express 5.3.0's default, Koa 3.3.0) and
		// URLSearchParams (hapi 21.4.13) read a byte that is not UTF-8
		// as U+FFFD.
		{"querystring: %FF is U+FFFD", spelling{query: "api_key=%FF"}, spelling{query: "api_key=%EF%BF%BD"}},
		{"querystring: %C3( is U+FFFD(", spelling{query: "api_key=%C3%28"}, spelling{query: "api_key=%EF%BF%BD("}},
		{"querystring: an escaped surrogate is U+FFFD three times", spelling{query: "api_key=%ED%A0%80"}, spelling{query: "api_key=%EF%BF%BD%EF%BF%BD%EF%BF%BD"}},
		// qs 6.17.1 (Express's extended parser) and fast-querystring
		// (Fastify 5.12.8) keep a value whose escapes do not decode as
		// it was sent. (A pair with a "%" that starts no escape never
		// reaches them: the gateway forwards only the pairs that parse.)
		{"qs: %FF stays", spelling{query: "api_key=%FF"}, spelling{query: "api_key=%25FF"}},
		// The cookie module of Express (0.7.2) and Fastify (2.0.2)
		// decodes with decodeURIComponent, all or nothing.
		{"cookie: %FF stays", spelling{cookie: "sid=%FF"}, spelling{cookie: "sid=%25FF"}},
		{"cookie: a broken escape keeps the good one", spelling{cookie: "sid=vic%tim%41"}, spelling{cookie: "sid=vic%25tim%2541"}},
		{"cookie: a broken escape alone stays", spelling{cookie: "sid=100%"}, spelling{cookie: "sid=100%25"}},
		// gin 1.12.0's c.Cookie unescapes a value with url.QueryUnescape
		// and gives the empty value when that fails: sid=100% and
		// sid=vic%zztim are "" to it, as sid= is.
		{"gin: a broken escape is the empty value", spelling{cookie: "sid=100%"}, spelling{cookie: "sid="}},
		{"gin: a broken escape beside letters is the empty value", spelling{cookie: "sid=vic%zztim"}, spelling{cookie: "sid="}},
		{"gin: a quoted broken escape is the empty value", spelling{cookie: `sid="100%"`}, spelling{cookie: "sid="}},
		// Express (cookie 0.7.2), Koa (cookies 0.9.2) and Fastify read a
		// cookie on past a comma, to the ";".
		{"cookie: a comma does not end a value", spelling{cookie: "sid=victim,x"}, spelling{cookie: "sid=victim%2Cx"}},
		// Express and Koa strip the quotes and keep a backslash.
		{"cookie: a backslash in quotes stays", spelling{cookie: `sid="vic\164im"`}, spelling{cookie: `sid=vic%5C164im`}},
		// Fastify's cookie module (cookie 2.0.2) keeps the quotes.
		{"cookie: Fastify keeps quotes", spelling{cookie: `sid="victim"`}, spelling{cookie: "sid=%22victim%22"}},
		{"cookie: Fastify keeps a quote", spelling{cookie: `sid="victim"`}, spelling{cookie: `sid=%22victim"`}},
		// Node reads a Cookie field as Latin-1: a raw "é" is "Ã©", as
		// the escaped UTF-8 of "Ã©" is.
		{"cookie: Node reads raw bytes as Latin-1", spelling{cookie: "sid=\xc3\xa9"}, spelling{cookie: "sid=%C3%83%C2%A9"}},
		{"cookie: Node reads a raw byte as Latin-1", spelling{cookie: "sid=\xff"}, spelling{cookie: "sid=%C3%BF"}},
		{"cookie: Node reads raw bytes in j: as Latin-1", spelling{cookie: "sid=j:\"\xc3\xa9\""}, spelling{cookie: "sid=j:\"%C3%83%C2%A9\""}},
	}
	v4 := netip.MustParseAddr("192.0.2.7")
	bucket := func(t *testing.T, s spelling) (string, error) {
		source := "query:api_key"
		if s.cookie != "" {
			source = "cookie:sid"
		}
		r := httptest.NewRequest("GET", "/", nil)
		r.URL.RawQuery = s.query
		if s.cookie != "" {
			r.Header["Cookie"] = []string{s.cookie}
		}
		got, err := keyOf(t, "r", source).Append(nil, r, v4, nil)
		return string(got), err
	}
	for _, tc := range pairs {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, errA := bucket(t, tc.a)
			b, errB := bucket(t, tc.b)
			if errA == nil && errB == nil && a != b {
				t.Errorf("%+v and %+v: got buckets %q and %q, want one, or one refused", tc.a, tc.b, a, b)
			}
		})
	}
	// Every byte that is not UTF-8 alone is U+FFFD to node:querystring.
	want, err := bucket(t, spelling{query: "api_key=%EF%BF%BD"})
	if err != nil {
		t.Fatalf("%%EF%%BF%%BD: got %v, want a bucket", err)
	}
	for c := 0x80; c <= 0xff; c++ {
		q := fmt.Sprintf("api_key=%%%02X", c)
		if got, err := bucket(t, spelling{query: q}); err == nil && got != want {
			t.Errorf("%s: got bucket %q, want %q (U+FFFD, as querystring reads it) or refused", q, got, want)
		}
	}
}
