package ratelimit

import (
	"context"
	"sync/atomic"
	"time"
)

// waiter is one request in Wait. Its dep is guarded by its bucket's lock;
// only the waiter's own goroutine receives from timer.
type waiter struct {
	prev, next *waiter
	dep        int64 // Unix ns of the departure, moved earlier when one ahead gives up
	// old marks a departure of a schedule the bucket no longer keeps: it
	// was reset, or made afresh for new settings, since the request was
	// decided. Such a waiter leaves at its own time, but neither hands its
	// slot down nor counts as, or moves with, the current schedule.
	old   bool
	timer *time.Timer
	// leaving is set by the waiter's goroutine, without the lock, once it
	// stops waiting; a give-up ahead of it then skips re-arming its timer,
	// which keeps a mass give-up (a shutdown) from costing a timer re-arm
	// per pair of waiters.
	leaving atomic.Bool
	// left, made by a waiter behind this one that is due while this one
	// has not left yet, is closed when this one leaves the queue. Guarded
	// by the bucket's lock.
	left chan struct{}
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
// A request leaves only once every one ahead of it in the queue has: when
// a stalled process wakes up past two departures, their timers fire
// together and the goroutines run in any order, so the one behind waits
// for the one ahead rather than overtaking it (SPEC §3: in arrival order).
//
// The queue moves only when every departure scheduled behind the one given
// up belongs to a request in Wait. A request that gives up while one behind
// it has been admitted but has not reached Wait yet (a moment between two
// calls) leaves a hole of one interval instead: departures may spread,
// never come closer than the interval.
func (m *MemoryStore) Wait(ctx context.Context, r Request, d Decision) error {
	if d.Delay <= 0 || d.Departure.IsZero() {
		return ctx.Err()
	}
	h := m.hash(r.Policy, r.Key)
	s := m.shardOf(r.Policy, h)
	w := &waiter{dep: d.Departure.UnixNano()}
	// Under the shard's lock a bucket is found whenever it exists.
	s.mu.Lock()
	e := s.find(h, r.Policy, r.Key)
	queued := e != nil && e.pol.Algorithm == LeakyBucket
	if queued {
		w.old = s.resetSince(r.Key, d.Ticket.Gen) || e.pol.serial != d.Ticket.Life || e.pol.Settings() != r.Policy.Settings()
		e.enqueueLocked(w)
	}
	err := ctx.Err()
	switch {
	case err != nil && queued:
		// Gone before waiting at all: no timer, the place goes back.
		m.giveUpLocked(s, h, e, w)
	case err == nil:
		w.timer = time.NewTimer(time.Duration(w.dep - m.clock().UnixNano()))
	}
	if e != nil {
		e.unlock(false)
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	defer w.timer.Stop()

	// A bucket with requests in Wait is never removed, but it moves in
	// its shard's table: after each unlock it is looked up again.
	drained, drain := DrainOf(ctx)
	var ahead chan struct{} // closed when the one ahead, due, has left
	for {
		select {
		case <-w.timer.C:
			// A departure only ever moves earlier, so any firing means due.
			w.leaving.Store(true)
			if ahead = m.leave(s, h, r, w, queued); ahead == nil {
				return nil
			}
			continue
		case <-ahead:
			if ahead = m.leave(s, h, r, w, queued); ahead == nil {
				return nil
			}
			continue
		case <-drained:
			// Where the departure stands now, under the bucket's lock,
			// which guards it.
			drained = nil
			s.mu.Lock()
			var e *entry
			if queued {
				e = s.find(h, r.Policy, r.Key)
			}
			cut := drain.Cuts(time.Duration(w.dep - m.clock().UnixNano()))
			if cut {
				w.leaving.Store(true)
				if queued {
					m.giveUpLocked(s, h, e, w)
				}
			}
			if e != nil {
				e.unlock(false)
			}
			s.mu.Unlock()
			if cut {
				return ErrDrained
			}
			continue
		case <-ctx.Done():
		}
		break
	}
	w.leaving.Store(true)
	if queued {
		s.mu.Lock()
		e := s.find(h, r.Policy, r.Key)
		m.giveUpLocked(s, h, e, w)
		e.unlock(false)
		s.mu.Unlock()
	}
	return ctx.Err()
}

// leave takes w, which is due, out of its bucket's queue, unless one
// ahead of it whose departure is no later than w's has not left yet: then
// it returns a channel closed when that one leaves, and w stays. That one
// is due too, so w waits only for it to go first. The departure decides,
// not the schedule: a give-up moves only the current schedule, which may
// bring one of it ahead of a waiter of a schedule the bucket no longer
// keeps (old), and that one then need not wait; but the waiters of an old
// schedule still leave in their order, as do an old one and a current one
// behind it. It takes the shard's lock itself.
func (m *MemoryStore) leave(s *memShard, h uint64, r Request, w *waiter, queued bool) chan struct{} {
	if !queued {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.find(h, r.Policy, r.Key)
	defer e.unlock(false)
	for p := w.prev; p != nil; p = p.prev {
		if p.dep > w.dep {
			continue
		}
		if p.left == nil {
			p.left = make(chan struct{})
		}
		return p.left
	}
	e.dequeueLocked(w)
	return nil
}

// giveUpLocked removes w from e's queue and hands its departure slot down
// the line: every later waiter, and the bucket's next departure, moves one
// interval earlier. A slot that has already passed is not handed on: the
// give-up reached the lock late (the lock was busy), and the waiter behind
// may have left at its own departure meanwhile, so moving the line would
// let the next request leave together with it.
//
// A bucket whose next departure moved earlier becomes idle earlier too:
// the shard's queue of buckets that become idle soonest learns the new
// time, or eviction could take a live bucket while this one is idle.
func (m *MemoryStore) giveUpLocked(s *memShard, h uint64, e *entry, w *waiter) {
	t := e.pol.interval // a waiter not old was decided under its settings
	now := m.clock().UnixNano()
	if w.old || e.s[0]-t < w.dep || w.dep < now || !behindWaited(e, w, t) {
		// The bucket was reset (or made afresh for new settings), its
		// schedule no longer holds this departure, the departure is
		// past, or a departure behind it belongs to a request not in
		// Wait: moving anything would bunch departures.
		e.dequeueLocked(w)
		return
	}
	for o := w.next; o != nil; o = o.next {
		if o.old {
			continue
		}
		o.dep -= t
		if o.timer != nil && !o.leaving.Load() {
			o.timer.Reset(time.Duration(o.dep - now))
		}
	}
	e.dequeueLocked(w)
	e.s[0] -= t
	if s.idle.due != nil {
		s.idle.push(idleDue{h, e.dueAtLocked(now)})
	}
}

// behindWaited reports whether every departure e's schedule holds after
// w's belongs to a waiter behind w: the schedule runs w.dep+t, w.dep+2t, ...
// up to the next free departure, exclusive. Its caller holds e's lock.
func behindWaited(e *entry, w *waiter, t int64) bool {
	scheduled := (e.s[0]-w.dep)/t - 1
	for o := w.next; o != nil; o = o.next {
		if !o.old {
			scheduled--
		}
	}
	return scheduled == 0
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
	if w.left != nil {
		close(w.left)
		w.left = nil
	}
	if q.head == nil && e.pol.Algorithm != SlidingWindowLog && e.ext.block == 0 {
		e.ext = nil
	}
}
