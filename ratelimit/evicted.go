package ratelimit

import "math/bits"

// evictedRecord is a shard's memory of the live buckets it had to evict:
// for each, its hash, the time its budget would have been whole and the
// time its block would have ended. A bucket made again while its record
// entry lasts starts no fuller than it left (see restoreLocked), so
// evicting a spent bucket never gives its budget back.
//
// The record has a fixed size, as many ways as the shard's bound on
// buckets, in sets of four. A way that has passed both its times is free
// again. When a set is full, the two of its four entries and the new one
// that agree on the most hash bits fold into one way, with the later of
// each of their times, that stands for every hash agreeing with them on
// those bits: a fold can make a bucket come back emptier than it left, or
// a new bucket start spent, never one come back fuller. Two hashes agree
// on about half their bits, so a way folded once stands for a tiny share
// of hashes; each further fold into it about squares that share's root.
//
// It belongs to its shard and is guarded by the shard's lock. The zero
// value is an empty record that holds nothing; make one with
// newEvictedRecord.
type evictedRecord struct {
	sets []evictedSet
	// pol is the policy the entries were noted under: a bucket whose
	// settings changed since would start afresh had it stayed, so entries
	// of other settings are dropped.
	pol *Policy
}

type evictedSet [4]evictedWay

// evictedWay stands for the hashes x with (x^h)&mask == 0: one hash when
// mask has every bit, the hashes of folded entries and their likes when
// not. It is 32 bytes, so a set is two cache lines.
type evictedWay struct {
	h, mask uint64
	evictedTimes
}

// evictedTimes is what the record keeps of a bucket evicted live: the
// budget and the block apart, since either may end first, and a block may
// be lifted by a reload that leaves the budget as it was.
type evictedTimes struct {
	until int64 // Unix ns the budget would have been whole (budgetIdleAt)
	block int64 // Unix ns the block would have ended; 0 when not blocked
}

// end is when the bucket would have become idle: the entry lasts until
// then.
func (v evictedTimes) end() int64 { return max(v.until, v.block) }

// fold is the times of two entries folded: the later of each, so that it
// restores no fuller than either.
func (v evictedTimes) fold(o evictedTimes) evictedTimes {
	return evictedTimes{max(v.until, o.until), max(v.block, o.block)}
}

// newEvictedRecord returns a record of at least ways ways.
func newEvictedRecord(ways int) evictedRecord {
	return evictedRecord{sets: make([]evictedSet, max((ways+3)/4, 1))}
}

// set is h's set: h's low 32 bits scaled to the number of sets, like a
// table's home slot (the shard's index lies in other bits).
func (r *evictedRecord) set(h uint64) *evictedSet {
	return &r.sets[h&0xffffffff*uint64(len(r.sets))>>32]
}

func (w *evictedWay) holds(h uint64) bool { return (h^w.h)&w.mask == 0 }

// note records that the bucket of hash h, of policy p, was evicted at now
// while live, with times v. It returns the entry whose way it took, when
// it took one whose times have passed at now: those still matter to
// requests decided before them, so the caller keeps them (goneTimes).
func (r *evictedRecord) note(p *Policy, h uint64, v evictedTimes, now int64) (passed evictedWay) {
	r.follow(p)
	set := r.set(h)
	free := -1
	for i := range set {
		w := &set[i]
		if w.end() > now && w.mask == ^uint64(0) && w.h == h {
			w.evictedTimes = w.fold(v)
			return passed
		}
		if free < 0 && w.end() <= now {
			free = i
		}
	}
	if free >= 0 {
		passed = set[free]
		set[free] = evictedWay{h, ^uint64(0), v}
		return passed
	}
	// Full: fold the pair of the five that keeps the most agreeing bits.
	c := [5]evictedWay{set[0], set[1], set[2], set[3], {h, ^uint64(0), v}}
	bi, bj, most := 0, 1, -1
	for i := range c {
		for j := i + 1; j < len(c); j++ {
			if n := bits.OnesCount64(c[i].mask & c[j].mask &^ (c[i].h ^ c[j].h)); n > most {
				bi, bj, most = i, j, n
			}
		}
	}
	mask := c[bi].mask & c[bj].mask &^ (c[bi].h ^ c[bj].h)
	c[bi] = evictedWay{c[bi].h & mask, mask, c[bi].fold(c[bj].evictedTimes)}
	copy(c[bj:], c[bj+1:])
	copy(set[:], c[:4])
	return passed
}

// take returns the latest times the record holds for a bucket of hash h,
// of policy p, at now; the zero times when it holds nothing. With forget
// set, h's own entry is dropped: the bucket is being made again and
// carries its state itself from now on.
func (r *evictedRecord) take(p *Policy, h uint64, now int64, forget bool) evictedTimes {
	own, folded := r.lookup(p, h, now, forget)
	return own.fold(folded)
}

// lookup is take with the times of h's own entry and those of the folded
// entries that stand for h apart. Entries whose times have passed at now
// count too: a sliding_window_log made again keeps them as the time
// before which a late request cannot be judged (see restoreLocked).
func (r *evictedRecord) lookup(p *Policy, h uint64, now int64, forget bool) (own, folded evictedTimes) {
	if r.sets == nil || !r.follow(p) {
		return own, folded
	}
	set := r.set(h)
	for i := range set {
		switch w := &set[i]; {
		case w.end() == 0 || !w.holds(h):
		case w.mask == ^uint64(0):
			own = own.fold(w.evictedTimes)
			if forget {
				*w = evictedWay{}
			}
		default:
			folded = folded.fold(w.evictedTimes)
		}
	}
	return own, folded
}

// liveAt reports whether an entry of the record lasts past now.
func (r *evictedRecord) liveAt(now int64) bool {
	for i := range r.sets {
		for _, w := range r.sets[i] {
			if w.end() > now {
				return true
			}
		}
	}
	return false
}

// follow makes p the record's policy and reports whether the entries were
// noted under p's settings; when not, it drops them.
func (r *evictedRecord) follow(p *Policy) bool {
	switch {
	case r.pol == p:
		return true
	case r.pol == nil || r.pol.Settings() == p.Settings():
		r.pol = p
		return true
	}
	r.pol = p
	clear(r.sets)
	return false
}

// evictedTimesLocked is what the record keeps of e when it is evicted at
// now. e is not pinned, so its budget's time is finite.
func (e *entry) evictedTimesLocked(now int64) evictedTimes {
	v := evictedTimes{until: e.budgetIdleAt()}
	if e.ext != nil && e.ext.block > now {
		v.block = e.ext.block
	}
	return v
}

// restoreLocked makes the fresh bucket e of p, made at now, no fuller than
// a bucket evicted live with times v. token_bucket and leaky_bucket keep
// their whole budget in v.until, so they come back as they left. The
// others come back spent: fixed_window with its window full,
// sliding_window_counter with both counts at the limit, its window on the
// grid it had, so that its budget grows back no sooner than the evicted
// one's could, and sliding_window_log admitting nothing before v.until
// (an empty log, spent until then). A bucket that was blocked comes back
// blocked to its block's end, and from then on with its budget as above,
// as it would have stayed; like a kept bucket's, the block counts only
// while p blocks.
//
// A sliding_window_log keeps the times even once they have passed: a
// request decided late, at a time before them, comes after one in order
// that made the bucket again (see goneTimes), and the bucket that stayed
// would refuse it, by the entries it dropped (its log's settled time) or
// by its block's end. Its ext is there anyway; the others' late requests
// are not judged exactly, and would cost them one.
func (e *entry) restoreLocked(p *Policy, v evictedTimes, now int64) {
	if v.block > now {
		if e.ext == nil {
			e.ext = new(entryExt)
		}
		e.ext.block = v.block
	}
	if v.until <= now {
		if p.Algorithm == SlidingWindowLog {
			e.ext.log.settled = max(e.ext.log.settled, v.until)
			e.ext.block = max(e.ext.block, v.block)
		}
		return
	}
	switch p.Algorithm {
	case TokenBucket, LeakyBucket:
		e.s[0] = v.until
	case FixedWindow:
		e.s[0], e.s[1] = v.until-p.window, p.Limit
	case SlidingWindowCounter:
		e.s[0], e.s[1], e.s[2] = v.until-2*p.window, p.Limit, p.Limit
	case SlidingWindowLog:
		e.ext.spent = v.until
	}
}
