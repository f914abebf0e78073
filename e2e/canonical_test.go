package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// lenientUpstream reads requests the way permissive frameworks do, and
// counts what it would act on: per endpoint and identity (phone, API key,
// host, client), the requests it served. It resolves dot segments and
// backslashes, drops ;parameters, merges slashes, ignores case and a
// trailing slash, honours X-Original-URL and method overrides, decodes JSON
// case-insensitively with the last duplicate winning (encoding/json), takes
// the last of repeated headers, query parameters (split on & and ;) and
// cookies, believes True-Client-IP and X_Forwarded_For, and keys hosts
// case-insensitively without port or trailing dot.
type lenientUpstream struct {
	*httptest.Server
	mu     sync.Mutex
	served map[string]int
	bad    []string // fields that must never reach an upstream
}

func newLenientUpstream(t *testing.T) *lenientUpstream {
	u := &lenientUpstream{served: map[string]int{}}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		what := u.identity(r, body)
		u.mu.Lock()
		u.served[what]++
		for name := range r.Header {
			switch {
			case strings.Contains(name, "_"), name == "True-Client-Ip", name == "X-Original-Url", name == "X-Rewrite-Url",
				name == "X-Http-Method-Override", name == "X-Method-Override", name == "Forwarded",
				strings.HasPrefix(name, "X-Forwarded-") && name != "X-Forwarded-For" && name != "X-Forwarded-Host" && name != "X-Forwarded-Proto":
				u.bad = append(u.bad, name+": "+r.Header.Get(name))
			}
		}
		u.mu.Unlock()
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *lenientUpstream) identity(r *http.Request, body []byte) string {
	method := strings.ToUpper(firstOf(r.Header, "X-Http-Method-Override", "X-Method-Override"))
	if method == "" {
		method = strings.ToUpper(r.Method)
	}
	target := firstOf(r.Header, "X-Original-Url", "X-Rewrite-Url")
	if target == "" {
		target = r.URL.EscapedPath()
	}
	target, _, _ = strings.Cut(target, "?")
	var segs []string
	for _, s := range strings.Split(strings.ReplaceAll(target, `\`, "/"), "/") {
		s, _, _ = strings.Cut(s, ";")
		if d, err := url.PathUnescape(s); err == nil {
			s = d
		}
		segs = append(segs, s)
	}
	p := strings.ToLower(strings.TrimSuffix(path.Clean("/"+strings.Join(segs, "/")), "/"))
	last := func(vs []string) string {
		if len(vs) == 0 {
			return ""
		}
		return vs[len(vs)-1]
	}
	switch p {
	case "/v1/otp":
		if method != "POST" {
			return "other"
		}
		return "otp|" + phoneOf(r.Header.Get("Content-Type"), body)
	case "/v1/key":
		return "key|" + last(r.Header.Values("X-Api-Key"))
	case "/v1/query":
		var vs []string
		for _, kv := range strings.FieldsFunc(r.URL.RawQuery, func(c rune) bool { return c == '&' || c == ';' }) {
			if k, v, _ := strings.Cut(kv, "="); k == "api_key" {
				vs = append(vs, v)
			}
		}
		return "query|" + last(vs)
	case "/v1/cookie":
		var vs []string
		for _, c := range r.Cookies() {
			if c.Name == "sid" {
				vs = append(vs, c.Value)
			}
		}
		return "cookie|" + last(vs)
	case "/v1/host":
		h := strings.ToLower(r.Header.Get("X-Forwarded-Host"))
		if host, port, err := net.SplitHostPort(h); err == nil && port == "80" {
			h = host
		}
		return "host|" + strings.TrimRight(h, ".")
	case "/v1/ip":
		ip := firstOf(r.Header, "True-Client-Ip", "X_forwarded_for", "X-Real-Ip")
		if ip == "" {
			ip, _, _ = strings.Cut(r.Header.Get("X-Forwarded-For"), ",")
		}
		return "ip|" + strings.TrimSpace(ip)
	}
	return "other"
}

func firstOf(h http.Header, names ...string) string {
	for _, n := range names {
		if v := h.Get(n); v != "" {
			return v
		}
	}
	return ""
}

// phoneOf reads the phone field as a framework would for the content type.
func phoneOf(ct string, body []byte) string {
	mt, _, _ := mime.ParseMediaType(ct)
	switch {
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		var v struct {
			Phone any `json:"phone"`
		}
		if json.Unmarshal(body, &v) != nil {
			return ""
		}
		switch p := v.Phone.(type) {
		case string:
			return p
		case float64:
			return strconv.FormatFloat(p, 'f', -1, 64)
		}
	case mt == "application/x-www-form-urlencoded":
		q, _ := url.ParseQuery(string(body))
		if vs := q["phone"]; len(vs) > 0 {
			return vs[len(vs)-1]
		}
	}
	return ""
}

// sendRaw writes raw to addr as bytes, so no client library normalises it,
// and returns the status of the response.
func sendRaw(t *testing.T, addr, raw string) int {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
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

// rawRequest builds an HTTP/1.1 request; Host defaults to
// acme.example.com and a body gets its Content-Length.
func rawRequest(line string, body string, headers ...string) string {
	var b strings.Builder
	b.WriteString(line + "\r\n")
	host := true
	for _, h := range headers {
		if strings.HasPrefix(strings.ToLower(h), "host:") {
			host = false
		}
	}
	if host {
		b.WriteString("Host: acme.example.com\r\n")
	}
	for _, h := range headers {
		b.WriteString(h + "\r\n")
	}
	if body != "" {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(body))
	}
	b.WriteString("Connection: close\r\n\r\n" + body)
	return b.String()
}

// TestCanonicalRequestRaw sends, as raw bytes through the real binary,
// every spelling of a request that once got past a limit. Each limited
// route (limit 2) sits beside a catch-all unlimited one, and the upstream
// reads requests as leniently as real frameworks do: for no endpoint and
// identity the upstream recognises may more than 2 requests reach it.
func TestCanonicalRequestRaw(t *testing.T) {
	t.Parallel()
	up := newLenientUpstream(t)
	limited := func(name, key string) string {
		return fmt.Sprintf("  - name: %s\n    match: {path: /v1/%s}\n    upstream: %s\n    limits:\n      - {algorithm: sliding_window_log, limit: 2, window: 10m, key: [%s]}\n", name, name, up.URL, key)
	}
	cfg := "listen: 127.0.0.1:0\nadmin: \"\"\nroutes:\n" +
		strings.Replace(limited("otp", "json:phone"), "match: {path: /v1/otp}", "match: {path: /v1/otp, methods: [POST]}", 1) +
		limited("key", "header:X-API-Key") + limited("query", "query:api_key") + limited("cookie", "cookie:sid") +
		limited("host", "header:Host") + limited("ip", "ip") +
		fmt.Sprintf("  - name: everything-else\n    upstream: %s\n", up.URL)
	in := start(t, writeConfig(t, cfg))
	addr := strings.TrimPrefix(in.HTTP, "http://")

	const victim = `{"phone":"+15550001"}`
	const ct = "Content-Type: application/json"
	var reqs []string
	for range 2 { // the budgets, spent the ordinary way
		reqs = append(reqs,
			rawRequest("POST /v1/otp HTTP/1.1", victim, ct),
			rawRequest("POST /v1/otp HTTP/1.1", `{"phone":15550002}`, ct),
			rawRequest("GET /v1/key HTTP/1.1", "", "X-API-Key: victim"),
			rawRequest("GET /v1/query?api_key=victim HTTP/1.1", ""),
			rawRequest("GET /v1/cookie HTTP/1.1", "", "Cookie: sid=victim"),
			rawRequest("GET /v1/host HTTP/1.1", ""),
			rawRequest("GET /v1/ip HTTP/1.1", ""),
		)
	}
	for i := range 3 {
		r := "r" + strconv.Itoa(i)
		reqs = append(reqs,
			rawRequest("POST /v1/otp HTTP/1.1", `{"phone":"`+r+`","Phone":"+15550001"}`, ct),
			rawRequest("POST /v1/otp HTTP/1.1", `{"phone":"`+r+`"}`, "Content-Type: application/x-www-form-urlencoded"),
			rawRequest("GET /v1/key HTTP/1.1", "", "X-API-Key: "+r, "X-API-Key: victim"),
			rawRequest("GET /v1/query?api_key="+r+"&api_key=victim HTTP/1.1", ""),
			rawRequest("GET /v1/query?api_key="+r+";api_key=victim HTTP/1.1", ""),
			rawRequest("GET /v1/cookie HTTP/1.1", "", "Cookie: sid="+r+"; sid=victim"),
			rawRequest("GET /v1/ip HTTP/1.1", "", "X_Forwarded_For: 198.51.100."+strconv.Itoa(i)),
			rawRequest("GET /v1/ip HTTP/1.1", "", "True-Client-IP: 198.51.100."+strconv.Itoa(i)),
			rawRequest("GET /v1/ip HTTP/1.1", "", "X-Forwarded-For: 198.51.100."+strconv.Itoa(i), "X-Real-IP: 198.51.100."+strconv.Itoa(i)),
		)
	}
	for _, body := range []string{`{"phone":15550002.0}`, `{"phone":1.5550002e7}`, `{"phone":155500020e-1}`} {
		reqs = append(reqs, rawRequest("POST /v1/otp HTTP/1.1", body, ct))
	}
	for _, target := range []string{"/v1/otp/", "//v1/otp", "/V1/OTP", "/v1/otp;x=1", "/v1;x/otp", "/x/..;/v1/otp", `/x\..\v1/otp`, "/x/%2e%2e/v1/otp", `/v1;"%2Fotp`} {
		reqs = append(reqs, rawRequest("POST "+target+" HTTP/1.1", victim, ct))
	}
	reqs = append(reqs,
		rawRequest("post /v1/otp HTTP/1.1", victim, ct),
		rawRequest("GET /public HTTP/1.1", victim, ct, "X-Original-URL: /v1/otp", "X-HTTP-Method-Override: POST"),
		rawRequest("POST /public HTTP/1.1", victim, ct, "X-Rewrite-URL: /v1/otp"),
		rawRequest("GET /v1/host HTTP/1.1", "", "Host: ACME.example.com"),
		rawRequest("GET /v1/host HTTP/1.1", "", "Host: acme.example.com."),
		rawRequest("GET /v1/host HTTP/1.1", "", "Host: acme.example.com:80"),
		rawRequest("GET /v1/ip HTTP/1.1", "", "X-Forwarded-Prefix: /admin", "X-Forwarded-Port: 8443", "X-Forwarded-Ssl: on", "Forwarded: for=198.51.100.9"),
		rawRequest("GET /v1/key HTTP/1.1", "", "X-API-Key: victim", "Connection: X-API-Key"),
		// Unlimited, so these reach the upstream whatever the budgets.
		rawRequest("GET /public HTTP/1.1", "", "X_Forwarded_For: 198.51.100.7", "True-Client-IP: 198.51.100.8",
			"X-Forwarded-Prefix: /admin", "X-Forwarded-Port: 8443", "X-Forwarded-Ssl: on", "Forwarded: for=198.51.100.9",
			"X-Method-Override: DELETE"),
	)
	statuses := map[int]int{}
	for _, raw := range reqs {
		statuses[sendRaw(t, addr, raw)]++
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	for what, n := range up.served {
		if what != "other" && n > 2 {
			t.Errorf("upstream served %d requests for %s, want at most the limit, 2", n, what)
		}
	}
	for _, h := range up.bad {
		t.Errorf("upstream got %s, want it removed", h)
	}
	if t.Failed() {
		t.Logf("statuses: %v; upstream served %v", statuses, up.served)
	}
}
