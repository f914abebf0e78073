package proxy

import (
	"errors"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"syscall"
	"time"
)

// errUpstreamTimeout is the cause of a request whose upstream sent no
// response headers within the route's timeout.
var errUpstreamTimeout = errors.New("upstream response timeout")

// upstreams sends a route's requests to its targets. It picks targets round
// robin, moves to the next target when a connection is refused (for
// idempotent requests, whose replay is harmless), and bounds the wait for
// response headers by the route's timeout, counted from the end of the
// request body, without ever cutting a response that has started.
type upstreams struct {
	base    http.RoundTripper
	targets []*url.URL
	timeout time.Duration
	next    atomic.Uint64
}

// pick returns the target for a new request.
func (u *upstreams) pick() *url.URL {
	if len(u.targets) == 1 {
		return u.targets[0]
	}
	return u.targets[(u.next.Add(1)-1)%uint64(len(u.targets))]
}

func (u *upstreams) indexOf(host string) int {
	for i, t := range u.targets {
		if t.Host == host {
			return i
		}
	}
	return 0
}

// RoundTrip implements http.RoundTripper.
func (u *upstreams) RoundTrip(req *http.Request) (*http.Response, error) {
	first := u.indexOf(req.URL.Host)
	for attempt := 0; ; attempt++ {
		resp, err := u.roundTrip(req)
		if err == nil || attempt+1 >= len(u.targets) || !isRefused(err) || !replayable(req) {
			return resp, err
		}
		next := u.targets[(first+attempt+1)%len(u.targets)]
		req = req.Clone(req.Context())
		if ex := exchangeOf(req.Context()); ex.upstream != "" {
			// The route's rewrite made req (and named its target).
			retarget(req, next, ex)
			ex.upstream = next.Host
		} else {
			req.URL.Scheme, req.URL.Host = next.Scheme, next.Host
		}
	}
}

// retarget points req, made for another target, at next: its scheme, host
// and base path, as the route's rewrite would have.
func retarget(req *http.Request, next *url.URL, ex *exchange) {
	host, query := req.Host, req.URL.RawQuery
	req.URL.Path, req.URL.RawPath = ex.path, ex.rawPath
	(&httputil.ProxyRequest{Out: req}).SetURL(next)
	req.Host, req.URL.RawQuery = host, query
}

// roundTrip is one attempt, timed by the route's clock, which the gateway
// hands each forwarded request with the context it cancels; a request
// without one (not forwarded by Gateway.ServeHTTP) goes untimed.
func (u *upstreams) roundTrip(req *http.Request) (*http.Response, error) {
	ex := exchangeOf(req.Context())
	clock := ex.clock
	if clock == nil {
		return u.base.RoundTrip(req)
	}
	clock.start(u.timeout)
	out := req
	if req.Body != nil && req.Body != http.NoBody {
		// The body is the attempt's own; req stays as the caller made it.
		out = new(http.Request)
		*out = *req
		out.Body = &timedBody{ReadCloser: req.Body, clock: clock, whole: ex.keyBody}
	}
	resp, err := u.base.RoundTrip(out)
	if clock.stop() {
		// The time ran out, which cancelled the attempt; headers that
		// came at that moment have no body left to read.
		if err == nil {
			resp.Body.Close()
		}
		return nil, errUpstreamTimeout
	}
	return resp, err
}

func isRefused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED)
}

// replayable reports whether req may be sent again to another target: an
// idempotent method with no body, or one the transport can rewind.
func replayable(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
	default:
		return false
	}
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}
