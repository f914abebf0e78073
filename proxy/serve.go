package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/problem"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
)

// exchange is what one request learns on its way through, for the upstream
// rewrite and the access log. It is also the request's context from
// admission on (the request's own, plus itself as a value), which spares
// a context.WithValue per request.
type exchange struct {
	context.Context
	id       string
	client   netip.Addr
	trusted  bool
	upstream string
	// path and rawPath are the upstream request's path before a target's
	// base path was joined to it.
	path, rawPath string
	rejectedBy    string
	keys          []string
	upstreamErr   error
	clientGone    bool
	body          *clientBody // nil when the request has no body
	keyBody       *replayBody // the body json: keys read, when they read all of it
	bodyErr       error       // what the client got wrong sending the body
	waited        time.Duration
	decisions     *decisions // pooled; released when the request is finished
	held          []int      // limits whose held units the exchange's end keeps (see armRefund)
	// clock times the upstream's answer to a forwarded request, whose
	// upstream context cancelUpstream cancels; both nil until then.
	clock          *routeClock
	cancelUpstream context.CancelCauseFunc
	// forwarded is the request as ReverseProxy gets it: r with the
	// upstream context, kept here rather than allocated apart.
	forwarded http.Request

	// Allocated with the exchange rather than one by one: the response
	// recorder, the single-value header slices of X-Request-Id,
	// X-Real-Ip and X-Forwarded-*, the values of the limit fields and of
	// Retry-After.
	rec         recorder
	idValue     [1]string
	ipValue     [1]string
	forValue    [1]string
	hostValue   [1]string
	protoValue  [1]string
	limitValues [4]string
	retryValue  [1]string
}

type exchangeKey struct{}

// Value returns ex itself for exchangeKey, else the request context's value.
func (ex *exchange) Value(key any) any {
	if _, ok := key.(exchangeKey); ok {
		return ex
	}
	if ex.Context == nil {
		return nil
	}
	return ex.Context.Value(key)
}

func exchangeOf(ctx context.Context) *exchange {
	ex, _ := ctx.Value(exchangeKey{}).(*exchange)
	if ex == nil {
		return &exchange{}
	}
	return ex
}

// ServeHTTP implements http.Handler.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Read on the clock limits are decided on, so that the access line
	// places the request where its decisions were made (see finish).
	start := g.clock.Now()
	s := g.current.Load()
	ex := &exchange{Context: r.Context()}
	ex.rec.ResponseWriter = w
	rec := &ex.rec
	rec.http10 = !r.ProtoAtLeast(1, 1)
	if s != nil {
		rec.bound(w, r, s.cfg.SendTimeout)
		rec.idle = s.cfg.WebSocketIdleTimeout
	}
	var rt *route
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				// The answer was cut short (the upstream broke off its
				// body, or the client stopped taking it): what it holds
				// stays spent, and it is still a request answered, with
				// its access line and its count. net/http then closes
				// the connection.
				g.finish(s, rt, rec, r, ex, start)
				panic(v)
			}
			g.log.Error("panic serving request", "request_id", ex.id, "panic", fmt.Sprint(v))
			if !rec.wrote {
				problem.Error(rec, http.StatusInternalServerError, "internal error")
			}
		}
		rec.finished()
		g.finish(s, rt, rec, r, ex, start)
	}()
	if s == nil {
		problem.Error(rec, http.StatusServiceUnavailable, "no configuration loaded")
		return
	}
	ex.body = wrapBody(rec, r, s)
	rec.body = ex.body
	// Routes, keys and the upstream all see the canonical request.
	var err error
	ex.client, ex.trusted, err = s.trust.canonicalize(r)
	// Read once the method is upper-cased, as net/http reads it when it
	// writes the answer: a "head" is a HEAD to both.
	rec.head = r.Method == http.MethodHead
	if v := r.Header[hRequestID]; len(v) > 0 {
		ex.id = v[0] // as Header.Get, without canonicalizing a canonical name
	}
	if !validRequestID(ex.id) {
		ex.id = newRequestID()
	}
	ex.idValue[0] = ex.id
	rec.Header()[hRequestID] = ex.idValue[:]
	if err != nil {
		problem.Error(rec, http.StatusBadRequest, err.Error())
		return
	}
	if r.Method == http.MethodConnect {
		// A gateway is no forward proxy. Over HTTP/2 a CONNECT's body
		// has no length, and Go's HTTP/1 transport writes such a body
		// as it is, unframed: the upstream would read it as requests
		// that no route matched and no limit counted.
		if r.ProtoMajor == 1 {
			rec.Header().Set("Connection", "close")
		}
		problem.Error(rec, http.StatusNotImplemented, "sluice does not forward CONNECT")
		return
	}
	var ok bool
	if rt, ok = routeOf(s, rec, r, ex); !ok {
		return
	}
	if len(rt.r.Limits) > 0 {
		if s, rt, ok = g.admit(s, rt, rec, r, ex); !ok {
			return
		}
	}
	// The upstream's context is the request's, plus the route's timeout:
	// one context and one clock for every attempt, made here rather than
	// per attempt, as the transport makes its own context per attempt
	// anyway.
	ctx, cancel := context.WithCancelCause(ex)
	ex.cancelUpstream = cancel
	rec.endTunnel = cancel
	ex.clock = newRouteClock(cancel, ex.body == nil)
	ex.forwarded = *r.WithContext(ctx)
	if len(rt.visible) > 0 {
		// The limit fields are the gateway's on this route's answers
		// (dropLimitHeaders), set now unless every limit was exempt.
		rec.ownLimits = true
		_, rec.setLimits = rec.Header()[hRateLimitPolicy]
	}
	rt.proxy.ServeHTTP(rec, &ex.forwarded)
	rec.dropTrailerFields()
}

// routeOf finds r's route in s and applies its max_body. It answers the
// request itself (400, 404, 413) and reports false when the request goes
// no further; the route is nil when none matched.
func routeOf(s *snapshot, w http.ResponseWriter, r *http.Request, ex *exchange) (*route, bool) {
	if h := s.cfg.Table.RepeatedMatchHeader(r); h != "" {
		problem.Error(w, http.StatusBadRequest, "header "+h+" is given more than once; routes match on it")
		return nil, false
	}
	if h := s.cfg.Table.StrippedMatchHeader(r); h != "" {
		problem.Error(w, http.StatusBadRequest, "header "+h+" starts or ends with a byte that some frameworks strip as a space; routes match on it")
		return nil, false
	}
	match := s.cfg.Table.Match(r)
	if match == nil {
		problem.Error(w, http.StatusNotFound, "no route matches "+r.Method+" "+r.URL.Path)
		return nil, false
	}
	rt := s.routes[match]
	return rt, admitBody(w, r, rt, ex)
}

// admit applies the route's limits to r. It answers the request itself and
// returns false when the request must not reach the upstream. It returns
// the configuration and route the request goes on with: those of a reload
// that came while the part of the body the keys read was arriving.
func (g *Gateway) admit(s *snapshot, rt *route, w *recorder, r *http.Request, ex *exchange) (*snapshot, *route, bool) {
	var body *routes.Body
	if rt.r.ReadsBody {
		ct := r.Header["Content-Type"]
		mediaProblem := ""
		if len(ct) == 1 {
			mediaProblem = routes.MediaTypeProblem(ct[0])
		}
		switch {
		case len(ct) > 1:
			problem.Error(w, http.StatusBadRequest, "Content-Type is given more than once; json: key sources need one")
			return s, rt, false
		case mediaProblem != "":
			problem.Error(w, http.StatusBadRequest, mediaProblem)
			return s, rt, false
		case len(ct) == 1 && routes.IsJSON(ct[0]):
			why := routes.JSONCharsetProblem(ct[0])
			if why == "" {
				why = routes.ContentEncodingProblem(r.Header["Content-Encoding"])
			}
			if why != "" {
				problem.Error(w, http.StatusBadRequest, why)
				return s, rt, false
			}
			// Nothing has counted this request yet: the part of the body
			// the keys read must come as quickly as the headers.
			lift := ex.body.wholeBy(time.Now().Add(s.cfg.ClientHeaderTimeout))
			body = readKeyBody(r)
			lift()
			if rb, ok := r.Body.(*replayBody); ok {
				if _, whole := rb.held(); whole {
					ex.keyBody = rb
				}
			}
			if f := ex.body.failure(); f != nil {
				refuseBody(w, r, ex, f)
				return s, rt, false
			}
			if why := body.EncodingProblem(); why != "" {
				problem.Error(w, http.StatusBadRequest, why)
				return s, rt, false
			}
			// That read may take up to client_header_timeout: a reload
			// meanwhile decides the request with the new configuration,
			// as a request that began after it. Decided with the old
			// one, the memory store would make the bucket afresh for
			// the old settings, and the next new request afresh again;
			// a client holding a few slow bodies over a reload that
			// tightens a limit would get a fresh budget at every turn.
			// Its client address is resolved again under the new
			// trusted_proxies; the settings that bound the connection
			// stay those of the configuration it began with.
			if cur := g.current.Load(); cur != s {
				ex.client, ex.trusted = cur.trust.reresolve(r, ex.trusted)
				rt2, ok := routeOf(cur, w, r, ex)
				if s, rt = cur, rt2; !ok {
					return s, rt, false
				}
				if len(rt.r.Limits) == 0 {
					return s, rt, true
				}
			}
		}
	}
	n := len(rt.r.Limits)
	// The slices live until the request is finished (finish releases them).
	ex.decisions = decisionsFor(n)
	reqs, ds := ex.decisions.reqs, ex.decisions.ds
	var kb [128]byte
	var m *matched // nil unless an override matched
	for i, l := range rt.r.Limits {
		k, err := l.Key.Append(kb[:0], r, ex.client, body)
		if err != nil {
			problem.Error(w, http.StatusBadRequest, err.Error())
			return s, rt, false
		}
		p := l.Policy
		if l.Overrides != nil {
			p = matchOverride(l, i, n, k, ex, &m)
		}
		reqs[i] = ratelimit.Request{Policy: p, Key: string(routes.BoundKey(k, 0))}
	}
	if s.keys {
		ex.keys = make([]string, n)
		for i := range reqs {
			ex.keys[i] = reqs[i].Key
		}
	}
	now := g.clock.Now()
	var err error
	if m != nil {
		err = decideExempt(r.Context(), s.store, now, reqs, ds, m.exempt)
	} else {
		err = s.store.Decide(r.Context(), now, reqs, ds)
	}
	if err != nil {
		g.log.Error("deciding rate limits", "route", rt.r.Name, "request_id", ex.id, "err", err)
		problem.Error(w, http.StatusServiceUnavailable, "rate limit store unavailable")
		return s, rt, false
	}
	// The rejecting limit is the one that lifts last, so Retry-After is
	// never earlier than any rejecting limit's t.
	reject := -1
	for i := range ds {
		if !ds[i].Allowed && !reqs[i].Policy.Shadow && (reject < 0 || ds[i].RetryAfter > ds[reject].RetryAfter) {
			reject = i
		}
	}
	if m != nil {
		rt.setOverriddenHeaders(w.Header(), reqs, ds, m)
	} else {
		rt.setLimitHeaders(w.Header(), ds, &ex.limitValues)
	}
	if reject >= 0 && r.Context().Err() != nil {
		// The client went away while its limits were decided. A store
		// whose call that ended (Redis) decides as on_error says, and
		// deny rejects: a 429 to nobody. It is logged 499, and counted
		// as no rejection, so that the rejections add up to the 429s.
		ex.clientGone = true
		return s, rt, false
	}
	if reject >= 0 {
		// The limit the 429 names counts the rejection, the others
		// nothing (SPEC §5), even one that rejected too: the rejected
		// counts add up to the 429s.
		res := metrics.Rejected
		if ds[reject].Blocked {
			res = metrics.Blocked
		}
		rt.metrics.Decision(reject, res)
		g.tooMany(w, rt, reject, reqs[reject].Policy, ds[reject], ex)
		return s, rt, false
	}
	rt.countAdmitted(reqs, ds, m)
	if rt.refunds {
		g.armRefund(s, rt, w, r, ex, reqs, ds, m)
	}
	// A shadow leaky_bucket keeps its schedule but never holds anyone.
	if rt.leaky >= 0 && ds[rt.leaky].Delay > 0 && !reqs[rt.leaky].Policy.Shadow {
		return s, rt, g.wait(s, rt, w, r, reqs[rt.leaky], ds[rt.leaky], ex)
	}
	return s, rt, true
}

// decisions holds one request's limit requests and decisions; pooled, as
// every limited request needs them and the store call makes them escape.
type decisions struct {
	reqs []ratelimit.Request
	ds   []ratelimit.Decision
}

var decisionPool = sync.Pool{New: func() any { return new(decisions) }}

func decisionsFor(n int) *decisions {
	dc := decisionPool.Get().(*decisions)
	if cap(dc.reqs) < n {
		dc.reqs = make([]ratelimit.Request, n)
		dc.ds = make([]ratelimit.Decision, n)
	}
	dc.reqs, dc.ds = dc.reqs[:n], dc.ds[:n]
	clear(dc.ds)
	return dc
}

// release returns dc to the pool; nothing may keep its slices after.
func (dc *decisions) release() {
	clear(dc.reqs) // drop the policy pointers and key strings
	decisionPool.Put(dc)
}

// wait holds an admitted request in its leaky-bucket queue until it may
// leave. It returns false when the request ends there: its client went
// away (nothing is written), or the gateway is shutting down (503).
func (g *Gateway) wait(s *snapshot, rt *route, w http.ResponseWriter, r *http.Request, req ratelimit.Request, d ratelimit.Decision, ex *exchange) bool {
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	ctx = ratelimit.WithDrain(ctx, g.drain) // before stop's func may read ctx
	// When shutdown begins, a request that cannot leave before the
	// deadline is answered at once (the store tells, see ratelimit.Drain);
	// the others keep their place but are cut off at the deadline.
	stop := context.AfterFunc(g.drainCtx, func() {
		t := time.AfterFunc(time.Until(*g.deadline.Load()), func() { cancel(errShuttingDown) })
		context.AfterFunc(ctx, func() { t.Stop() })
	})
	defer stop()
	peer := watchPeer(ctx, cancel, r)
	rt.queue.Enter()
	start := time.Now()
	err := s.store.Wait(ctx, req, d)
	ex.waited = time.Since(start)
	rt.queue.Leave(ex.waited)
	if peer != nil {
		peer.stop()
		if err == nil && peer.gone() {
			// Gone at the departure itself: its place is spent, but
			// the request goes no further.
			err = errClientGone
			cancel(errClientGone)
		}
	}
	if err == nil && r.Context().Err() != nil {
		// Gone at the departure itself, as net/http saw it: the store's
		// wait may report the departure when both came at once. The
		// place is spent; the request goes no further.
		err = context.Cause(r.Context())
	}
	switch {
	case err == nil:
		return true
	case errors.Is(context.Cause(ctx), errClientGone):
		ex.clientGone = true
		return false
	case errors.Is(err, ratelimit.ErrDrained), errors.Is(context.Cause(ctx), errShuttingDown):
		w.Header()[hRetryAfter] = []string{"1"}
		problem.Error(w, http.StatusServiceUnavailable, "sluice is shutting down; the request left the queue before reaching the upstream")
		return false
	case r.Context().Err() != nil:
		ex.clientGone = true
		return false
	default:
		g.log.Error("waiting in queue", "route", rt.r.Name, "request_id", ex.id, "err", err)
		problem.Error(w, http.StatusServiceUnavailable, "rate limit store unavailable")
		return false
	}
}

// readKeyBody reads up to routes.MaxKeyBody bytes of r's body for json: key
// sources and puts back a body that yields the same bytes to the upstream.
func readKeyBody(r *http.Request) *routes.Body {
	if r.Body == nil || r.Body == http.NoBody {
		return routes.NewBody(nil)
	}
	if r.ContentLength > routes.MaxKeyBody {
		return routes.NewBody(nil)
	}
	orig := r.Body
	buf, err := io.ReadAll(io.LimitReader(orig, routes.MaxKeyBody+1))
	if len(buf) > routes.MaxKeyBody || err != nil {
		r.Body = &replayBody{Reader: io.MultiReader(bytes.NewReader(buf), orig), orig: orig}
		return routes.NewBody(nil)
	}
	r.Body = &replayBody{Reader: bytes.NewReader(buf), orig: orig}
	return routes.NewBody(buf)
}

// replayBody serves bytes already read, then the rest of the original
// body; when all of it was read (the gateway holds it), only those bytes,
// from a bytes.Reader.
type replayBody struct {
	io.Reader
	orig io.ReadCloser
}

// held reports the length of the body when the gateway holds all of it
// and none has been read back yet: the transport may then write it at
// once (see direct).
func (b *replayBody) held() (int, bool) {
	r, ok := b.Reader.(*bytes.Reader)
	if !ok {
		return 0, false
	}
	return int(r.Size()), r.Size() > 0 && int64(r.Len()) == r.Size()
}

func (b *replayBody) Close() error { return b.orig.Close() }

// finish records the request in metrics and the access log.
func (g *Gateway) finish(s *snapshot, rt *route, rec *recorder, r *http.Request, ex *exchange, start time.Time) {
	ex.body.settle()
	g.keepHeld(s, rt, r, ex)
	if ex.clock != nil {
		ex.clock.release()
		ex.cancelUpstream(nil)
	}
	if ex.decisions != nil {
		defer ex.decisions.release()
	}
	status := rec.status
	if ex.clientGone && !rec.wrote {
		abandon(r)
		status = 499 // as nginx logs it: the client closed the connection first
	} else if status == 0 {
		status = http.StatusOK
	}
	// The line's time is on the gateway's clock, as the decisions are:
	// a replay of the log must find the requests where the limits saw
	// them, even after the wall clock was stepped.
	now := g.clock.Now()
	dur := now.Sub(start)
	name := ""
	if rt != nil {
		name = rt.r.Name
		rt.metrics.Request(status, dur)
	} else if s != nil {
		s.unmatched.Request(status, dur)
	}
	if s == nil || !s.access {
		return
	}
	g.logAccess(r, ex, accessLine{at: now, route: name, status: status, duration: dur})
}

// recorder remembers the status written through it. It passes flushes and
// hijacks through (Unwrap), so streaming and WebSocket upgrades work.
type recorder struct {
	http.ResponseWriter
	status int
	wrote  bool
	body   *clientBody // the request's, nil without one
	// onStatus, when set, learns the final status before the client does.
	onStatus func(code int)
	// kept holds the fields the gateway set before forwarding, saved at
	// the first 1xx: ReverseProxy clears the header map after passing an
	// informational answer on, and the final answer must still carry them.
	kept http.Header
	// ownLimits: the route's answers carry the gateway's limit fields,
	// never the upstream's; setLimits: the gateway set them (all five
	// but X-RateLimit-Retry-After, which only a 429 has) before
	// forwarding.
	ownLimits, setLimits bool
	// fields is how many fields the answer's header map held as its
	// header went out: more after forwarding means trailers came.
	fields int

	// send is send_timeout, 0 for none; dl sets the write deadline of
	// the client's connection (HTTP/1) or stream (HTTP/2), sendBy is the
	// deadline set last (see extend).
	send   time.Duration
	dl     writeDeadliner
	h2     bool
	sendBy time.Time
	// http10: the client speaks HTTP/1.0, to which no informational
	// answer may go (RFC 9110 §15.2): it would read a 103 as the final
	// answer and the real one as its body.
	http10 bool
	// head: the request is a HEAD, whose answer's Content-Length tells
	// the length of a body it does not have.
	head bool
	// idle is websocket_idle_timeout, 0 for none; endTunnel cancels the
	// forwarded request, which ends the upstream's side of an upgraded
	// connection.
	idle      time.Duration
	endTunnel context.CancelCauseFunc
}

// writeDeadliner is the write deadline of an answer, as net/http's
// response writers of HTTP/1 and HTTP/2 have it.
type writeDeadliner interface{ SetWriteDeadline(time.Time) error }

// bound makes every write of the answer to w wait for the client at most
// send: a client that takes none of the answer for longer loses its
// connection (HTTP/1) or stream (HTTP/2), and with it the upstream's
// connection and the goroutines the request holds. Nothing else bounds a
// client that stops reading, or an HTTP/2 client that never opens its
// flow-control window: the listeners have no write timeout, so that
// streams and queue waits are not cut. The deadline is set when the answer
// is written, not before, so neither a queue wait nor a slow upstream
// counts against it.
func (w *recorder) bound(rw http.ResponseWriter, r *http.Request, send time.Duration) {
	w.send, w.h2 = send, r.ProtoMajor == 2
	for {
		if d, ok := rw.(writeDeadliner); ok {
			w.dl = d
			return
		}
		u, ok := rw.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return
		}
		rw = u.Unwrap()
	}
}

// extend gives the client at least send_timeout from now to take the
// write that follows. Setting a deadline costs a timer update, so one that
// leaves that much is kept, and a new one leaves a quarter more: a client
// that takes nothing is cut off after at least send_timeout and at most a
// quarter more.
func (w *recorder) extend() {
	if w.dl == nil || w.send <= 0 {
		return
	}
	now := time.Now()
	if !w.sendBy.IsZero() && w.sendBy.Sub(now) >= w.send {
		return
	}
	w.sendFrom(now)
}

// sendFrom sets the write deadline a quarter more than send_timeout after
// t (see extend).
func (w *recorder) sendFrom(t time.Time) {
	w.sendBy = t.Add(w.send + w.send/4)
	w.dl.SetWriteDeadline(w.sendBy)
}

// sent ends the deadline once a write has returned. An HTTP/2 stream is
// reset when its deadline passes even with nothing to write, which would
// cut an answer whose upstream pauses (a quiet event stream, a 103 before
// a slow answer, a body that comes in bursts); an HTTP/1 connection only
// fails the next write, which extend moves the deadline for first.
// net/http clears an HTTP/1 connection's deadline after each request.
func (w *recorder) sent() {
	if w.h2 && !w.sendBy.IsZero() {
		w.sendBy = time.Time{}
		w.dl.SetWriteDeadline(time.Time{})
	}
}

// gatewayHeaders are the fields the gateway sets on a response before the
// upstream answers.
var gatewayHeaders = append([]string{hRequestID}, limitHeaders...)

func (w *recorder) WriteHeader(code int) {
	informational := code < 200 && code != http.StatusSwitchingProtocols
	if informational && !w.wrote {
		if w.kept == nil {
			// ReverseProxy clears the header map after passing a
			// 1xx on, sent or not (see http10).
			w.keep()
		}
		w.ownFields()
	}
	if informational && w.http10 {
		return
	}
	if code == http.StatusContinue {
		// The server writes the client's 100 when the transport first
		// reads the body, which it does once the upstream's 100 came
		// (or ExpectContinueTimeout passed). The upstream's own would
		// be a second, and ReverseProxy passes it on only after the
		// transport may have begun that read.
		return
	}
	w.extend()
	var by time.Time
	if !w.wrote && !informational {
		var lift func()
		by, lift = w.body.answering()
		defer lift()
		w.final(code)
	}
	readAway := code >= 200 && w.readAway(by)
	w.ResponseWriter.WriteHeader(code)
	if code < 200 {
		w.sent() // an informational answer goes out at once
	} else if readAway {
		w.headerOut()
	}
}

// readAway reports whether the answer's header must be written out at
// once (headerOut), while the read of what is left of the request body
// that an HTTP/1 server makes before the header is bounded by by (see
// clientBody.answering; zero: no such read). WriteHeader writes nothing in
// HTTP/1, nor does a write its buffer holds: the header would otherwise go
// out, and the rest of the body be read, at whatever later write fills
// the buffer, with no bound left, and a client that stopped sending would
// get no answer and hold the connection for as long as it stayed open.
// The read comes first, so the write gets send_timeout after its bound,
// not from now: a send_timeout shorter than client_body_timeout would
// fail the write before it began.
func (w *recorder) readAway(by time.Time) bool {
	if by.IsZero() || w.h2 {
		return false // HTTP/2 reads nothing before the header
	}
	if w.dl != nil && w.send > 0 {
		w.sendFrom(by)
	}
	return true
}

// headerOut writes out what the answer has so far, its header first; the
// next write's deadline is send_timeout from then again (see readAway).
func (w *recorder) headerOut() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
	w.sendBy = time.Time{}
}

// keep saves the gateway's own fields before a 1xx goes out.
//
// ReverseProxy has already added the 1xx's fields to the header map by
// then, after the gateway's own: the gateway sets each of its fields to
// one value, so the first is its own, and the upstream's 1xx values of
// the same names are left out. A field the gateway did not set is not
// kept: its first value would be the upstream's.
func (w *recorder) keep() {
	h := w.Header()
	w.kept = make(http.Header, len(gatewayHeaders))
	for _, k := range gatewayHeaders {
		if k != hRequestID && (!w.setLimits || k == hXRateLimitRetry) {
			continue
		}
		if v, ok := h[k]; ok && len(v) > 0 {
			w.kept[k] = v[:1:1]
		}
	}
}

// ownFields makes the 1xx about to go out carry the gateway's fields
// alone, as the final answer does (dropRequestID, dropLimitHeaders): the
// upstream's values of them, which ReverseProxy added to the header map,
// are left out, and after a first 1xx, whose passing cleared the map, the
// gateway's are put back.
func (w *recorder) ownFields() {
	h := w.Header()
	for _, k := range gatewayHeaders {
		if k != hRequestID && !w.ownLimits {
			continue // a route of no visible limit passes the upstream's
		}
		if v, ok := w.kept[k]; ok {
			h[k] = v
		} else {
			delete(h, k)
		}
	}
}

// dropTrailerFields leaves the upstream's trailers of the gateway's own
// fields out of the answer, as dropRequestID and dropLimitHeaders leave
// out its header fields. ReverseProxy adds the upstream's trailers to the
// header map once the body is copied, after the gateway's values of the
// same names, and net/http sends as trailers what the map then holds
// under an announced name, or under http.TrailerPrefix. The header went
// out with its own copy of the map, so nothing of it changes.
func (w *recorder) dropTrailerFields() {
	if !w.wrote {
		return
	}
	h := w.Header()
	if _, announced := h["Trailer"]; !announced && len(h) == w.fields {
		// No trailers came: ReverseProxy adds an announced one under
		// its name, which "Trailer" then lists, and any other under
		// http.TrailerPrefix, a field the map did not have.
		return
	}
	for i, k := range gatewayHeaders {
		if k != hRequestID && !w.ownLimits {
			continue // a route of no visible limit passes the upstream's
		}
		delete(h, k)
		delete(h, gatewayTrailers[i])
	}
}

// gatewayTrailers are gatewayHeaders under http.TrailerPrefix, in order.
var gatewayTrailers = func() []string {
	out := make([]string, len(gatewayHeaders))
	for i, k := range gatewayHeaders {
		out[i] = http.TrailerPrefix + k
	}
	return out
}()

func (w *recorder) Write(b []byte) (int, error) {
	w.extend()
	readAway := false
	if !w.wrote {
		by, lift := w.body.answering()
		defer lift()
		w.final(http.StatusOK)
		readAway = w.readAway(by)
	}
	n, err := w.ResponseWriter.Write(b)
	if readAway {
		w.headerOut()
	}
	w.sent()
	return n, err
}

// finished bounds the writes net/http makes after the handler: the rest
// of the answer it buffered, the end of a chunked body, trailers. The
// deadline of the last write may have passed while the upstream was
// quiet; one set moments ago is kept (see extend).
func (w *recorder) finished() {
	if w.wrote {
		w.extend()
	}
}

// final records the status the client is about to receive.
func (w *recorder) final(code int) {
	w.status, w.wrote = code, true
	h := w.Header()
	if w.kept != nil {
		for k, v := range w.kept {
			if _, ok := h[k]; !ok {
				h[k] = v
			}
		}
	}
	if _, ok := h["Trailer"]; ok && !w.h2 && !w.http10 && !w.head {
		// An HTTP/1.1 client gets trailers only after a chunked body,
		// and net/http frames an answer by its Content-Length when it
		// has one, dropping them: an HTTP/2 upstream may send both.
		delete(h, "Content-Length")
	}
	if _, ok := h["Content-Type"]; !ok {
		// An answer without a type goes out without one, as nginx and
		// Envoy pass it: net/http would sniff its first bytes and add
		// one (text/html for "<html"), which the upstream did not send.
		// A nil value is net/http's way to write no field at all.
		h["Content-Type"] = nil
	}
	if f := w.onStatus; f != nil {
		w.onStatus = nil
		f(code)
	}
	w.fields = len(h)
}

func (w *recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush lets ReverseProxy stream through the recorder.
func (w *recorder) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		w.extend()
		f.Flush()
		w.sent()
	}
}

// Hijack hands WebSocket upgrades the connection, ended once it is quiet
// for websocket_idle_timeout (see idleConn).
func (w *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.status == 0 {
		w.final(http.StatusSwitchingProtocols)
	}
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return c, brw, err
	}
	// The connection is a tunnel now: no deadline of an earlier answer may
	// cut it, and websocket_idle_timeout bounds its quiet.
	c.SetDeadline(time.Time{})
	if n := brw.Reader.Buffered(); n > 0 {
		// Bytes the client sent before the 101 (with its request, or
		// while it waited) are in the server's read buffer, and
		// ReverseProxy copies from the connection alone: they go first.
		early, _ := brw.Reader.Peek(n)
		c = &earlyConn{Conn: c, early: append([]byte(nil), early...)}
		brw.Reader.Discard(n)
	}
	if w.idle > 0 {
		return newIdleConn(c, w.idle, w.endTunnel), brw, nil
	}
	return c, brw, nil
}
