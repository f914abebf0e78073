package simulate

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The README's walk-through replays a log the repository ships, generated
// by exampleLog; -update writes it and the outputs the README shows.
var update = flag.Bool("update", false, "rewrite the example log and its outputs in testdata")

const (
	exampleLogFile = "testdata/example-access.log"
	exampleTable   = "testdata/example-replay.txt"
	exampleSVG     = "testdata/example-replay.svg"
)

// exampleArgs is the README's command line.
var exampleArgs = []string{"-replay", exampleLogFile, "-limit", "60", "-window", "1m"}

// exampleLog writes ten minutes of an API's access log as sluice
// writes it: people using a web client now and then, a mobile app that
// fetches 20 things at once when it opens, a nightly batch job at 1.5 per
// second, a scraper at 4 per second, a few unmatched requests and the
// startup line; the log ends with a line cut short by a crash.
func exampleLog() []byte {
	type hit struct {
		at     time.Duration
		client string
		path   string
	}
	rng := rand.New(rand.NewPCG(2026, 3))
	var hits []hit
	poisson := func(client, path string, rate float64, from, to time.Duration) {
		for t := from + time.Duration(rng.ExpFloat64()/rate*1e9); t < to; t += time.Duration(rng.ExpFloat64() / rate * 1e9) {
			hits = append(hits, hit{t, client, path})
		}
	}
	const span = 10 * time.Minute
	for u := range 12 {
		poisson(fmt.Sprintf("198.51.100.%d", 10+u), "/v1/orders", 0.05, 0, span)
	}
	for a := range 3 {
		client := fmt.Sprintf("2001:db8:%x::%x", 0xa0+a, 1+rng.IntN(200))
		for open := time.Duration(rng.Int64N(int64(3 * time.Minute))); open < span; open += 3*time.Minute + time.Duration(rng.Int64N(int64(time.Minute))) {
			for k := range 20 {
				hits = append(hits, hit{open + time.Duration(k)*7*time.Millisecond, client, "/v1/feed"})
			}
		}
	}
	for t := 3 * time.Minute; t < 6*time.Minute; t += time.Second * 2 / 3 {
		hits = append(hits, hit{t, "203.0.113.40", "/v1/orders/export"})
	}
	poisson("192.0.2.99", "/v1/products", 4, 6*time.Minute+30*time.Second, 8*time.Minute)
	poisson("192.0.2.7", "/wp-login.php", 0.02, 0, span)
	slices.SortStableFunc(hits, func(a, b hit) int { return int(a.at - b.at) })

	start := time.Date(2026, time.March, 9, 14, 0, 0, 0, time.UTC)
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"time":%q,"level":"INFO","msg":"sluice started","http":":8080","https":"","admin":"127.0.0.1:9091","routes":1,"store":"memory"}`+"\n", start.Add(-2*time.Second).Format(time.RFC3339Nano))
	for _, h := range hits {
		route, status, upstream := "api", 200, `,"upstream":"10.0.0.5:8080"`
		if strings.HasPrefix(h.path, "/wp") {
			route, status, upstream = "", 404, ""
		}
		dur := 2 + rng.ExpFloat64()*25
		fmt.Fprintf(&b, `{"time":%q,"level":"INFO","msg":"request","request_id":"%016x%016x","route":%q,"method":"GET","path":%q,"status":%d,"duration_ms":%.3f,"client_ip":%q%s}`+"\n",
			start.Add(h.at+time.Duration(dur*float64(time.Millisecond))).Format(time.RFC3339Nano), rng.Uint64(), rng.Uint64(),
			route, h.path, status, dur, h.client, upstream)
	}
	fmt.Fprintf(&b, `{"time":%q,"level":"INFO","msg":"requ`+"\n", start.Add(span).Format(time.RFC3339Nano))
	return b.Bytes()
}

// TestExampleReplay keeps the shipped log, the outputs and the README's
// walk-through the same as what the code does now.
func TestExampleReplay(t *testing.T) {
	t.Parallel()
	log := exampleLog()
	code, table, errOut := run(t, nil, exampleArgs...)
	if *update {
		if err := os.WriteFile(exampleLogFile, log, 0o644); err != nil {
			t.Fatal(err)
		}
		code, table, errOut = run(t, nil, exampleArgs...)
	}
	if code != 0 {
		t.Fatalf("got exit %d (stderr %q), want 0", code, errOut)
	}
	_, svg, _ := run(t, nil, append(exampleArgs, "-format", "svg")...)
	// The README runs it from the top of the repository.
	shown := strings.ReplaceAll("$ sluice simulate "+strings.Join(exampleArgs, " ")+"\n"+errOut+table, "testdata/", "simulate/testdata/")
	if *update {
		for name, data := range map[string]string{exampleTable: shown, exampleSVG: svg} {
			if err := os.WriteFile(name, []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, want := range map[string][]byte{exampleLogFile: log, exampleTable: []byte(shown), exampleSVG: []byte(svg)} {
		got, err := os.ReadFile(name)
		if err != nil {
			t.Fatalf("%v (run go test ./simulate -run TestExampleReplay -update)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is not what the code makes now: run go test ./simulate -run TestExampleReplay -update", name)
		}
	}
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(readme, []byte("```\n"+shown+"```\n")) {
		t.Errorf("README.md does not show %s as it is now:\n%s", exampleTable, shown)
	}
	if !bytes.Contains(readme, []byte("("+filepath.Join("simulate", exampleSVG)+")")) {
		t.Errorf("README.md does not show %s", exampleSVG)
	}
}

// TestReadmeExamples runs the README's other simulate commands and finds
// their output there.
func TestReadmeExamples(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"-limit", "100", "-window", "1m", "-at", "100@58s,100@61s"},
		{"-limit", "100", "-window", "1m", "-at", "100@58s,100@61s", "-format", "json"},
		{"-limit", "10", "-window", "1s", "-queue", "50", "-max-wait", "5s", "-at", "30@0s,30@2s,30@4s"},
		{"-limit", "10", "-window", "1s", "-pattern", "burst", "-rate", "2", "-duration", "1m", "-consumers", "3", "-show-keys"},
		{"-limit", "100", "-window", "1m", "-at", "100@58s,100@61s", "-accuracy"},
	} {
		code, out, errOut := run(t, nil, args...)
		if code != 0 {
			t.Fatalf("%q: got exit %d (stderr %q), want 0", args, code, errOut)
		}
		line := "$ sluice simulate " + strings.Join(args, " ")
		line = strings.Replace(line, "-at 100@58s,100@61s", `-at "100@58s,100@61s"`, 1)
		line = strings.Replace(line, "-at 30@0s,30@2s,30@4s", `-at "30@0s,30@2s,30@4s"`, 1)
		if want := "```\n" + line + "\n" + out + "```\n"; !bytes.Contains(readme, []byte(want)) {
			t.Errorf("README.md does not show\n%s", want)
		}
	}
}
