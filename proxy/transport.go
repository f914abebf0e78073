package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/sluicehq/sluice/internal/plainbytes"
)

// Transport is the RoundTripper every route shares. It is safe for
// concurrent use.
//
// A GET, HEAD, OPTIONS or TRACE with no body of its own and no protocol
// upgrade, going to a plain http:// upstream (a GET, which is most of what a
// gateway forwards), is written and its answer read on the caller's own
// goroutine, over an HTTP/1.1 keep-alive connection from the Transport's
// pool; so is a request of any method whose body the gateway holds whole,
// up to maxDirectBody (the JSON of a login, OTP or token request that json:
// keys read). Every other request goes through the wrapped http.Transport:
// other request bodies, which it writes while the answer may already be
// coming, upgrades, and https:// upstreams with their HTTP/2.
//
// The two carry the same bytes: the request is written by Request.Write,
// which http.Transport also uses, and the answer read by http.ReadResponse.
// What the direct path saves is http.Transport's handover: it gives each
// request to a connection's write goroutine and takes the answer back from
// its read goroutine, and under load those wake-ups cost about a fifth of
// a proxied request's CPU (README › Performance).
//
// Like http.Transport, which watches each idle connection from its read
// goroutine, the direct path never takes for an answer what an upstream
// sent on an idle connection: before it reuses one, it checks (a
// non-blocking peek) that nothing came on it. Like http.Transport, it
// sends such a request again when a kept-alive connection turns out to be
// closed by the upstream before any answer came, though only once, on a
// new connection (see RoundTrip); keeps at most maxIdlePerHost idle
// connections per upstream and closes those idle for idleTimeout; bounds
// an answer's head, informational (1xx) answers included, to
// maxHeadBytes; and never reuses a connection that has bytes left after
// an answer, whose answer was not read to its end, or that switched
// protocols, nor one whose answer had no HTTP status (noStatus). Unlike
// http.Transport, it does not reuse one after an answer
// whose framing is in doubt either (framingInDoubt), and it takes at most
// max1xx informational answers before the final one, where http.Transport
// leaves the count of those passed on to the trace to its caller.
type Transport struct {
	base           http.RoundTripper // for every request the direct path does not take
	dial           func(ctx context.Context, network, addr string) (net.Conn, error)
	maxIdlePerHost int
	idleTimeout    time.Duration
	maxHeadBytes   int64

	mu       sync.Mutex
	idle     map[string][]*h1Conn // per upstream address, the most recently used last
	sweeper  *time.Timer          // nil until the first connection is kept
	sweeping bool                 // sweeper is pending
}

// NewTransport returns the Transport every route shares: a keep-alive pool
// sized for a gateway's fan-in, bounded dial and handshake times, and no
// response-header timeout of its own (routes set theirs per request).
func NewTransport() *Transport {
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	base := &http.Transport{
		Proxy:             nil, // a gateway talks to its upstreams directly
		DialContext:       dialer.DialContext,
		ForceAttemptHTTP2: true,
		// The upstream gets the client's Accept-Encoding as sent: the
		// transport's own gzip would ask for it on behalf of a client
		// that did not, and decode the answer here, at the gateway's cost.
		DisableCompression:    true,
		MaxIdleConns:          2048,
		MaxIdleConnsPerHost:   512,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: 1 * time.Second,
		WriteBufferSize:       32 << 10,
		ReadBufferSize:        32 << 10,
	}
	return &Transport{
		base:           base,
		dial:           dialer.DialContext,
		maxIdlePerHost: base.MaxIdleConnsPerHost,
		idleTimeout:    base.IdleConnTimeout,
		maxHeadBytes:   10 << 20, // http.Transport's default MaxResponseHeaderBytes
	}
}

// CloseIdleConnections closes the connections kept alive, in the direct
// pool and in the wrapped http.Transport.
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	t.mu.Unlock()
	for _, l := range idle {
		for _, c := range l {
			c.conn.Close()
		}
	}
	if ci, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !direct(req) {
		return t.base.RoundTrip(req)
	}
	ctx := req.Context()
	if ctx.Err() != nil {
		// Ended before it went (its client left while it waited in a
		// queue): not written, as http.Transport writes none.
		return nil, context.Cause(ctx)
	}
	addr := req.URL.Host
	if req.URL.Port() == "" {
		addr = net.JoinHostPort(req.URL.Hostname(), "80")
	}
	c, err := t.conn(ctx, addr)
	for {
		if err != nil {
			return nil, err
		}
		resp, err := t.exchange(ctx, c, req)
		if err == nil {
			return resp, nil
		}
		c.conn.Close()
		if !errors.Is(err, errStaleConn) {
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		// The upstream closed a kept-alive connection before it
		// answered (its keep-alive timeout ran out as the request
		// went): a GET, HEAD, OPTIONS or TRACE with no body goes again,
		// once, on a new connection, which is never stale; any other
		// request, which the upstream may have had, is not sent again
		// (resend), as http.Transport does not. Not on the next idle
		// one, as http.Transport does: an upstream that drops the
		// connection on this very request (a handler that panics, a
		// filter that resets) would get it again on every idle
		// connection in turn, and lose each, for one request the
		// limits counted once.
		if !resend(req) {
			return nil, err
		}
		c, err = t.dialConn(ctx, addr)
	}
}

// heldBody is a request body the gateway holds whole in memory (one that
// json: keys read), so that writing it waits on nothing but the
// connection.
type heldBody interface {
	// held reports the body's length, and whether it is all held and
	// unread.
	held() (int, bool)
}

// maxDirectBody is the largest held body the direct path writes. The
// request is written whole before its answer is read, so the body must
// fit in what the kernel takes at once even when the upstream reads none
// of it (an answer before the body, a 401 or 413): the send buffer alone
// holds 16 KiB on Linux by default. http.Transport, which writes a body
// while it reads the answer, carries larger ones.
const maxDirectBody = 8 << 10

// direct reports whether req takes the direct path (see Transport).
func direct(req *http.Request) bool {
	if !canPeek || req.URL.Scheme != "http" || req.Close {
		return false
	}
	if req.Body != nil && req.Body != http.NoBody {
		// A body the gateway holds, of the length the request says,
		// with nothing to wait for before it is sent.
		h, ok := req.Body.(heldBody)
		if !ok {
			return false
		}
		n, whole := h.held()
		if !whole || n > maxDirectBody || int64(n) != req.ContentLength || len(req.TransferEncoding) > 0 || req.Trailer != nil {
			return false
		}
		if _, ok := req.Header["Expect"]; ok {
			return false
		}
	} else if !resend(req) {
		// Without a body, only what the direct path may send again
		// after a stale connection, as http.Transport does.
		return false
	}
	if _, ok := req.Header["Upgrade"]; ok {
		return false
	}
	// http.Transport refuses a request with a field Request.Write would
	// send broken; leaving such a request to it keeps its error.
	for k, vv := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return false
		}
		for _, v := range vv {
			// Most of a value is plain; only what follows is checked
			// byte by byte.
			if !httpguts.ValidHeaderFieldValue(v[plainbytes.FieldValue(v):]) {
				return false
			}
		}
	}
	return true
}

// resend reports whether req may be sent again after a kept-alive
// connection failed before any answer came: the methods http.Transport
// sends again (Request.isReplayable), without a body. Any other request
// may have reached the upstream, which cannot be told from a connection
// it closed before it read the request.
func resend(req *http.Request) bool {
	if req.Body != nil && req.Body != http.NoBody {
		return false
	}
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// h1Conn is one connection of the direct path.
type h1Conn struct {
	conn   net.Conn
	quiet  quietCheck    // nil when the connection has no socket to peek at
	br     *bufio.Reader // reads through head
	bw     *bufio.Writer
	abort  func() // ends the connection's reads and writes at once
	addr   string
	reused bool      // it has carried an exchange before this one
	since  time.Time // when it went idle
	// headLeft is what the reader may still take while an answer's head
	// is read; negative while a body is.
	headLeft int64
}

// head reads from the connection, within headLeft while that is not
// negative.
type head h1Conn

func (h *head) Read(p []byte) (int, error) {
	if h.headLeft < 0 {
		return h.conn.Read(p)
	}
	if h.headLeft == 0 {
		return 0, errHeadTooLarge
	}
	if int64(len(p)) > h.headLeft {
		p = p[:h.headLeft]
	}
	n, err := h.conn.Read(p)
	h.headLeft -= int64(n)
	return n, err
}

var (
	errStaleConn    = errors.New("upstream closed a kept-alive connection")
	errHeadTooLarge = errors.New("upstream response head too large")
	errTooMany1xx   = errors.New("upstream sent too many informational responses")
)

// conn returns an idle connection to addr, or a new one.
func (t *Transport) conn(ctx context.Context, addr string) (*h1Conn, error) {
	now := time.Now()
	t.mu.Lock()
	for l := t.idle[addr]; len(l) > 0; l = t.idle[addr] {
		c := l[len(l)-1]
		l[len(l)-1] = nil
		t.idle[addr] = l[:len(l)-1]
		if now.Sub(c.since) >= t.idleTimeout {
			c.conn.Close()
			continue
		}
		t.mu.Unlock()
		// Anything that came on an idle connection, the upstream's
		// close or bytes no request asked for, would be taken for the
		// next answer: such a connection is not used again.
		if c.quiet == nil || c.quiet() {
			return c, nil
		}
		c.conn.Close()
		t.mu.Lock()
	}
	t.mu.Unlock()
	return t.dialConn(ctx, addr)
}

// dialConn returns a new connection to addr.
func (t *Transport) dialConn(ctx context.Context, addr string) (*h1Conn, error) {
	nc, err := t.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &h1Conn{conn: nc, addr: addr, bw: bufio.NewWriterSize(nc, 32<<10), quiet: newQuietCheck(nc)}
	c.br = bufio.NewReaderSize((*head)(c), 32<<10)
	c.abort = func() { nc.SetDeadline(aLongTimeAgo) }
	return c, nil
}

// keep puts c back in the pool for the next request to its upstream.
func (t *Transport) keep(c *h1Conn) {
	c.reused, c.since = true, time.Now()
	t.mu.Lock()
	l := t.idle[c.addr]
	if len(l) >= t.maxIdlePerHost {
		t.mu.Unlock()
		c.conn.Close()
		return
	}
	if t.idle == nil {
		t.idle = make(map[string][]*h1Conn)
	}
	t.idle[c.addr] = append(l, c)
	if !t.sweeping {
		t.sweeping = true
		if t.sweeper == nil {
			t.sweeper = time.AfterFunc(t.idleTimeout, t.sweep)
		} else {
			t.sweeper.Reset(t.idleTimeout)
		}
	}
	t.mu.Unlock()
}

// sweep closes the connections idle for idleTimeout, and comes again while
// some are left.
func (t *Transport) sweep() {
	var old []*h1Conn
	now := time.Now()
	t.mu.Lock()
	left := 0
	for addr, l := range t.idle {
		n := 0
		for n < len(l) && now.Sub(l[n].since) >= t.idleTimeout {
			n++
		}
		old = append(old, l[:n]...)
		if n == len(l) {
			delete(t.idle, addr)
			continue
		}
		t.idle[addr] = append(l[:0], l[n:]...)
		clear(l[len(l)-n:])
		left += len(l) - n
	}
	t.sweeping = left > 0
	if t.sweeping {
		t.sweeper.Reset(t.idleTimeout / 2)
	}
	t.mu.Unlock()
	for _, c := range old {
		c.conn.Close()
	}
}

// exchange writes req on c and reads its answer's head. On an error the
// caller closes c; errStaleConn says nothing came back on a reused one.
func (t *Transport) exchange(ctx context.Context, c *h1Conn, req *http.Request) (*http.Response, error) {
	// A cancelled context (the client gone, the route's time up) ends
	// whatever the connection is waiting for.
	stop := context.AfterFunc(ctx, c.abort)
	resp, err := t.readAnswer(ctx, c, req)
	if err != nil {
		stop()
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, err
	}
	// After a 101 the connection speaks another protocol (ReverseProxy
	// answers 502 to one no upgrade asked for), and a final status below
	// 100 or above 599 is no HTTP answer at all (noStatus; the gateway
	// answers 502 to it): as http.Transport keeps no connection whose
	// final status is below 200, none of these is reused, even when no
	// body is left on it.
	keep := !resp.Close && resp.StatusCode >= 200 && !noStatus(resp.StatusCode)
	if resp.Body == http.NoBody {
		if stop() && keep && c.br.Buffered() == 0 {
			t.keep(c)
		} else {
			c.conn.Close()
		}
		return resp, nil
	}
	resp.Body = &h1Body{t: t, c: c, ctx: ctx, body: resp.Body, stop: stop, keep: keep}
	return resp, nil
}

var aLongTimeAgo = time.Unix(1, 0)

// max1xx is how many informational answers may come before the final one;
// ReverseProxy passes each on to the client.
const max1xx = 4

func (t *Transport) readAnswer(ctx context.Context, c *h1Conn, req *http.Request) (*http.Response, error) {
	if err := req.Write(c.bw); err != nil {
		return nil, stale(c, err)
	}
	if err := c.bw.Flush(); err != nil {
		return nil, stale(c, err)
	}
	c.headLeft = t.maxHeadBytes
	defer func() { c.headLeft = -1 }()
	if _, err := c.br.Peek(1); err != nil {
		return nil, stale(c, err)
	}
	for n := 0; ; n++ {
		var head headScan
		doubt := framingInDoubt(c.br, &head)
		resp, err := http.ReadResponse(c.br, req)
		if err != nil {
			return nil, err
		}
		head.dropHopFields(resp.Header)
		code := resp.StatusCode
		if code < 100 || code >= 200 || code == http.StatusSwitchingProtocols {
			// The connection is closed after an answer whose
			// framing is in doubt.
			resp.Close = resp.Close || doubt
			return resp, nil
		}
		// An informational answer: ReverseProxy passes it on through
		// its trace, as it does for http.Transport.
		if n == max1xx {
			return nil, errTooMany1xx
		}
		if trace := httptrace.ContextClientTrace(ctx); trace != nil && trace.Got1xxResponse != nil {
			if err := trace.Got1xxResponse(code, textproto.MIMEHeader(resp.Header)); err != nil {
				return nil, err
			}
		}
	}
}

// stale marks err as the failure of a reused connection before any answer
// came, which a retry on a new connection may mend.
func stale(c *h1Conn, err error) error {
	if !c.reused {
		return err
	}
	return errors.Join(errStaleConn, err)
}

// h1Body is an answer's body on the direct path: read to its end, it puts
// its connection back in the pool, unless the upstream asked to close it
// or sent more than the answer; closed before its end, it closes the
// connection, which has the rest of the body in it. Close may be called
// while a Read is in progress.
type h1Body struct {
	t    *Transport
	c    *h1Conn
	ctx  context.Context // the request's
	body io.ReadCloser   // http.ReadResponse's
	stop func() bool     // of the AfterFunc that cancels the connection
	keep bool            // the upstream allows another request on it

	mu     sync.Mutex
	closed bool // Close was called
	over   bool // the connection is no longer this body's
}

var errBodyClosed = errors.New("http: read on closed response body")

func (b *h1Body) Read(p []byte) (int, error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return 0, errBodyClosed
	}
	if b.over {
		b.mu.Unlock()
		return 0, io.EOF
	}
	b.mu.Unlock()
	n, err := b.body.Read(p)
	if err == nil {
		return n, nil
	}
	b.mu.Lock()
	over := b.over
	b.over = true
	b.mu.Unlock()
	if over {
		// Close came first and closed the connection.
		return n, err
	}
	cancelled := !b.stop()
	if err == io.EOF && !cancelled && b.keep && b.c.br.Buffered() == 0 {
		b.t.keep(b.c)
		return n, io.EOF
	}
	b.c.conn.Close()
	if cancelled && err != io.EOF {
		// The read broke off because the context ended: say why.
		return n, context.Cause(b.ctx)
	}
	return n, err
}

func (b *h1Body) Close() error {
	b.mu.Lock()
	b.closed = true
	over := b.over
	b.over = true
	b.mu.Unlock()
	if !over {
		b.stop()
		b.c.conn.Close()
	}
	return nil
}
