package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// errUpstreamTimeout is the cause of a request whose upstream sent no
// response headers within the route's timeout.
var errUpstreamTimeout = errors.New("upstream response timeout")

// upstreams sends a route's requests to its targets. It picks targets round
// robin, moves a request of any method to the next target when the
// connection to one could not be made or its TLS handshake failed (nothing
// of the request was sent, so nothing can have acted on it), and bounds the wait for response headers
// by the route's timeout, counted from the end of the request body, without
// ever cutting a response that has started.
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

// RoundTrip implements http.RoundTripper. Each target is tried at most
// once per request.
func (u *upstreams) RoundTrip(req *http.Request) (*http.Response, error) {
	first := u.indexOf(req.URL.Host)
	for attempt := 0; ; attempt++ {
		last := attempt+1 >= len(u.targets)
		out, body := req, (*attemptBody)(nil)
		if !last && req.Body != nil && req.Body != http.NoBody {
			// A transport closes the body when it cannot connect:
			// the next target still needs it, whole.
			body = &attemptBody{ReadCloser: req.Body, hold: true}
			out = new(http.Request)
			*out = *req
			out.Body = body
		}
		var hs *handshake
		if !last && req.URL.Scheme == "https" {
			hs = new(handshake)
			out = out.WithContext(hs.watch(out.Context()))
		}
		resp, err := u.roundTrip(out)
		if err == nil || last || !(notConnected(err) || hs.failedUnsent()) || body.touched() || req.Context().Err() != nil {
			body.letGo()
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

// notConnected reports whether err is a connection to the target that
// could not be made (refused, unreachable, its connect timed out): both
// transports return the dialer's error as it is, and write nothing of the
// request before they have a connection.
func notConnected(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// handshake watches one attempt to an https:// target through the hooks
// http.Transport calls, over HTTP/1.1 and HTTP/2 alike: TLSHandshakeDone
// with the error of a handshake that failed, and GotConn when it hands the
// request a connection, before writing anything of it. The error alone
// cannot tell: a tls.RecordHeaderError or an alert also ends a connection
// whose handshake succeeded and which carried the request, and the
// transport's handshake timeout has no type of its own.
type handshake struct {
	failed  atomic.Bool
	gotConn atomic.Bool
}

// watch returns ctx with the hooks that fill h.
func (h *handshake) watch(ctx context.Context) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { h.gotConn.Store(true) },
		TLSHandshakeDone: func(_ tls.ConnectionState, err error) {
			if err != nil {
				h.failed.Store(true)
			}
		},
	})
}

// failedUnsent reports whether the handshake of the connection dialed for
// the attempt failed and no other connection took the request: nothing of
// it was sent. A nil h, for an http:// target, never failed.
func (h *handshake) failedUnsent() bool {
	return h != nil && h.failed.Load() && !h.gotConn.Load()
}

// attemptBody is the request body as one attempt that may be followed by
// another gets it. While held, Close is kept from the body, so that a
// transport that could not connect leaves the body to the next attempt;
// touched tells whether the attempt read any of it. It is safe for
// concurrent use.
type attemptBody struct {
	io.ReadCloser
	read atomic.Bool

	mu     sync.Mutex
	hold   bool // Close waits for letGo
	closed bool // the transport closed it
}

func (b *attemptBody) Read(p []byte) (int, error) {
	b.read.Store(true)
	return b.ReadCloser.Read(p)
}

// Close closes the body once, when no longer held (see letGo).
func (b *attemptBody) Close() error {
	b.mu.Lock()
	again, hold := b.closed, b.hold
	b.closed = true
	b.mu.Unlock()
	if again || hold {
		return nil
	}
	return b.ReadCloser.Close()
}

// touched reports whether the attempt read the body, a read of nothing
// included: what it read may have reached the target. A nil b, for a
// request without body, was never touched.
func (b *attemptBody) touched() bool {
	return b != nil && b.read.Load()
}

// letGo ends the hold once no other attempt follows: a Close the transport
// made reaches the body now, and one it makes later goes straight through.
func (b *attemptBody) letGo() {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.hold = false
	closed := b.closed
	b.mu.Unlock()
	if closed {
		b.ReadCloser.Close()
	}
}
