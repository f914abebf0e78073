package metrics

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/ratelimit"
)

// Limit describes one limit of a route for its decision metrics.
type Limit struct {
	// Policy is the policy name, ROUTE#N for an inline policy.
	Policy string
	// Algorithm is the algorithm's configuration name, such as "token_bucket".
	Algorithm string
	// Shadow marks a limit that never rejects. It only chooses which
	// result series start at zero; any result can be counted for any limit.
	Shadow bool
	// Refunds marks a limit with count_status, whose refund series starts
	// at zero; Blocks one with a block, whose blocked series does.
	Refunds, Blocks bool
}

// LimitOf describes the compiled policy p.
func LimitOf(p *ratelimit.Policy) Limit {
	return Limit{Policy: p.Name, Algorithm: p.Algorithm.String(), Shadow: p.Shadow, Blocks: p.Block > 0 && !p.Shadow}
}

// Result is what one limit decided for one request.
type Result uint8

// The results, exported as the label values allowed, rejected, queued,
// shadow_rejected, blocked (rejected by an active block) and exempt (an
// override exempted the request).
const (
	Allowed Result = iota
	Rejected
	Queued
	ShadowRejected
	Blocked
	Exempt
	numResults
)

var resultNames = [numResults]string{"allowed", "rejected", "queued", "shadow_rejected", "blocked", "exempt"}

// String returns the label value of r.
func (r Result) String() string {
	if r < numResults {
		return resultNames[r]
	}
	return "Result(" + strconv.Itoa(int(r)) + ")"
}

// Status codes 100 to 599 have a cached counter; others, which only a
// misbehaving upstream sends, are looked up on each request.
const (
	minCode = 100
	maxCode = 599
)

// codeCounters caches one route's sluice_http_requests_total children by
// status code. It is created on first use and shared by every Route of
// that name, so a reload starts warm.
type codeCounters struct {
	c [maxCode - minCode + 1]atomic.Pointer[counter]
	// retired is set when a reload removed the route: handles that
	// requests still in flight hold then make no series, which no later
	// reload would remove.
	retired atomic.Bool
}

// counter boxes a Counter so it fits an atomic.Pointer.
type counter struct{ prometheus.Counter }

// Route holds the metric children of one route, looked up once when the
// configuration is loaded. Its methods do not allocate once every status
// code seen has been counted once. It is safe for concurrent use.
type Route struct {
	m         *Metrics
	name      string
	vec       *prometheus.CounterVec
	codes     *codeCounters
	duration  prometheus.Observer
	decisions [][numResults]atomic.Pointer[counter]
	refunds   []prometheus.Counter
	limits    []Limit
	dvec      *prometheus.CounterVec
	rvec      *prometheus.CounterVec
	upstream  [numUpstreamErrorKinds]prometheus.Counter
}

// Route returns the handles for route, whose limits are given in route
// order; Decision's limit argument indexes them. Calling it again for the
// same route, on a reload, returns handles to the same series. The series
// that a route is sure to use are created at once, at zero, so that rates
// are right from the first event.
func (m *Metrics) Route(route string, limits []Limit) *Route {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	codes := m.codes[route]
	if codes == nil {
		codes = new(codeCounters)
		m.codes[route] = codes
	}
	m.routes[route] = struct{}{}
	ls := m.limits[route]
	if ls == nil {
		ls = make(map[Limit]bool, len(limits))
		m.limits[route] = ls
	}
	for l := range ls {
		ls[l] = false
	}
	for _, l := range limits {
		m.policies[l.Policy] = struct{}{}
		ls[l] = true
	}
	m.mu.Unlock()

	r := &Route{
		m:         m,
		name:      route,
		vec:       m.requests,
		codes:     codes,
		duration:  m.duration.WithLabelValues(route),
		decisions: make([][numResults]atomic.Pointer[counter], len(limits)),
		refunds:   make([]prometheus.Counter, len(limits)),
		limits:    append([]Limit(nil), limits...),
		dvec:      m.decisions,
		rvec:      m.refunds,
	}
	for i, l := range limits {
		expected := []Result{Allowed, Rejected}
		if l.Shadow {
			expected[1] = ShadowRejected
		}
		if l.Algorithm == "leaky_bucket" {
			expected = append(expected, Queued)
		}
		if l.Blocks {
			expected = append(expected, Blocked)
		}
		if l.Refunds {
			r.refunds[i] = m.refunds.WithLabelValues(route, l.Policy)
		}
		for _, res := range expected {
			r.decisionCounter(i, res)
		}
	}
	for k := range r.upstream {
		r.upstream[k] = m.upstreamErrors.WithLabelValues(route, UpstreamErrorKind(k).String())
	}
	return r
}

// Name returns the route's name.
func (r *Route) Name() string { return r.name }

// Request counts one answered request with its status code and how long it
// took, from arrival to the end of the answer.
func (r *Route) Request(code int, d time.Duration) {
	if r == nil {
		return
	}
	r.duration.Observe(d.Seconds())
	if code < minCode || code > maxCode {
		if !r.codes.retired.Load() {
			r.vec.WithLabelValues(r.name, strconv.Itoa(code)).Inc()
		}
		return
	}
	slot := &r.codes.c[code-minCode]
	c := slot.Load()
	if c == nil {
		if r.codes.retired.Load() {
			return
		}
		c = &counter{r.vec.WithLabelValues(r.name, strconv.Itoa(code))}
		if !slot.CompareAndSwap(nil, c) {
			c = slot.Load()
		}
	}
	c.Inc()
}

// Decision counts what the limit at index limit (in the order given to
// Route) decided. An index or result out of range is ignored.
func (r *Route) Decision(limit int, res Result) {
	if r == nil {
		return
	}
	if uint(limit) >= uint(len(r.decisions)) || res >= numResults {
		return
	}
	c := r.decisions[limit][res].Load()
	if c == nil {
		// A handle a reload superseded makes no series for a route or a
		// policy the configuration serving has not: no later reload
		// would remove it. (Its cached ones go on counting, into series
		// that are gone or still served.)
		if r.codes.retired.Load() || !r.m.decides(r.name, r.limits[limit]) {
			return
		}
		c = r.decisionCounter(limit, res)
	}
	c.Inc()
}

// decisionCounter returns the cached child of one limit and result,
// creating it when it is not cached yet.
func (r *Route) decisionCounter(limit int, res Result) *counter {
	slot := &r.decisions[limit][res]
	if c := slot.Load(); c != nil {
		return c
	}
	l := r.limits[limit]
	c := &counter{r.dvec.WithLabelValues(r.name, l.Policy, l.Algorithm, res.String())}
	if !slot.CompareAndSwap(nil, c) {
		c = slot.Load()
	}
	return c
}

// Refund counts a unit the limit at index limit gave back (count_status).
func (r *Route) Refund(limit int) {
	if r == nil || uint(limit) >= uint(len(r.refunds)) {
		return
	}
	if c := r.refunds[limit]; c != nil {
		c.Inc()
		return
	}
	// Only limits with count_status give units back, and they have theirs.
	if !r.codes.retired.Load() && r.m.decides(r.name, r.limits[limit]) {
		r.rvec.WithLabelValues(r.name, r.limits[limit].Policy).Inc()
	}
}

// UpstreamError counts a request that got no answer from the upstream.
// Unknown kinds count as UpstreamOther.
func (r *Route) UpstreamError(kind UpstreamErrorKind) {
	if r == nil {
		return
	}
	if kind >= numUpstreamErrorKinds {
		kind = UpstreamOther
	}
	r.upstream[kind].Inc()
}
