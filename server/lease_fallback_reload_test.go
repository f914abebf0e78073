package server

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestReloadReleasingInFallbackKeepsGauge: a leased policy deciding in its
// fallback (Redis down) that a reload turns to sync: request, and a
// later one back to sync: lease while Redis is still down, decides in its
// fallback again: sluice_ratelimit_lease_fallback is 1, as it was before
// the reloads. The store still counted the policy in fallback from before,
// so it reported nothing, and the series the second reload made read 0
// for the whole outage.
func TestReloadReleasingInFallbackKeepsGauge(t *testing.T) {
	t.Parallel()
	srv, up := leaseParts(t)
	leased := leasedConfig(srv, up, 100_000)
	r := serve(t, leased)
	url, admin := r.url("http")+"/", r.url("admin")
	if code, _, _ := get(t, url, ""); code != http.StatusOK {
		t.Fatalf("GET: got %d, want 200", code)
	}
	srv.Kill()
	gauge := func() float64 {
		_, _, body := get(t, admin+"/metrics", "")
		return metricValue(t, body, `sluice_ratelimit_lease_fallback{policy="global"}`)
	}
	// A request in flight when Redis went waits for its timeout (1s).
	deadline := time.Now().Add(10 * time.Second)
	for gauge() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the leased policy never fell back with Redis down")
		}
		if code, _, _ := get(t, url, ""); code != http.StatusOK {
			t.Fatalf("GET with Redis down (on_error local): got %d, want 200", code)
		}
	}
	for _, cfg := range []string{strings.Replace(leased, "sync: lease", "sync: request", 1), leased} {
		writeFile(t, r.path, cfg)
		if err := r.Reload(); err != nil {
			t.Fatal(err)
		}
		if code, _, _ := get(t, url, ""); code != http.StatusOK {
			t.Fatalf("GET with Redis down after a reload: got %d, want 200", code)
		}
	}
	if got := gauge(); got != 1 {
		t.Errorf("lease fallback gauge with Redis still down, leased again: got %v, want 1", got)
	}
}
