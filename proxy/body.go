package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/problem"
)

// clientBody is a request body as the client sends it, guarded: each read
// must bring data within the idle timeout (client_body_timeout), the
// route's max_body caps the total, and a deadline may bound a whole read
// (the part json: keys look at, read before any limit has counted the
// request). The first failure sticks: later reads return it again, and the
// gateway answers for the client (408, 413, 400) instead of blaming the
// upstream.
//
// One goroutine reads at a time (the handler for keys, then the transport);
// failure and Close are safe to call from any goroutine.
type clientBody struct {
	// orig is the server's own body of req, which r.Body is again once
	// the answer is written (see restore).
	orig io.ReadCloser
	req  *http.Request
	raw  http.ResponseWriter // the server's, under the gateway's wrappers (see endConnection)
	ctl  *http.ResponseController
	idle time.Duration
	max  int64 // bytes; 0: no limit
	n    int64 // bytes returned so far
	// tooLarge is the 413 detail, made once per request.
	tooLarge string
	until    time.Time

	// done is set once a read saw EOF or a failure; from then on the
	// connection's deadline is left alone. The handler reads it while the
	// transport may still be reading the body.
	done   atomic.Bool
	closed atomic.Bool
	// ended is set as the handler returns: the connection is then the
	// server's again (and maybe the next request's), so the deadline is
	// never touched after, and the body is not read (see settle).
	ended atomic.Bool
	// reading is held by a guarded read while it runs, so that settle can
	// wait for it.
	reading sync.Mutex
	fail    atomic.Pointer[bodyFailure]
}

// bodyFailure is what the client did wrong, as the answer it gets.
type bodyFailure struct {
	status int
	detail string
	gone   bool // the client went away: nobody is left to answer
	// sent: part of the body had been handed on before it failed, so the
	// upstream may have had the request (see armRefund).
	sent bool
	err  error
}

func (f *bodyFailure) Error() string { return f.err.Error() }
func (f *bodyFailure) Unwrap() error { return f.err }

var errBodyTooLarge = errors.New("request body larger than max_body")

// errHandlerEnded ends a read of the body begun after the handler returned
// (see settle).
var errHandlerEnded = errors.New("request body read after the handler returned")

// wrapBody puts a clientBody in front of r's body before anything reads it
// and returns it; nil when r has no body. It runs before routing, so a
// body sluice answers without reading (404, 429) is bounded too.
func wrapBody(w http.ResponseWriter, r *http.Request, s *snapshot) *clientBody {
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	b := &clientBody{orig: r.Body, req: r, raw: unwrapWriter(w), ctl: http.NewResponseController(w), idle: s.cfg.ClientBodyTimeout}
	r.Body = b
	return b
}

// restore gives r back its own body once the gateway is done with it (the
// answer is being written, or the handler ends). net/http decides by that
// body's type what to do with a body left unread: whether a client that
// sent Expect: 100-continue and no body yet can have its answer at once,
// and whether to linger before closing so that a client still sending
// reads the answer rather than a reset. The transport may go on reading
// through b, which it holds.
func (b *clientBody) restore() {
	if b != nil {
		b.req.Body = b.orig
	}
}

// unwrapWriter returns the ResponseWriter under w's wrappers.
func unwrapWriter(w http.ResponseWriter) http.ResponseWriter {
	for {
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return w
		}
		w = u.Unwrap()
	}
}

// admitBody applies the route's max_body: a declared length over it is
// answered 413 at once (false), and a streamed body is cut where it grows
// past it.
func admitBody(w http.ResponseWriter, r *http.Request, rt *route, ex *exchange) bool {
	b, max := ex.body, rt.r.MaxBody
	if b == nil {
		return true
	}
	// A route of a reload may come after another (see admit): its bound,
	// or none, replaces the other's.
	b.max, b.tooLarge = 0, ""
	if max <= 0 {
		return true
	}
	b.tooLarge = tooLargeDetail(rt, max)
	if r.ContentLength > max || b.n > max {
		refuseBody(w, r, ex, &bodyFailure{status: http.StatusRequestEntityTooLarge, detail: b.tooLarge, err: errBodyTooLarge})
		return false
	}
	// Read counts against it, and settle tells the server to close the
	// connection when the body went past it.
	b.max = max
	return true
}

// answering runs as the answer's header is written and returns the bound
// it set on a read of the rest of the body (zero: none), and what to run
// after. An
// HTTP/1 server reads what is left of a body nobody read before it writes
// the header, so the connection can carry the next request; it does so
// with no deadline, and a client that stopped halfway would never get its
// 404 or 429 and hold the connection for good. That read gets
// client_body_timeout as a whole; when it fails the server closes the
// connection after the answer. The deadline is lifted after, so it cannot
// cut a long response: the header must have gone out by then (see
// recorder.readAway).
func (b *clientBody) answering() (time.Time, func()) {
	b.restore()
	if b == nil || b.idle <= 0 || b.done.Load() || b.closed.Load() {
		return time.Time{}, func() {}
	}
	by := time.Now().Add(b.idle)
	b.ctl.SetReadDeadline(by)
	return by, func() {
		if b.done.Load() {
			return
		}
		b.ctl.SetReadDeadline(time.Time{})
		// A read that failed meanwhile (another goroutine) set a past
		// deadline after marking the body done; whichever came last,
		// that deadline stays.
		if b.done.Load() && b.fail.Load() != nil {
			b.ctl.SetReadDeadline(time.Unix(1, 0))
		}
	}
}

// settle runs as the handler ends. What is left of a body nobody read is
// read away by the server so the connection can carry the next request;
// that read gets client_body_timeout as a whole.
//
// The transport may still be reading the body then, as an upstream may
// answer before it has the whole body. net/http, as the handler returns,
// ends a read of the connection it finds in flight with a deadline in the
// past, as settle does here, but then lifts every deadline before it
// reads the rest away: a client that stopped sending would hold the
// connection for as long as it stayed silent. So settle ends that read
// itself and waits for it, and the body reads nothing after.
func (b *clientBody) settle() {
	if b == nil {
		return
	}
	b.restore()
	b.ended.Store(true) // reads to come end at once
	if b.idle > 0 && !b.done.Load() && !b.closed.Load() {
		if !b.reading.TryLock() {
			b.ctl.SetReadDeadline(time.Unix(1, 0))
			b.reading.Lock()
		}
		b.ctl.SetReadDeadline(time.Now().Add(b.idle))
		b.reading.Unlock()
	}
	if f := b.fail.Load(); f != nil && f.status == http.StatusRequestEntityTooLarge {
		endConnection(b.raw)
	}
}

// endConnection tells the server of w, an HTTP/1 one, to close the
// connection after the answer without reading the rest of the request
// body, and to linger before it closes, so that a client still sending
// its body reads the answer (a 413) rather than a reset. It must run on
// the handler's goroutine: net/http offers this only through
// http.MaxBytesReader, whose reader, past its limit, sets Connection:
// close in the answer's header map unless the header is out. Put in front
// of the body itself, it did so from whichever goroutine read the body
// (the transport's, while the handler wrote the same map: an upstream's
// early answer or its 1xx), a concurrent map write that ends the process.
// A reader with a limit of 0 over one byte does it here instead. Other
// servers (HTTP/2) are left alone.
func endConnection(w http.ResponseWriter) {
	var one [1]byte
	http.MaxBytesReader(w, io.NopCloser(bytes.NewReader(one[:])), 0).Read(one[:])
}

func tooLargeDetail(rt *route, max int64) string {
	return fmt.Sprintf("request body is larger than route %s accepts (max_body %d bytes)", rt.r.Name, max)
}

// Read implements io.Reader.
func (b *clientBody) Read(p []byte) (int, error) {
	if f := b.fail.Load(); f != nil {
		return 0, f
	}
	if b.done.Load() {
		return b.orig.Read(p)
	}
	b.reading.Lock()
	defer b.reading.Unlock()
	if b.ended.Load() {
		return 0, errHandlerEnded
	}
	if b.max > 0 && int64(len(p)) > b.max-b.n+1 {
		// Read one byte past the limit at most: enough to tell a body
		// that ends at max_body from one that goes on.
		p = p[:b.max-b.n+1]
	}
	var d time.Time // zero: no bound (a Config not made by routes.Parse may lack the timeout)
	if b.idle > 0 {
		d = time.Now().Add(b.idle)
	}
	byWhole := !b.until.IsZero() && (d.IsZero() || b.until.Before(d))
	if byWhole {
		d = b.until
	}
	b.ctl.SetReadDeadline(d)
	if b.ended.Load() {
		// settle came between the check above and this deadline, which
		// may have replaced the one it set to end this read.
		return 0, errHandlerEnded
	}
	n, err := b.orig.Read(p)
	b.n += int64(n)
	if b.max > 0 && b.n > b.max {
		// The byte past max_body is not handed on.
		n -= int(b.n - b.max)
		b.n = b.max
		err = b.failed(&bodyFailure{status: http.StatusRequestEntityTooLarge, detail: b.tooLarge, err: errBodyTooLarge})
	} else if err != nil && err != io.EOF && !b.closed.Load() {
		err = b.failed(classify(err, byWhole, b.idle, b.req.ProtoMajor == 2 && b.req.Context().Err() != nil))
	}
	if err != nil {
		b.done.Store(true)
		if b.fail.Load() == nil {
			// The server reads the connection again once the body is
			// done, to notice a client that leaves; a deadline left
			// behind would cancel the request when it expires.
			b.ctl.SetReadDeadline(time.Time{})
		} else {
			// A failed body ends its connection after the answer
			// (refuseBody says so). net/http first reads away what it
			// can of the rest, up to 256 KiB, with no deadline of its
			// own: a client that stopped would hold the connection for
			// as long as it stayed silent. That read now fails at once.
			b.ctl.SetReadDeadline(time.Unix(1, 0))
		}
	}
	return n, err
}

// failed records f unless a failure is already recorded, and returns the
// recorded one.
func (b *clientBody) failed(f *bodyFailure) error {
	f.sent = b.n > 0
	b.fail.CompareAndSwap(nil, f)
	return b.fail.Load()
}

// Close implements io.Closer. Closing a body that is not done reads the
// rest of it away (up to 256 KiB), which gets client_body_timeout as a
// whole; the deadline is lifted after, since the server then reads the
// connection to notice a client that leaves.
func (b *clientBody) Close() error {
	b.closed.Store(true)
	guard := b.idle > 0 && !b.done.Load() && !b.ended.Load()
	if guard {
		b.ctl.SetReadDeadline(time.Now().Add(b.idle))
	}
	err := b.orig.Close()
	if guard {
		b.ctl.SetReadDeadline(time.Time{})
	}
	return err
}

// failure returns what went wrong reading the body, nil when nothing did
// (or b is nil: the request has no body).
func (b *clientBody) failure() *bodyFailure {
	if b == nil {
		return nil
	}
	return b.fail.Load()
}

// wholeBy bounds every read from now on by t as well as by the idle
// timeout; the returned func lifts that bound. Calling it on a nil b (a
// request without body) is fine.
func (b *clientBody) wholeBy(t time.Time) func() {
	if b == nil {
		return func() {}
	}
	b.until = t
	return func() { b.until = time.Time{} }
}

// classify tells a client's body failure apart: silence past the deadline
// (408), a connection that went away or an HTTP/2 stream the client reset
// (streamGone: the stream's context ended before its body failed; nobody
// to answer), or a body that does not keep its framing: a short body, bad
// chunked encoding (400).
func classify(err error, byWhole bool, idle time.Duration, streamGone bool) *bodyFailure {
	var ne net.Error
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		detail := fmt.Sprintf("the client sent no request body data for %s (client_body_timeout)", idle)
		if byWhole {
			detail = "the request body part that the rate-limit keys read did not arrive within client_header_timeout"
		}
		return &bodyFailure{status: http.StatusRequestTimeout, detail: detail, err: err}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &bodyFailure{status: http.StatusBadRequest, detail: "the request body ended before its declared length", err: err}
	case streamGone, errors.As(err, new(*net.OpError)):
		return &bodyFailure{gone: true, err: err}
	}
	return &bodyFailure{status: http.StatusBadRequest, detail: "malformed request body: " + err.Error(), err: err}
}

// refuseBody answers a request whose body the client got wrong. An HTTP/1
// connection is closed after: what is left of the body cannot be trusted
// to frame the next request. An HTTP/2 stream is framed apart from the
// others, and ends on its own; Go's server would take Connection: close
// for a GOAWAY of the whole connection, every other stream's too.
func refuseBody(w http.ResponseWriter, r *http.Request, ex *exchange, f *bodyFailure) {
	if f.gone {
		ex.clientGone = true
		return
	}
	ex.bodyErr = f.err
	if r.ProtoMajor == 1 {
		w.Header().Set("Connection", "close")
	}
	problem.Error(w, f.status, f.detail)
}
