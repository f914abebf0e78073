// Package proxy is sluice's HTTP front door: it matches each request to a
// route, applies the route's rate limits, holds leaky-bucket overflow, and
// forwards to the upstream with httputil.ReverseProxy.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/problem"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
)

// Options configure a Gateway.
type Options struct {
	// Logger receives errors and, when AccessLog is on, one line per
	// request. Default: slog.Default().
	Logger *slog.Logger
	// Metrics records what the gateway does; nil records nothing.
	Metrics *metrics.Metrics
	// Transport reaches the upstreams; default NewTransport().
	Transport http.RoundTripper
	// Clock gives the time limits are decided at; default
	// ratelimit.SystemClock(). Give the store the same clock.
	Clock *ratelimit.Clock
	// AccessLog, when set, receives the access lines (one JSON line per
	// request, in the Logger's JSON format) instead of the Logger; they are
	// still written only when the Logger is enabled for info. Each Write
	// is one whole line.
	AccessLog io.Writer
}

// Gateway is the http.Handler of the plain and TLS listeners. Load swaps
// its configuration atomically; requests in flight finish on the one they
// started with. It is safe for concurrent use.
type Gateway struct {
	log       *slog.Logger
	metrics   *metrics.Metrics
	transport http.RoundTripper
	clock     *ratelimit.Clock
	access    io.Writer
	current   atomic.Pointer[snapshot]

	drainOnce sync.Once
	drainCtx  context.Context // done once shutdown begins
	drainNow  context.CancelFunc
	deadline  atomic.Pointer[time.Time] // by when shutdown cuts off, with its monotonic reading
	drain     *ratelimit.Drain          // the shutdown as the stores' Wait sees it
}

// UnmatchedRoute is the route label of requests that matched no route.
const UnmatchedRoute = routes.UnmatchedRoute

// snapshot is one loaded configuration compiled for serving.
type snapshot struct {
	cfg    *routes.Config
	store  ratelimit.Store
	trust  Trust
	routes map[*routes.Route]*route
	access bool
	keys   bool
	// unmatched counts the requests no route matched.
	unmatched *metrics.Route
}

// route is a routes.Route with what serving it needs, built once per load.
type route struct {
	r            *routes.Route
	proxy        *httputil.ReverseProxy
	upstreams    *upstreams
	metrics      *metrics.Route
	queue        *metrics.Queue // nil without a leaky_bucket limit
	leaky        int            // index of the leaky_bucket limit, -1 when none
	visible      []int          // indexes of non-shadow limits
	quoted       []string       // each limit's policy name as a Structured Field string
	policyHeader []string
	refunds      bool           // some limit has count_status
	rejected     []rejectedBody // each limit's 429 body
}

// New returns a Gateway with no configuration; Load one before serving.
func New(o Options) *Gateway {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Transport == nil {
		o.Transport = NewTransport()
	}
	if o.Clock == nil {
		o.Clock = ratelimit.SystemClock()
	}
	g := &Gateway{log: o.Logger, metrics: o.Metrics, transport: o.Transport, clock: o.Clock, access: o.AccessLog}
	g.drainCtx, g.drainNow = context.WithCancel(context.Background())
	g.drain = &ratelimit.Drain{Done: g.drainCtx.Done(), Deadline: func() time.Time { return *g.deadline.Load() }}
	return g
}

// Load compiles cfg for serving with store and makes it current.
func (g *Gateway) Load(cfg *routes.Config, store ratelimit.Store) {
	s := &snapshot{
		cfg:    cfg,
		store:  store,
		trust:  NewTrust(cfg.TrustedProxies),
		routes: make(map[*routes.Route]*route, len(cfg.Table.Routes)),
		access: cfg.Log.AccessLog,
		keys:   cfg.Log.LogKeys,
	}
	for _, r := range cfg.Table.Routes {
		s.routes[r] = g.compileRoute(r)
	}
	s.unmatched = g.metrics.Route(UnmatchedRoute, nil)
	// Leased policies are declared before they serve: their first round
	// trips count.
	policies := make([]string, 0, len(cfg.Policies))
	var leased []string
	for name, p := range cfg.Policies {
		policies = append(policies, name)
		if p.Sync == ratelimit.SyncLease {
			g.metrics.LeaseDeclare(name)
			leased = append(leased, name)
		}
	}
	g.current.Store(s)
	// Series of routes and policies the new configuration no longer has
	// would otherwise linger in every scrape.
	names := []string{UnmatchedRoute}
	for _, r := range cfg.Table.Routes {
		names = append(names, r.Name)
	}
	if d, ok := store.(interface {
		DeclareLeases()
		RetireLeases()
	}); ok {
		if len(leased) > 0 {
			d.DeclareLeases()
		} else {
			d.RetireLeases()
		}
	}
	g.metrics.Retain(names, policies)
	g.metrics.RetainLeases(leased)
}

func (g *Gateway) compileRoute(r *routes.Route) *route {
	rt := &route{r: r, leaky: -1}
	limits := make([]metrics.Limit, len(r.Limits))
	var names []string
	var pols []*ratelimit.Policy
	for i, l := range r.Limits {
		p := l.Policy
		limits[i] = metrics.LimitOf(p)
		if l.CountStatus != nil {
			limits[i].Refunds = true
			rt.refunds = true
		}
		rt.quoted = append(rt.quoted, sfString(p.Name))
		rt.rejected = append(rt.rejected, newRejectedBody(r.Name, p))
		if p.Algorithm == ratelimit.LeakyBucket {
			rt.leaky = i
			rt.queue = g.metrics.Queue(p.Name)
		}
		if !p.Shadow {
			rt.visible = append(rt.visible, i)
			names = append(names, rt.quoted[i])
			pols = append(pols, p)
		}
	}
	rt.metrics = g.metrics.Route(r.Name, limits)
	if len(pols) > 0 {
		rt.policyHeader = []string{policyHeader(names, pols)}
	}
	rt.upstreams = &upstreams{base: g.transport, targets: r.Upstreams, timeout: r.Timeout}
	// FlushInterval stays 0: ReverseProxy flushes every write of a
	// text/event-stream response and of one without a Content-Length on
	// its own. A negative interval would flush the headers of every
	// response from a timer goroutine before the body is copied, one more
	// write to the client socket and a goroutine per request.
	rt.proxy = &httputil.ReverseProxy{
		Rewrite:      rt.rewrite,
		Transport:    rt.upstreams,
		ErrorHandler: g.upstreamError(rt),
		ErrorLog:     slog.NewLogLogger(g.log.Handler(), slog.LevelWarn),
		BufferPool:   bufferPool{},
	}
	rt.proxy.ModifyResponse = dropRequestID
	if len(rt.visible) > 0 {
		// A route of shadow limits alone sets none of the fields, and
		// watching a policy must not change what clients get.
		rt.proxy.ModifyResponse = dropLimitHeaders
	}
	return rt
}

// dropRequestID removes the upstream's X-Request-Id: the response writer
// already has the one sent upstream, which an upstream that echoes it
// would otherwise repeat (ReverseProxy adds, it does not replace). It
// refuses the answers checkAnswer refuses.
func dropRequestID(resp *http.Response) error {
	if err := checkAnswer(resp); err != nil {
		return err
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		dropSwitchHopFields(resp.Header)
	}
	delete(resp.Header, hRequestID)
	return nil
}

// dropSwitchHopFields strips the hop-by-hop fields of a 101, which
// ReverseProxy passes on whole, while it strips them from every other
// answer: those the upstream's Connection names, as the request's are
// (dropConnectionNamed), and those hop by hop by definition
// (routes.IsHopByHop). What switches the client's connection stays:
// Upgrade, and a Connection that names it alone (checkAnswer has made
// sure the upstream's did).
func dropSwitchHopFields(h http.Header) {
	dropConnectionNamed(h)
	for name := range h {
		if routes.IsHopByHop(name) {
			delete(h, name)
		}
	}
	h["Connection"] = []string{"Upgrade"}
}

// checkAnswer refuses an answer that cannot be passed on: a status that
// is no HTTP status (see noStatus), or a 101 that switches to a protocol
// the request did not ask for. An error here makes ReverseProxy close the
// answer's body, which lets the upstream's connection go (its own answer
// to the second, a 502, would leave the switched connection open), and
// answer 502 through the route's error handler.
func checkAnswer(resp *http.Response) error {
	if noStatus(resp.StatusCode) {
		return fmt.Errorf("%w: status %d", errBadAnswer, resp.StatusCode)
	}
	if resp.StatusCode == http.StatusSwitchingProtocols && resp.Request != nil {
		asked, got := upgradeType(resp.Request.Header), upgradeType(resp.Header)
		if asked == "" || !strings.EqualFold(asked, got) {
			return fmt.Errorf("%w: switched protocols to %q when %q was asked for", errBadAnswer, got, asked)
		}
	}
	return nil
}

// noStatus reports whether code, which http.ReadResponse reads from any
// three digits, is outside the 100 to 599 of RFC 9110 §15, which has a
// client take such an answer for a 5xx: below 100, net/http's server
// panics on it; above 599, it would reach the client as it came, and
// each one would be a status of its own in the request counts.
func noStatus(code int) bool {
	return code < 100 || code > 599
}

// errBadAnswer is an upstream answer checkAnswer refused.
var errBadAnswer = errors.New("upstream answer cannot be passed on")

// upgradeType is the protocol h asks to switch to, as ReverseProxy reads
// it: Upgrade, when Connection names it.
func upgradeType(h http.Header) string {
	if !httpguts.HeaderValuesContainsToken(h["Connection"], "Upgrade") {
		return ""
	}
	return h.Get("Upgrade")
}

// dropLimitHeaders removes an upstream's own rate-limit fields so the
// client sees sluice's alone (those are already on the response writer),
// and its X-Request-Id as dropRequestID does.
func dropLimitHeaders(resp *http.Response) error {
	for _, h := range limitHeaders {
		delete(resp.Header, h)
	}
	return dropRequestID(resp)
}

// rewrite turns the inbound request into the upstream one.
func (rt *route) rewrite(pr *httputil.ProxyRequest) {
	ex := exchangeOf(pr.In.Context())
	target := rt.upstreams.pick()
	if p := rt.r.StripPrefix; p != "" {
		routes.StripPrefix(pr.Out.URL, p, !rt.r.CaseSensitive())
	}
	// Kept for a retry on another target, which has its own base path.
	ex.path, ex.rawPath = pr.Out.URL.Path, pr.Out.URL.RawPath
	pr.SetURL(target)
	// The inbound query is canonical (canonicalize kept only the pairs
	// that parse), so ReverseProxy's own cleaning changed nothing; setting
	// it again makes sure the upstream gets the query the keys read.
	pr.Out.URL.RawQuery = pr.In.URL.RawQuery
	// Request trailers are not forwarded, as nginx forwards none: they
	// arrive after the header fields were cleaned and matched, and an
	// upstream that merges them into the header (Apache's MergeTrailers,
	// Tomcat's allowedTrailerHeaders) would read an X-Forwarded-For or a
	// method override that the client chose.
	pr.Out.Trailer = nil
	in, out := pr.In.Header, pr.Out.Header
	if c := out["Cookie"]; len(c) > 1 {
		out["Cookie"] = joinCookies(c)
	}
	if ex.trusted {
		out[hXForwardedFor] = in[hXForwardedFor]
	}
	setXForwarded(out, pr.In, ex)
	if ex.trusted {
		// A trusted proxy in front already knows the original scheme and
		// host better than this hop does.
		if v := in[hXForwardedProto]; len(v) > 0 {
			out[hXForwardedProto] = v
		}
		if v := in[hXForwardedHost]; len(v) > 0 {
			out[hXForwardedHost] = v
		}
	}
	ex.ipValue[0] = ex.client.String()
	out[hXRealIP] = ex.ipValue[:]
	out[hRequestID] = ex.idValue[:]
	hideIdempotencyKeys(pr.Out)
	ex.upstream = target.Host
}

// idempotencyKeys are the fields by which http.Transport takes a request
// of any method as safe to send again.
var idempotencyKeys = [...]string{"Idempotency-Key", "X-Idempotency-Key"}

// hideIdempotencyKeys keeps http.Transport from resending a request that
// no method makes safe to repeat (a POST, say) because the client added an
// Idempotency-Key: the transport resends such a request when a kept-alive
// upstream connection closes without an answer, which an upstream that
// read the request may have acted on (sent the OTP), while the limits
// counted it once. The transport looks the fields up by their canonical
// names only; written lower-case they still reach the upstream, field
// names being case-insensitive.
func hideIdempotencyKeys(r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return
	}
	for _, k := range idempotencyKeys {
		if v, ok := r.Header[k]; ok {
			delete(r.Header, k)
			r.Header[strings.ToLower(k)] = v
		}
	}
}

// setXForwarded sets X-Forwarded-For, -Host and -Proto on out exactly as
// httputil.ProxyRequest.SetXForwarded does (TestSetXForwardedMatchesHttputil),
// but into value slices the exchange holds, which spares three allocations
// per request. out's X-Forwarded-For, when set, is the prior list the peer
// is appended to.
func setXForwarded(out http.Header, in *http.Request, ex *exchange) {
	if peer, _, err := net.SplitHostPort(in.RemoteAddr); err == nil {
		if prior := out[hXForwardedFor]; len(prior) > 0 {
			peer = strings.Join(prior, ", ") + ", " + peer
		}
		ex.forValue[0] = peer
		out[hXForwardedFor] = ex.forValue[:]
	} else {
		delete(out, hXForwardedFor)
	}
	ex.hostValue[0] = in.Host
	out[hXForwardedHost] = ex.hostValue[:]
	if in.TLS == nil {
		ex.protoValue[0] = "http"
	} else {
		ex.protoValue[0] = "https"
	}
	out[hXForwardedProto] = ex.protoValue[:]
}

// upstreamError answers a request whose upstream could not be reached: 504
// when it sent no headers in time, 502 otherwise, both problem+json.
func (g *Gateway) upstreamError(rt *route) func(http.ResponseWriter, *http.Request, error) {
	return func(w http.ResponseWriter, r *http.Request, err error) {
		ex := exchangeOf(r.Context())
		if f := ex.body.failure(); f != nil {
			// The client broke off or mangled its own body: its fault,
			// not the upstream's.
			refuseBody(w, r, ex, f)
			return
		}
		if ex.Err() != nil {
			// The client went away; nobody is left to answer. (r's own
			// context is the upstream's, which the route's timeout
			// cancels too.)
			ex.clientGone = true
			return
		}
		// Only the route's timeout is a 504: an upstream that could not
		// be reached at all, its connection or TLS handshake timing out
		// included, is a 502 (counted as a timeout all the same).
		kind := metrics.UpstreamErrorKindOf(err)
		timedOut := errors.Is(err, errUpstreamTimeout)
		if timedOut {
			kind = metrics.UpstreamTimeout
		}
		rt.metrics.UpstreamError(kind)
		ex.upstreamErr = err
		if timedOut {
			problem.Error(w, http.StatusGatewayTimeout, fmt.Sprintf("upstream of route %s sent no response within %s", rt.r.Name, rt.r.Timeout))
			return
		}
		problem.Error(w, http.StatusBadGateway, fmt.Sprintf("upstream of route %s is unavailable", rt.r.Name))
	}
}

// Drain starts a shutdown that must be over by deadline: a request waiting
// in a leaky-bucket queue whose departure falls later is answered 503 at
// once, and any still waiting at the deadline is answered 503 then.
func (g *Gateway) Drain(deadline time.Time) {
	g.drainOnce.Do(func() {
		g.deadline.Store(&deadline)
		g.drainNow()
	})
}

var errShuttingDown = errors.New("shutting down")

// bufferPool lends ReverseProxy its copy buffers.
type bufferPool struct{}

var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufferPool) Get() []byte  { return *(copyBuffers.Get().(*[]byte)) }
func (bufferPool) Put(b []byte) { copyBuffers.Put(&b) }
