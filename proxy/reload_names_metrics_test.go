package proxy

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
)

// TestReloadsOfChangingNamesKeepSeriesBounded: a long run of reloads, each
// naming its route and its leaky_bucket policy anew, with a request served
// under each, leaves the registry with the series of the last
// configuration alone: those of removed routes and policies go with the
// reload that removed them (SPEC §5, README › Metrics), so the registry
// does not grow with the reloads.
func TestReloadsOfChangingNamesKeepSeriesBounded(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer up.Close()
	store := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{SweepInterval: -1})
	defer store.Close()
	m := metrics.New()
	g := New(Options{Metrics: m, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	series := func() (n int, names []string) {
		mfs, err := m.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if !strings.HasPrefix(mf.GetName(), "sluice_") {
				continue
			}
			n += len(mf.GetMetric())
			for _, s := range mf.GetMetric() {
				for _, l := range s.GetLabel() {
					if l.GetName() == "route" && l.GetValue() != UnmatchedRoute || l.GetName() == "policy" {
						names = append(names, l.GetValue())
					}
				}
			}
		}
		return n, names
	}
	var first int
	for i := range 50 {
		cfg := fmt.Sprintf(`
policies:
  p%d: {algorithm: leaky_bucket, limit: 1000, window: 1s, queue: 10, key: [global]}
routes:
  - name: n%d
    upstream: %s
    limits: [p%d]
`, i, i, up.URL, i)
		c, err := routes.Parse("test.yaml", []byte(cfg), func(string) (string, bool) { return "", false })
		if err != nil {
			t.Fatal(err)
		}
		g.Load(c, store)
		rec := httptest.NewRecorder()
		g.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("load %d: got %d, want 200", i, rec.Code)
		}
		n, names := series()
		if i == 0 {
			first = n
			continue
		}
		if n != first {
			t.Fatalf("after %d loads: %d series, want the %d of the first load", i+1, n, first)
		}
		for _, name := range names {
			if name != fmt.Sprintf("n%d", i) && name != fmt.Sprintf("p%d", i) {
				t.Fatalf("after %d loads: series of %s, removed", i+1, name)
			}
		}
	}
}
