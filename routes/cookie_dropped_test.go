package routes

import (
	"errors"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"strings"
	"testing"
)

// honoCookieValue is the cookie value Hono 4.13.23's parse (hono/cookie)
// takes, once it has stripped the double quotes around it.
var honoCookieValue = regexp.MustCompile(`^[ !#-:<-\[\]-~]*$`)

// readHonoCookie reads the cookie name from a Cookie line as Hono 4.13.23's
// getCookie(c, name) does behind sluice: pairs split at ";", name and
// value trimmed of blanks, the quotes around a value stripped, and the
// first pair of that name whose value holds only the bytes it allows
// taken. A value with any other byte is skipped as if it were not there.
func readHonoCookie(line, name string) (string, bool) {
	for _, pair := range strings.Split(line, ";") {
		k, v, ok := strings.Cut(pair, "=")
		if !ok || strings.Trim(k, " \t") != name {
			continue
		}
		v = strings.Trim(v, " \t")
		if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
			v = v[1 : len(v)-1]
		}
		if honoCookieValue.MatchString(v) {
			return v, true
		}
	}
	return "", false
}

// TestCookieHonoDrops: a sid that Hono's getCookie takes for no cookie at
// all (a double quote inside its value, a backslash, a control character),
// while Express, Koa and Fastify read it, must not be keyed on its value:
// sid=k1", sid=k2", ... would each be a bucket of their own, and to Hono
// all requests without a session. Observed behind sluice with Hono
// 4.13.23 on @hono/node-server 2.1.11: getCookie(c, "sid") was undefined
// for each of these, and sluice keyed the value.
func TestCookieHonoDrops(t *testing.T) {
	t.Parallel()
	v4 := netip.MustParseAddr("192.0.2.7")
	for _, cookie := range []string{
		`sid=k"`, `sid=vic"tim`, `sid="vic"tim"`, `sid=k";x=1`, `sid=.+"`,
		`sid=vic\tim`, `sid=\`, `sid=\"k\"`, "sid=vic\ttim", "sid=vic\x7ftim",
		`sid=j:"victim"`, `sid=j:{"a":1}`, `sid=j:""`,
		// Values it reads, as sluice does.
		`sid=victim`, `sid="victim"`, `sid=vic tim`, `sid=j:%22victim%22`, `sid=`,
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header["Cookie"] = []string{cookie}
		got, err := keyOf(t, "r", "cookie:sid").Append(nil, r, v4, nil)
		var amb *AmbiguousError
		if err != nil && !errors.As(err, &amb) {
			t.Errorf("%q: got %v, want a key or an AmbiguousError", cookie, err)
			continue
		}
		if _, read := readHonoCookie(cookie, "sid"); !read && err == nil && len(got) > 0 {
			t.Errorf("%q: Hono reads no sid, sluice keys %q; want refused or the empty value", cookie, got)
		}
		if _, read := readHonoCookie(cookie, "sid"); read && err != nil {
			t.Errorf("%q: Hono reads a sid, sluice refuses: %v", cookie, err)
		}
	}
}
