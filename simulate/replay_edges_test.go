package simulate

import (
	"errors"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/routes"
)

// TestReplayReadsLogWithByteOrderMark: a log saved by a Windows editor
// starts with a UTF-8 byte order mark and ends its lines in CRLF; its
// first line is as readable as the others, in either format.
func TestReplayReadsLogWithByteOrderMark(t *testing.T) {
	t.Parallel()
	const bom = "\ufeff"
	for _, tc := range []struct{ name, log, format string }{
		{"nginx", bom + `203.0.113.7 - - [09/Mar/2026:10:00:01 +0000] "GET / HTTP/1.1" 200 512 "-" "curl/8.5.0"` + "\r\n" +
			`203.0.113.8 - - [09/Mar/2026:10:00:02 +0000] "GET / HTTP/1.1" 200 512 "-" "curl/8.5.0"` + "\r\n", FormatCombined},
		{"sluice", bom + `{"time":"2026-03-09T10:00:01Z","level":"INFO","msg":"request","route":"api","method":"GET","path":"/","status":200,"duration_ms":0,"client_ip":"203.0.113.7"}` + "\r\n" +
			`{"time":"2026-03-09T10:00:02Z","level":"INFO","msg":"request","route":"api","method":"GET","path":"/","status":200,"duration_ms":0,"client_ip":"203.0.113.8"}` + "\r\n", FormatSluice},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr, rep := readLog(t, tc.log, ReplayOptions{Key: []string{"ip"}})
			want := []string{"203.0.113.7@1s", "203.0.113.8@2s"}
			if got := consumersOf(tr); !slices.Equal(got, want) || len(rep.Bad) > 0 || rep.Format != tc.format {
				t.Errorf("got requests %q, bad lines %v, format %q; want %q, none, %q", got, rep.Bad, rep.Format, want, tc.format)
			}
		})
	}
	// Through the command: a one-line log with a mark is read, exit 0.
	path := writeLog(t, bom+`203.0.113.7 - - [09/Mar/2026:10:00:01 +0000] "GET / HTTP/1.1" 200 512 "-" "curl/8.5.0"`+"\r\n")
	code, out, errOut := run(t, nil, "-replay", path, "-limit", "1", "-window", "1s", "-format", "json")
	if code != 0 || !strings.Contains(out, `"accepted":1,"rejected":0`) || strings.Contains(errOut, "could not be read") {
		t.Errorf("got exit %d, stdout %q, stderr %q; want 0, one request accepted, no bad line", code, out, errOut)
	}
}

// TestReplayNginxUserWithSpaces: nginx escapes '"', '\' and bytes outside
// printable ASCII in $remote_user, not spaces, and a Basic auth user name
// may hold them (or a '['): the line is still in the combined format.
func TestReplayNginxUserWithSpaces(t *testing.T) {
	t.Parallel()
	const log = `203.0.113.7 - John Smith [09/Mar/2026:10:00:01 +0000] "GET / HTTP/1.1" 200 512 "-" "curl/8.5.0"
203.0.113.8 - a [b] c [09/Mar/2026:10:00:02 +0000] "GET / HTTP/1.1" 200 512 "-" "curl/8.5.0"
203.0.113.9 -  [09/Mar/2026:10:00:03 +0000] "GET / HTTP/1.1" 200 512 "-" "curl/8.5.0"
203.0.113.10 - bob [09/Mar/2026:10:00:04 +0000 "GET / HTTP/1.1" 200 512 "-" "curl/8.5.0"
`
	tr, rep := readLog(t, log, ReplayOptions{Key: []string{"ip"}})
	want := []string{"203.0.113.7@1s", "203.0.113.8@2s", "203.0.113.9@3s"}
	if got := consumersOf(tr); !slices.Equal(got, want) {
		t.Errorf("got requests %q, want %q", got, want)
	}
	if wantBad := []BadLine{{4, "not in nginx's combined format"}}; !slices.Equal(rep.Bad, wantBad) {
		t.Errorf("got bad lines %v, want %v", rep.Bad, wantBad)
	}
}

// TestReplayLeavesOutQueryPastFrameworks: a query of more than 1,000
// parameters, past which frameworks stop reading it, is answered 400 by
// the gateway when a limit is keyed on a query parameter, before any limit
// counts it; replay leaves it out as it leaves out a parameter given twice.
func TestReplayLeavesOutQueryPastFrameworks(t *testing.T) {
	t.Parallel()
	target := "/v1/x?api_key=a" + strings.Repeat("&p=1", 1000)
	cfg, err := routes.Parse("sluice.yaml", []byte(`
routes:
  - name: api
    match: {path_prefix: /}
    upstream: http://127.0.0.1:9000
    limits: [{algorithm: fixed_window, limit: 1, window: 1m, key: [query:api_key]}]
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	_, err = cfg.Table.Routes[0].Limits[0].Key.Append(nil, httptest.NewRequest("GET", target, nil), netip.MustParseAddr("203.0.113.7"), nil)
	var amb *routes.AmbiguousError
	if !errors.As(err, &amb) {
		t.Fatalf("the gateway's key for %d parameters: got error %v, want an AmbiguousError", 1001, err)
	}
	ng := func(target string) string {
		return `203.0.113.7 - - [09/Mar/2026:10:00:01 +0000] "GET ` + target + ` HTTP/1.1" 200 0 "-" "curl/8"` + "\n"
	}
	tr, rep := readLog(t, ng(target)+ng("/v1/x?api_key=b"), ReplayOptions{Key: []string{"query:api_key"}})
	if rep.Refused != 1 || len(tr.Requests) != 1 || tr.Keys[tr.Requests[0].Consumer] != "b" {
		t.Errorf("got %d refused, %d requests (keys %q); want 1 refused and the one keyed b", rep.Refused, len(tr.Requests), tr.Keys)
	}
	// Keyed on something else, the gateway reads no query: it is replayed.
	if _, rep := readLog(t, ng(target), ReplayOptions{Key: []string{"ip"}}); rep.Refused != 0 || rep.Requests != 1 {
		t.Errorf("keyed by ip: got %d refused, %d requests; want 0 and 1", rep.Refused, rep.Requests)
	}
}
