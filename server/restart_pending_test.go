package server

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
)

// TestRestartWarningAgainstRunningConfig: the restart warning compares a
// reload with what runs, the configuration the server started with, not
// with the last file loaded. A change that waits for a restart is named
// at every reload until then, also at one that changes something else;
// a reload that puts the running value back names nothing. (The ACME
// section's warning, before it joined the others, compared so.)
func TestRestartWarningAgainstRunningConfig(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(up.Close)
	cfg := func(keepalive, route string) string {
		return fmt.Sprintf("listen: 127.0.0.1:0\nadmin: \"\"\nkeepalive_timeout: %s\nroutes:\n  - name: %s\n    upstream: %s\n", keepalive, route, up.URL)
	}
	r := serve(t, cfg("1m", "a"))
	for i, step := range []struct {
		keepalive, route string
		want             []string
	}{
		{"2m", "a", []string{"keepalive_timeout"}},
		// Still not in effect at a reload that changes another field.
		{"2m", "b", []string{"keepalive_timeout"}},
		// Back to the value that runs.
		{"1m", "b", nil},
	} {
		before := len(r.logs.records(t))
		writeFile(t, r.path, cfg(step.keepalive, step.route))
		if err := r.Reload(); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, rec := range r.logs.records(t)[before:] {
			if rec["msg"] == "configuration change needs a restart to take effect" {
				got = append(got, fmt.Sprint(rec["field"]))
			}
		}
		if !slices.Equal(got, step.want) {
			t.Errorf("reload %d (keepalive_timeout %s, route %s): warned for %q, want %q", i+1, step.keepalive, step.route, got, step.want)
		}
	}
}
