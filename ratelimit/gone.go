package ratelimit

import (
	"math/bits"
	"sync/atomic"
)

// goneTimes is a shard's memory of the buckets it removed as idle, for
// requests decided late: at a time before the removal's (a request whose
// time was read before the sweeper's, or before that of a decision that
// made room). A bucket that stayed judges such a request by its state: a
// sliding_window_log by the entries that count at the request's time, a
// block by its end. Made again fresh, it could admit more than the limit
// in a window of arrival times. So each removal keeps, in a slot its hash
// picks, the latest times a removed bucket's budget and block became
// whole; a bucket made for a request decided before them starts as a
// bucket evicted live comes back (see restoreLocked), and one made at or
// after them, as for every request in order, starts fresh.
//
// A slot stands for every hash that picks it, so a late request for a new
// key may find another bucket's times: it is refused until then, as a
// sliding_window_log that dropped entries refuses a request from before
// them. The slots grow with the shard's table, about one for every 16 of
// its slots, so a slot holds the latest of few buckets.
//
// It belongs to its shard and is guarded by the shard's lock. The zero
// value holds nothing and makes its slots at the first removal.
type goneTimes struct {
	slots []evictedTimes // a power of two long
	// pol is the policy the times were noted under: a bucket of other
	// settings would have started afresh, so they are dropped.
	pol *Policy
}

// slot is h's slot: h's low 32 bits scaled to the number of slots, so that
// a slot of twice as many slots lies within the slot it was part of.
func (g *goneTimes) slot(h uint64) *evictedTimes {
	return &g.slots[h&0xffffffff*uint64(len(g.slots))>>32]
}

// noteLocked keeps the times of e, idle and about to be removed from a
// table of size slots. The caller holds the shard's lock and e's.
func (g *goneTimes) noteLocked(e *entry, size int) {
	v := evictedTimes{until: e.budgetIdleAt()}
	if e.ext != nil {
		v.block = e.ext.block
	}
	g.keep(e.pol, evictedWay{atomic.LoadUint64(&e.tag) & hashMask, ^uint64(0), v}, size)
}

// keep keeps the times of w, an entry of the record of evicted buckets of
// policy p that stands for the hashes w holds, in a table of size slots.
func (g *goneTimes) keep(p *Policy, w evictedWay, size int) {
	if w.end() == 0 {
		return // never took anything: fresh for any request
	}
	if g.pol != p && (g.pol == nil || g.pol.Settings() != p.Settings()) {
		clear(g.slots)
	}
	g.pol = p
	n := max(len(g.slots), 8)
	for n < size/16 {
		n *= 2
	}
	if n != len(g.slots) {
		// Each new slot takes the times of the slot it was part of.
		slots := make([]evictedTimes, n)
		if len(g.slots) > 0 {
			for i := range slots {
				slots[i] = g.slots[i*len(g.slots)/n]
			}
		}
		g.slots = slots
	}
	if w.mask == ^uint64(0) {
		s := g.slot(w.h)
		*s = s.fold(w.evictedTimes)
		return
	}
	// A folded entry: every slot one of its hashes picks, by the high
	// bits of the hash's low 32 (see slot).
	shift := 32 - bits.Len(uint(len(g.slots)-1))
	bitsOfSlot := uint64(len(g.slots)-1) << shift
	for i := range g.slots {
		if (uint64(i)<<shift^w.h)&w.mask&bitsOfSlot == 0 {
			g.slots[i] = g.slots[i].fold(w.evictedTimes)
		}
	}
}

// at returns the times kept for a bucket of hash h, of policy p: the zero
// times when none are, or they were noted under other settings.
func (g *goneTimes) at(p *Policy, h uint64) evictedTimes {
	if g.slots == nil || g.pol != p && g.pol.Settings() != p.Settings() {
		return evictedTimes{}
	}
	return *g.slot(h)
}

// dropIdleLocked is removeLocked for the bucket in slot i, which is idle:
// its times are kept for requests decided before them.
func (s *memShard) dropIdleLocked(i int) {
	t := s.tab.Load()
	s.gone.noteLocked(&t.slots[i], len(t.slots))
	s.removeLocked(i)
}
