package routes

import (
	"errors"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"strings"
	"testing"
)

// koaCookie reads cookie name from a Cookie field as Koa's
// ctx.cookies.get does (koa 3.3.0, cookies 0.9.2, observed running
// behind sluice): the first match of `(?:^|;) *NAME=([^;]*)`, and, when
// that value starts with a double quote, the value without its first and
// last byte, whatever they are (`"victimX` is victim). Node has trimmed
// the field's trailing blanks first.
func koaCookie(field, name string) (string, bool) {
	m := regexp.MustCompile(`(?:^|;) *` + regexp.QuoteMeta(name) + `=([^;]*)`).FindStringSubmatch(strings.TrimRight(field, " \t"))
	if m == nil {
		return "", false
	}
	v := m[1]
	if strings.HasPrefix(v, `"`) {
		if len(v) < 2 {
			return "", true
		}
		v = v[1 : len(v)-1]
	}
	return v, true
}

// TestCookieQuoteAsKoaReadsIt: a cookie value that starts with a double
// quote but is not one quoted string is refused, since Koa drops its
// first and last byte: sid="victimA, sid="victimB, ... would each be a
// bucket of their own to sluice and victim to Koa.
func TestCookieQuoteAsKoaReadsIt(t *testing.T) {
	t.Parallel()
	v4 := netip.MustParseAddr("192.0.2.7")
	for _, tc := range []struct {
		name, cookie, want string
		refused            bool
	}{
		{"quoted", `sid="victim"`, "victim", false},
		{"quoted among others", `a=1; sid="victim"; b=2`, "victim", false},
		{"empty quotes", `sid=""`, "", false},
		{"quote inside", `sid=vic"tim`, "", true},
		{"quote inside a quoted string", `sid="vic"tim"`, "", true},
		{"no closing quote", `sid="victimA`, "", true},
		{"no closing quote before the next", `sid="victimA; b=2`, "", true},
		{"a lone quote", `sid="`, "", true},
		{"a byte after the closing quote", `sid="victim"A`, "", true},
		{"a blank after the closing quote", `sid="victim" ; b=2`, "", true},
		{"a blank before the opening quote", `sid= "victim"`, "", true},
		{"a blank inside the opening quote", `sid=" victim"`, "", true},
		{"a blank inside the closing quote", `sid="victim "`, "", true},
		{"quoted string cut at a comma", `sid="victim,A"`, "", true},
		{"quoted string ended by a comma", `sid="victim",A`, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest("GET", "/", nil)
			r.Header["Cookie"] = []string{tc.cookie}
			got, err := keyOf(t, "r", "cookie:sid").Append(nil, r, v4, nil)
			var amb *AmbiguousError
			if tc.refused {
				if !errors.As(err, &amb) {
					t.Errorf("got %q, %v; want refused", got, err)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Errorf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestCookieKeyPerKoaValue: every cookie value Koa reads is one bucket
// to sluice, or the request is refused. It tries every value of up to
// four bytes of a small alphabet that holds the quote, a blank and the
// separators.
func TestCookieKeyPerKoaValue(t *testing.T) {
	t.Parallel()
	v4 := netip.MustParseAddr("192.0.2.7")
	key := keyOf(t, "r", "cookie:sid")
	const alphabet = `va" ,;`
	values := []string{""}
	for n, from := 0, 0; n < 4; n++ {
		to := len(values)
		for _, v := range values[from:to] {
			for i := range alphabet {
				values = append(values, v+alphabet[i:i+1])
			}
		}
		from = to
	}
	seen := map[string]string{} // Koa's value -> the Cookie field that gave it
	buckets := map[string]string{}
	for _, v := range values {
		field := "sid=" + v
		kv, ok := koaCookie(field, "sid")
		if !ok {
			continue
		}
		r := httptest.NewRequest("GET", "/", nil)
		r.Header["Cookie"] = []string{strings.TrimRight(field, " \t")}
		got, err := key.Append(nil, r, v4, nil)
		if err != nil {
			continue
		}
		if b, ok := buckets[kv]; ok && b != string(got) {
			t.Errorf("Koa reads %q and %q as %q: got buckets %q and %q, want one", seen[kv], field, kv, b, got)
			continue
		}
		seen[kv], buckets[kv] = field, string(got)
	}
}
