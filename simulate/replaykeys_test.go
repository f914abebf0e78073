package simulate

import (
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/routes"
)

// gatewayKey is the key the gateway's own code builds for a (canonical)
// request on a route of the default kind (case-insensitive) whose one
// limit is keyed by source.
func gatewayKey(t *testing.T, source, method, target, client string) string {
	t.Helper()
	cfg, err := routes.Parse("sluice.yaml", []byte(`
routes:
  - name: api
    match: {path_prefix: /}
    upstream: http://127.0.0.1:9000
    limits: [{algorithm: fixed_window, limit: 1, window: 1m, key: [`+source+`]}]
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(method, target, nil)
	k, err := cfg.Table.Routes[0].Limits[0].Key.Append(nil, r, netip.MustParseAddr(client), nil)
	if err != nil {
		t.Fatal(err)
	}
	return string(k)
}

// replayKeys returns the consumer keys ReadLog gives the log's requests, in
// order.
func replayKeys(t *testing.T, log string, key ...string) []string {
	t.Helper()
	tr, rep, err := ReadLog(strings.NewReader(log), ReplayOptions{Key: key})
	if err != nil || len(rep.Bad) > 0 {
		t.Fatalf("ReadLog: %v, bad %v", err, rep.Bad)
	}
	var out []string
	for _, r := range tr.Requests {
		out = append(out, tr.Keys[r.Consumer])
	}
	return out
}

func sluiceLine(method, path string) string {
	return `{"time":"2026-03-09T10:00:01Z","level":"INFO","msg":"request","route":"api","method":"` + method +
		`","path":"` + path + `","status":200,"duration_ms":1,"client_ip":"203.0.113.7"}` + "\n"
}

// TestReplayPathKeyAsGateway: the key is built from the log as the gateway
// builds it from the request. The gateway's path source drops one trailing
// slash, folds case on a case-insensitive route (the default) and leaves
// out ";parameters"; keyed as logged, one gateway bucket would be several
// consumers.
func TestReplayPathKeyAsGateway(t *testing.T) {
	for _, path := range []string{"/v1/orders/", "/V1/Orders"} {
		want := gatewayKey(t, "path", "GET", path, "203.0.113.7")
		got := replayKeys(t, sluiceLine("GET", path), "path")[0]
		if got != want {
			t.Errorf("sluice log path %q: replay keys it %q, the gateway %q", path, got, want)
		}
	}
	path := "/v1/orders;jsessionid=1"
	want := gatewayKey(t, "path", "GET", path, "203.0.113.7")
	ng := `203.0.113.7 - - [09/Mar/2026:10:00:01 +0000] "GET ` + path + ` HTTP/1.1" 200 0 "-" "curl/8"` + "\n"
	if got := replayKeys(t, ng, "path")[0]; got != want {
		t.Errorf("nginx path %q: replay keys it %q, the gateway %q", path, got, want)
	}
}

// TestReplayMethodKeyAsGateway: the gateway's method source keys HEAD as
// GET, in either log.
func TestReplayMethodKeyAsGateway(t *testing.T) {
	want := gatewayKey(t, "method", "HEAD", "/v1/orders", "203.0.113.7")
	got := replayKeys(t, sluiceLine("HEAD", "/v1/orders"), "method")[0]
	if got != want {
		t.Errorf("logged HEAD: replay keys it %q, the gateway %q", got, want)
	}
	ng := `203.0.113.7 - - [09/Mar/2026:10:00:01 +0000] "HEAD /v1/orders HTTP/1.1" 200 0 "-" "curl/8"` + "\n"
	if got := replayKeys(t, ng, "method")[0]; got != want {
		t.Errorf("nginx HEAD: replay keys it %q, the gateway %q", got, want)
	}
}

// TestReplayExitStatusAllLinesRead: SPEC §10, "the exit status stays 0
// unless no line could be read": a log whose lines all read but hold no
// request (a sluice startup line) exits 0.
func TestReplayExitStatusAllLinesRead(t *testing.T) {
	path := writeLog(t, `{"time":"2026-03-09T10:00:00Z","level":"INFO","msg":"listening","addr":":8080"}`+"\n")
	code, out, errOut := run(t, nil, "-replay", path, "-limit", "1", "-window", "1m")
	if code != 0 {
		t.Errorf("every line was read; got exit %d, stdout %q, stderr:\n%s", code, out, errOut)
	}
}

// TestAtOffsetOverflow: an -at offset past the virtual clock's end (Unix
// nanoseconds run out in 2262) would have every algorithm decide on an
// overflowed time; it is a usage error, and two requests two hours apart
// under 1 per hour are otherwise both admitted.
func TestAtOffsetOverflow(t *testing.T) {
	code, out, errOut := run(t, nil, "-limit", "1", "-window", "1h", "-at", "1@2200000h,1@2200001h", "-format", "json")
	if code != 2 || !strings.Contains(errOut, "must be from 0 to") {
		t.Errorf("offset past the clock: got exit %d, stderr %q; want 2 and the bound", code, errOut)
	}
	code, out, errOut = run(t, nil, "-limit", "1", "-window", "1h", "-at", "1@800000h,1@800002h", "-format", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "{") && !strings.Contains(line, `"accepted":2,"rejected":0`) {
			t.Errorf("exit %d, got %s (stderr %q); want 2 accepted", code, strings.TrimSpace(line), errOut)
		}
	}
}

// TestReplayQueryKeyAsGateway: the query source reads a parameter as the
// gateway does, its name's escapes decoded.
func TestReplayQueryKeyAsGateway(t *testing.T) {
	for _, target := range []string{"/v1/x?api%5Fkey=victim", "/v1/x?%61pi_key=vic%74im"} {
		want := gatewayKey(t, "query:api_key", "GET", target, "203.0.113.7")
		ng := `203.0.113.7 - - [09/Mar/2026:10:00:01 +0000] "GET ` + target + ` HTTP/1.1" 200 0 "-" "curl/8"` + "\n"
		if got := replayKeys(t, ng, "query:api_key")[0]; got != want {
			t.Errorf("nginx %s: replay keys it %q, the gateway %q", target, got, want)
		}
	}
}

// TestReplayLeavesOutWhatTheGatewayRefuses: a request that gives a query
// key source twice, as the frameworks read its names, or only under a name
// some of them read as it (PHP's "api.key" is api_key, Flask's is not),
// or whose path the gateway refuses, is answered 400 before any limit:
// replay leaves it out and counts it, and merges repeated slashes as the
// gateway does.
func TestReplayLeavesOutWhatTheGatewayRefuses(t *testing.T) {
	ng := func(target string) string {
		return `203.0.113.7 - - [09/Mar/2026:10:00:01 +0000] "GET ` + target + ` HTTP/1.1" 200 0 "-" "curl/8"` + "\n"
	}
	log := ng("/v1/x?api.key=victim&api_key=decoy") + ng("/v1/../admin?api_key=a") + ng("/v1/x?api_key[]=victim") + ng("/v1/x?api_key=ok")
	tr, rep, err := ReadLog(strings.NewReader(log), ReplayOptions{Key: []string{"query:api_key"}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Refused != 3 || len(tr.Requests) != 1 || tr.Keys[tr.Requests[0].Consumer] != "ok" {
		t.Errorf("got %d refused, %d requests (keys %q); want 3 refused and the one keyed ok", rep.Refused, len(tr.Requests), tr.Keys)
	}
	if got := replayKeys(t, ng("//v1//orders/"), "path")[0]; got != "/v1/orders" {
		t.Errorf("nginx //v1//orders/: keyed %q, want /v1/orders", got)
	}
}

// TestReplayNginxTargetsAsGateway: an nginx line's target is read as the
// gateway's server reads it: an absolute-form target ("GET
// http://host/v1/x", which the gateway serves) is its path and query, and
// an escaped path is keyed from its escaped form, as the gateway keys it:
// a decoded %2F merges with its neighbours, an encoded ';' stays a byte of
// its segment.
func TestReplayNginxTargetsAsGateway(t *testing.T) {
	ng := func(target string) string {
		return `203.0.113.7 - - [09/Mar/2026:10:00:01 +0000] "GET ` + target + ` HTTP/1.1" 200 0 "-" "curl/8"` + "\n"
	}
	for _, path := range []string{"/v1/%2Fotp", "/v1/a%3Bb", "/v1/A%2fB/"} {
		want := gatewayKey(t, "path", "GET", path, "203.0.113.7")
		if got := replayKeys(t, ng(path), "path")[0]; got != want {
			t.Errorf("nginx path %q: replay keys it %q, the gateway %q", path, got, want)
		}
	}
	abs := "http://api.example.com/v1/x?api_key=a"
	tr, rep, err := ReadLog(strings.NewReader(ng(abs)), ReplayOptions{Key: []string{"query:api_key", "path"}})
	if err != nil {
		t.Fatal(err)
	}
	want := gatewayKey(t, "query:api_key,path", "GET", abs, "203.0.113.7")
	if rep.Refused != 0 || len(tr.Requests) != 1 || tr.Keys[tr.Requests[0].Consumer] != want {
		t.Errorf("absolute-form line: %d refused, %d requests (keys %q); the gateway serves it, keyed %q", rep.Refused, len(tr.Requests), tr.Keys, want)
	}
}
