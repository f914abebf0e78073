package proxy

import (
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
)

// TestReloadThatUnleasesDropsLeaseSeries: a policy in lease fallback
// (its gauge at 1, Redis unreachable) loses sync: lease in a reload that
// keeps it. With no leased policy left the Redis store stops its
// heartbeat, which is what ends a fallback without traffic, so nothing
// would ever set the gauge back: the policy's lease series go with the
// reload, and a decision of the old configuration still in flight makes
// none again.
func TestReloadThatUnleasesDropsLeaseSeries(t *testing.T) {
	t.Parallel()
	const cfg = `
store:
  type: redis
  redis: {addresses: ["127.0.0.1:1"]}
policies:
  g: {algorithm: fixed_window, limit: 100, window: 1h, key: [global]SYNC}
routes:
  - name: r
    upstream: http://127.0.0.1:1
    limits: [g]
`
	parse := func(sync string) *routes.Config {
		c, err := routes.Parse("test.yaml", []byte(strings.ReplaceAll(cfg, "SYNC", sync)), func(string) (string, bool) { return "", false })
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	store := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{SweepInterval: -1})
	defer store.Close()
	m := metrics.New()
	g := New(Options{Metrics: m, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	g.Load(parse(", sync: lease"), store)
	m.LeaseRequest("g", "error") // as the Redis store reports them
	m.LeaseFallback("g", true)

	g.Load(parse(""), store)
	m.LeaseFallback("g", true) // a leased decision still in flight
	m.LeaseRequest("g", "returned")
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "sluice_ratelimit_lease_") {
			continue
		}
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "policy" && l.GetValue() == "g" {
					t.Errorf("%s %v: exported after a reload took sync: lease off g, want gone", mf.GetName(), s)
				}
			}
		}
	}
}
