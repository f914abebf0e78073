package ratelimit

import (
	"math"
	"slices"
	"sync/atomic"
)

// idleQueue is a shard's list of the buckets that become idle soonest, so
// that eviction takes an idle bucket whenever the shard holds one without
// a pass over its table at every eviction.
//
// A decision only ever takes from a bucket and takes no shard lock, so the
// queue cannot follow decisions: an entry's time is when its bucket may
// become idle at the earliest, and the bucket is looked at again when that
// time comes. What the queue keeps true: every bucket of the shard either
// has an entry no later than the time it becomes idle, or becomes idle no
// sooner than horizon. A new bucket gets an entry at its making's time;
// an entry found early is put back at its bucket's time, or dropped when
// that is past horizon; a pass over the table (see passLocked) refills the
// queue with the buckets that become idle soonest. Only what gives budget
// back (a refund, a Reset, a reload that starts buckets afresh) makes a
// bucket idle before its entry's time; the clock hand, which takes the idle
// buckets it meets, the sweeper or the next pass removes it.
//
// It belongs to its shard and is guarded by the shard's lock. The zero
// value holds nothing and asks for a pass (horizon 0); makeLocked gives
// it room.
type idleQueue struct {
	due     []idleDue // a min-heap by at; its capacity fixed when made
	horizon int64     // Unix ns before which no bucket without an entry becomes idle
}

// idleDue is a bucket, by its hash, that is not idle before at (Unix ns).
type idleDue struct {
	h  uint64
	at int64
}

// idleQueueLen is the room of the queue of a shard of limit buckets: an
// eighth of the bound. A pass fills half, so that a pass comes at most
// once per limit/16 entries that came due or buckets made since it, and
// at 16 bytes an entry the queue costs 2 bytes per bucket of the bound.
func idleQueueLen(limit int) int { return max(limit/8, 8) }

// makeLocked gives the queue room for a shard of limit buckets; a queue
// that had another room starts empty, asking for a pass.
func (q *idleQueue) makeLocked(limit int) {
	if n := idleQueueLen(limit); cap(q.due) != n {
		*q = idleQueue{due: make([]idleDue, 0, n)}
	}
}

// push adds d, or, when d is not before horizon, drops it: the bucket is
// idle no sooner than horizon anyway. A full queue drops d and brings
// horizon forward to d's time.
func (q *idleQueue) push(d idleDue) {
	switch {
	case d.at >= q.horizon:
	case len(q.due) == cap(q.due):
		q.horizon = d.at
	default:
		q.due = append(q.due, d)
		siftUp(q.due, len(q.due)-1)
	}
}

// pop removes and returns the entry of the earliest time.
func (q *idleQueue) pop() idleDue {
	d := q.due[0]
	last := len(q.due) - 1
	q.due[0] = q.due[last]
	q.due = q.due[:last]
	siftDown(q.due, 0)
	return d
}

func siftUp(h []idleDue, i int) {
	for i > 0 {
		p := (i - 1) / 2
		if h[p].at <= h[i].at {
			return
		}
		h[p], h[i] = h[i], h[p]
		i = p
	}
}

func siftDown(h []idleDue, i int) {
	for {
		c := 2*i + 1
		if c >= len(h) {
			return
		}
		if c+1 < len(h) && h[c+1].at < h[c].at {
			c++
		}
		if h[i].at <= h[c].at {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

// dueAtLocked is the earliest time the bucket e, not idle at now, may
// become idle: its idle time, or now+1 when that is unknown (tokens held
// until their request's answer) or past (the bucket is pinned), so that
// the bucket is looked at again at the next eviction.
func (e *entry) dueAtLocked(now int64) int64 {
	if t := e.idleAt(); t > now && t != math.MaxInt64 {
		return t
	}
	return now + 1
}

// slotLocked returns the slot of the bucket of hash h, holding its lock,
// or -1 when the shard has none. The caller holds the shard's lock.
func (s *memShard) slotLocked(h uint64) int {
	t := s.tab.Load()
	want := mark(h)
	for i := t.home(h); ; i = t.next(i) {
		switch m := atomic.LoadUint32(&t.marks[i]); {
		case m == 0:
			return -1
		case m == want && atomic.LoadUint64(&t.slots[i].tag)&hashMask == h:
			t.slots[i].lock()
			return i
		}
	}
}

// takeIdleLocked removes an idle bucket, one that no request waits on
// and whose hash is not in keep, from those whose entries' times have
// come at now, and reports whether it did. Entries of buckets that are
// gone are dropped, and those of buckets used since are put back at their
// new times. The caller holds the shard's lock.
func (s *memShard) takeIdleLocked(now int64, keep []uint64) bool {
	q := &s.idle
	for len(q.due) > 0 && q.due[0].at <= now {
		d := q.pop()
		i := s.slotLocked(d.h)
		if i < 0 {
			continue
		}
		e := &s.tab.Load().slots[i]
		if e.idleAt() <= now && !e.pinnedLocked() && !slices.Contains(keep, d.h) {
			s.dropIdleLocked(i)
			return true
		}
		q.push(idleDue{d.h, e.dueAtLocked(now)})
		e.unlock(false)
	}
	return false
}

// passLocked removes every idle bucket of the shard that no request waits
// on and whose hash is not in keep, refills the queue with half its room
// of the buckets that become idle soonest, and returns how many it
// removed. It visits every slot, the slots a removal shifts a bucket into
// again, so at most twice the table's length. The caller holds the
// shard's lock.
func (s *memShard) passLocked(now int64, keep []uint64) (removed int) {
	q := &s.idle
	half := max(cap(q.due)/2, 1)
	// The candidates gather in q.due as a heap of the latest first (times
	// negated), so that a sooner one takes the place of the latest.
	q.due, q.horizon = q.due[:0], math.MaxInt64
	offer := func(h uint64, at int64) {
		switch {
		case len(q.due) < half:
			q.due = append(q.due, idleDue{h, -at})
			siftUp(q.due, len(q.due)-1)
		case at < -q.due[0].at:
			q.horizon = min(q.horizon, -q.due[0].at)
			q.due[0] = idleDue{h, -at}
			siftDown(q.due, 0)
		default:
			q.horizon = min(q.horizon, at)
		}
	}
	slots := s.tab.Load().slots
	for at, n := 0, 2*len(slots); n > 0 && at < len(slots); n-- {
		e := &slots[at]
		tag := atomic.LoadUint64(&e.tag)
		switch {
		case tag == 0:
		case !e.tryLock():
			offer(tag&hashMask, now+1) // being decided on: live
		case e.idleAt() <= now && !e.pinnedLocked() && !slices.Contains(keep, tag&hashMask):
			s.dropIdleLocked(at)
			removed++
			continue // a later bucket may have shifted into at
		default:
			offer(tag&hashMask, e.dueAtLocked(now))
			e.unlock(false)
		}
		at++
	}
	for i := range q.due {
		q.due[i].at = -q.due[i].at
	}
	for i := len(q.due)/2 - 1; i >= 0; i-- {
		siftDown(q.due, i)
	}
	return removed
}
