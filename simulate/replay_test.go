package simulate

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// at10 is 10:00 on the day the test logs were written.
var at10 = time.Date(2026, time.March, 9, 10, 0, 0, 0, time.UTC)

func readLog(t *testing.T, log string, o ReplayOptions) (*Traffic, *LogReport) {
	t.Helper()
	tr, rep, err := ReadLog(strings.NewReader(log), o)
	if err != nil {
		t.Fatalf("got error %v, want none", err)
	}
	return tr, rep
}

// consumersOf lists each request's key and arrival since 10:00.
func consumersOf(tr *Traffic) []string {
	var out []string
	for _, r := range tr.Requests {
		out = append(out, tr.Keys[r.Consumer]+"@"+(tr.Origin.Add(r.At).Sub(at10)).String())
	}
	return out
}

func TestReadLogSluice(t *testing.T) {
	t.Parallel()
	const log = `{"time":"2026-03-09T10:00:00.5Z","level":"INFO","msg":"listening","addr":":8080"}
{"time":"2026-03-09T10:00:01.100Z","level":"INFO","msg":"request","request_id":"a","route":"api","method":"GET","path":"/v1/x","status":200,"duration_ms":100,"client_ip":"203.0.113.7"}
{"time":"2026-03-09T10:00:01.050Z","level":"INFO","msg":"request","request_id":"b","route":"api","method":"GET","path":"/v1/x","status":200,"duration_ms":0.5,"client_ip":"2001:db8::1"}
not json
{"time":"soon","msg":"request"}
{"msg":"request","client_ip":"203.0.113.7"}

{"time":"2026-03-09T10:00:02Z","level":"INFO","msg":"request","route":"api","method":"POST","path":"/v1/x","status":429,"duration_ms":1,"client_ip":"2001:db8::2","rejected_by":"p","nested":{"a":[1,{"b":null}]}}
{"time":"2026-03-09T10:00:03Z","msg":"request","duration_ms":"slow"}
{"time":"2026-03-09T10:00:03Z","msg":"request"} {"second":"value"}
{"time":"2026-03-09T10:00:04Z","msg":"request","client_ip":"invalid IP"}
{"time":"9999-03-09T10:00:04Z","msg":"request","client_ip":"203.0.113.7"}
`
	tr, rep := readLog(t, log, ReplayOptions{Key: []string{"ip", "method"}})
	// Arrival is the line's time less the duration: the first request
	// arrived before the second though it was logged after.
	want := []string{"203.0.113.7|GET@1s", "2001:db8::/64|GET@1.0495s", "2001:db8::/64|POST@1.999s", "|@4s"}
	if got := consumersOf(tr); !slices.Equal(got, want) {
		t.Errorf("got requests %q, want %q", got, want)
	}
	if !tr.Origin.Equal(at10) || !tr.Clock {
		t.Errorf("got origin %v (clock %v), want %v on the clock", tr.Origin, tr.Clock, at10)
	}
	wantBad := []BadLine{
		{4, "not a JSON object"},
		{5, `time "soon": want RFC 3339`},
		{6, "no time"},
		{9, "duration_ms: want a number"},
		{10, "more than one JSON value"},
		{12, "time 9999-03-09T10:00:04Z: out of range (1970 to 2199)"},
	}
	if !slices.Equal(rep.Bad, wantBad) {
		t.Errorf("got bad lines %v, want %v", rep.Bad, wantBad)
	}
	wantRep := LogReport{Format: FormatSluice, Lines: 12, Requests: 4, NotRequests: 1, Blank: 1}
	rep.Bad = nil
	if rep.Format != wantRep.Format || rep.Lines != wantRep.Lines || rep.Requests != wantRep.Requests ||
		rep.NotRequests != wantRep.NotRequests || rep.Blank != wantRep.Blank || rep.Unrecorded != nil {
		t.Errorf("got report %+v, want %+v", *rep, wantRep)
	}
}

// TestReadLogPolicyRoutes replays a policy's routes only, keyed by the
// keys the gateway logged when it logs them.
func TestReadLogPolicyRoutes(t *testing.T) {
	t.Parallel()
	const log = `{"time":"2026-03-09T10:00:01Z","msg":"request","route":"orders","client_ip":"203.0.113.7","keys":["203.0.113.7","key-a"]}
{"time":"2026-03-09T10:00:02Z","msg":"request","route":"search","client_ip":"203.0.113.7","keys":["203.0.113.7"]}
{"time":"2026-03-09T10:00:03Z","msg":"request","route":"","client_ip":"203.0.113.8"}
{"time":"2026-03-09T10:00:04Z","msg":"request","route":"login","client_ip":"203.0.113.9","keys":["key-b"]}
{"time":"2026-03-09T10:00:05Z","msg":"request","route":"login","client_ip":"203.0.113.9"}
`
	o := ReplayOptions{Key: []string{"header:X-API-Key", "tls:sni"}, Slots: map[string]int{"orders": 1, "login": 0}}
	tr, rep := readLog(t, log, o)
	want := []string{"key-a@1s", "key-b@4s", "|@5s"}
	if got := consumersOf(tr); !slices.Equal(got, want) {
		t.Errorf("got requests %q, want %q", got, want)
	}
	if rep.OtherRoutes != 2 || rep.LoggedKeys != 2 {
		t.Errorf("got %d lines of other routes and %d keyed by logged keys, want 2 and 2", rep.OtherRoutes, rep.LoggedKeys)
	}
	// The last line carries no keys, and the log has no headers, nor a
	// source this reader does not know.
	if want := []string{"header:X-API-Key", "tls:sni"}; !slices.Equal(rep.Unrecorded, want) {
		t.Errorf("got unrecorded sources %q, want %q", rep.Unrecorded, want)
	}
}

func TestReadLogCombined(t *testing.T) {
	t.Parallel()
	const log = `203.0.113.7 - - [09/Mar/2026:10:00:01 +0000] "GET /v1/items?api_key=abc&x=1 HTTP/1.1" 200 512 "-" "curl/8.5.0"
203.0.113.7 - - [09/Mar/2026:10:00:01 +0000] "GET /v1/items?api%5Fkey=a%20b HTTP/1.1" 200 512 "-" "curl/8.5.0"
203.0.113.7 - - [09/Mar/2026:10:00:01 +0000] "GET /v1/items HTTP/1.1" 200 512 "-" "curl/8.5.0"
198.51.100.2 - bob [09/Mar/2026:11:00:02 +0100] "POST /v1/a%20b HTTP/2.0" 429 0 "https://e.com/\"q\"" "Mozilla \x22x\x22" "10.0.0.1"
garbage
198.51.100.2 - - [09/Mar/2026:10:00:03 +0000] "-" 400 0 "-" "-"
198.51.100.2 - - [09/Mar/2026:10:00:03 +0000] "GET / HTTP/1.1" 200
unix: - - [09/Mar/2026:10:00:03 +0000] "GET / HTTP/1.1" 200 1 "-" "-"
198.51.100.2 - - [09/Mar/2026 10:00:03] "GET / HTTP/1.1" 200 1 "-" "-"
`
	tr, rep := readLog(t, log, ReplayOptions{Key: []string{"ip", "query:api_key", "path", "header:user-agent", "header:Referer", "route"}})
	// The three requests of 10:00:01 are spread over that second.
	want := []string{
		"203.0.113.7|abc|/v1/items|curl/8.5.0||@1s",
		"203.0.113.7|a b|/v1/items|curl/8.5.0||@1.333333333s",
		"203.0.113.7||/v1/items|curl/8.5.0||@1.666666666s",
		`198.51.100.2||/v1/a b|Mozilla "x"|https://e.com/"q"|@2s`,
	}
	if got := consumersOf(tr); !slices.Equal(got, want) {
		t.Errorf("got requests\n%q, want\n%q", got, want)
	}
	wantBad := []BadLine{
		{5, "not in nginx's combined format"},
		{7, "http_referer: want a quoted field"},
		{8, `remote_addr "unix:": not an IP address`},
		{9, `time_local "09/Mar/2026 10:00:03": want 02/Jan/2006:15:04:05 -0700`},
	}
	if !slices.Equal(rep.Bad, wantBad) {
		t.Errorf("got bad lines %v, want %v", rep.Bad, wantBad)
	}
	// nginx logs no route.
	// "-" is a connection that sent no request: no limit counts it.
	if rep.Format != FormatCombined || rep.Requests != 4 || rep.Refused != 1 || !slices.Equal(rep.Unrecorded, []string{"route"}) {
		t.Errorf("got format %q, %d requests, %d refused, unrecorded %q; want %q, 4, 1, [route]", rep.Format, rep.Requests, rep.Refused, rep.Unrecorded, FormatCombined)
	}
}

// TestReadLogDetectsFormat: the first line that reads as either format
// decides; lines before it are bad, not silently taken for the other.
func TestReadLogDetectsFormat(t *testing.T) {
	t.Parallel()
	const log = `# a comment
{"time":"2026-03-09T10:00:01Z","msg":"request","client_ip":"203.0.113.7"}
203.0.113.7 - - [09/Mar/2026:10:00:01 +0000] "GET / HTTP/1.1" 200 512 "-" "curl/8.5.0"
`
	_, rep := readLog(t, log, ReplayOptions{Key: []string{"ip"}})
	want := []BadLine{{1, `neither a sluice JSON log line nor nginx's combined format: remote_addr "#": not an IP address`}, {3, "not a JSON object"}}
	if rep.Format != FormatSluice || !slices.Equal(rep.Bad, want) {
		t.Errorf("got format %q, bad lines %v; want %q, %v", rep.Format, rep.Bad, FormatSluice, want)
	}
}

func TestReadLogLongLines(t *testing.T) {
	t.Parallel()
	long := `{"time":"2026-03-09T10:00:01Z","msg":"request","path":"/` + strings.Repeat("a", maxLine) + `"}`
	ok := `{"time":"2026-03-09T10:00:02Z","msg":"request","client_ip":"203.0.113.7"}`
	// A long key value is kept as its digest, as the gateway keeps it.
	wide := `{"time":"2026-03-09T10:00:03Z","msg":"request","path":"/` + strings.Repeat("b", 300) + `"}`
	tr, rep := readLog(t, long+"\n"+ok+"\n"+wide, ReplayOptions{Key: []string{"path"}})
	if want := []BadLine{{1, "longer than 1048576 bytes"}}; !slices.Equal(rep.Bad, want) {
		t.Errorf("got bad lines %v, want %v", rep.Bad, want)
	}
	if len(tr.Keys) != 2 || tr.Keys[0] != "" || !strings.HasPrefix(tr.Keys[1], "sha256:") || len(tr.Keys[1]) != 7+64 {
		t.Errorf("got keys %q, want the empty path and a sha256: digest", tr.Keys)
	}
}

func TestReadLogEmpty(t *testing.T) {
	t.Parallel()
	tr, rep := readLog(t, "\n\nnonsense\n", ReplayOptions{Key: []string{"ip"}})
	if len(tr.Requests) != 0 || rep.Format != "" || len(rep.Bad) != 1 || rep.Bad[0].Line != 3 || rep.Lines != 3 {
		t.Errorf("got %d requests, format %q, bad %v, %d lines; want none, none, line 3, 3", len(tr.Requests), rep.Format, rep.Bad, rep.Lines)
	}
}

func TestParseKeyErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"", `unknown key source "" (want ip, header:NAME, query:NAME, cookie:NAME, json:FIELD, route, method, path or global)`},
		{"client", `unknown key source "client" (want ip, header:NAME, query:NAME, cookie:NAME, json:FIELD, route, method, path or global)`},
		// As the gateway says it of a policy's key.
		{"header:", `invalid header name "" in key source "header:"`},
	} {
		if _, err := parseKey(strings.Split(tc.in, ",")); err == nil || err.Error() != tc.want {
			t.Errorf("parseKey(%q): got error %v, want %q", tc.in, err, tc.want)
		}
	}
}

// TestReadLogChunks reads a log long enough to be parsed in chunks on
// several goroutines: lines keep their numbers and requests their order.
func TestReadLogChunks(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	const n = 3*linesPerChunk + 17
	bad := map[int]bool{2: true, linesPerChunk: true, linesPerChunk + 1: true, 2*linesPerChunk + 5: true, n: true}
	for i := 1; i <= n; i++ {
		switch {
		case bad[i]:
			b.WriteString("{broken\n")
		case i%1000 == 0:
			b.WriteString(`{"time":"2026-03-09T10:00:00Z","msg":"reloaded"}` + "\n")
		default:
			fmt.Fprintf(&b, `{"time":"2026-03-09T10:00:%02d.%06dZ","msg":"request","client_ip":"10.0.%d.%d"}`+"\n", i/100000, i%100000*10, i%7, i%3)
		}
	}
	tr, rep := readLog(t, b.String(), ReplayOptions{Key: []string{"ip"}})
	var lines []int
	for _, l := range rep.Bad {
		lines = append(lines, l.Line)
	}
	if want := []int{2, linesPerChunk, linesPerChunk + 1, 2*linesPerChunk + 5, n}; !slices.Equal(lines, want) {
		t.Errorf("got bad lines %v, want %v", lines, want)
	}
	wantRequests := n - len(bad) - n/1000
	if rep.Lines != n || rep.Requests != wantRequests || rep.NotRequests != n/1000 || len(tr.Keys) != 21 {
		t.Errorf("got %d lines, %d requests, %d others, %d consumers; want %d, %d, %d, 21", rep.Lines, rep.Requests, rep.NotRequests, len(tr.Keys), n, wantRequests, n/1000)
	}
	// Each line is 10µs after the last: the order of lines is kept.
	for i := 1; i < len(tr.Requests); i++ {
		if tr.Requests[i].At <= tr.Requests[i-1].At {
			t.Fatalf("request %d at %s, after %s: want increasing", i, tr.Requests[i].At, tr.Requests[i-1].At)
		}
	}
	if want := "10.0.1.1"; tr.Keys[0] != want {
		t.Errorf("got first consumer %q, want %q", tr.Keys[0], want)
	}
}

// readBoth reads a line on the fast path and with the decoder and
// describes what each found; fast is "" when the fast path declined.
func readBoth(line []byte) (fast, full string, fullErr error) {
	describe := func(sr *sluiceReader, fr *fieldsRead) string {
		var b strings.Builder
		for f := range nFields {
			fmt.Fprintf(&b, "%v:%q ", fr.seen[f], sr.arena[fr.fields[f].from:fr.fields[f].to])
		}
		fmt.Fprintf(&b, "keys %v", fr.hasKeys)
		for _, k := range sr.keys {
			fmt.Fprintf(&b, " %q", sr.arena[k.from:k.to])
		}
		fmt.Fprintf(&b, " duration %v", fr.duration)
		return b.String()
	}
	sr := newSluiceReader()
	var fr fieldsRead
	if sr.fast(line, &fr) {
		fast = describe(sr, &fr)
	}
	sr2 := newSluiceReader()
	var fr2 fieldsRead
	if fullErr = sr2.decode(line, &fr2); fullErr == nil {
		full = describe(sr2, &fr2)
	}
	return fast, full, fullErr
}

// TestSluiceFastPath: the fast path reads what the decoder reads, and
// leaves every line it cannot read plainly to the decoder.
func TestSluiceFastPath(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		line string
		fast bool // the fast path takes it
	}{
		{`{"time":"2026-03-09T10:00:01Z","level":"INFO","msg":"request","route":"api","method":"GET","path":"/v1/x","status":200,"duration_ms":12.5,"client_ip":"203.0.113.7","keys":["a","b|c"]}`, true},
		{` { "msg" : "request" , "duration_ms" : 1e-3 , "ok" : true, "x": null, "y": false, "n": -0.5E+2 } `, true},
		{`{}`, true},
		{`{"msg":"request","keys":[]}`, true},
		{`{"msg":"request","keys":null}`, true},
		{`{"msg":"request","path":"/caf\u00e9"}`, false},
		{`{"msg":"request","path":"/café"}`, false},
		{`{"msg":"request","path":"/a\"b"}`, false},
		{`{"msg":"request","nested":{"a":1}}`, false},
		{`{"msg":"request","list":[1,2]}`, false},
		{`{"msg":"request","msg":"other"}`, false},
		{`{"msg":"request","n":01}`, false},
		{`{"msg":"request","n":1.}`, false},
		{`{"msg":"request","n":tru}`, false},
		{`{"msg":"request","duration_ms":-1}`, false},
		{`{"msg":"request","duration_ms":"1"}`, false},
		{`{"msg":"request","route":7}`, false},
		{`{"msg":"request","keys":["a",1]}`, false},
		{`{"msg":"request",}`, false},
		{`{"msg":"request"} x`, false},
		{`{"msg":"request"`, false},
		{`{"msg" "request"}`, false},
		{"{\"msg\":\"req\tuest\"}", false},
	} {
		fast, full, err := readBoth([]byte(tc.line))
		if (fast != "") != tc.fast {
			t.Errorf("%s: fast path took it: %v, want %v", tc.line, fast != "", tc.fast)
		}
		if fast != "" && (err != nil || fast != full) {
			t.Errorf("%s: fast path read\n%s\ndecoder read\n%s (error %v)", tc.line, fast, full, err)
		}
	}
}

// FuzzSluiceFastPath checks the same on any line.
func FuzzSluiceFastPath(f *testing.F) {
	f.Add([]byte(`{"time":"2026-03-09T10:00:01Z","msg":"request","duration_ms":12.5,"client_ip":"203.0.113.7","keys":["a"]}`))
	f.Add([]byte(`{"msg":"request","n":-0.5E+2,"b":true}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		fast, full, err := readBoth(line)
		if fast != "" && (err != nil || fast != full) {
			t.Errorf("%q: fast path read\n%s\ndecoder read\n%s (error %v)", line, fast, full, err)
		}
	})
}

// failingReader gives its data, then fails.
type failingReader struct{ data *strings.Reader }

func (r failingReader) Read(p []byte) (int, error) {
	if r.data.Len() == 0 {
		return 0, errClosed
	}
	return r.data.Read(p)
}

func TestReadLogReadError(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	for range 2*linesPerChunk + 3 {
		b.WriteString(`{"time":"2026-03-09T10:00:01Z","msg":"request","client_ip":"203.0.113.7"}` + "\n")
	}
	_, _, err := ReadLog(failingReader{strings.NewReader(b.String())}, ReplayOptions{Key: []string{"ip"}})
	if want := fmt.Sprintf("reading line %d: closed", 2*linesPerChunk+4); err == nil || err.Error() != want {
		t.Errorf("got error %v, want %q", err, want)
	}
}
