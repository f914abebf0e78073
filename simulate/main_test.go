package simulate

import (
	"errors"
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
	for _, flag := range []string{"-limit", "-window", "-burst", "-queue", "-max-wait", "-at", "-format", "-config", "-policy"} {
		if !strings.Contains(errOut, "\n  "+flag+" ") {
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
