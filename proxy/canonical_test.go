package proxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
)

// canonicalConfig has a limited route per kind of key source beside a
// catch-all unlimited one; each route forwards under its own upstream
// path, so the path the upstream sees names the route too.
const canonicalConfig = `
log: {log_keys: true}
routes:
  - name: otp
    match: {path: /v1/otp, methods: [POST]}
    upstream: %[1]s/otp
    limits:
      - {algorithm: sliding_window_log, limit: 100, window: 10m, key: [json:phone]}
  - name: keyed
    match: {path_prefix: /v1/keyed}
    upstream: %[1]s/keyed
    strip_prefix: /v1
    limits:
      - {algorithm: fixed_window, limit: 100, window: 1m, key: [header:X-API-Key, query:api_key, cookie:sid]}
  - name: hosted
    match: {path: /v1/host}
    upstream: %[1]s/host
    limits:
      - {algorithm: fixed_window, limit: 100, window: 1m, key: [header:Host, method, path]}
  - name: v2
    match: {path: /v1/v2, headers: {X-Api-Version: "2"}}
    upstream: %[1]s/v2
    limits:
      - {algorithm: fixed_window, limit: 100, window: 1m, key: [ip]}
  - name: all
    upstream: %[1]s/all
`

// seen is what the upstream received.
type seen struct {
	method, uri, host string
	header            http.Header
}

// canonicalRig is a gateway on a real listener, with a recording upstream
// and the access log kept for the key values.
type canonicalRig struct {
	addr string
	mu   sync.Mutex
	got  []seen
	log  *syncBuffer
	n    int // requests sent, for their X-Request-Id
	id   string
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func newCanonicalRig(t *testing.T, trusted string) *canonicalRig {
	t.Helper()
	rig := &canonicalRig{log: &syncBuffer{}}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		rig.mu.Lock()
		rig.got = append(rig.got, seen{r.Method, r.RequestURI, r.Host, r.Header.Clone()})
		rig.mu.Unlock()
	}))
	t.Cleanup(up.Close)
	yaml := fmt.Sprintf(canonicalConfig, up.URL)
	if trusted != "" {
		yaml += "trusted_proxies: [" + trusted + "]\n"
	}
	cfg, err := routes.Parse("test.yaml", []byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	store := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{})
	t.Cleanup(func() { store.Close() })
	g := New(Options{Logger: slog.New(slog.NewJSONHandler(rig.log, nil))})
	g.Load(cfg, store)
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	rig.addr = srv.Listener.Addr().String()
	return rig
}

// send writes raw to the gateway as bytes, so nothing normalises it on the
// way, and returns the status and what the upstream saw (nil if nothing).
func (rig *canonicalRig) send(t *testing.T, raw string) (int, *seen) {
	t.Helper()
	rig.mu.Lock()
	before := len(rig.got)
	rig.n++
	rig.id = fmt.Sprintf("canonical-%d", rig.n)
	rig.mu.Unlock()
	// The id finds this request's access log line.
	line, rest, _ := strings.Cut(raw, "\r\n")
	raw = line + "\r\nX-Request-Id: " + rig.id + "\r\n" + rest
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
	rig.mu.Lock()
	defer rig.mu.Unlock()
	if len(rig.got) > before {
		s := rig.got[len(rig.got)-1]
		return resp.StatusCode, &s
	}
	return resp.StatusCode, nil
}

// lastKeys returns the key values in the access log line of the last
// request sent. The line is written once the response is, so it may
// follow the response by a moment.
func (rig *canonicalRig) lastKeys(t *testing.T) []string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, line := range strings.Split(rig.log.String(), "\n") {
			var l struct {
				ID   string   `json:"request_id"`
				Keys []string `json:"keys"`
			}
			if json.Unmarshal([]byte(line), &l) == nil && l.ID == rig.id {
				return l.Keys
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no access log line for request %s", rig.id)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// req builds a raw HTTP/1.1 request; body gets its Content-Length.
func req(line string, headers []string, body string) string {
	var b strings.Builder
	b.WriteString(line + "\r\n")
	hasHost := false
	for _, h := range headers {
		hasHost = hasHost || strings.HasPrefix(strings.ToLower(h), "host:")
	}
	if !hasHost {
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

const jsonCT = "Content-Type: application/json"

// TestCanonicalRequest lists each way of spelling a request differently
// that got past a limit before the request had one canonical form, and
// what sluice does with it: the status, the upstream request (method and
// path, so also the route), the key values, and the fields the upstream
// must not get.
func TestCanonicalRequest(t *testing.T) {
	t.Parallel()
	rig := newCanonicalRig(t, "")
	for _, tc := range []struct {
		name    string
		raw     string
		status  int
		method  string // at the upstream; "" with uri ""
		uri     string // at the upstream; "" when nothing may reach it
		keys    []string
		missing []string // fields the upstream must not see
	}{
		{"json plain", req("POST /v1/otp HTTP/1.1", []string{jsonCT}, `{"phone":"+15550001"}`), 200, "POST", "/otp/v1/otp", []string{"+15550001"}, nil},
		{"json field twice in another case", req("POST /v1/otp HTTP/1.1", []string{jsonCT}, `{"phone":"r1","Phone":"+15550001"}`), 400, "", "", nil, nil},
		{"json field twice exactly", req("POST /v1/otp HTTP/1.1", []string{jsonCT}, `{"phone":"r1","phone":"+15550001"}`), 400, "", "", nil, nil},
		{"json field also in the query", req("POST /v1/otp?phone=%2B15550001 HTTP/1.1", []string{jsonCT}, `{"phone":"decoy"}`), 400, "", "", nil, nil},
		{"json field also in the query as PHP names it", req("POST /v1/otp?phone[]=%2B15550001 HTTP/1.1", []string{jsonCT}, `{"phone":"decoy"}`), 400, "", "", nil, nil},
		{"json field and another query parameter", req("POST /v1/otp?phones=1&x=2 HTTP/1.1", []string{jsonCT}, `{"phone":"+15550001"}`), 200, "POST", "/otp/v1/otp?phones=1&x=2", []string{"+15550001"}, nil},
		{"json vendor type", req("POST /v1/otp HTTP/1.1", []string{"Content-Type: application/vnd.acme+json; charset=utf-8"}, `{"phone":"+15550001"}`), 200, "POST", "/otp/v1/otp", []string{"+15550001"}, nil},
		{"form body that parses as JSON", req("POST /v1/otp HTTP/1.1", []string{"Content-Type: application/x-www-form-urlencoded"}, `{"phone":"r1"}`), 200, "POST", "/otp/v1/otp", []string{""}, nil},
		{"body without a type", req("POST /v1/otp HTTP/1.1", nil, `{"phone":"r1"}`), 200, "POST", "/otp/v1/otp", []string{""}, nil},
		{"two content types", req("POST /v1/otp HTTP/1.1", []string{"Content-Type: text/plain", jsonCT}, `{"phone":"r1"}`), 400, "", "", nil, nil},
		{"number 1", req("POST /v1/otp HTTP/1.1", []string{jsonCT}, `{"phone":1}`), 200, "POST", "/otp/v1/otp", []string{"1"}, nil},
		{"number 1.0", req("POST /v1/otp HTTP/1.1", []string{jsonCT}, `{"phone":1.0}`), 200, "POST", "/otp/v1/otp", []string{"1"}, nil},
		{"number 1e0", req("POST /v1/otp HTTP/1.1", []string{jsonCT}, `{"phone":1e0}`), 200, "POST", "/otp/v1/otp", []string{"1"}, nil},
		{"escaped string", req("POST /v1/otp HTTP/1.1", []string{jsonCT}, `{"phone":"\u002b15550001"}`), 200, "POST", "/otp/v1/otp", []string{"+15550001"}, nil},
		{"path trailing slash", req("POST /v1/otp/ HTTP/1.1", []string{jsonCT}, `{"phone":"+15550001"}`), 200, "POST", "/otp/v1/otp/", []string{"+15550001"}, nil},
		{"path double slash", req("POST //v1/otp HTTP/1.1", []string{jsonCT}, `{"phone":"+15550001"}`), 200, "POST", "/otp/v1/otp", []string{"+15550001"}, nil},
		{"path upper case", req("POST /V1/OTP HTTP/1.1", []string{jsonCT}, `{"phone":"+15550001"}`), 200, "POST", "/otp/V1/OTP", []string{"+15550001"}, nil},
		{"path parameter at the end", req("POST /v1/otp;x=1 HTTP/1.1", []string{jsonCT}, `{"phone":"+15550001"}`), 200, "POST", "/otp/v1/otp;x=1", []string{"+15550001"}, nil},
		{"path parameter inside", req("POST /v1;x/otp HTTP/1.1", []string{jsonCT}, `{"phone":"+15550001"}`), 200, "POST", "/otp/v1;x/otp", []string{"+15550001"}, nil},
		{"path dot-dot with parameter", req("POST /x/..;/v1/otp HTTP/1.1", []string{jsonCT}, `{"phone":"+15550001"}`), 400, "", "", nil, nil},
		{"path backslashes", req(`POST /x\..\v1/otp HTTP/1.1`, []string{jsonCT}, `{"phone":"+15550001"}`), 400, "", "", nil, nil},
		{"path escaped dot-dot", req("POST /x/%2e%2e/v1/otp HTTP/1.1", []string{jsonCT}, `{"phone":"+15550001"}`), 400, "", "", nil, nil},
		{"path encoded NUL", req("POST /v1/otp%00 HTTP/1.1", []string{jsonCT}, `{"phone":"+15550001"}`), 400, "", "", nil, nil},
		{"path with a Kelvin sign", req("GET /v1/%E2%84%AAeyed HTTP/1.1", nil, ""), 200, "GET", "/keyed/%E2%84%AAeyed", []string{"||"}, nil},
		{"path with a long s, keyed folded", req("GET /V1/HO%C5%BFT/ HTTP/1.1", nil, ""), 200, "GET", "/host/V1/HO%C5%BFT/", []string{"acme.example.com|GET|/v1/host"}, nil},
		{"path encoded slash next to a slash", req("POST /v1/%2Fotp HTTP/1.1", []string{jsonCT}, `{"phone":"+15550001"}`), 200, "POST", "/otp/v1/%2Fotp", []string{"+15550001"}, nil},
		{"path dot-dot in parameters between encoded slashes", req("POST /x;%2F..%2Fv1%2Fotp HTTP/1.1", []string{jsonCT}, `{"phone":"+15550001"}`), 400, "", "", nil, nil},
		{"method lower case", req("post /v1/otp HTTP/1.1", []string{jsonCT}, `{"phone":"+15550001"}`), 200, "POST", "/otp/v1/otp", []string{"+15550001"}, nil},
		{"header twice", req("GET /v1/keyed HTTP/1.1", []string{"X-API-Key: a", "X-Api-Key: b"}, ""), 400, "", "", nil, nil},
		{"query parameter twice", req("GET /v1/keyed?api_key=a&api_key=b HTTP/1.1", nil, ""), 400, "", "", nil, nil},
		{"query parameter twice escaped", req("GET /v1/keyed?api_key=a&api%5Fkey=b HTTP/1.1", nil, ""), 400, "", "", nil, nil},
		{"cookie twice", req("GET /v1/keyed HTTP/1.1", []string{"Cookie: sid=a; sid=b"}, ""), 400, "", "", nil, nil},
		{"cookie twice on two lines", req("GET /v1/keyed HTTP/1.1", []string{"Cookie: sid=a", "Cookie: sid=b"}, ""), 400, "", "", nil, nil},
		{"key sources once", req("GET /v1/keyed?api_key=q HTTP/1.1", []string{"X-API-Key: h", "Cookie: sid=c; other=1"}, ""), 200, "GET", "/keyed/keyed?api_key=q", []string{"h|q|c"}, nil},
		{"header folded onto an empty line", req("GET /v1/keyed HTTP/1.1", []string{"X-API-Key: h\r\n \r\n\t"}, ""), 200, "GET", "/keyed/keyed", []string{"h||"}, nil},
		{"query with a fragment", req("GET /v1/keyed?api_key=q#1 HTTP/1.1", nil, ""), 200, "GET", "/keyed/keyed?api_key=q%231", []string{"|q#1|"}, nil},
		{"query name as PHP reads it, twice", req("GET /v1/keyed?api.key=victim&api_key=decoy HTTP/1.1", nil, ""), 400, "", "", nil, nil},
		// PHP reads "api key" as api_key, Flask and Django as no api_key.
		{"query name as PHP reads it, alone", req("GET /v1/keyed?api%20key=victim HTTP/1.1", nil, ""), 400, "", "", nil, nil},
		{"query name escaped", req("GET /v1/keyed?api%5Fkey=victim HTTP/1.1", nil, ""), 200, "GET", "/keyed/keyed?api%5Fkey=victim", []string{"|victim|"}, nil},
		{"query array and plain", req("GET /v1/keyed?api_key[]=victim&api_key=decoy HTTP/1.1", nil, ""), 400, "", "", nil, nil},
		{"cookie escaped", req("GET /v1/keyed HTTP/1.1", []string{"Cookie: sid=%76ictim"}, ""), 200, "GET", "/keyed/keyed", []string{"||victim"}, nil},
		// Django decodes the escape, Node frameworks keep the backslash.
		{"cookie quoted with an octal escape", req("GET /v1/keyed HTTP/1.1", []string{`Cookie: sid="\166ictim"`}, ""), 400, "", "", nil, nil},
		{"cookie plus and escaped plus", req("GET /v1/keyed HTTP/1.1", []string{"Cookie: sid=a+b%2Bc"}, ""), 200, "GET", "/keyed/keyed", []string{"||a b c"}, nil},
		{"cookie name escaped, twice", req("GET /v1/keyed HTTP/1.1", []string{"Cookie: s%69d=a; sid=b"}, ""), 400, "", "", nil, nil},
		{"cookie array and plain", req("GET /v1/keyed HTTP/1.1", []string{"Cookie: sid[]=a; sid=b"}, ""), 400, "", "", nil, nil},
		{"query with a semicolon", req("GET /v1/keyed?api_key=a;api_key=b&x=1 HTTP/1.1", nil, ""), 200, "GET", "/keyed/keyed?x=1", []string{"||"}, nil},
		{"path parameter with a raw quote and an encoded slash", req("POST /v1;\"%2Fotp HTTP/1.1", []string{jsonCT}, `{"phone":"+15550001"}`), 200, "POST", "/otp/v1;%22/otp", []string{"+15550001"}, nil},
		{"encoded slash stays encoded", req("GET /v1/keyed/a%2Fb HTTP/1.1", nil, ""), 200, "GET", "/keyed/keyed/a%2Fb", []string{"||"}, nil},
		{"strip_prefix ignores case and parameters", req("GET /V1;p/keyed/x HTTP/1.1", nil, ""), 200, "GET", "/keyed/keyed/x", []string{"||"}, nil},
		{"host", req("GET /v1/host HTTP/1.1", []string{"Host: acme.example.com"}, ""), 200, "GET", "/host/v1/host", []string{"acme.example.com|GET|/v1/host"}, nil},
		{"host upper case", req("GET /v1/host HTTP/1.1", []string{"Host: ACME.example.com"}, ""), 200, "GET", "/host/v1/host", []string{"acme.example.com|GET|/v1/host"}, nil},
		{"host trailing dot", req("GET /v1/host HTTP/1.1", []string{"Host: acme.example.com."}, ""), 200, "GET", "/host/v1/host", []string{"acme.example.com|GET|/v1/host"}, nil},
		{"host with a comma", req("GET /v1/host HTTP/1.1", []string{"Host: acme.example.com,x"}, ""), 400, "", "", nil, nil},
		{"host default port", req("GET /v1/host HTTP/1.1", []string{"Host: acme.example.com:80"}, ""), 200, "GET", "/host/v1/host", []string{"acme.example.com|GET|/v1/host"}, nil},
		{"path key without parameters", req("get /v1/host;x HTTP/1.1", nil, ""), 200, "GET", "/host/v1/host;x", []string{"acme.example.com|GET|/v1/host"}, nil},
		{"underscore header", req("GET /v1/keyed HTTP/1.1", []string{"X_Forwarded_For: 198.51.100.1", "X_API_Key: k"}, ""), 200, "GET", "/keyed/keyed", []string{"||"}, []string{"X_forwarded_for", "X_api_key"}},
		{"dotted header", req("GET /v1/keyed HTTP/1.1", []string{"X.Forwarded.For: 198.51.100.1", "X-API-Key: k", "X.API.Key: victim"}, ""), 200, "GET", "/keyed/keyed", []string{"k||"}, []string{"X.forwarded.for", "X.api.key"}},
		{"header named in Connection is no key", req("GET /v1/keyed HTTP/1.1", []string{"X-API-Key: k", "Connection: X-API-Key"}, ""), 200, "GET", "/keyed/keyed", []string{"||"}, []string{"X-Api-Key"}},
		{"header named in Connection matches nothing", req("GET /v1/v2 HTTP/1.1", []string{"X-Api-Version: 2", "Connection: x-api-version"}, ""), 200, "GET", "/all/v1/v2", nil, []string{"X-Api-Version"}},
		{"header matches folded", req("GET /v1/v2 HTTP/1.1", []string{"X-Api-Version: 2\r\n "}, ""), 200, "GET", "/v2/v1/v2", []string{"127.0.0.1"}, nil},
		{"header routes match on, twice", req("GET /v1/v2 HTTP/1.1", []string{"X-Api-Version: 2", "X-Api-Version: 1"}, ""), 400, "", "", nil, nil},
		{"header routes match on, twice in other routes' requests", req("GET /v1/keyed HTTP/1.1", []string{"X-Api-Version: 2", "X-Api-Version: 1"}, ""), 400, "", "", nil, nil},
		{"header matches", req("GET /v1/v2 HTTP/1.1", []string{"X-Api-Version: 2"}, ""), 200, "GET", "/v2/v1/v2", []string{"127.0.0.1"}, nil},
		{"upgrade to h2c", req("GET /v1/v2 HTTP/1.1", []string{"X-Api-Version: 2", "Connection: Upgrade, HTTP2-Settings", "Upgrade: h2c", "HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA"}, ""), 200, "GET", "/v2/v1/v2", []string{"127.0.0.1"}, []string{"Upgrade", "Http2-Settings"}},
		{"upgrade to h2c without naming its settings", req("GET /v1/v2 HTTP/1.1", []string{"X-Api-Version: 2", "Connection: Upgrade", "Upgrade: h2c", "HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA"}, ""), 200, "GET", "/v2/v1/v2", []string{"127.0.0.1"}, []string{"Upgrade", "Http2-Settings"}},
		{"upgrade to websocket or h2c", req("GET /v1/v2 HTTP/1.1", []string{"X-Api-Version: 2", "Connection: Upgrade", "Upgrade: websocket, h2c"}, ""), 200, "GET", "/v2/v1/v2", []string{"127.0.0.1"}, []string{"Upgrade"}},
		{"upgrade given twice", req("GET /v1/v2 HTTP/1.1", []string{"X-Api-Version: 2", "Connection: Upgrade", "Upgrade: websocket", "Upgrade: h2c"}, ""), 200, "GET", "/v2/v1/v2", []string{"127.0.0.1"}, []string{"Upgrade"}},
		{"untrusted forwarding fields", req("GET /v1/v2 HTTP/1.1", []string{
			"X-Api-Version: 2", "X-Forwarded-For: 198.51.100.1", "X-Real-IP: 198.51.100.2", "True-Client-IP: 198.51.100.3",
			"Forwarded: for=198.51.100.4", "X-Forwarded-Prefix: /admin", "X-Forwarded-Port: 8443", "X-Forwarded-Ssl: on",
			"X-Original-URL: /admin", "X-Rewrite-URL: /admin", "X-HTTP-Method-Override: DELETE", "X-Method-Override: DELETE",
			"X-Forwarded: for=198.51.100.5", "Forwarded-For: 198.51.100.6", "X-Client-IP: 198.51.100.7", "Client-IP: 198.51.100.8",
			"X-Cluster-Client-IP: 198.51.100.9", "CF-Connecting-IP: 198.51.100.10", "CF-Connecting-IPv6: 2001:db8::1",
			"Cf-Pseudo-IPv4: 198.51.100.11", "Fastly-Client-IP: 198.51.100.12", "X-AppEngine-User-IP: 198.51.100.13",
		}, ""), 200, "GET", "/v2/v1/v2", []string{"127.0.0.1"}, []string{
			"True-Client-Ip", "Forwarded", "X-Forwarded-Prefix", "X-Forwarded-Port", "X-Forwarded-Ssl",
			"X-Original-Url", "X-Rewrite-Url", "X-Http-Method-Override", "X-Method-Override",
			"X-Forwarded", "Forwarded-For", "X-Client-Ip", "Client-Ip", "X-Cluster-Client-Ip", "Cf-Connecting-Ip",
			"Cf-Connecting-Ipv6", "Cf-Pseudo-Ipv4", "Fastly-Client-Ip", "X-Appengine-User-Ip",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, got := rig.send(t, tc.raw)
			if status != tc.status {
				t.Errorf("got status %d, want %d", status, tc.status)
			}
			switch {
			case tc.uri == "" && got != nil:
				t.Fatalf("upstream got %s %s, want nothing", got.method, got.uri)
			case tc.uri == "":
				return
			case got == nil:
				t.Fatalf("upstream got nothing, want %s %s", tc.method, tc.uri)
			}
			if got.method != tc.method || got.uri != tc.uri {
				t.Errorf("upstream got %s %s, want %s %s", got.method, got.uri, tc.method, tc.uri)
			}
			if keys := rig.lastKeys(t); tc.keys != nil && fmt.Sprint(keys) != fmt.Sprint(tc.keys) {
				t.Errorf("got keys %q, want %q", keys, tc.keys)
			}
			for _, h := range tc.missing {
				if v, ok := got.header[h]; ok {
					t.Errorf("upstream got %s: %q, want it removed", h, v)
				}
			}
			for name := range got.header {
				if strings.Contains(name, "_") {
					t.Errorf("upstream got header %s, want no names with _", name)
				}
			}
			if xfh := got.header.Get("X-Forwarded-Host"); strings.HasPrefix(tc.name, "host") && xfh != "acme.example.com" {
				t.Errorf("upstream got X-Forwarded-Host %q, want acme.example.com", xfh)
			}
			if strings.HasPrefix(tc.name, "untrusted") {
				if xff := got.header.Get("X-Forwarded-For"); xff != "127.0.0.1" {
					t.Errorf("upstream got X-Forwarded-For %q, want 127.0.0.1 (the peer alone)", xff)
				}
				if rip := got.header.Get("X-Real-Ip"); rip != "127.0.0.1" {
					t.Errorf("upstream got X-Real-IP %q, want 127.0.0.1", rip)
				}
			}
		})
	}
}

// TestCanonicalTrustedForwarding checks that a trusted proxy's forwarding
// fields pass, and that one named in Connection is gone before the client
// address is read from it.
func TestCanonicalTrustedForwarding(t *testing.T) {
	t.Parallel()
	rig := newCanonicalRig(t, "127.0.0.1/32")
	status, got := rig.send(t, req("GET /v1/v2 HTTP/1.1", []string{"X-Api-Version: 2", "X-Forwarded-For: 198.51.100.1", "X-Forwarded-Prefix: /api", "CF-Connecting-IP: 198.51.100.1", "X-Client-IP: 198.51.100.1"}, ""))
	if status != 200 || got == nil {
		t.Fatalf("got status %d, want 200", status)
	}
	for _, h := range []string{"Cf-Connecting-Ip", "X-Client-Ip"} {
		if v := got.header.Get(h); v != "198.51.100.1" {
			t.Errorf("upstream got %s %q, want 198.51.100.1 from a trusted proxy", h, v)
		}
	}
	if keys := rig.lastKeys(t); fmt.Sprint(keys) != "[198.51.100.1]" {
		t.Errorf("got keys %q, want [198.51.100.1]", keys)
	}
	if v := got.header.Get("X-Forwarded-Prefix"); v != "/api" {
		t.Errorf("upstream got X-Forwarded-Prefix %q, want /api from a trusted proxy", v)
	}
	status, _ = rig.send(t, req("GET /v1/v2 HTTP/1.1", []string{"X-Api-Version: 2", "X-Forwarded-For: 198.51.100.1", "Connection: X-Forwarded-For"}, ""))
	if keys := rig.lastKeys(t); status != 200 || fmt.Sprint(keys) != "[127.0.0.1]" {
		t.Errorf("X-Forwarded-For named in Connection: got status %d keys %q, want 200 [127.0.0.1]", status, keys)
	}
}

// ordinaryRequest is a request already in canonical form, as most are.
func ordinaryRequest() *http.Request {
	r := httptest.NewRequest("POST", "/v1/orders/7?expand=items", nil)
	r.Host = "api.example.com"
	r.RemoteAddr = "203.0.113.5:4000"
	r.Header.Set("X-Api-Key", "abc")
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("User-Agent", "curl/8.5.0")
	r.Header.Set("Accept", "*/*")
	r.Header.Set("Connection", "keep-alive")
	return r
}

func TestCanonicalizeAllocs(t *testing.T) {
	trust := NewTrust(nil)
	r := ordinaryRequest()
	if got := testing.AllocsPerRun(100, func() { trust.canonicalize(r) }); got != 0 {
		t.Errorf("got %v allocs canonicalising an ordinary request, want 0", got)
	}
}

func BenchmarkCanonicalize(b *testing.B) {
	trust := NewTrust(nil)
	b.Run("ordinary", func(b *testing.B) {
		b.ReportAllocs()
		r := ordinaryRequest()
		for b.Loop() {
			trust.canonicalize(r)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			r := ordinaryRequest()
			for pb.Next() {
				trust.canonicalize(r)
			}
		})
	})
}

// TestConnectionLongTokens: a field named in Connection by a token longer
// than the stack buffer is removed like a short one, with one lookup per
// token: a scan of every field per token let one request of 7,000 long
// tokens and 60,000 fields cost 22 s of CPU.
func TestConnectionLongTokens(t *testing.T) {
	t.Parallel()
	long := textproto.CanonicalMIMEHeaderKey("x-" + strings.Repeat("abcdefghij", 7)) // as the server stores it
	h := http.Header{
		long:         {"v"},
		"X-Keep":     {"k"},
		"Connection": {strings.ToLower(long) + ", " + strings.ToUpper(long[:40])},
	}
	for i := range 1000 {
		h["X-Filler-"+strconv.Itoa(i)] = []string{""}
		h["Connection"][0] += ", x-" + strings.Repeat("long", 20) + strconv.Itoa(i)
	}
	cleanHeaders(h, false)
	if _, ok := h[long]; ok {
		t.Errorf("%s named in Connection in lower case: kept", long)
	}
	if h.Get("X-Keep") != "k" || len(h) != 1002 {
		t.Errorf("got %d fields with X-Keep %q, want the 1000 fillers, X-Keep and Connection", len(h), h.Get("X-Keep"))
	}
}

func BenchmarkConnectionLongTokens(b *testing.B) {
	var conn strings.Builder
	h := http.Header{}
	for i := range 2000 {
		h["X-Filler-"+strconv.Itoa(i)] = []string{""}
		fmt.Fprintf(&conn, "x-%s%d, ", strings.Repeat("long", 20), i)
	}
	for b.Loop() {
		h["Connection"] = []string{conn.String()}
		cleanHeaders(h, true)
	}
}
