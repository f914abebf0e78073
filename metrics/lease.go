package metrics

import "github.com/prometheus/client_golang/prometheus"

// leaseMetrics are the Redis store's lease (sync: lease) series.
type leaseMetrics struct {
	requests  *prometheus.CounterVec // policy, result
	fallback  *prometheus.GaugeVec   // policy
	instances prometheus.Gauge
	// falling holds, by the policy a gauge is named for, the names
	// (the policy's, its overrides') deciding locally: the gauge is 1
	// while any is. Guarded by Metrics.mu.
	falling map[string]map[string]struct{}
}

func newLeaseMetrics() leaseMetrics {
	return leaseMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_ratelimit_lease_requests_total",
			Help: "Redis round trips of leased policies (sync: lease), by policy and result (granted, exhausted, returned, error).",
		}, []string{"policy", "result"}),
		fallback: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_ratelimit_lease_fallback",
			Help: "1 while a leased policy decides locally with limit / N because Redis is unreachable, else 0, by policy.",
		}, []string{"policy"}),
		instances: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_ratelimit_lease_instances",
			Help: "Instances seen alive through heartbeats in Redis: the N of the limit / N fallback.",
		}),
		falling: make(map[string]map[string]struct{}),
	}
}

// LeaseRequest counts one Redis round trip of leased policy with its
// result: granted, exhausted, returned or error. It is called per round
// trip, not per request, so the label lookup is affordable. An override's
// leases ("NAME#override:LIMIT/WINDOW...") count under NAME, as the configuration names
// the policy, and every lease method takes names the same way. A policy
// the configuration serving does not lease makes no series (a reload
// removed it or its sync: lease, and the store gives back a lease it
// still held): no later reload would remove it.
func (m *Metrics) LeaseRequest(policy, result string) {
	if m == nil {
		return
	}
	policy = policyOf(policy)
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.leased[policy]; ok {
		m.lease.requests.WithLabelValues(policy, result).Inc()
	}
}

// LeaseFallback sets whether leased policy decides locally with limit / N.
// A policy and its overrides enter and leave their fallbacks apart and
// share the gauge, which is 1 while any of them is in fallback. Like
// LeaseRequest, it makes no series for a policy no longer served.
func (m *Metrics) LeaseFallback(name string, on bool) {
	if m == nil {
		return
	}
	policy := policyOf(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.leased[policy]; !ok {
		return
	}
	names := m.lease.falling[policy]
	if on {
		if names == nil {
			names = make(map[string]struct{})
			m.lease.falling[policy] = names
		}
		names[name] = struct{}{}
	} else {
		delete(names, name)
		if len(names) == 0 {
			delete(m.lease.falling, policy)
		}
	}
	v := 0.0
	if len(names) > 0 {
		v = 1
	}
	m.lease.fallback.WithLabelValues(policy).Set(v)
}

// LeaseDeclare makes the fallback series of leased policy, at 0, when it
// has none yet: an alert on it finds a series before Redis ever failed.
// Declare a configuration's leased policies before it serves: until then
// LeaseRequest and LeaseFallback count nothing for them.
func (m *Metrics) LeaseDeclare(policy string) {
	if m == nil {
		return
	}
	policy = policyOf(policy)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.policies[policy] = struct{}{}
	m.leased[policy] = struct{}{}
	m.lease.fallback.WithLabelValues(policy)
}

// RetainLeases drops the lease series of every policy declared leased
// that is not in leased, the leased policies of the configuration now
// serving, as Retain does for removed policies; LeaseRequest and
// LeaseFallback then count nothing for it until LeaseDeclare declares it
// again. Call it after every load. A policy that loses sync: lease while
// in fallback would otherwise keep its gauge at 1: the Redis store ends a
// fallback from its heartbeat, which stops with the last leased policy.
func (m *Metrics) RetainLeases(leased []string) {
	if m == nil {
		return
	}
	keep := make(map[string]bool, len(leased))
	for _, p := range leased {
		keep[policyOf(p)] = true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for p := range m.leased {
		if !keep[p] {
			m.forgetLeaseLocked(p)
		}
	}
}

// forgetLeaseLocked drops policy p's lease series and what the gauge was
// made from, and takes p off the leased policies. The caller holds m.mu.
func (m *Metrics) forgetLeaseLocked(p string) {
	l := prometheus.Labels{"policy": p}
	m.lease.requests.DeletePartialMatch(l)
	m.lease.fallback.DeletePartialMatch(l)
	delete(m.lease.falling, p)
	delete(m.leased, p)
}

// LeaseInstances sets N, the instances seen alive.
func (m *Metrics) LeaseInstances(n int) {
	if m == nil {
		return
	}
	m.lease.instances.Set(float64(n))
}
