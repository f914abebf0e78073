package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSimulateReplaysGatewayLog runs the gateway, replays its own access
// log with `sluice simulate -replay` for one of its policies, and finds
// the decisions the gateway made: same consumers, same keys, same counts.
func TestSimulateReplaysGatewayLog(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	config := writeConfig(t, fmt.Sprintf(`listen: 127.0.0.1:0
admin: ""
log: {log_keys: true}
policies:
  per-key:
    algorithm: sliding_window_log
    limit: 3
    window: 1h
    key: [header:X-API-Key]
routes:
  - name: api
    match: {path_prefix: /api}
    upstream: %[1]s
    limits:
      - {algorithm: fixed_window, limit: 1000, window: 1h, key: [ip]}
      - per-key
  - name: other
    match: {path_prefix: /other}
    upstream: %[1]s
`, up.URL))
	in := start(t, config)
	rejected := map[string]int{}
	for _, k := range []string{"alice", "alice", "bob", "alice", "carol", "alice", "carol", "bob", "carol", "alice", "carol"} {
		resp, _ := do(t, nil, "GET", in.HTTP+"/api/items", nil, map[string]string{"X-API-Key": k})
		switch resp.StatusCode {
		case 200:
		case 429:
			rejected[k]++
		default:
			t.Fatalf("got status %d for %s, want 200 or 429", resp.StatusCode, k)
		}
	}
	for range 3 {
		if resp, _ := do(t, nil, "GET", in.HTTP+"/other", nil, map[string]string{"X-API-Key": "alice"}); resp.StatusCode != 200 {
			t.Fatalf("got status %d on /other, want 200", resp.StatusCode)
		}
	}
	if want := map[string]int{"alice": 2, "carol": 1}; fmt.Sprint(rejected) != fmt.Sprint(want) {
		t.Fatalf("gateway: got rejections %v, want %v", rejected, want)
	}
	if err := in.Stop(); err != nil {
		t.Fatalf("stopping sluice: %v", err)
	}
	log := filepath.Join(t.TempDir(), "sluice.log")
	if err := os.WriteFile(log, []byte(strings.Join(in.logs.Lines(), "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(binary, "simulate", "-config", config, "-policy", "per-key", "-replay", log, "-format", "json", "-show-keys")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("sluice simulate: %v\n%s", err, stderr.String())
	}
	// The gateway's algorithm, and token_bucket, which refills one token
	// in 20 minutes, decide as the gateway did.
	limited := `"consumers_limited":2,"most_limited":[{"consumer":"alice","requests":5,"rejected":2},{"consumer":"carol","requests":4,"rejected":1}]}`
	for _, alg := range []string{"sliding_window_log", "token_bucket"} {
		want := `{"algorithm":"` + alg + `","accepted":8,"rejected":3,"queued":0,"peak":8,` + limited
		if !strings.Contains(string(out), want) {
			t.Errorf("got\n%s\nwant a line %s", out, want)
		}
	}
	if want := `3 requests left out: their routes do not list policy "per-key"`; !strings.Contains(stderr.String(), want) {
		t.Errorf("got stderr\n%s\nwant %q", stderr.String(), want)
	}
	if strings.Contains(stderr.String(), "does not record") {
		t.Errorf("got stderr\n%s\nwant every request keyed by its logged keys", stderr.String())
	}
}
