package simulate

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// run calls Main and returns its exit code, stdout and stderr.
func run(t *testing.T, load func(file, name string) (Policy, error), args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr strings.Builder
	code := Main(args, &stdout, &stderr, load)
	return code, stdout.String(), stderr.String()
}

func TestMainSpecExample(t *testing.T) {
	t.Parallel()
	code, out, errOut := run(t, nil, "-limit", "100", "-window", "1m", "-at", "100@58s,100@61s", "-format", "json")
	if code != 0 {
		t.Fatalf("got exit %d (stderr %q), want 0", code, errOut)
	}
	const want = `[
  {"algorithm":"token_bucket","accepted":105,"rejected":95,"queued":0,"peak":105},
  {"algorithm":"leaky_bucket","accepted":2,"rejected":198,"queued":0,"peak":2},
  {"algorithm":"fixed_window","accepted":200,"rejected":0,"queued":0,"peak":200},
  {"algorithm":"sliding_window_log","accepted":100,"rejected":100,"queued":0,"peak":100},
  {"algorithm":"sliding_window_counter","accepted":102,"rejected":98,"queued":0,"peak":102}
]
`
	if out != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
	if errOut != "" {
		t.Errorf("got stderr %q, want none", errOut)
	}
}

func TestMainFormats(t *testing.T) {
	t.Parallel()
	args := []string{"-limit", "100", "-window", "1m", "-at", "100@58s,100@61s"}
	tests := []struct {
		name   string
		args   []string
		prefix string
	}{
		{"table by default", args, "algorithm               accepted  rejected  queued  peak\n"},
		{"table", append(args, "-format", "table"), "algorithm               accepted  rejected  queued  peak\n"},
		{"svg", append(args, "-format", "svg"), "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := run(t, nil, tc.args...)
			if code != 0 {
				t.Fatalf("got exit %d (stderr %q), want 0", code, errOut)
			}
			if !strings.HasPrefix(out, tc.prefix) {
				t.Errorf("got output starting %q, want %q", out[:min(len(out), len(tc.prefix))], tc.prefix)
			}
		})
	}
}

func TestMainPolicy(t *testing.T) {
	t.Parallel()
	var gotFile, gotName string
	load := func(file, name string) (Policy, error) {
		gotFile, gotName = file, name
		if name != "orders-shaping" {
			return Policy{}, errors.New(file + `: no policy "` + name + `"`)
		}
		return Policy{Params: Params{Limit: 10, Window: time.Second, Queue: 50, MaxWait: 5 * time.Second}, Key: []string{"global"}}, nil
	}
	code, out, errOut := run(t, load, "-config", "gw.yaml", "-policy", "orders-shaping", "-at", "20@0s", "-format", "json")
	if code != 0 {
		t.Fatalf("got exit %d (stderr %q), want 0", code, errOut)
	}
	if gotFile != "gw.yaml" || gotName != "orders-shaping" {
		t.Errorf("got loadPolicy(%q, %q), want (gw.yaml, orders-shaping)", gotFile, gotName)
	}
	if want := `{"algorithm":"leaky_bucket","accepted":20,"rejected":0,"queued":19,"peak":10}`; !strings.Contains(out, want) {
		t.Errorf("got\n%s\nwant a line %s", out, want)
	}

	// Flags given beside -policy override its settings; -config defaults
	// to sluice.yaml.
	code, out, errOut = run(t, load, "-policy", "orders-shaping", "-queue", "4", "-at", "20@0s", "-format", "json")
	if code != 0 {
		t.Fatalf("got exit %d (stderr %q), want 0", code, errOut)
	}
	if gotFile != "sluice.yaml" {
		t.Errorf("got config %q, want sluice.yaml", gotFile)
	}
	if want := `{"algorithm":"leaky_bucket","accepted":5,"rejected":15,"queued":4,"peak":5}`; !strings.Contains(out, want) {
		t.Errorf("got\n%s\nwant a line %s", out, want)
	}

	code, out, errOut = run(t, load, "-config", "gw.yaml", "-policy", "nope", "-at", "1@0s")
	if code != 1 {
		t.Errorf("got exit %d, want 1", code)
	}
	if want := "sluice simulate: loading policy \"nope\" from gw.yaml: gw.yaml: no policy \"nope\"\n"; errOut != want {
		t.Errorf("got stderr %q, want %q", errOut, want)
	}
	if out != "" {
		t.Errorf("got stdout %q, want none", out)
	}
}

func TestMainUsageErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string // the first line of stderr
	}{
		{"nothing", nil, "sluice simulate: -at, -pattern or -replay is required, e.g. -at 100@58s,100@61s"},
		{"no limit", []string{"-window", "1m", "-at", "1@0s"}, "sluice simulate: -limit is required (or -policy NAME)"},
		{"no window", []string{"-limit", "1", "-at", "1@0s"}, "sluice simulate: -window is required (or -policy NAME)"},
		{"neither", []string{"-at", "1@0s"}, "sluice simulate: -limit and -window are required (or -policy NAME)"},
		{"bad arrivals", []string{"-limit", "1", "-window", "1s", "-at", "1@0s,2x"}, `sluice simulate: -at: parsing arrival "2x": want COUNT@OFFSET like 100@58s`},
		{"zero limit", []string{"-limit", "0", "-window", "1s", "-at", "1@0s"}, "sluice simulate: -limit: must be > 0"},
		{"negative max-wait", []string{"-limit", "1", "-window", "1s", "-max-wait", "-1s", "-at", "1@0s"}, "sluice simulate: -max-wait: must be >= 0"},
		// An explicit 0 is refused, as burst: 0 and max_wait: 0 are in a
		// config, rather than read as "the default": with -policy it
		// would quietly replace the policy's burst by the limit.
		{"zero burst", []string{"-limit", "1", "-window", "1s", "-burst", "0", "-at", "1@0s"}, "sluice simulate: -burst: must be > 0; leave it out for the default, the limit"},
		{"zero max-wait", []string{"-limit", "1", "-window", "1s", "-queue", "2", "-max-wait", "0s", "-at", "1@0s"}, "sluice simulate: -max-wait: must be > 0; leave it out for the default, queue x window/limit, or give -queue 0 to reject what cannot leave at once"},
		{"bad format", []string{"-limit", "1", "-window", "1s", "-at", "1@0s", "-format", "csv"}, `sluice simulate: -format: want table, json or svg, got "csv"`},
		{"config without policy", []string{"-config", "x.yaml", "-at", "1@0s"}, "sluice simulate: -config needs -policy NAME"},
		{"policy without loader", []string{"-policy", "p", "-at", "1@0s"}, "sluice simulate: -policy is not available in this build"},
		{"extra argument", []string{"-limit", "1", "-window", "1s", "-at", "1@0s", "table"}, `sluice simulate: unexpected argument "table"`},
		{"unknown flag", []string{"-speed", "5"}, "flag provided but not defined: -speed"},
		{"bad duration", []string{"-window", "soon"}, `invalid value "soon" for flag -window: parse error`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := run(t, nil, tc.args...)
			if code != 2 {
				t.Errorf("got exit %d, want 2", code)
			}
			if first, _, _ := strings.Cut(errOut, "\n"); first != tc.want {
				t.Errorf("got stderr starting %q, want %q", first, tc.want)
			}
			if !strings.Contains(errOut, "usage: sluice simulate") {
				t.Errorf("got stderr %q, want the usage", errOut)
			}
			if out != "" {
				t.Errorf("got stdout %q, want none", out)
			}
		})
	}
}

func TestMainHelp(t *testing.T) {
	t.Parallel()
	code, out, errOut := run(t, nil, "-h")
	if code != 0 {
		t.Errorf("got exit %d, want 0", code)
	}
	for _, flag := range []string{"-limit", "-window", "-burst", "-queue", "-max-wait", "-at", "-format", "-config", "-policy",
		"-pattern", "-rate", "-duration", "-consumers", "-seed", "-replay", "-key", "-show-keys", "-accuracy"} {
		if !strings.Contains(errOut, "\n  "+flag+" ") && !strings.Contains(errOut, "\n  "+flag+"\n") {
			t.Errorf("got help %q, want it to list %s", errOut, flag)
		}
	}
	if out != "" {
		t.Errorf("got stdout %q, want none", out)
	}
}

func TestMainWriteError(t *testing.T) {
	t.Parallel()
	var stderr strings.Builder
	code := Main([]string{"-limit", "1", "-window", "1s", "-at", "1@0s"}, failingWriter{}, &stderr, nil)
	if code != 1 {
		t.Errorf("got exit %d, want 1", code)
	}
	if want := "sluice simulate: writing table: closed\n"; stderr.String() != want {
		t.Errorf("got stderr %q, want %q", stderr.String(), want)
	}
}

// writeLog puts a log in a file of its own.
func writeLog(t *testing.T, log string) string {
	t.Helper()
	path := t.TempDir() + "/access.log"
	if err := os.WriteFile(path, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

const replayLog = `{"time":"2026-03-09T10:00:01Z","level":"INFO","msg":"request","route":"api","method":"GET","path":"/v1/x","status":200,"duration_ms":1,"client_ip":"203.0.113.7"}
{"time":"2026-03-09T10:00:01.5Z","level":"INFO","msg":"request","route":"api","method":"GET","path":"/v1/x","status":200,"duration_ms":1,"client_ip":"203.0.113.7"}
{"time":"2026-03-09T10:00:02Z","level":"INFO","msg":"request","route":"api","method":"GET","path":"/v1/x","status":200,"duration_ms":1,"client_ip":"203.0.113.7"}
{"time":"2026-03-09T10:00:02Z","level":"INFO","msg":"request","route":"api","method":"GET","path":"/v1/x","status":200,"duration_ms":1,"client_ip":"198.51.100.2"}
{"time":"2026-03-09T10:00:03Z","level":"INFO","msg":"request"
`

func TestMainReplay(t *testing.T) {
	t.Parallel()
	path := writeLog(t, replayLog)
	code, out, errOut := run(t, nil, "-replay", path, "-limit", "2", "-window", "1m", "-format", "json")
	if code != 0 {
		t.Fatalf("got exit %d (stderr %q), want 0", code, errOut)
	}
	d := Digest("203.0.113.7")
	if d != "fec52565aa0c" {
		t.Errorf("got digest %s, want fec52565aa0c: digests must stay stable", d)
	}
	lim := `"consumers_limited":1,"most_limited":[{"consumer":"` + d + `","requests":3,"rejected":1}]}`
	want := `[
  {"algorithm":"token_bucket","accepted":3,"rejected":1,"queued":0,"peak":3,` + lim + `,
  {"algorithm":"leaky_bucket","accepted":2,"rejected":2,"queued":0,"peak":2,"consumers_limited":1,"most_limited":[{"consumer":"` + d + `","requests":3,"rejected":2}]},
  {"algorithm":"fixed_window","accepted":3,"rejected":1,"queued":0,"peak":3,` + lim + `,
  {"algorithm":"sliding_window_log","accepted":3,"rejected":1,"queued":0,"peak":3,` + lim + `,
  {"algorithm":"sliding_window_counter","accepted":3,"rejected":1,"queued":0,"peak":3,` + lim + `
]
`
	if out != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
	wantErr := "sluice simulate: " + path + ":5: not JSON: unexpected EOF\n" +
		"sluice simulate: " + path + ": 1 of 5 lines could not be read and were left out: 5\n" +
		"sluice simulate: " + path + ": sluice JSON access log, 4 requests from 2 consumers, 2026-03-09T10:00:00Z to 2026-03-09T10:00:01Z\n"
	if errOut != wantErr {
		t.Errorf("got stderr\n%s\nwant\n%s", errOut, wantErr)
	}
	if strings.Contains(out, "203.0.113.7") {
		t.Errorf("got a key in the output without -show-keys")
	}

	// -show-keys shows them, in the table too.
	code, out, _ = run(t, nil, "-replay", path, "-limit", "2", "-window", "1m", "-show-keys")
	if code != 0 {
		t.Fatalf("got exit %d, want 0", code)
	}
	if want := "\nfixed_window            203.0.113.7          3         1\n"; !strings.Contains(out, want) {
		t.Errorf("got\n%s\nwant a line %q", out, want)
	}
	if want := "algorithm               accepted  rejected  queued  peak  consumers_limited\n"; !strings.HasPrefix(out, want) {
		t.Errorf("got\n%s\nwant it to start %q", out, want)
	}
}

func TestMainReplayPolicy(t *testing.T) {
	t.Parallel()
	// The gateway logged each request's keys: the policy is the second
	// limit of route api.
	log := `{"time":"2026-03-09T10:00:01Z","msg":"request","route":"api","client_ip":"203.0.113.7","keys":["x","secret-1"]}
{"time":"2026-03-09T10:00:02Z","msg":"request","route":"api","client_ip":"203.0.113.8","keys":["x","secret-1"]}
{"time":"2026-03-09T10:00:03Z","msg":"request","route":"other","client_ip":"203.0.113.8","keys":["secret-1"]}
`
	load := func(file, name string) (Policy, error) {
		return Policy{Params: Params{Limit: 1, Window: time.Minute}, Key: []string{"header:X-API-Key"}, Slots: map[string]int{"api": 1}}, nil
	}
	path := writeLog(t, log)
	code, out, errOut := run(t, load, "-policy", "per-key", "-replay", path, "-show-keys", "-format", "json")
	if code != 0 {
		t.Fatalf("got exit %d (stderr %q), want 0", code, errOut)
	}
	if want := `{"algorithm":"fixed_window","accepted":1,"rejected":1,"queued":0,"peak":1,"consumers_limited":1,"most_limited":[{"consumer":"secret-1","requests":2,"rejected":1}]}`; !strings.Contains(out, want) {
		t.Errorf("got\n%s\nwant a line %s", out, want)
	}
	if want := `: 1 request left out: their routes do not list policy "per-key"`; !strings.Contains(errOut, want) {
		t.Errorf("got stderr\n%s\nwant %q", errOut, want)
	}

	// -key overrides the policy's key: logged keys no longer apply, and
	// the log's addresses tell the two apart.
	code, out, errOut = run(t, load, "-policy", "per-key", "-replay", path, "-key", "ip", "-format", "json")
	if code != 0 {
		t.Fatalf("got exit %d (stderr %q), want 0", code, errOut)
	}
	if want := `{"algorithm":"fixed_window","accepted":2,"rejected":0,"queued":0,"peak":2,"consumers_limited":0,"most_limited":[]}`; !strings.Contains(out, want) {
		t.Errorf("got\n%s\nwant a line %s", out, want)
	}
}

func TestMainReplayNothing(t *testing.T) {
	t.Parallel()
	path := writeLog(t, "hello\n")
	code, out, errOut := run(t, nil, "-replay", path, "-limit", "2", "-window", "1m")
	if code != 1 || out != "" {
		t.Errorf("got exit %d, stdout %q; want 1 and none", code, out)
	}
	if want := path + ": no line could be read\n"; !strings.HasSuffix(errOut, want) {
		t.Errorf("got stderr %q, want it to end %q", errOut, want)
	}
	code, _, errOut = run(t, nil, "-replay", path+".missing", "-limit", "2", "-window", "1m")
	if code != 1 || !strings.Contains(errOut, "no such file") {
		t.Errorf("got exit %d, stderr %q; want 1 and no such file", code, errOut)
	}
}

func TestMainPattern(t *testing.T) {
	t.Parallel()
	args := []string{"-limit", "10", "-window", "1s", "-pattern", "steady", "-rate", "20", "-duration", "1s", "-consumers", "2", "-format", "json"}
	code, out, errOut := run(t, nil, args...)
	if code != 0 {
		t.Fatalf("got exit %d (stderr %q), want 0", code, errOut)
	}
	if want := `{"algorithm":"sliding_window_log","accepted":20,"rejected":20,"queued":0,"peak":20,"consumers_limited":2,`; !strings.Contains(out, want) {
		t.Errorf("got\n%s\nwant a line starting %s", out, want)
	}
}

func TestMainTrafficUsageErrors(t *testing.T) {
	t.Parallel()
	lw := []string{"-limit", "1", "-window", "1s"}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"two modes", append(lw, "-at", "1@0s", "-replay", "x"), "sluice simulate: -at, -pattern and -replay are alternatives: give one"},
		{"rate without pattern", append(lw, "-at", "1@0s", "-rate", "2"), "sluice simulate: -rate needs -pattern"},
		{"key without replay", append(lw, "-at", "1@0s", "-key", "ip"), "sluice simulate: -key needs -replay"},
		{"show-keys with at", append(lw, "-at", "1@0s", "-show-keys"), "sluice simulate: -show-keys needs -pattern or -replay (-at has one consumer)"},
		{"no rate", append(lw, "-pattern", "steady", "-duration", "1s"), "sluice simulate: -pattern needs -rate R, requests per second of each consumer"},
		{"no duration", append(lw, "-pattern", "steady", "-rate", "1"), "sluice simulate: -pattern needs -duration D, e.g. 10m"},
		{"bad shape", append(lw, "-pattern", "wave", "-rate", "1", "-duration", "1s"), `sluice simulate: -pattern "wave": want steady, poisson or burst`},
		{"bad key", append(lw, "-replay", "x", "-key", "ip,client"), `sluice simulate: -key: unknown key source "client" (want ip, header:NAME, query:NAME, cookie:NAME, json:FIELD, route, method, path or global)`},
		// A source the gateway refuses in a config is refused here too,
		// rather than replayed as a value the log does not record.
		{"underscored header", append(lw, "-replay", "x", "-key", "header:X_Api_Key"), `sluice simulate: -key: key source "header:X_Api_Key": X_Api_Key contains "_": sluice drops such fields before keying, as nginx does, so its value would always be empty`},
		{"hop-by-hop header", append(lw, "-replay", "x", "-key", "ip,header:Connection"), `sluice simulate: -key: key source "header:Connection": Connection is a hop-by-hop field: the upstream never gets it`},
		{"bad json path", append(lw, "-replay", "x", "-key", "json:user..id"), `sluice simulate: -key: invalid JSON field "user..id" in key source "json:user..id": want a name or a dotted path, like json:user.id`},
		{"bad cookie", append(lw, "-replay", "x", "-key", "cookie:a b"), `sluice simulate: -key: invalid cookie name "a b" in key source "cookie:a b"`},
		{"accuracy svg", append(lw, "-at", "1@0s", "-accuracy", "-format", "svg"), "sluice simulate: -accuracy prints a table or json, not svg"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := run(t, nil, tc.args...)
			if code != 2 || out != "" {
				t.Errorf("got exit %d, stdout %q; want 2 and none", code, out)
			}
			if first, _, _ := strings.Cut(errOut, "\n"); first != tc.want {
				t.Errorf("got stderr starting %q, want %q", first, tc.want)
			}
		})
	}
	load := func(file, name string) (Policy, error) {
		return Policy{Params: Params{Limit: 1, Window: time.Second}}, nil
	}
	code, _, errOut := run(t, load, "-policy", "unused", "-replay", "x")
	if want := `sluice simulate: -replay: no route lists policy "unused", so its key is not known: give -key SOURCES`; code != 2 || !strings.HasPrefix(errOut, want) {
		t.Errorf("got exit %d, stderr %q; want 2, %q", code, errOut, want)
	}
}
