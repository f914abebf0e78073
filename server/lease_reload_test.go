package server

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestReloadUnleasingGivesLeaseBack: a reload that turns the only leased
// policy to sync: request while its lease holds units stops the
// heartbeat (the instance leaves the others' count at once) and gives the
// units back to Redis as the lease goes idle, while the gateway serves on:
// the old bucket then counts the requests admitted from it, and no
// later request, now decided per request on a bucket of its own, takes a
// lease from it again.
func TestReloadUnleasingGivesLeaseBack(t *testing.T) {
	t.Parallel()
	srv, up := leaseParts(t)
	leased := leasedConfig(srv, up, 100_000)
	r := serve(t, leased)
	url := r.url("http") + "/"
	for range 300 {
		if code, _, _ := get(t, url, ""); code != http.StatusOK {
			t.Fatalf("GET: got %d, want 200", code)
		}
	}
	// counts returns what each bucket of the policy counts, by key.
	counts := func() map[string]int {
		out := map[string]int{}
		for _, k := range strings.Fields(srv.Do("KEYS", "sluice:{global|global}:*")) {
			if f := strings.Fields(srv.Do("GET", k)); len(f) == 2 {
				out[k], _ = strconv.Atoi(f[1])
			}
		}
		return out
	}
	before := counts()
	if len(before) != 1 {
		t.Fatalf("buckets before the reload: got %v, want one", before)
	}
	var key string
	for k, n := range before {
		if key = k; n <= 300 {
			t.Fatalf("Redis counts %d while serving, want more than the 300 admitted (the lease holds the rest)", n)
		}
	}
	if got := srv.Do("ZCARD", "sluice:lease:instances"); got != "1" {
		t.Fatalf("instances beating before the reload: got %s, want 1", got)
	}

	writeFile(t, r.path, strings.Replace(leased, "sync: lease", "sync: request", 1))
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := srv.Do("ZCARD", "sluice:lease:instances"); got != "0" {
		t.Errorf("instances beating after the reload: got %s, want 0", got)
	}
	// The lease goes idle 400ms after its last request.
	deadline := time.Now().Add(5 * time.Second)
	for counts()[key] != 300 {
		if time.Now().After(deadline) {
			t.Fatalf("the old bucket counts %d 5s after the reload, want the 300 admitted (the lease's units given back)", counts()[key])
		}
		time.Sleep(20 * time.Millisecond)
	}
	for range 20 {
		if code, _, _ := get(t, url, ""); code != http.StatusOK {
			t.Fatalf("GET after the reload: got %d, want 200", code)
		}
	}
	after := counts()
	if after[key] != 300 || len(after) != 2 {
		t.Errorf("buckets after 20 more requests: got %v, want %s at 300 and a new one at 20", after, key)
	}
	for k, n := range after {
		if k != key && n != 20 {
			t.Errorf("the per-request bucket %s counts %d, want 20", k, n)
		}
	}
	if got := srv.Do("ZCARD", "sluice:lease:instances"); got != "0" {
		t.Errorf("instances beating after more requests: got %s, want 0", got)
	}
}
