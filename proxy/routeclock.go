package proxy

import (
	"context"
	"io"
	"sync"
	"time"
)

// routeClock runs a route's timeout for one forwarded request while the
// upstream has the turn (taking the body, preparing its answer): started
// as each attempt goes upstream, paused while the transport waits for the
// client to send more of the body, so the timeout counts from the end of
// the request body and a slow upload is not the upstream's fault, and
// stopped for good once the attempt is decided. When the time runs out
// first it cancels the request's upstream context with errUpstreamTimeout.
// It is safe for concurrent use.
//
// Its timer and the timer's func are made once and kept across requests
// (clockPool), so forwarding a request allocates neither. A timer whose
// func has already started when it is stopped is left to that func and
// replaced; the func finds its generation outdated and does nothing, so a
// late timer never cancels a later request.
type routeClock struct {
	mu      sync.Mutex
	t       *time.Timer // nil until first armed, and after a stale fire
	gen     uint64      // generation of t; a func of an older one is stale
	timeout time.Duration
	cancel  context.CancelCauseFunc // the request's upstream context
	armed   bool                    // t is pending
	over    bool                    // the attempt is decided: stop, release, or the time ran out
	fired   bool                    // the time ran out during this attempt
	pooled  bool                    // release puts it back in clockPool
}

var clockPool = sync.Pool{New: func() any { return &routeClock{pooled: true} }}

// newRouteClock returns a clock for a request whose upstream context cancel
// cancels. A pooled clock comes from the pool and goes back to it at
// release, so only a request that nothing can still time once its handler
// returns may have one: a request with a body may not, as the transport
// can go on reading the body (and pausing the clock) after that.
func newRouteClock(cancel context.CancelCauseFunc, pooled bool) *routeClock {
	var c *routeClock
	if pooled {
		c = clockPool.Get().(*routeClock)
	} else {
		c = new(routeClock)
	}
	c.mu.Lock()
	c.cancel, c.over = cancel, true
	c.mu.Unlock()
	return c
}

// start begins an attempt with a whole timeout from now.
func (c *routeClock) start(timeout time.Duration) {
	c.mu.Lock()
	c.timeout, c.over, c.fired = timeout, false, false
	c.armLocked()
	c.mu.Unlock()
}

// pause stops the clock while the transport waits for the client.
func (c *routeClock) pause() {
	c.mu.Lock()
	if !c.over {
		c.disarmLocked()
	}
	c.mu.Unlock()
}

// resume gives the upstream a whole timeout again from now.
func (c *routeClock) resume() {
	c.mu.Lock()
	if !c.over {
		c.armLocked()
	}
	c.mu.Unlock()
}

// stop ends the attempt and reports whether its time had run out.
func (c *routeClock) stop() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.over = true
	c.disarmLocked()
	return c.fired
}

// release stops c for good as the request's handler returns, and puts a
// pooled clock back in the pool; nothing may use a pooled one after.
func (c *routeClock) release() {
	c.mu.Lock()
	c.over = true
	c.disarmLocked()
	c.cancel = nil
	c.mu.Unlock()
	if c.pooled {
		clockPool.Put(c)
	}
}

func (c *routeClock) armLocked() {
	c.disarmLocked()
	c.armed = true
	if c.t != nil {
		c.t.Reset(c.timeout)
		return
	}
	gen := c.gen
	c.t = time.AfterFunc(c.timeout, func() { c.fire(gen) })
}

func (c *routeClock) disarmLocked() {
	if !c.armed {
		return
	}
	c.armed = false
	if !c.t.Stop() {
		// The func has started and waits for the lock; it belongs to
		// the attempt that is over now, so the next one gets a new timer.
		c.t = nil
		c.gen++
	}
}

func (c *routeClock) fire(gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	c.armed = false
	if c.over || c.cancel == nil {
		return
	}
	c.over, c.fired = true, true
	c.cancel(errUpstreamTimeout)
}

// timedBody is the upstream request's body: reading it from the client
// pauses the route's clock.
type timedBody struct {
	io.ReadCloser
	clock *routeClock
	// whole is the body under ReadCloser's wrappers (ReverseProxy's
	// among them) when the gateway holds it whole, or nil.
	whole *replayBody
}

// held is that of the body the gateway holds, which is read at once.
func (b *timedBody) held() (int, bool) {
	if b.whole == nil {
		return 0, false
	}
	return b.whole.held()
}

func (b *timedBody) Read(p []byte) (int, error) {
	b.clock.pause()
	n, err := b.ReadCloser.Read(p)
	b.clock.resume()
	return n, err
}
