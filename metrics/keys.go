package metrics

import (
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// keysCollector exports sluice_ratelimit_keys by asking its source at
// scrape time, so counting buckets costs nothing between scrapes.
type keysCollector struct {
	desc *prometheus.Desc
	src  atomic.Pointer[func() map[string]int64]
	// serving reports whether a policy is one of the configuration now
	// serving: the store keeps a removed policy's buckets until they go
	// idle, but its series goes with the reload, as its others do.
	serving func(policy string) bool
}

// SetKeys installs the source of sluice_ratelimit_keys{policy}: f returns
// the tracked buckets per policy name (MemoryStore.Keys) and is called at
// each scrape. A reload may replace it; nil removes it, for a store that
// cannot count its keys.
func (m *Metrics) SetKeys(f func() map[string]int64) {
	if m == nil {
		return
	}
	if f == nil {
		m.keys.src.Store(nil)
		return
	}
	m.keys.src.Store(&f)
}

// Describe implements prometheus.Collector.
func (c *keysCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *keysCollector) Collect(ch chan<- prometheus.Metric) {
	f := c.src.Load()
	if f == nil {
		return
	}
	byPolicy := map[string]int64{}
	for name, n := range (*f)() {
		byPolicy[policyOf(name)] += n
	}
	for policy, n := range byPolicy {
		if c.serving != nil && !c.serving(policy) {
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), policy)
	}
}

// policyOf is the policy a bucket's policy name belongs to: an override's
// buckets (policy "NAME#override:LIMIT/WINDOW...") count under NAME, which is the name
// the configuration gives.
func policyOf(name string) string {
	if i := strings.LastIndex(name, "#override"); i > 0 {
		return name[:i]
	}
	return name
}
