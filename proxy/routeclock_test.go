package proxy

import (
	"context"
	"testing"
	"time"
)

// When the time runs out the clock cancels the upstream context with
// errUpstreamTimeout, and stop reports it.
func TestRouteClockRunsOut(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancelCause(context.Background())
	c := newRouteClock(cancel, true)
	c.start(time.Millisecond)
	<-ctx.Done()
	if got := context.Cause(ctx); got != errUpstreamTimeout {
		t.Errorf("got cause %v, want %v", got, errUpstreamTimeout)
	}
	if !c.stop() {
		t.Error("stop after the time ran out: got false, want true")
	}
	c.release()
}

// A stopped attempt is never cancelled, and a clock that is started again
// (the next attempt, or the next request of a pooled clock) gets a whole
// timeout from then and a fresh report.
func TestRouteClockStopAndRestart(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancelCause(context.Background())
	c := newRouteClock(cancel, false)
	c.start(time.Hour)
	c.pause()
	c.resume()
	if c.stop() {
		t.Error("stop within the timeout: got true, want false")
	}
	c.resume() // a body read after the attempt is decided arms nothing
	if c.armed {
		t.Error("resume after stop armed the timer")
	}
	c.start(time.Millisecond)
	<-ctx.Done()
	if !c.stop() {
		t.Error("stop of the second attempt after its time ran out: got false, want true")
	}
	c.start(time.Hour)
	if c.stop() {
		t.Error("stop of a third attempt within its timeout: got true, want false")
	}
}

// A timer whose func has started just as its attempt is stopped cannot
// cancel whatever the clock times next: the func waits for the lock, finds
// its generation outdated and does nothing.
func TestRouteClockLateFireCancelsNothingLater(t *testing.T) {
	t.Parallel()
	ctxA, cancelA := context.WithCancelCause(context.Background())
	ctxB, cancelB := context.WithCancelCause(context.Background())
	c := newRouteClock(cancelA, true)
	// What start does, keeping the lock: a func that got the lock first
	// would fire for the first attempt before the test begins.
	c.mu.Lock()
	c.timeout, c.over, c.fired = time.Nanosecond, false, false
	c.armLocked()
	// Hold the lock until the timer has expired: its func has then
	// started and waits for the lock.
	for c.t.Stop() {
		c.t.Reset(time.Nanosecond)
	}
	stale := c.gen
	// What stop does, then what the next request's start does, while that
	// func still waits.
	c.over = true
	c.disarmLocked()
	c.cancel, c.timeout, c.over, c.fired = cancelB, time.Hour, false, false
	c.armLocked()
	if c.gen == stale {
		t.Error("the clock kept the generation of a timer whose func had started")
	}
	c.mu.Unlock()
	c.fire(stale) // as the waiting func does, whenever it gets the lock
	if err := ctxB.Err(); err != nil {
		t.Errorf("the later attempt's context: got %v, want not cancelled", err)
	}
	if err := ctxA.Err(); err != nil {
		t.Errorf("the stopped attempt's context: got %v, want not cancelled", err)
	}
	if c.stop() {
		t.Error("stop of the later attempt: got true, want false")
	}
	c.release()
}
