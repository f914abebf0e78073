package ratelimit

import (
	"context"
	"sync/atomic"
	"time"
)

// waiter is one request in Wait. Its dep is guarded by the shard lock;
// only the waiter's own goroutine receives from timer.
type waiter struct {
	prev, next *waiter
	dep        int64 // Unix ns of the departure, moved earlier when one ahead gives up
	timer      *time.Timer
	// leaving is set by the waiter's goroutine, without the lock, once it
	// stops waiting; a give-up ahead of it then skips re-arming its timer,
	// which keeps a mass give-up (a shutdown) from costing a timer re-arm
	// per pair of waiters.
	leaving atomic.Bool
}

// waitQueue lists a bucket's waiting requests in departure order. A
// leaky_bucket has one (in its entryExt) only while requests wait in it.
type waitQueue struct {
	head, tail *waiter
}

// Wait implements Store. The waiting request's own goroutine sleeps on a
// timer; the store keeps no worker. A request whose ctx ends first gives its
// place to those behind it: each of them, and the bucket's next departure,
// moves one interval earlier, so departures stay spaced by the interval in
// arrival order with no hole. Timers run on MemoryOptions.Clock.
//
// The queue moves only when every departure still ahead in the bucket's
// schedule belongs to a request in Wait. A request that gives up while
// another has been admitted but has not reached Wait yet (a moment between
// two calls) leaves a hole of one interval instead: departures may spread,
// never come closer than the interval.
func (m *MemoryStore) Wait(ctx context.Context, r Request, d Decision) error {
	if d.Delay <= 0 || d.Departure.IsZero() {
		return ctx.Err()
	}
	h := m.hash(r.Policy.Name, r.Key)
	s := m.shardOf(h)
	w := &waiter{dep: d.Departure.UnixNano()}
	s.mu.Lock()
	e := s.lookupLocked(h, r.Policy.Name, r.Key)
	if e != nil && e.pol.Algorithm != LeakyBucket {
		e = nil
	}
	if e != nil {
		e.enqueueLocked(w)
	}
	if err := ctx.Err(); err != nil {
		// Gone before waiting at all: no timer, the place goes back.
		if e != nil {
			m.giveUpLocked(e, w, r.Policy)
		}
		s.mu.Unlock()
		return err
	}
	w.timer = time.NewTimer(time.Duration(w.dep - m.clock().UnixNano()))
	s.mu.Unlock()
	defer w.timer.Stop()

	select {
	case <-w.timer.C:
		// A departure only ever moves earlier, so any firing means due.
		w.leaving.Store(true)
		if e != nil {
			s.mu.Lock()
			e.dequeueLocked(w)
			s.mu.Unlock()
		}
		return nil
	case <-ctx.Done():
	}
	w.leaving.Store(true)
	if e != nil {
		s.mu.Lock()
		m.giveUpLocked(e, w, r.Policy)
		s.mu.Unlock()
	}
	return ctx.Err()
}

// giveUpLocked removes w from e's queue and hands its departure slot down
// the line: every later waiter, and the bucket's next departure, moves one
// interval earlier.
func (m *MemoryStore) giveUpLocked(e *entry, w *waiter, p *Policy) {
	t := p.interval
	now := m.clock().UnixNano()
	if e.pol.Settings() != p.Settings() || e.s[0]-t < w.dep || !e.scheduleWaitedLocked(now, t) {
		// The bucket was reset (a settings change), its schedule no longer
		// holds this departure, or a departure ahead belongs to a request
		// not in Wait: moving anything would bunch departures.
		e.dequeueLocked(w)
		return
	}
	for o := w.next; o != nil; o = o.next {
		o.dep -= t
		if o.timer != nil && !o.leaving.Load() {
			o.timer.Reset(time.Duration(o.dep - now))
		}
	}
	e.dequeueLocked(w)
	e.s[0] -= t
}

// scheduleWaitedLocked reports whether every departure of e's schedule
// after now belongs to a waiter in the queue. The schedule's departures
// after now are next-t, next-2t, ... down to now, exclusive.
func (e *entry) scheduleWaitedLocked(now, t int64) bool {
	scheduled := int64(0)
	if x := e.s[0] - now; x > 0 {
		scheduled = (x - 1) / t
	}
	waited := int64(0)
	for o := e.ext.wq.head; o != nil; o = o.next {
		if o.dep > now {
			waited++
		}
	}
	return waited == scheduled
}

// enqueueLocked adds w to e's queue in departure order. Waiters nearly
// always arrive in order, so the walk from the tail is short.
func (e *entry) enqueueLocked(w *waiter) {
	if e.ext == nil {
		e.ext = new(entryExt)
	}
	q := &e.ext.wq
	at := q.tail
	for at != nil && at.dep > w.dep {
		at = at.prev
	}
	w.prev = at
	if at == nil {
		w.next, q.head = q.head, w
	} else {
		w.next, at.next = at.next, w
	}
	if w.next == nil {
		q.tail = w
	} else {
		w.next.prev = w
	}
}

// dequeueLocked removes w from e's queue, dropping the queue when it
// empties. Removing a waiter twice is harmless.
func (e *entry) dequeueLocked(w *waiter) {
	if e.ext == nil {
		return
	}
	q := &e.ext.wq
	if w.prev == nil && q.head != w {
		return
	}
	if w.prev == nil {
		q.head = w.next
	} else {
		w.prev.next = w.next
	}
	if w.next == nil {
		q.tail = w.prev
	} else {
		w.next.prev = w.prev
	}
	w.prev, w.next = nil, nil
	if q.head == nil && e.pol.Algorithm != SlidingWindowLog {
		e.ext = nil
	}
}
