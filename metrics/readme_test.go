package metrics

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/internal/readmetext"
)

// TestREADMEMetricTable keeps README's metric table (Observability ›
// Metrics) saying what New registers: every sluice_ metric, its type and
// its labels, and no metric the table leaves out.
func TestREADMEMetricTable(t *testing.T) {
	t.Parallel()
	types := map[string]dto.MetricType{
		"counter":   dto.MetricType_COUNTER,
		"gauge":     dto.MetricType_GAUGE,
		"histogram": dto.MetricType_HISTOGRAM,
	}
	row := regexp.MustCompile("^\\| `(sluice_[a-z_]+)` \\| ([a-z]+) \\|([^|]*)\\|")
	label := regexp.MustCompile("`([a-z_]+)`")
	type doc struct {
		typ    dto.MetricType
		labels []string
	}
	documented := map[string]doc{}
	for _, line := range readmetext.Section(t, "### Metrics") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		typ, ok := types[m[2]]
		if !ok {
			t.Errorf("README %s: type %q is none of counter, gauge, histogram", m[1], m[2])
		}
		var labels []string
		for _, l := range label.FindAllStringSubmatch(m[3], -1) {
			labels = append(labels, l[1])
		}
		slices.Sort(labels)
		documented[m[1]] = doc{typ, labels}
	}
	if len(documented) == 0 {
		t.Fatal("README's metric table has no rows")
	}

	m := New()
	exercise(m)
	got := families(t, m)
	for name, d := range documented {
		mf, ok := got[name]
		if !ok {
			t.Errorf("README lists %s; not registered", name)
			continue
		}
		if mf.GetType() != d.typ {
			t.Errorf("%s: README says %v, registered as %v", name, d.typ, mf.GetType())
		}
		for _, s := range mf.GetMetric() {
			if l := labelNames(s); !slices.Equal(l, d.labels) {
				t.Errorf("%s labels: README says %v, registered with %v", name, d.labels, l)
			}
		}
	}
	for name := range got {
		if _, ok := documented[name]; strings.HasPrefix(name, "sluice_") && !ok {
			t.Errorf("%s is registered; README's metric table leaves it out", name)
		}
	}
}

// TestREADMEHistogramBuckets keeps README's line on the histograms'
// buckets saying where each starts and ends.
func TestREADMEHistogramBuckets(t *testing.T) {
	t.Parallel()
	text := strings.Join(readmetext.Section(t, "### Metrics"), " ")
	text = strings.Join(strings.Fields(text), " ")
	for _, h := range []struct {
		name    string
		buckets []float64
	}{
		{"request duration", requestBuckets},
		{"queue wait", queueWaitBuckets},
		{"store duration", storeBuckets},
	} {
		want := h.name + " " + strconv.FormatFloat(h.buckets[0], 'f', -1, 64) +
			" to " + strconv.FormatFloat(h.buckets[len(h.buckets)-1], 'f', -1, 64)
		if !strings.Contains(text, want) {
			t.Errorf("README's Metrics section does not say %q", want)
		}
	}
}

// TestREADMELabelValues keeps README's metric table naming every value
// of the labels whose values are a fixed set.
func TestREADMELabelValues(t *testing.T) {
	t.Parallel()
	rows := map[string]string{}
	for _, line := range readmetext.Section(t, "### Metrics") {
		if name, rest, ok := strings.Cut(strings.TrimPrefix(line, "| `"), "` |"); ok && strings.HasPrefix(line, "| `sluice_") {
			rows[name] = rest
		}
	}
	for _, c := range []struct {
		metric string
		values []string
	}{
		{"sluice_ratelimit_decisions_total", resultNames[:]},
		{"sluice_upstream_errors_total", upstreamErrorKindNames[:]},
		{"sluice_config_reloads_total", []string{"success", "error"}},
		{"sluice_store_errors_total", []string{"memory", "redis"}},
		{"sluice_ratelimit_lease_requests_total", []string{"granted", "exhausted", "returned", "error"}},
	} {
		row, ok := rows[c.metric]
		if !ok {
			t.Errorf("README's metric table has no %s", c.metric)
			continue
		}
		for _, v := range c.values {
			if !strings.Contains(row, "`"+v+"`") {
				t.Errorf("README's row of %s does not name the value `%s`", c.metric, v)
			}
		}
	}
}
