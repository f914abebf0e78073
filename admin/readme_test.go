package admin

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
)

// TestREADMELimitsExamples replays what README's GET /v1/limits examples
// describe, on the sample config: three requests with X-API-Key: abc and,
// ten seconds before, two OTPs for +15550100; then an unknown policy. Each
// answer must be the one README prints after its curl line.
func TestREADMELimitsExamples(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := routes.Load(filepath.Join("..", "config.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	store := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{SweepInterval: -1})
	t.Cleanup(func() { store.Close() })
	t0 := time.Date(2026, time.March, 9, 14, 0, 0, 0, time.UTC)
	take := func(policy, key string, at time.Time, n int) {
		t.Helper()
		out := make([]ratelimit.Decision, 1)
		for range n {
			req := []ratelimit.Request{{Policy: cfg.Policies[policy], Key: key}}
			if err := store.Decide(context.Background(), at, req, out); err != nil || !out[0].Allowed {
				t.Fatalf("deciding %s %s: allowed %v, %v", policy, key, out[0].Allowed, err)
			}
		}
	}
	take("otp-per-phone", "+15550100", t0.Add(-10*time.Second), 2)
	take("api-per-key", "abc", t0, 3)
	src := &fakeSource{policies: cfg.Policies, store: store, ready: Readiness{Loaded: true, StoreHealthy: true}, now: t0}
	h := Handler(metrics.New(), src)
	for _, target := range []string{
		"/v1/limits?policy=api-per-key&key=abc",
		"/v1/limits?policy=otp-per-phone&key=%2B15550100",
		"/v1/limits?policy=nope&key=abc",
	} {
		rec := get(t, h, "GET", target)
		want := "$ curl -s '127.0.0.1:9091" + target + "'\n" + strings.TrimSuffix(rec.Body.String(), "\n") + "\n"
		if !bytes.Contains(readme, []byte(want)) {
			t.Errorf("README.md does not show GET %s as it answers:\n%s", target, want)
		}
	}
}

// TestREADMEUnlockExample replays README's "Unlocking a customer" on the
// configuration README gives for login and OTP endpoints: five failed
// logins for alice and a sixth that starts the block, 58 seconds before
// the look; then the reset.
func TestREADMEUnlockExample(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, yaml, ok := bytes.Cut(readme, []byte("A complete configuration:\n\n```yaml\n"))
	if ok {
		yaml, _, ok = bytes.Cut(yaml, []byte("```\n"))
	}
	if !ok {
		t.Fatal("README.md no longer has the login and OTP configuration")
	}
	cfg, err := routes.Parse("sluice.yaml", yaml, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Policies["login-per-user"]
	store := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{SweepInterval: -1})
	t.Cleanup(func() { store.Close() })
	t0 := time.Date(2026, time.March, 9, 14, 0, 0, 0, time.UTC)
	out := make([]ratelimit.Decision, 1)
	for i := range 6 {
		req := []ratelimit.Request{{Policy: p, Key: "alice"}}
		if err := store.Decide(context.Background(), t0.Add(-58*time.Second), req, out); err != nil {
			t.Fatal(err)
		}
		if got, want := out[0].Allowed, i < 5; got != want {
			t.Fatalf("attempt %d: got allowed %v, want %v", i+1, got, want)
		}
	}
	src := &fakeSource{policies: cfg.Policies, store: store, ready: Readiness{Loaded: true, StoreHealthy: true}, now: t0, token: "s3cret"}
	h := Handler(metrics.New(), src)
	target := "/v1/limits?policy=login-per-user&key=alice"
	rec := get(t, h, "GET", target)
	want := "$ curl -s '127.0.0.1:9091" + target + "'\n" + strings.TrimSuffix(rec.Body.String(), "\n") + "\n"
	if !bytes.Contains(readme, []byte(want)) {
		t.Errorf("README.md does not show GET %s as it answers:\n%s", target, want)
	}
	req := httptest.NewRequest("DELETE", target, nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	del := httptest.NewRecorder()
	h.ServeHTTP(del, req)
	want = "$ curl -s -X DELETE -H \"Authorization: Bearer $SLUICE_ADMIN_TOKEN\" \\\n    '127.0.0.1:9091" + target + "' -o /dev/null -w '%{http_code}\\n'\n" + strconv.Itoa(del.Code) + "\n"
	if !bytes.Contains(readme, []byte(want)) {
		t.Errorf("README.md does not show DELETE %s as it answers:\n%s", target, want)
	}
}
