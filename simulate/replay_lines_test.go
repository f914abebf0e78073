package simulate

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func logFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "access.log")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestReplayReadsRequestsLongerThanADay: a request the gateway counted
// may last more than a day (a WebSocket or a stream kept open while
// traffic flows, as websocket_idle_timeout allows). Its line is replayed
// at its arrival like any other, so the consumer's later requests find
// the budget spent, as the gateway found it.
func TestReplayReadsRequestsLongerThanADay(t *testing.T) {
	t.Parallel()
	log := logFile(t, `{"time":"2026-03-10T10:00:00Z","level":"INFO","msg":"request","request_id":"a","route":"ws","method":"GET","path":"/ws","status":101,"duration_ms":90000000,"client_ip":"203.0.113.7","upstream":"127.0.0.1:9000"}
{"time":"2026-03-10T10:00:01Z","level":"INFO","msg":"request","request_id":"b","route":"ws","method":"GET","path":"/ws","status":101,"duration_ms":1,"client_ip":"203.0.113.7","upstream":"127.0.0.1:9000"}
`)
	code, stdout, stderr := run(t, nil, "-limit", "1", "-window", "1000h", "-replay", log, "-format", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if strings.Contains(stderr, "could not be read") || !strings.Contains(stdout, `{"algorithm":"fixed_window","accepted":1,"rejected":1`) {
		t.Errorf("a WebSocket held 25h, then another: got\n%s\nstderr: %s", stdout, stderr)
	}
}

// TestReplayLeavesOutNginxLinesThatAreNoRequest: nginx logs a connection
// that sent no request (a browser's preconnect timing out: 408) or one it
// could not parse (TLS sent to the plain port: 400) as "-" or the raw
// bytes. The gateway never counts such a connection (net/http answers a
// malformed request line itself), so the replay must not charge it to the
// client's bucket either.
func TestReplayLeavesOutNginxLinesThatAreNoRequest(t *testing.T) {
	t.Parallel()
	log := logFile(t, `203.0.113.7 - - [09/Mar/2026:10:00:01 +0000] "-" 408 0 "-" "-"
203.0.113.7 - - [09/Mar/2026:10:00:02 +0000] "\x16\x03\x01\x00\xF7\x01\x00\x00\xF3\x03\x03" 400 157 "-" "-"
203.0.113.7 - - [09/Mar/2026:10:00:03 +0000] "GET /v1/items HTTP/1.1" 200 512 "-" "curl/8.5.0"
`)
	code, stdout, stderr := run(t, nil, "-limit", "1", "-window", "1h", "-replay", log, "-format", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, `{"algorithm":"fixed_window","accepted":1,"rejected":0`) {
		t.Errorf("one real request from 203.0.113.7 under a limit of 1/h: the gateway admits it; the replay says\n%s\nstderr: %s", stdout, stderr)
	}
}

// TestReadLogLeavesOutRequestsAnsweredBeforeLimits: a sluice line that
// went neither to the upstream, nor to a rejecting limit, nor into a
// queue, and failed, was answered before any limit counted it; a 404
// (no route) is left to the limit being tried, which might cover it.
func TestReadLogLeavesOutRequestsAnsweredBeforeLimits(t *testing.T) {
	t.Parallel()
	line := func(route string, status int, extra string) string {
		return `{"time":"2026-03-09T10:00:01Z","level":"INFO","msg":"request","route":"` + route + `","method":"GET","path":"/v1/x","status":` +
			strconv.Itoa(status) + `,"duration_ms":1,"client_ip":"203.0.113.7"` + extra + "}\n"
	}
	for _, tc := range []struct {
		line    string
		refused bool
	}{
		{line("api", 413, `,"body_error":"http: request body too large"`), true},
		{line("api", 400, ""), true},
		{line("api", 408, ""), true},
		{line("api", 503, ""), true},
		{line("", 400, ""), true},
		{line("", 501, ""), true},
		{line("", 404, ""), false},
		{line("api", 200, `,"upstream":"10.0.0.5:8080"`), false},
		{line("api", 502, `,"upstream":"10.0.0.5:8080","upstream_error":"dial tcp: refused"`), false},
		{line("api", 429, `,"rejected_by":"p"`), false},
		{line("api", 200, ""), false}, // no status failure: nothing says it was refused
	} {
		_, rep := readLog(t, tc.line, ReplayOptions{Key: []string{"ip"}})
		if got := rep.Refused == 1; got != tc.refused || rep.Refused+rep.Requests != 1 {
			t.Errorf("%s: got %d refused, %d replayed; want refused %v", tc.line, rep.Refused, rep.Requests, tc.refused)
		}
	}
}

// TestReadLogUnescapesMarkedValues: the access log writes a path or key
// that is not UTF-8 (or that starts with the mark) as "%!" and its '%'
// and non-UTF-8 bytes as %XX; the replay reads back the bytes.
func TestReadLogUnescapesMarkedValues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ logged, want string }{
		{"caf%e9", "caf%e9"},
		{"%!caf%e9", "caf\xe9"},
		{"%!%25!x", "%!x"},
		{"%!50%25", "50%"},
	} {
		if got := unescapeLogged(tc.logged); got != tc.want {
			t.Errorf("unescapeLogged(%q): got %q, want %q", tc.logged, got, tc.want)
		}
	}
}
