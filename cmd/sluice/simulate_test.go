package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// accessLine is one line of sluice's access log for the simulator.
func accessLine(sec int, route, path, client string) string {
	return `{"time":"2026-03-09T10:00:0` + string(rune('0'+sec)) + `Z","level":"INFO","msg":"request","route":"` + route +
		`","method":"GET","path":"` + path + `","status":200,"duration_ms":1,"client_ip":"` + client + `"}` + "\n"
}

// simulatePolicy runs `sluice simulate -config -policy -replay` on cfg
// and the log lines, and returns stdout and stderr.
// An argument that starts with "-" is a flag with its value following,
// not a line.
func simulatePolicy(t *testing.T, cfg, policy string, lines ...string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	cp := filepath.Join(dir, "sluice.yaml")
	lp := filepath.Join(dir, "access.log")
	if err := os.WriteFile(cp, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"simulate", "-config", cp, "-policy", policy, "-replay", lp, "-format", "json"}
	var log []string
	for i := 0; i < len(lines); i++ {
		if strings.HasPrefix(lines[i], "-") {
			args = append(args, lines[i], lines[i+1])
			i++
			continue
		}
		log = append(log, lines[i])
	}
	if err := os.WriteFile(lp, []byte(strings.Join(log, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := run(args, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	return out.String(), errOut.String()
}

// TestSimulateSaysWhatItDoesNotReplay: a policy's count_status, which the
// simulator does not replay, is named on stderr, never left out silently;
// so are its overrides under -key, whose key values they cannot match.
func TestSimulateSaysWhatItDoesNotReplay(t *testing.T) {
	t.Parallel()
	const cfg = `policies:
  per-ip:
    algorithm: fixed_window
    limit: 1
    window: 1m
    key: [ip]
    block: 10m
    count_status: [401]
    overrides:
      - clients: [10.20.0.0/16]
        exempt: true
  plain: {algorithm: fixed_window, limit: 1, window: 1m, key: [ip]}
routes:
  - name: api
    upstream: http://127.0.0.1:9000
    limits: [per-ip]
  - name: other
    match: {path_prefix: /other}
    upstream: http://127.0.0.1:9000
    limits: [plain]
`
	_, errOut := simulatePolicy(t, cfg, "per-ip", accessLine(1, "api", "/x", "10.20.0.5"))
	if want := `policy "per-ip" sets count_status, which the simulator does not replay`; !strings.Contains(errOut, want) {
		t.Errorf("stderr:\n%s\nwant it to say %q", errOut, want)
	}
	_, errOut = simulatePolicy(t, cfg, "per-ip", accessLine(1, "api", "/x", "10.20.0.5"), "-key", "ip,path")
	if want := `policy "per-ip" sets count_status, overrides (with -key), which the simulator does not replay`; !strings.Contains(errOut, want) {
		t.Errorf("with -key: stderr:\n%s\nwant it to say %q", errOut, want)
	}
	_, errOut = simulatePolicy(t, cfg, "plain", accessLine(1, "other", "/other", "10.20.0.5"))
	if strings.Contains(errOut, "does not replay") {
		t.Errorf("a policy with none of them: stderr\n%s", errOut)
	}
}

// TestSimulatePathKeyFollowsRouteCase: a path key folds letter case as the
// gateway's does, on every route but one that sets case_sensitive.
func TestSimulatePathKeyFollowsRouteCase(t *testing.T) {
	t.Parallel()
	const cfg = `policies:
  per-path: {algorithm: fixed_window, limit: 1, window: 1m, key: [path]}
routes:
  - name: exact
    match: {path_prefix: /exact, case_sensitive: true}
    upstream: http://127.0.0.1:9000
    limits: [per-path]
  - name: loose
    match: {path_prefix: /loose}
    upstream: http://127.0.0.1:9000
    limits: [per-path]
`
	out, errOut := simulatePolicy(t, cfg, "per-path",
		accessLine(1, "exact", "/exact/A", "10.0.0.1"), accessLine(2, "exact", "/exact/a", "10.0.0.1"),
		accessLine(3, "loose", "/loose/A/", "10.0.0.1"), accessLine(4, "loose", "/loose/a", "10.0.0.1"))
	// /exact/A and /exact/a are two buckets; /loose/A/ and /loose/a one.
	if want := `{"algorithm":"fixed_window","accepted":3,"rejected":1,`; !strings.Contains(out, want) {
		t.Errorf("got\n%s\nstderr:\n%s\nwant %s", out, errOut, want)
	}
}

// TestSimulateReplaysBlock: a policy's block refuses a consumer from its
// first rejection for the block's length, whatever its budget, in every
// algorithm, as the gateway's store does.
func TestSimulateReplaysBlock(t *testing.T) {
	t.Parallel()
	const cfg = `policies:
  guard: {algorithm: fixed_window, limit: 1, window: 2s, block: 1h, key: [ip]}
routes:
  - name: api
    upstream: http://127.0.0.1:9000
    limits: [guard]
`
	// 1 admitted, 2 rejected (the block starts), then 4 to 8 all blocked:
	// without the block, 3 (a new window) and 5 and 7 would be admitted.
	var lines []string
	for _, sec := range []int{1, 2, 3, 4, 5, 6, 7, 8} {
		lines = append(lines, accessLine(sec, "api", "/x", "10.0.0.1"))
	}
	out, errOut := simulatePolicy(t, cfg, "guard", lines...)
	for _, alg := range []string{"token_bucket", "leaky_bucket", "fixed_window", "sliding_window_log", "sliding_window_counter"} {
		if want := `{"algorithm":"` + alg + `","accepted":1,"rejected":7,`; !strings.Contains(out, want) {
			t.Errorf("got\n%s\nstderr:\n%s\nwant %s", out, errOut, want)
		}
	}
}

// TestSimulateReplaysOverrides: an exempt client is neither limited nor
// charged, and a key with an override of its own is decided by it in a
// bucket of its own, as the gateway decides them.
func TestSimulateReplaysOverrides(t *testing.T) {
	t.Parallel()
	const cfg = `policies:
  per-ip:
    algorithm: fixed_window
    limit: 1
    window: 1m
    key: [ip]
    overrides:
      - clients: [10.20.0.0/16]
        exempt: true
      - keys: ["10.30.0.1"]
        limit: 2
routes:
  - name: api
    upstream: http://127.0.0.1:9000
    limits: [per-ip]
`
	var lines []string
	for i, ip := range []string{"10.20.0.5", "10.20.0.5", "10.20.0.5", "10.30.0.1", "10.30.0.1", "10.30.0.1", "10.40.0.1", "10.40.0.1"} {
		lines = append(lines, accessLine(i+1, "api", "/x", ip))
	}
	out, errOut := simulatePolicy(t, cfg, "per-ip", lines...)
	// Exempt: 3 through. The override's limit 2: 2 of 3. The policy's own
	// limit 1: 1 of 2.
	if want := `{"algorithm":"fixed_window","accepted":6,"rejected":2,`; !strings.Contains(out, want) {
		t.Errorf("got\n%s\nstderr:\n%s\nwant %s", out, errOut, want)
	}
	if strings.Contains(errOut, "does not replay") {
		t.Errorf("stderr:\n%s", errOut)
	}
}

// TestSimulateKeySourceWithBar: a key source whose name holds a '|' (a
// query parameter or header may) is one source to the simulator, as it
// is to the gateway, not two split at the bar.
func TestSimulateKeySourceWithBar(t *testing.T) {
	t.Parallel()
	const cfg = `policies:
  per-filter: {algorithm: fixed_window, limit: 1, window: 1m, key: ["query:a|b", ip]}
routes:
  - name: api
    upstream: http://127.0.0.1:9000
    limits: [per-filter]
`
	// nginx's lines name no route and carry the query: two values of
	// a|b from one client are two buckets, so both are admitted.
	line := func(sec int, v string) string {
		return `10.0.0.1 - - [09/Mar/2026:10:00:0` + string(rune('0'+sec)) + ` +0000] "GET /x?a|b=` + v + ` HTTP/1.1" 200 2 "-" "curl/8"` + "\n"
	}
	out, errOut := simulatePolicy(t, cfg, "per-filter", line(1, "1"), line(2, "2"))
	if want := `{"algorithm":"fixed_window","accepted":2,"rejected":0,`; !strings.Contains(out, want) {
		t.Errorf("got\n%s\nstderr:\n%s\nwant %s", out, errOut, want)
	}
	if strings.Contains(errOut, "does not record") {
		t.Errorf("stderr:\n%s\nwant no unrecorded source", errOut)
	}
}
