package metrics

import (
	"errors"
	"io"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/ratelimit"
)

// exercise touches every sluice metric once.
func exercise(m *Metrics) {
	r := m.Route("orders", []Limit{
		{Policy: "api-per-key", Algorithm: "token_bucket", Refunds: true, Blocks: true},
		{Policy: "orders-shaping", Algorithm: "leaky_bucket"},
	})
	r.Request(200, 3*time.Millisecond)
	r.Decision(0, Allowed)
	r.Refund(0)
	r.UpstreamError(UpstreamTimeout)
	q := m.Queue("orders-shaping")
	q.Enter()
	q.Leave(20 * time.Millisecond)
	m.Store("memory").Observe(time.Millisecond, errors.New("store down"))
	m.Reload(true)
	m.SetKeys(func() map[string]int64 { return map[string]int64{"api-per-key": 3} })
	m.LeaseDeclare("api-per-key")
	m.LeaseRequest("api-per-key", "granted")
	m.LeaseFallback("api-per-key", true)
	m.LeaseInstances(3)
}

// families gathers m's registry, indexed by name.
func families(t *testing.T, m *Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatalf("gathering: %v", err)
	}
	out := make(map[string]*dto.MetricFamily, len(mfs))
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

func labelNames(m *dto.Metric) []string {
	var names []string
	for _, l := range m.GetLabel() {
		names = append(names, l.GetName())
	}
	slices.Sort(names)
	return names
}

// labels renders a series' labels as name=value pairs in name order.
func labels(m *dto.Metric) string {
	var parts []string
	for _, l := range m.GetLabel() {
		parts = append(parts, l.GetName()+"="+l.GetValue())
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// value returns the counter, gauge or histogram sample count of the series
// of family name whose labels are want, and whether there is one.
func value(t *testing.T, m *Metrics, name, want string) (float64, bool) {
	t.Helper()
	mf := families(t, m)[name]
	for _, s := range mf.GetMetric() {
		if labels(s) != want {
			continue
		}
		switch {
		case s.Counter != nil:
			return s.Counter.GetValue(), true
		case s.Gauge != nil:
			return s.Gauge.GetValue(), true
		case s.Histogram != nil:
			return float64(s.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

func wantValue(t *testing.T, m *Metrics, name, lbls string, want float64) {
	t.Helper()
	got, ok := value(t, m, name, lbls)
	if !ok {
		t.Errorf("%s{%s}: missing, want %v", name, lbls, want)
		return
	}
	if got != want {
		t.Errorf("%s{%s}: got %v, want %v", name, lbls, got, want)
	}
}

func TestFamilies(t *testing.T) {
	t.Parallel()
	m := New()
	exercise(m)
	want := map[string]struct {
		typ    dto.MetricType
		labels []string
	}{
		"sluice_http_requests_total":            {dto.MetricType_COUNTER, []string{"code", "route"}},
		"sluice_http_request_duration_seconds":  {dto.MetricType_HISTOGRAM, []string{"route"}},
		"sluice_ratelimit_decisions_total":      {dto.MetricType_COUNTER, []string{"algorithm", "policy", "result", "route"}},
		"sluice_ratelimit_refunds_total":        {dto.MetricType_COUNTER, []string{"policy", "route"}},
		"sluice_ratelimit_queue_depth":          {dto.MetricType_GAUGE, []string{"policy"}},
		"sluice_ratelimit_queue_wait_seconds":   {dto.MetricType_HISTOGRAM, []string{"policy"}},
		"sluice_ratelimit_keys":                 {dto.MetricType_GAUGE, []string{"policy"}},
		"sluice_store_errors_total":             {dto.MetricType_COUNTER, []string{"store"}},
		"sluice_store_duration_seconds":         {dto.MetricType_HISTOGRAM, []string{"store"}},
		"sluice_upstream_errors_total":          {dto.MetricType_COUNTER, []string{"kind", "route"}},
		"sluice_config_reloads_total":           {dto.MetricType_COUNTER, []string{"result"}},
		"sluice_ratelimit_lease_requests_total": {dto.MetricType_COUNTER, []string{"policy", "result"}},
		"sluice_ratelimit_lease_fallback":       {dto.MetricType_GAUGE, []string{"policy"}},
		"sluice_ratelimit_lease_instances":      {dto.MetricType_GAUGE, nil},
	}
	got := families(t, m)
	for name, w := range want {
		mf, ok := got[name]
		if !ok {
			t.Errorf("%s: missing", name)
			continue
		}
		if mf.GetType() != w.typ {
			t.Errorf("%s type: got %v, want %v", name, mf.GetType(), w.typ)
		}
		for _, s := range mf.GetMetric() {
			if l := labelNames(s); !slices.Equal(l, w.labels) {
				t.Errorf("%s labels: got %v, want %v", name, l, w.labels)
			}
		}
	}
	for name := range got {
		if strings.HasPrefix(name, "sluice_") {
			if _, ok := want[name]; !ok {
				t.Errorf("%s: exported but not in the contract", name)
			}
		}
	}
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if _, ok := got[name]; !ok {
			t.Errorf("%s: missing, want the Go and process collectors", name)
		}
	}
}

func TestLabelValues(t *testing.T) {
	t.Parallel()
	m := New()
	r := m.Route("otp", []Limit{
		{Policy: "otp-per-phone", Algorithm: "sliding_window_log"},
		{Policy: "per-ip-hourly", Algorithm: "fixed_window", Shadow: true},
		{Policy: "otp#3", Algorithm: "leaky_bucket"},
	})
	for range 3 {
		r.Request(200, time.Millisecond)
	}
	r.Request(429, time.Millisecond)
	r.Request(999, time.Millisecond)
	r.Decision(0, Allowed)
	r.Decision(0, Rejected)
	r.Decision(1, ShadowRejected)
	r.Decision(2, Queued)
	r.Decision(2, Queued)
	r.Decision(3, Allowed)     // out of range: ignored
	r.Decision(0, Result(200)) // out of range: ignored
	for k := range numUpstreamErrorKinds + 1 {
		r.UpstreamError(k)
	}
	m.Reload(false)
	m.Reload(false)
	m.Reload(true)
	m.Store("redis").Observe(time.Millisecond, nil)
	m.Store("redis").Observe(time.Millisecond, io.EOF)

	for _, tc := range []struct {
		name, labels string
		want         float64
	}{
		{"sluice_http_requests_total", "code=200,route=otp", 3},
		{"sluice_http_requests_total", "code=429,route=otp", 1},
		{"sluice_http_requests_total", "code=999,route=otp", 1},
		{"sluice_http_request_duration_seconds", "route=otp", 5},
		{"sluice_ratelimit_decisions_total", "algorithm=sliding_window_log,policy=otp-per-phone,result=allowed,route=otp", 1},
		{"sluice_ratelimit_decisions_total", "algorithm=sliding_window_log,policy=otp-per-phone,result=rejected,route=otp", 1},
		{"sluice_ratelimit_decisions_total", "algorithm=fixed_window,policy=per-ip-hourly,result=shadow_rejected,route=otp", 1},
		{"sluice_ratelimit_decisions_total", "algorithm=fixed_window,policy=per-ip-hourly,result=allowed,route=otp", 0},
		{"sluice_ratelimit_decisions_total", "algorithm=leaky_bucket,policy=otp#3,result=queued,route=otp", 2},
		{"sluice_ratelimit_decisions_total", "algorithm=leaky_bucket,policy=otp#3,result=rejected,route=otp", 0},
		{"sluice_upstream_errors_total", "kind=refused,route=otp", 1},
		{"sluice_upstream_errors_total", "kind=timeout,route=otp", 1},
		{"sluice_upstream_errors_total", "kind=reset,route=otp", 1},
		{"sluice_upstream_errors_total", "kind=tls,route=otp", 1},
		{"sluice_upstream_errors_total", "kind=other,route=otp", 2}, // other and an unknown kind
		{"sluice_config_reloads_total", "result=error", 2},
		{"sluice_config_reloads_total", "result=success", 1},
		{"sluice_store_duration_seconds", "store=redis", 2},
		{"sluice_store_errors_total", "store=redis", 1},
	} {
		wantValue(t, m, tc.name, tc.labels, tc.want)
	}
	// Series a limit cannot produce are not created until they happen.
	for _, lbls := range []string{
		"algorithm=sliding_window_log,policy=otp-per-phone,result=queued,route=otp",
		"algorithm=sliding_window_log,policy=otp-per-phone,result=shadow_rejected,route=otp",
		"algorithm=fixed_window,policy=per-ip-hourly,result=rejected,route=otp",
	} {
		if got, ok := value(t, m, "sluice_ratelimit_decisions_total", lbls); ok {
			t.Errorf("sluice_ratelimit_decisions_total{%s}: got %v, want no series", lbls, got)
		}
	}
}

func TestQueueDepth(t *testing.T) {
	t.Parallel()
	m := New()
	q := m.Queue("orders-shaping")
	q.Enter()
	q.Enter()
	q.Enter()
	q.Leave(time.Second)
	// A reload hands out a new Queue; requests that entered under the old
	// one still leave the same gauge.
	q2 := m.Queue("orders-shaping")
	q2.Enter()
	q.Leave(2 * time.Second)
	wantValue(t, m, "sluice_ratelimit_queue_depth", "policy=orders-shaping", 2)
	wantValue(t, m, "sluice_ratelimit_queue_wait_seconds", "policy=orders-shaping", 2)
	mf := families(t, m)["sluice_ratelimit_queue_wait_seconds"]
	if got, want := mf.GetMetric()[0].GetHistogram().GetSampleSum(), 3.0; got != want {
		t.Errorf("wait sum: got %v, want %v", got, want)
	}
}

func TestKeys(t *testing.T) {
	t.Parallel()
	m := New()
	if _, ok := families(t, m)["sluice_ratelimit_keys"]; ok {
		t.Errorf("sluice_ratelimit_keys: got a family before SetKeys, want none")
	}
	m.Route("r", []Limit{{Policy: "a", Algorithm: "fixed_window"}, {Policy: "b", Algorithm: "fixed_window"}})
	m.SetKeys(func() map[string]int64 { return map[string]int64{"a": 3, "b": 1} })
	wantValue(t, m, "sluice_ratelimit_keys", "policy=a", 3)
	wantValue(t, m, "sluice_ratelimit_keys", "policy=b", 1)
	m.SetKeys(func() map[string]int64 { return map[string]int64{"b": 7} })
	wantValue(t, m, "sluice_ratelimit_keys", "policy=b", 7)
	if _, ok := value(t, m, "sluice_ratelimit_keys", "policy=a"); ok {
		t.Errorf("policy=a: still exported after the source was replaced")
	}
	// A reload that removes a policy drops its series, though the store
	// keeps its buckets until they go idle.
	m.SetKeys(func() map[string]int64 { return map[string]int64{"a": 3, "b": 7} })
	m.Retain([]string{"r"}, []string{"b"})
	if _, ok := value(t, m, "sluice_ratelimit_keys", "policy=a"); ok {
		t.Errorf("policy=a: still exported after a reload removed it")
	}
	wantValue(t, m, "sluice_ratelimit_keys", "policy=b", 7)
	m.SetKeys(nil)
	if _, ok := families(t, m)["sluice_ratelimit_keys"]; ok {
		t.Errorf("sluice_ratelimit_keys: got a family after SetKeys(nil), want none")
	}
}

func TestInstancesDoNotCollide(t *testing.T) {
	t.Parallel()
	a, b := New(), New()
	exercise(a)
	exercise(b)
	a.Route("orders", nil).Request(200, time.Millisecond)
	wantValue(t, a, "sluice_http_requests_total", "code=200,route=orders", 2)
	wantValue(t, b, "sluice_http_requests_total", "code=200,route=orders", 1)
}

func TestRouteAgainSharesSeries(t *testing.T) {
	t.Parallel()
	m := New()
	limits := []Limit{{Policy: "api-per-key", Algorithm: "token_bucket"}}
	old := m.Route("api", limits)
	old.Request(200, time.Millisecond)
	old.Decision(0, Allowed)
	reloaded := m.Route("api", limits)
	reloaded.Request(200, time.Millisecond)
	reloaded.Decision(0, Allowed)
	old.Request(200, time.Millisecond) // in flight across the reload
	wantValue(t, m, "sluice_http_requests_total", "code=200,route=api", 3)
	wantValue(t, m, "sluice_ratelimit_decisions_total", "algorithm=token_bucket,policy=api-per-key,result=allowed,route=api", 2)
}

func TestForgetAndRetain(t *testing.T) {
	t.Parallel()
	m := New()
	a := m.Route("a", []Limit{{Policy: "pa", Algorithm: "token_bucket"}})
	b := m.Route("b", []Limit{{Policy: "pb", Algorithm: "leaky_bucket"}, {Policy: "shared", Algorithm: "fixed_window"}})
	m.Queue("pb").Enter()
	a.Request(200, time.Millisecond)
	b.Request(200, time.Millisecond)

	m.Retain([]string{"a"}, []string{"pa", "shared"})
	for _, tc := range []struct {
		name, labels string
		kept         bool
	}{
		{"sluice_http_requests_total", "code=200,route=a", true},
		{"sluice_http_requests_total", "code=200,route=b", false},
		{"sluice_http_request_duration_seconds", "route=b", false},
		{"sluice_upstream_errors_total", "kind=other,route=b", false},
		{"sluice_ratelimit_decisions_total", "algorithm=token_bucket,policy=pa,result=allowed,route=a", true},
		{"sluice_ratelimit_decisions_total", "algorithm=fixed_window,policy=shared,result=allowed,route=b", false},
		{"sluice_ratelimit_queue_depth", "policy=pb", false},
	} {
		if _, ok := value(t, m, tc.name, tc.labels); ok != tc.kept {
			t.Errorf("%s{%s}: got kept %v, want %v", tc.name, tc.labels, ok, tc.kept)
		}
	}
	// A route that comes back starts from zero.
	m.Route("b", nil).Request(200, time.Millisecond)
	wantValue(t, m, "sluice_http_requests_total", "code=200,route=b", 1)

	m.Forget(nil, []string{"pa"})
	if _, ok := value(t, m, "sluice_ratelimit_decisions_total", "algorithm=token_bucket,policy=pa,result=allowed,route=a"); ok {
		t.Errorf("policy pa: still exported after Forget")
	}
}

func TestHandler(t *testing.T) {
	t.Parallel()
	m := New()
	exercise(m)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if got, want := rec.Code, 200; got != want {
		t.Fatalf("status: got %d, want %d", got, want)
	}
	body := rec.Body.String()
	for _, s := range []string{
		`sluice_http_requests_total{code="200",route="orders"} 1`,
		`sluice_ratelimit_keys{policy="api-per-key"} 3`,
		`sluice_config_reloads_total{result="success"} 1`,
		`sluice_http_request_duration_seconds_bucket{route="orders",le="0.005"} 1`,
		"go_goroutines ",
	} {
		if !strings.Contains(body, s) {
			t.Errorf("body: got no line %q", s)
		}
	}
}

func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	m := New()
	r := m.Route("api", []Limit{{Policy: "p", Algorithm: "token_bucket"}})
	const workers, each = 4, 500
	done := make(chan struct{})
	for w := range workers {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range each {
				r.Request(200+w*100, time.Millisecond) // 200..500, warmed concurrently
				r.Decision(0, Result(i%4))
			}
		}()
	}
	for range workers {
		<-done
	}
	for _, code := range []string{"200", "300", "400", "500"} {
		wantValue(t, m, "sluice_http_requests_total", "code="+code+",route=api", each)
	}
	wantValue(t, m, "sluice_ratelimit_decisions_total", "algorithm=token_bucket,policy=p,result=queued,route=api", workers*each/4)
}

func TestLimitOf(t *testing.T) {
	t.Parallel()
	p := ratelimit.MustPolicy(ratelimit.Policy{Name: "per-ip-hourly", Algorithm: ratelimit.FixedWindow, Limit: 1000, Window: time.Hour, Shadow: true})
	if got, want := LimitOf(p), (Limit{Policy: "per-ip-hourly", Algorithm: "fixed_window", Shadow: true}); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestNilMetricsRecordNothing(t *testing.T) {
	t.Parallel()
	var m *Metrics
	r := m.Route("r", []Limit{{Policy: "p", Algorithm: "token_bucket"}})
	r.Request(200, time.Millisecond)
	r.Decision(0, Allowed)
	r.UpstreamError(UpstreamRefused)
	q := m.Queue("p")
	q.Enter()
	q.Leave(time.Millisecond)
	m.Store("memory").Observe(time.Millisecond, nil)
	m.Reload(true)
	m.Retain(nil, nil)
	m.SetKeys(nil)
	if r != nil || q != nil {
		t.Errorf("got handles %v %v from a nil Metrics, want nil", r, q)
	}
}

// TestRetiredRouteMakesNoSeries: a request in flight across the reload
// that removed its route finishes on the old handles; a status code or a
// result they had not counted yet makes no series, which no later reload
// would remove.
func TestRetiredRouteMakesNoSeries(t *testing.T) {
	t.Parallel()
	m := New()
	r := m.Route("old", []Limit{{Policy: "p", Algorithm: "fixed_window"}})
	r.Request(200, time.Millisecond)
	m.Retain(nil, nil)
	r.Request(418, time.Millisecond)
	r.Request(200, time.Millisecond)
	r.Request(999, time.Millisecond)
	r.Decision(0, Exempt)
	m.Retain(nil, nil)
	for name, mf := range families(t, m) {
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "route" && l.GetValue() == "old" {
					t.Errorf("%s%v: exported after its route was removed", name, s.GetLabel())
				}
			}
		}
	}
}

// TestLeaseSeriesFoldOverrides: an override's leases count under the
// policy the configuration names, as its buckets do.
func TestLeaseSeriesFoldOverrides(t *testing.T) {
	t.Parallel()
	m := New()
	m.LeaseDeclare("api#override1")
	m.LeaseRequest("api#override1", "granted")
	m.LeaseFallback("api#override1", true)
	wantValue(t, m, "sluice_ratelimit_lease_requests_total", "policy=api,result=granted", 1)
	wantValue(t, m, "sluice_ratelimit_lease_fallback", "policy=api", 1)
	for name, mf := range families(t, m) {
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if strings.Contains(l.GetValue(), "#override") {
					t.Errorf("%s%v: an override's internal name as a label", name, s.GetLabel())
				}
			}
		}
	}
}

// TestRemovedPolicyMakesNoSeries: the route stays but a reload removes
// the policy one of its limits used; a request in flight on the old
// handles that counts a result they had not counted yet makes no series
// under the removed policy.
func TestRemovedPolicyMakesNoSeries(t *testing.T) {
	t.Parallel()
	m := New()
	old := m.Route("api", []Limit{{Policy: "a", Algorithm: "fixed_window"}})
	m.Route("api", []Limit{{Policy: "b", Algorithm: "fixed_window"}}) // the reload
	m.Retain([]string{"api"}, []string{"b"})
	old.Decision(0, Exempt) // in flight across the reload
	old.Refund(0)
	m.Retain([]string{"api"}, []string{"b"}) // a later reload
	for name, mf := range families(t, m) {
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "policy" && l.GetValue() == "a" {
					t.Errorf("%s%v: exported after a reload removed policy a", name, s.GetLabel())
				}
			}
		}
	}
}

// TestReloadRetiresChangedLimits: a reload that keeps a route and a policy
// but changes the policy's algorithm, or takes count_status away, leaves
// no series of what the policy was; its queue series go once it is no
// leaky_bucket. A change that names the same series (shadow, block) keeps
// them and their counts, and a handle the reload superseded makes no
// series of the old algorithm.
func TestReloadRetiresChangedLimits(t *testing.T) {
	t.Parallel()
	m := New()
	old := m.Route("orders", []Limit{{Policy: "shaping", Algorithm: "leaky_bucket", Refunds: false}, {Policy: "otp", Algorithm: "fixed_window", Refunds: true}})
	q := m.Queue("shaping")
	old.Decision(0, Queued)
	old.Decision(1, Allowed)
	old.Refund(1)
	q.Enter()
	m.Retain([]string{"orders"}, []string{"shaping", "otp"})

	now := m.Route("orders", []Limit{{Policy: "shaping", Algorithm: "token_bucket"}, {Policy: "otp", Algorithm: "fixed_window", Shadow: true}})
	m.Retain([]string{"orders"}, []string{"shaping", "otp"})
	old.Decision(0, Exempt) // in flight across the reload
	now.Decision(0, Allowed)
	for name, mf := range families(t, m) {
		for _, s := range mf.GetMetric() {
			l := labels(s)
			if strings.Contains(l, "algorithm=leaky_bucket") || strings.Contains(l, "policy=shaping") && strings.HasPrefix(name, "sluice_ratelimit_queue") {
				t.Errorf("%s{%s}: exported after shaping became a token_bucket", name, l)
			}
			if name == "sluice_ratelimit_refunds_total" {
				t.Errorf("%s{%s}: exported after otp lost count_status", name, l)
			}
		}
	}
	wantValue(t, m, "sluice_ratelimit_decisions_total", "algorithm=token_bucket,policy=shaping,result=allowed,route=orders", 1)
	wantValue(t, m, "sluice_ratelimit_decisions_total", "algorithm=fixed_window,policy=otp,result=allowed,route=orders", 1)
}

// TestReloadRetiresQueueOfPolicyWhoseLeakyRouteWent: a reload that removes
// the only route listing a leaky_bucket policy and makes that policy a
// token_bucket on another route drops the policy's queue series.
func TestReloadRetiresQueueOfPolicyWhoseLeakyRouteWent(t *testing.T) {
	t.Parallel()
	m := New()
	m.Route("orders", []Limit{{Policy: "shaping", Algorithm: "leaky_bucket"}})
	m.Queue("shaping").Enter()
	m.Retain([]string{"orders"}, []string{"shaping"})

	m.Route("other", []Limit{{Policy: "shaping", Algorithm: "token_bucket"}})
	m.Retain([]string{"other"}, []string{"shaping"})
	for name, mf := range families(t, m) {
		if !strings.HasPrefix(name, "sluice_ratelimit_queue") {
			continue
		}
		for _, s := range mf.GetMetric() {
			t.Errorf("%s{%s}: exported, want dropped once shaping is no leaky_bucket anywhere", name, labels(s))
		}
	}
}

// TestRemovedLeasedPolicyMakesNoSeries: a reload removes a leased policy,
// and the Redis store then gives its idle lease back and ends its
// fallback, as it does in the background for the leases it still holds.
// Neither brings the removed policy's series back.
func TestRemovedLeasedPolicyMakesNoSeries(t *testing.T) {
	t.Parallel()
	m := New()
	m.LeaseDeclare("gone")
	m.LeaseRequest("gone", "granted")
	m.LeaseFallback("gone", true)
	m.Retain(nil, nil) // the reload that removes it
	m.LeaseRequest("gone", "returned")
	m.LeaseRequest("gone#override1", "returned")
	m.LeaseFallback("gone", false)
	for name, mf := range families(t, m) {
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "policy" && l.GetValue() == "gone" {
					t.Errorf("%s{%s}: exported after a reload removed policy gone", name, labels(s))
				}
			}
		}
	}
}
