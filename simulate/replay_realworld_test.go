package simulate

import (
	"fmt"
	"net/http/httptest"
	"net/netip"

	"github.com/sluicehq/sluice/routes"
	"slices"
	"strings"
	"testing"
	"time"
)

// ngxLine is one line of nginx's combined format from client at the given
// $time_local, with request, status, referer and user agent as nginx
// writes them (escapes included).
func ngxLine(client, local, request, status, referer, agent string) string {
	return client + ` - - [` + local + `] "` + request + `" ` + status + ` 512 "` + referer + `" "` + agent + `"`
}

// TestReplayNginxEscapes: nginx's default escaping writes '"' as \x22,
// '\' as \x5C and bytes outside printable ASCII as \xHH in $request,
// $http_referer and $http_user_agent; other servers write \" and \\. The
// replay keys each request on the bytes the client sent, as the gateway
// keys them.
func TestReplayNginxEscapes(t *testing.T) {
	t.Parallel()
	const at = "09/Mar/2026:10:00:01 +0000"
	for _, tc := range []struct {
		name, request, agent string
		target, wantAgent    string // as the gateway receives them
	}{
		{"x22 in query", `GET /v1/s?q=\x22a\x22 HTTP/1.1`, `curl/8`, `/v1/s?q="a"`, "curl/8"},
		{"x5C in query", `GET /v1/s?q=a\x5Cb HTTP/1.1`, `curl/8`, `/v1/s?q=a\b`, "curl/8"},
		{"backslash quote", `GET /v1/s?q=\"a\" HTTP/1.1`, `Mozilla \"x\"`, `/v1/s?q="a"`, `Mozilla "x"`},
		{"not UTF-8, escaped", `GET /v1/caf\xE9?q=\xC3\xA9 HTTP/1.1`, `bot \xFF`, "/v1/caf\xe9?q=\xc3\xa9", "bot \xff"},
		{"not UTF-8, raw (escape=none)", "GET /v1/caf\xe9?q=\xc3\xa9 HTTP/1.1", "bot \xff", "/v1/caf\xe9?q=\xc3\xa9", "bot \xff"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			log := ngxLine("203.0.113.7", at, tc.request, "200", "-", tc.agent) + "\n"
			got := replayKeys(t, log, "path", "query:q", "header:User-Agent")
			want := gatewayKey(t, "path,query:q", "GET", tc.target, "203.0.113.7") + "|" + tc.wantAgent
			if len(got) != 1 || got[0] != want {
				t.Errorf("keys %q, want the gateway's %q", got, want)
			}
		})
	}
	// A backslash in the path, escaped or not, is a 400 the gateway
	// answers before any limit.
	for _, request := range []string{`GET /v1/a\x5Cb HTTP/1.1`, `GET /v1/a\\b HTTP/1.1`} {
		_, rep := readLog(t, ngxLine("203.0.113.7", at, request, "200", "-", "-")+"\n", ReplayOptions{Key: []string{"ip"}})
		if rep.Refused != 1 || rep.Requests != 0 {
			t.Errorf("%s: %d refused, %d replayed; want it refused", request, rep.Refused, rep.Requests)
		}
	}
}

// TestReplayNginxClientAddresses: nginx logs an IPv6 client as it came
// and, on a dual-stack socket, an IPv4 client as IPv4-mapped IPv6; the
// replay keys both as the gateway keys them (a /64, plain IPv4).
func TestReplayNginxClientAddresses(t *testing.T) {
	t.Parallel()
	const at = "09/Mar/2026:10:00:01 +0000"
	for _, client := range []string{"2001:db8:1:2:3:4:5:6", "::ffff:203.0.113.7", "203.0.113.7", "::1"} {
		log := ngxLine(client, at, "GET / HTTP/1.1", "200", "-", "-") + "\n"
		want := gatewayKey(t, "ip", "GET", "/", client)
		if got := replayKeys(t, log, "ip"); len(got) != 1 || got[0] != want {
			t.Errorf("client %s: keyed %q, want the gateway's %q", client, got, want)
		}
	}
}

// TestReplayNginxStatuses: nginx writes $status in three digits, "000"
// when no status was set (the request was cut off before one was) and
// "009" for an HTTP/0.9 request ("GET /x", no protocol). Both are lines
// nginx really writes, not bad lines: a request with a request line is
// replayed whatever its status, and one with no protocol is left out as
// the gateway's server refuses it.
func TestReplayNginxStatuses(t *testing.T) {
	t.Parallel()
	const at = "09/Mar/2026:10:00:01 +0000"
	log := ngxLine("203.0.113.7", at, "GET /v1/a HTTP/1.1", "000", "-", "-") + "\n" +
		ngxLine("203.0.113.7", at, "GET /v1/b", "009", "-", "-") + "\n" +
		ngxLine("203.0.113.7", at, "GET /v1/c", "200", "-", "-") + "\n" +
		ngxLine("203.0.113.7", at, "-", "400", "-", "-") + "\n" +
		ngxLine("203.0.113.7", at, "GET /v1/d HTTP/1.1", "499", "-", "-") + "\n" +
		ngxLine("203.0.113.7", at, "GET /v1/e HTTP/1.1", "2000", "-", "-") + "\n"
	tr, rep := readLog(t, log, ReplayOptions{Key: []string{"path"}})
	var paths []string
	for _, r := range tr.Requests {
		paths = append(paths, tr.Keys[r.Consumer])
	}
	if want := []string{"/v1/a", "/v1/d"}; !slices.Equal(paths, want) || rep.Refused != 3 {
		t.Errorf("replayed %q, %d refused; want %q and 3 refused (no protocol twice, \"-\")", paths, rep.Refused, want)
	}
	if want := []BadLine{{6, `status "2000": want three digits`}}; !slices.Equal(rep.Bad, want) {
		t.Errorf("bad lines %v, want %v", rep.Bad, want)
	}
}

// TestReplayNginxLongLines: a line past bufio.Scanner's 64 KiB (a long
// user agent or query, a cookie-stuffed referer) is read whole, first
// line or not, CRLF-ended or not, and the last line needs no newline.
func TestReplayNginxLongLines(t *testing.T) {
	t.Parallel()
	agent := strings.Repeat("A", 200<<10)
	long := func(client, at string) string {
		return ngxLine(client, "09/Mar/2026:10:00:0"+at+" +0000", "GET /v1/x?pad="+strings.Repeat("p", 100<<10)+" HTTP/1.1", "200", "-", agent)
	}
	log := long("203.0.113.1", "1") + "\r\n" + long("203.0.113.2", "2") + "\n" + long("203.0.113.3", "3")
	tr, rep := readLog(t, log, ReplayOptions{Key: []string{"ip"}})
	want := []string{"203.0.113.1@1s", "203.0.113.2@2s", "203.0.113.3@3s"}
	if got := consumersOf(tr); !slices.Equal(got, want) || len(rep.Bad) > 0 || rep.Lines != 3 {
		t.Errorf("got requests %q, bad lines %v, %d lines; want %q, none, 3", got, rep.Bad, rep.Lines, want)
	}
	// Keyed on the user agent, the 200 KiB value is kept as its digest,
	// as the gateway keeps it.
	keys := replayKeys(t, long("203.0.113.1", "1")+"\n", "header:User-Agent")
	if want := gatewayKeyAgent(t, agent); len(keys) != 1 || keys[0] != want {
		t.Errorf("200 KiB user agent keyed %.80q, want the gateway's %.80q", keys, want)
	}
}

// TestReplayNginxTimeZones: $time_local carries the server's offset,
// which a DST change moves mid-log (+0100 to +0200 and back), and lines
// may come out of order (nginx writes a line when a request finishes):
// requests are replayed at their instants, in order of arrival, those of
// one second in the order logged.
func TestReplayNginxTimeZones(t *testing.T) {
	t.Parallel()
	log := strings.Join([]string{
		// Spring forward in Europe: 01:59:59 +0100 is 00:59:59Z; one
		// second later it is 03:00:00 +0200.
		ngxLine("10.0.0.1", "29/Mar/2026:01:59:59 +0100", "GET / HTTP/1.1", "200", "-", "-"),
		ngxLine("10.0.0.2", "29/Mar/2026:03:00:00 +0200", "GET / HTTP/1.1", "200", "-", "-"),
		// Out of order: finished later, arrived first.
		ngxLine("10.0.0.3", "29/Mar/2026:01:59:58 +0100", "GET / HTTP/1.1", "200", "-", "-"),
		ngxLine("10.0.0.4", "29/Mar/2026:06:29:59 +0530", "GET / HTTP/1.1", "200", "-", "-"),
		ngxLine("10.0.0.5", "28/Mar/2026:19:59:59 -0500", "GET / HTTP/1.1", "200", "-", "-"),
	}, "\n") + "\n"
	tr, _ := readLog(t, log, ReplayOptions{Key: []string{"ip"}})
	var got []string
	for _, r := range tr.Requests {
		got = append(got, tr.Keys[r.Consumer]+"@"+tr.Origin.Add(r.At).UTC().Format("15:04:05.000"))
	}
	// 01:00:00Z holds two requests: spread over its second in log order.
	want := []string{"10.0.0.3@00:59:58.000", "10.0.0.1@00:59:59.000", "10.0.0.4@00:59:59.333", "10.0.0.5@00:59:59.666", "10.0.0.2@01:00:00.000"}
	if !slices.Equal(got, want) {
		t.Errorf("spring forward: got %q, want %q", got, want)
	}
	// Fall back: 02:59:59 +0200 is 00:59:59Z, and the 02:00:00 +0100
	// logged after it is one second later, not an hour earlier.
	log = ngxLine("10.0.0.1", "25/Oct/2026:02:59:59 +0200", "GET / HTTP/1.1", "200", "-", "-") + "\n" +
		ngxLine("10.0.0.2", "25/Oct/2026:02:00:00 +0100", "GET / HTTP/1.1", "200", "-", "-") + "\n"
	tr, _ = readLog(t, log, ReplayOptions{Key: []string{"ip"}})
	if len(tr.Requests) != 2 || tr.Requests[1].At-tr.Requests[0].At != 1e9 || tr.Keys[tr.Requests[0].Consumer] != "10.0.0.1" {
		t.Errorf("fall back: got %+v (keys %q), want 10.0.0.1 then 10.0.0.2 one second later", tr.Requests, tr.Keys)
	}
}

// TestReplayDetectsFormatPastBlankAndGarbage: blank lines, whitespace and
// garbage before the first readable line are counted, not taken for a
// format; the first readable line decides, and lines of the other format
// after it are bad lines named by number.
func TestReplayDetectsFormatPastBlankAndGarbage(t *testing.T) {
	t.Parallel()
	ng := ngxLine("203.0.113.7", "09/Mar/2026:10:00:01 +0000", "GET / HTTP/1.1", "200", "-", "-")
	js := `{"time":"2026-03-09T10:00:01Z","level":"INFO","msg":"request","route":"api","method":"GET","path":"/","status":200,"duration_ms":0,"client_ip":"203.0.113.7"}`
	for _, tc := range []struct {
		name, log, format string
		bad               []int
		requests          int
	}{
		{"nginx after blanks", "\n \t\r\n\n" + ng + "\n" + js + "\n" + ng, FormatCombined, []int{5}, 2},
		{"sluice after garbage", "-- log rotated --\n{\"partial\n\x00\x01\xff\n" + js + "\n" + ng + "\n" + js + "\n", FormatSluice, []int{1, 2, 3, 5}, 2},
		{"nginx after a JSON line of another program", `{"level":"info","message":"up"}` + "\n" + ng + "\n", FormatCombined, []int{1}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, rep := readLog(t, tc.log, ReplayOptions{Key: []string{"ip"}})
			var bad []int
			for _, b := range rep.Bad {
				bad = append(bad, b.Line)
			}
			if rep.Format != tc.format || !slices.Equal(bad, tc.bad) || rep.Requests != tc.requests {
				t.Errorf("got format %q, bad lines %v, %d requests; want %q, %v, %d", rep.Format, rep.Bad, rep.Requests, tc.format, tc.bad, tc.requests)
			}
		})
	}
}

// gatewayKeyAgent is the gateway's key on header:User-Agent for a request
// that sends agent.
func gatewayKeyAgent(t *testing.T, agent string) string {
	t.Helper()
	cfg, err := routes.Parse("sluice.yaml", []byte(`
routes:
  - name: api
    match: {path_prefix: /}
    upstream: http://127.0.0.1:9000
    limits: [{algorithm: fixed_window, limit: 1, window: 1m, key: [header:User-Agent]}]
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("User-Agent", agent)
	k, err := cfg.Table.Routes[0].Limits[0].Key.Append(nil, r, netip.MustParseAddr("203.0.113.7"), nil)
	if err != nil {
		t.Fatal(err)
	}
	return string(routes.BoundKey(k, 0))
}

// TestReplaySluiceLinesAsWritten: sluice's access line with every field
// the gateway writes (see proxy/accesslog.go), in its order and escaping,
// its time in the gateway's local offset; a line of a later version with
// fields this one does not know, in another order; a queued request that
// reached the upstream and one whose client left the queue; and the
// statuses the gateway answers before any limit (400, 413, and 499 of a
// client gone before its limits counted it), left out.
func TestReplaySluiceLinesAsWritten(t *testing.T) {
	t.Parallel()
	log := strings.Join([]string{
		// Every field, reached the upstream after a wait.
		`{"time":"2026-03-09T11:00:01.25+01:00","level":"INFO","msg":"request","request_id":"01J\"x","route":"api","method":"POST","path":"/v1/a/b","raw_path":"/v1/a%2Fb","status":502,"duration_ms":250,"client_ip":"2001:db8::7","upstream":"10.0.0.5:8080","queue_wait_ms":200,"upstream_error":"dial tcp 10.0.0.5:8080: connect: \"refused\" \u2028","body_error":"unexpected EOF","keys":["2001:db8::/64","k\\1"]}`,
		// A later version: unknown fields of every kind, another order.
		`{"msg":"request","trace":{"id":"abc","sampled":true,"spans":[1,2.5e3,null]},"client_ip":"203.0.113.7","route":"api","time":"2026-03-09T10:00:02Z","duration_ms":0,"method":"GET","path":"/v1/b","status":200,"upstream":"10.0.0.5:8080","bytes_out":12,"cached":false,"tags":[]}`,
		// Left the queue after 300ms: its client went away.
		`{"time":"2026-03-09T10:00:03.3Z","level":"INFO","msg":"request","request_id":"c","route":"api","method":"GET","path":"/v1/c","status":499,"duration_ms":300,"client_ip":"203.0.113.8","queue_wait_ms":300}`,
		// Answered before any limit: no upstream, no rejected_by, no wait.
		`{"time":"2026-03-09T10:00:04Z","level":"INFO","msg":"request","request_id":"d","route":"api","method":"GET","path":"/v1/d","status":400,"duration_ms":0.1,"client_ip":"203.0.113.9"}`,
		`{"time":"2026-03-09T10:00:04Z","level":"INFO","msg":"request","request_id":"e","route":"api","method":"POST","path":"/v1/e","status":413,"duration_ms":0.1,"client_ip":"203.0.113.9","body_error":"http: request body too large"}`,
		`{"time":"2026-03-09T10:00:04Z","level":"INFO","msg":"request","request_id":"f","route":"api","method":"POST","path":"/v1/f","status":499,"duration_ms":3000,"client_ip":"203.0.113.9"}`,
		// Rejected: replayed, whatever its status.
		`{"time":"2026-03-09T10:00:05Z","level":"INFO","msg":"request","request_id":"g","route":"api","method":"GET","path":"/v1/g","status":429,"duration_ms":0.05,"client_ip":"203.0.113.9","rejected_by":"p"}`,
	}, "\n") + "\n"
	tr, rep := readLog(t, log, ReplayOptions{Key: []string{"ip", "path"}})
	want := []string{gatewayKey(t, "ip,path", "POST", "/v1/a%2Fb", "2001:db8::7") + "@1s", "203.0.113.7|/v1/b@2s", "203.0.113.8|/v1/c@3s", "203.0.113.9|/v1/g@4.99995s"}
	if got := consumersOf(tr); !slices.Equal(got, want) || len(rep.Bad) > 0 || rep.Refused != 3 {
		t.Errorf("got requests %q, bad lines %v, %d refused; want %q, none, 3", got, rep.Bad, rep.Refused, want)
	}
	var gaveUp []time.Duration
	for _, r := range tr.Requests {
		gaveUp = append(gaveUp, r.GiveUp)
	}
	if want := []time.Duration{0, 0, 300 * time.Millisecond, 0}; !slices.Equal(gaveUp, want) {
		t.Errorf("got give-ups %v, want %v: only the request that left the queue without reaching the upstream gives up", gaveUp, want)
	}
	// The keys the gateway logged, for a policy second on its route.
	tr, rep = readLog(t, log, ReplayOptions{Key: []string{"ip", "header:X-Key"}, Slots: map[string]int{"api": 1}})
	if len(tr.Requests) != 4 || tr.Keys[tr.Requests[0].Consumer] != `k\1` || rep.LoggedKeys != 1 {
		t.Errorf("got keys %q, %d keyed as logged; want the first keyed k\\1 as the gateway logged it", tr.Keys, rep.LoggedKeys)
	}
}

// TestReplayNamesSourcesNoLogRecords: README: "A source the log does not
// record counts as empty, as a missing source does in the gateway, and
// stderr says so". Neither log has cookies, JSON bodies or most headers;
// nginx's has User-Agent and Referer, sluice's the route; each source
// the log lacks is named once, the key is built from the rest, and the
// replay goes on (exit 0).
func TestReplayNamesSourcesNoLogRecords(t *testing.T) {
	t.Parallel()
	ng := ngxLine("203.0.113.7", "09/Mar/2026:10:00:01 +0000", "GET /v1/x HTTP/1.1", "200", "-", "curl/8") + "\n" +
		ngxLine("203.0.113.8", "09/Mar/2026:10:00:02 +0000", "GET /v1/x HTTP/1.1", "200", "-", "curl/8") + "\n"
	js := `{"time":"2026-03-09T10:00:01Z","level":"INFO","msg":"request","route":"api","method":"GET","path":"/v1/x","status":200,"duration_ms":0,"client_ip":"203.0.113.7","upstream":"u"}` + "\n" +
		`{"time":"2026-03-09T10:00:02Z","level":"INFO","msg":"request","route":"api","method":"GET","path":"/v1/x","status":200,"duration_ms":0,"client_ip":"203.0.113.8","upstream":"u"}` + "\n"
	const key = "cookie:sid,json:user.id,header:X-API-Key,header:User-Agent,route,ip"
	for _, tc := range []struct {
		name, log string
		missing   []string
		hint      string
	}{
		{"nginx", ng, []string{"cookie:sid", "json:user.id", "header:X-API-Key", "route"}, ""},
		{"sluice", js, []string{"cookie:sid", "json:user.id", "header:X-API-Key", "header:User-Agent"}, " (sluice logs keys with log.log_keys: true)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := run(t, nil, "-limit", "1", "-window", "1m", "-replay", logFile(t, tc.log), "-key", key, "-format", "json", "-show-keys")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			for _, s := range tc.missing {
				if want := "the log does not record key source " + s + ": it counted as empty on every request" + tc.hint + "\n"; strings.Count(errOut, want) != 1 {
					t.Errorf("stderr:\n%s\nwant it to say once %q", errOut, want)
				}
			}
			if n := strings.Count(errOut, "does not record"); n != len(tc.missing) {
				t.Errorf("stderr names %d sources, want %d:\n%s", n, len(tc.missing), errOut)
			}
			// The two clients stay two consumers: the sources the log
			// has still tell them apart.
			if !strings.Contains(out, `{"algorithm":"fixed_window","accepted":2,"rejected":0`) {
				t.Errorf("two clients, one request each, limit 1: got\n%s", out)
			}
		})
	}
}

// TestReplayNamesEveryBadLine: SPEC §10: "Lines that cannot be read are
// counted and named by line number on stderr; the exit status stays 0
// unless no line could be read." README: the first 20 with the reason,
// all of them by number, and a line over 1 MiB is a bad line.
func TestReplayNamesEveryBadLine(t *testing.T) {
	t.Parallel()
	good := func(s int) string {
		return ngxLine("203.0.113.7", fmt.Sprintf("09/Mar/2026:10:00:%02d +0000", s), "GET / HTTP/1.1", "200", "-", "-") + "\n"
	}
	var b strings.Builder
	b.WriteString(good(1))     // 1
	for i := 2; i <= 26; i++ { // 2-26
		fmt.Fprintf(&b, "garbage %d\n", i)
	}
	b.WriteString(good(2))                                                        // 27
	b.WriteString("\n")                                                           // 28: blank, not bad
	b.WriteString(strings.Repeat("x", maxLine+1) + "\r\n")                        // 29
	b.WriteString(good(3))                                                        // 30
	b.WriteString(`203.0.113.7 - - [09/Mar/2026:10:00:04 +0000] "GET / HTTP/1.1`) // 31, cut short, no newline
	path := logFile(t, b.String())
	code, _, errOut := run(t, nil, "-replay", path, "-limit", "1", "-window", "1m")
	if code != 0 {
		t.Fatalf("exit %d, want 0: some lines were read\n%s", code, errOut)
	}
	if n := strings.Count(errOut, path+":"); n != 20+2 {
		t.Errorf("stderr has %d lines naming the log, want 20 reasons and 2 summaries:\n%s", n, errOut)
	}
	for _, want := range []string{
		path + ":2: remote_addr \"garbage\": not an IP address\n",
		path + ":21: remote_addr \"garbage\": not an IP address\n",
		path + ": 27 of 31 lines could not be read and were left out: 2-26, 29, 31\n",
		path + ": nginx combined log, 3 requests from 1 consumer, ",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr:\n%s\nwant it to hold %q", errOut, want)
		}
	}
	if strings.Contains(errOut, path+":22:") {
		t.Errorf("stderr gives the reason for more than 20 lines:\n%s", errOut)
	}
}

// TestReplayDetectsIndentedJSON: a JSON line with leading whitespace is
// read as sluice's line once the format is known (JSON allows it); as
// the first line it must decide the format the same way, not be taken
// for a broken combined line.
func TestReplayDetectsIndentedJSON(t *testing.T) {
	t.Parallel()
	js := `{"time":"2026-03-09T10:00:01Z","level":"INFO","msg":"request","route":"api","method":"GET","path":"/","status":200,"duration_ms":0,"client_ip":"203.0.113.7"}`
	tr, rep := readLog(t, " \t"+js+"\n"+"  "+js+"\n", ReplayOptions{Key: []string{"ip"}})
	if rep.Format != FormatSluice || len(rep.Bad) > 0 || len(tr.Requests) != 2 {
		t.Errorf("got format %q, bad lines %v, %d requests; want %q, none, 2", rep.Format, rep.Bad, len(tr.Requests), FormatSluice)
	}
}

// TestReplaySluiceLineNotUTF8: the gateway writes a path that is not
// UTF-8 with "%!" escapes, never raw: a JSON line holding raw bytes that
// are not UTF-8 was not written by it (a shipper mangled it), and is a
// bad line rather than a request keyed on whatever the bytes decode to.
func TestReplaySluiceLineNotUTF8(t *testing.T) {
	t.Parallel()
	ok := `{"time":"2026-03-09T10:00:01Z","level":"INFO","msg":"request","route":"api","method":"GET","path":"%!/caf%e9","status":200,"duration_ms":0,"client_ip":"203.0.113.7"}`
	raw := `{"time":"2026-03-09T10:00:02Z","level":"INFO","msg":"request","route":"api","method":"GET","path":"/caf` + "\xe9" + `","status":200,"duration_ms":0,"client_ip":"203.0.113.7"}`
	tr, rep := readLog(t, ok+"\n"+raw+"\n", ReplayOptions{Key: []string{"path"}})
	if len(tr.Requests) != 1 || len(rep.Bad) != 1 || rep.Bad[0].Line != 2 {
		t.Errorf("got %d requests, bad lines %v; want 1 and line 2 bad", len(tr.Requests), rep.Bad)
	}
}
