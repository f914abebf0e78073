package proxy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"
)

// connKey is the context key under which WithConn keeps a connection.
type connKey struct{}

// WithConn is an http.Server's ConnContext: it keeps each connection in
// the contexts of its requests, so that a request waiting in a queue can
// tell whether its client is still there (see watchPeer).
func WithConn(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// peerPoll is how often a waiting HTTP/1 request checks that its client
// is still connected.
const peerPoll = time.Second

// errClientGone ends the wait of a request whose client closed its
// connection.
var errClientGone = errors.New("client closed the connection")

// peerWatch checks, every peerPoll while a request waits, whether its
// client has closed the connection, and then ends the wait.
//
// net/http notices that an HTTP/1 client went away only by reading the
// connection, which it starts once the request's body has been read to
// its end. A request in a queue has not had its body read: a client may
// send all of it, close, and net/http would still forward the request,
// from the socket's buffer, at its departure. Nor does that read notice
// anything once the client has sent one more byte (a pipelined request,
// or a stray byte): it stops there, and a close that follows goes
// unseen. The connection's TCP state tells what net/http cannot see.
type peerWatch struct {
	conn   net.Conn
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu    sync.Mutex
	timer *time.Timer
}

// watchPeer starts watching r's client for a request that waits with ctx,
// which cancel ends, or returns nil when there is nothing to watch: a
// request over HTTP/2 (whose streams end on their own), or one whose
// connection WithConn did not keep. An HTTP/1 request without a body is
// watched too: net/http's own watch of its connection ends at the first
// byte the client sends after it.
func watchPeer(ctx context.Context, cancel context.CancelCauseFunc, r *http.Request) *peerWatch {
	if r.ProtoMajor != 1 {
		return nil
	}
	c := connOf(r)
	if c == nil || !canCheckPeer {
		return nil
	}
	w := &peerWatch{conn: c, ctx: ctx, cancel: cancel}
	w.mu.Lock()
	w.timer = time.AfterFunc(peerPoll, w.check)
	w.mu.Unlock()
	return w
}

func (w *peerWatch) check() {
	if w.ctx.Err() != nil {
		return
	}
	if w.gone() {
		w.cancel(errClientGone)
		return
	}
	w.mu.Lock()
	w.timer.Reset(peerPoll)
	w.mu.Unlock()
}

// gone reports whether the client has closed its side of the connection
// (or reset it). The request then ends as one whose client went away,
// whose connection abandon closes.
func (w *peerWatch) gone() bool { return peerClosed(w.conn) }

// stop ends the watch.
func (w *peerWatch) stop() {
	w.mu.Lock()
	w.timer.Stop()
	w.mu.Unlock()
}

// abandon ends the exchange of a request whose client went away without
// an answer: over HTTP/1 its connection is closed. Were the handler only
// to return, net/http would write an empty 200 of its own, which a client
// that has only shut down its sending side (net/http takes that for gone
// too) would read as the answer to a request nobody served.
func abandon(r *http.Request) {
	if c := connOf(r); c != nil && r.ProtoMajor == 1 {
		c.Close()
	}
}

// connOf is the connection WithConn kept for r, or nil.
func connOf(r *http.Request) net.Conn {
	c, _ := r.Context().Value(connKey{}).(net.Conn)
	return c
}
