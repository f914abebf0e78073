// Package metrics holds sluice's Prometheus metrics. Handles into them are
// looked up once, when a configuration is loaded, so a request only touches
// counters and histograms it already holds: no label lookups and no
// allocations on the request path.
package metrics

import (
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Histogram buckets, in seconds.
var (
	// requestBuckets span a cached answer (sub-millisecond) to a slow
	// upstream or a long queue wait.
	requestBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	// queueWaitBuckets reach the scale of a leaky_bucket max_wait.
	queueWaitBuckets = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	// storeBuckets cover an in-memory decision up to a Redis round trip
	// that ran into its timeout.
	storeBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}
)

// Metrics holds every sluice metric on a registry of its own, together with
// the Go and process collectors. Create one per process with New; reloads
// call Route and Queue again but never register anything again. It is safe
// for concurrent use; the zero value is not usable, but a nil *Metrics records
// nothing (its handles are nil and their methods do nothing), which is how
// benchmarks measure what metrics cost.
type Metrics struct {
	reg *prometheus.Registry

	requests       *prometheus.CounterVec   // route, code
	duration       *prometheus.HistogramVec // route
	decisions      *prometheus.CounterVec   // route, policy, algorithm, result
	refunds        *prometheus.CounterVec   // route, policy
	upstreamErrors *prometheus.CounterVec   // route, kind
	queueDepth     *prometheus.GaugeVec     // policy
	queueWait      *prometheus.HistogramVec // policy
	storeErrors    *prometheus.CounterVec   // store
	storeDuration  *prometheus.HistogramVec // store
	reloads        [2]prometheus.Counter    // error, success
	keys           keysCollector
	lease          leaseMetrics

	mu       sync.Mutex
	codes    map[string]*codeCounters // by route, shared by every Route of that name
	routes   map[string]struct{}      // every route handed out by Route
	policies map[string]struct{}      // every policy handed out by Route and Queue
	// limits holds, by route, every limit handed out by Route for it and
	// whether the last Route call for that route had it: a reload may keep
	// a route and a policy while changing the policy's algorithm, or drop
	// the policy from that route only.
	limits map[string]map[Limit]bool
	queues map[string]struct{} // every policy handed out by Queue
	// leased holds the policies LeaseDeclare declared that no load has
	// taken sync: lease from since (RetainLeases): the only ones with
	// lease series.
	leased map[string]struct{}
}

// New creates the metrics and registers them, with the Go and process
// collectors, on a new registry.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_http_requests_total",
			Help: "HTTP requests answered, by route and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_http_request_duration_seconds",
			Help:    "Time from receiving a request to finishing its answer, queue wait included, by route.",
			Buckets: requestBuckets,
		}, []string{"route"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_ratelimit_decisions_total",
			Help: "Rate-limit decisions, one per limit that decided a request, by route, policy, algorithm and result (allowed, rejected, queued, shadow_rejected, blocked, exempt).",
		}, []string{"route", "policy", "algorithm", "result"}),
		refunds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_ratelimit_refunds_total",
			Help: "Units given back because the response status was not one count_status lists, by route and policy.",
		}, []string{"route", "policy"}),
		upstreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_upstream_errors_total",
			Help: "Requests that got no answer from the upstream, by route and kind (refused, timeout, reset, tls, other).",
		}, []string{"route", "kind"}),
		queueDepth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_ratelimit_queue_depth",
			Help: "Requests waiting in a leaky_bucket queue, by policy.",
		}, []string{"policy"}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_ratelimit_queue_wait_seconds",
			Help:    "Time requests spent waiting in a leaky_bucket queue, by policy.",
			Buckets: queueWaitBuckets,
		}, []string{"policy"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_store_errors_total",
			Help: "Limiter store operations that failed, by store (memory, redis).",
		}, []string{"store"}),
		storeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_store_duration_seconds",
			Help:    "Time the limiter store took per operation (a memory decision, a Redis round trip), by store (memory, redis).",
			Buckets: storeBuckets,
		}, []string{"store"}),
		keys: keysCollector{desc: prometheus.NewDesc(
			"sluice_ratelimit_keys",
			"Buckets the memory store tracks, by policy.",
			[]string{"policy"}, nil,
		)},
		lease:    newLeaseMetrics(),
		codes:    make(map[string]*codeCounters),
		routes:   make(map[string]struct{}),
		policies: make(map[string]struct{}),
		limits:   make(map[string]map[Limit]bool),
		queues:   make(map[string]struct{}),
		leased:   make(map[string]struct{}),
	}
	m.keys.serving = m.serving
	reloads := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_config_reloads_total",
		Help: "Configuration reloads, by result (success, error).",
	}, []string{"result"})
	m.reloads[0] = reloads.WithLabelValues("error")
	m.reloads[1] = reloads.WithLabelValues("success")
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.requests, m.duration, m.decisions, m.refunds, m.upstreamErrors,
		m.queueDepth, m.queueWait, m.storeErrors, m.storeDuration,
		reloads, &m.keys,
		m.lease.requests, m.lease.fallback, m.lease.instances,
	)
	return m
}

// Registry returns the registry that holds the metrics, for tests and for
// registering more collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus exposition formats. A
// collector that fails is reported in the log of the scrape but does not
// hide the other metrics.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
	})
}

// Reload counts one configuration reload: result="success" when ok, else
// result="error".
func (m *Metrics) Reload(ok bool) {
	if m == nil {
		return
	}
	if ok {
		m.reloads[1].Inc()
	} else {
		m.reloads[0].Inc()
	}
}

// serving reports whether policy is one of the configuration now serving
// (handed out by Route, Queue or a lease method, and not forgotten since).
func (m *Metrics) serving(policy string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.policies[policy]
	return ok
}

// Forget removes every series labelled with one of routes (in route) or
// policies (in policy), for the routes and policies a reload removed. Call
// it after the new configuration serves: handles the old one still holds
// keep working but count into series nobody exports any more.
func (m *Metrics) Forget(routes, policies []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range routes {
		if c := m.codes[r]; c != nil {
			c.retired.Store(true)
		}
		l := prometheus.Labels{"route": r}
		m.requests.DeletePartialMatch(l)
		m.duration.DeletePartialMatch(l)
		m.decisions.DeletePartialMatch(l)
		m.refunds.DeletePartialMatch(l)
		m.upstreamErrors.DeletePartialMatch(l)
		delete(m.codes, r)
		delete(m.routes, r)
		delete(m.limits, r)
	}
	for _, p := range policies {
		l := prometheus.Labels{"policy": p}
		m.decisions.DeletePartialMatch(l)
		m.refunds.DeletePartialMatch(l)
		m.queueDepth.DeletePartialMatch(l)
		m.queueWait.DeletePartialMatch(l)
		m.forgetLeaseLocked(p)
		delete(m.policies, p)
		delete(m.queues, p)
		for _, ls := range m.limits {
			for l := range ls {
				if l.Policy == p {
					delete(ls, l)
				}
			}
		}
	}
}

// Retain forgets (see Forget) every route and policy handed out by Route
// and Queue that is not in routes or policies, the names of the
// configuration now serving. Call it after every reload, successful or
// not, so the zero series a rejected configuration created go too.
func (m *Metrics) Retain(routes, policies []string) {
	if m == nil {
		return
	}
	keepR := make(map[string]bool, len(routes))
	for _, r := range routes {
		keepR[r] = true
	}
	keepP := make(map[string]bool, len(policies))
	for _, p := range policies {
		keepP[p] = true
	}
	var goneR, goneP []string
	m.mu.Lock()
	for r := range m.routes {
		if !keepR[r] {
			goneR = append(goneR, r)
		}
	}
	for p := range m.policies {
		if !keepP[p] {
			goneP = append(goneP, p)
		}
	}
	m.retireChangedLocked(keepR)
	m.mu.Unlock()
	m.Forget(goneR, goneP)
}

// retireChangedLocked removes the series of the routes and policies that
// stay but changed: a limit the last Route call of its route no longer
// has (its policy now of another algorithm, without count_status, or off
// that route), and the queue series of a policy no longer a leaky_bucket.
// Routes not in keep are on their way out (Forget), and count for nothing.
func (m *Metrics) retireChangedLocked(keep map[string]bool) {
	leaky := map[string]bool{}
	for r, ls := range m.limits {
		if !keep[r] {
			continue
		}
		// The series the current limits still count into, which a limit
		// that changed in other ways (shadow, block) shares.
		decides, refunds := map[deciding]bool{}, map[string]bool{}
		for l, current := range ls {
			if current {
				decides[deciding{l.Policy, l.Algorithm}] = true
				refunds[l.Policy] = refunds[l.Policy] || l.Refunds
				leaky[l.Policy] = leaky[l.Policy] || l.Algorithm == "leaky_bucket"
			}
		}
		for l, current := range ls {
			if current {
				continue
			}
			if !decides[deciding{l.Policy, l.Algorithm}] {
				m.decisions.DeletePartialMatch(prometheus.Labels{"route": r, "policy": l.Policy, "algorithm": l.Algorithm})
			}
			if l.Refunds && !refunds[l.Policy] {
				m.refunds.DeletePartialMatch(prometheus.Labels{"route": r, "policy": l.Policy})
			}
			delete(ls, l)
		}
	}
	for p := range m.queues {
		if !leaky[p] {
			l := prometheus.Labels{"policy": p}
			m.queueDepth.DeletePartialMatch(l)
			m.queueWait.DeletePartialMatch(l)
			delete(m.queues, p)
		}
	}
}

// deciding is what names a limit's decision series on its route.
type deciding struct{ policy, algorithm string }

// decides reports whether the configuration serving counts route's
// decisions of policy under algorithm: a handle a reload superseded makes
// no series that no later reload would remove.
func (m *Metrics) decides(route string, l Limit) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for c, current := range m.limits[route] {
		if current && c.Policy == l.Policy && c.Algorithm == l.Algorithm {
			return true
		}
	}
	return false
}
