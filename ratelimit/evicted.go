package ratelimit

import "math/bits"

// evictedRecord is a shard's memory of the live buckets it had to evict:
// for each, its hash and the time it would have become idle. A bucket made
// again while its record entry lasts starts no fuller than it left (see
// restoreLocked), so evicting a spent bucket never gives its budget back.
//
// The record has a fixed size, as many ways as the shard's bound on
// buckets, in sets of four. A way that has passed its time is free again.
// When a set is full, the two of its four entries and the new one that
// agree on the most hash bits fold into one way, with the later of their
// times, that stands for every hash agreeing with them on those bits: a
// fold can make a bucket come back emptier than it left, or a new bucket
// start spent, never one come back fuller. Two hashes agree on about half
// their bits, so a way folded once stands for a tiny share of hashes;
// each further fold into it about squares that share's root.
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
// not.
type evictedWay struct {
	h, mask uint64
	until   int64 // Unix ns the buckets would have become idle; free once past
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
// while live, and would have become idle at until.
func (r *evictedRecord) note(p *Policy, h uint64, until, now int64) {
	r.follow(p)
	set := r.set(h)
	free := -1
	for i := range set {
		w := &set[i]
		if w.until > now && w.mask == ^uint64(0) && w.h == h {
			w.until = foldUntil(w.until, until)
			return
		}
		if free < 0 && w.until <= now {
			free = i
		}
	}
	if free >= 0 {
		set[free] = evictedWay{h, ^uint64(0), until}
		return
	}
	// Full: fold the pair of the five that keeps the most agreeing bits.
	c := [5]evictedWay{set[0], set[1], set[2], set[3], {h, ^uint64(0), until}}
	bi, bj, most := 0, 1, -1
	for i := range c {
		for j := i + 1; j < len(c); j++ {
			if n := bits.OnesCount64(c[i].mask & c[j].mask &^ (c[i].h ^ c[j].h)); n > most {
				bi, bj, most = i, j, n
			}
		}
	}
	mask := c[bi].mask & c[bj].mask &^ (c[bi].h ^ c[bj].h)
	c[bi] = evictedWay{c[bi].h & mask, mask, foldUntil(c[bi].until, c[bj].until)}
	copy(c[bj:], c[bj+1:])
	copy(set[:], c[:4])
}

// take returns the latest time a bucket of hash h, of policy p, would
// have become idle by the record, or 0 when the record holds nothing for
// it at now. With forget set, h's own entry is dropped: the bucket is
// being made again and carries its state itself from now on.
func (r *evictedRecord) take(p *Policy, h uint64, now int64, forget bool) int64 {
	if r.sets == nil || !r.follow(p) {
		return 0
	}
	set := r.set(h)
	var until int64
	for i := range set {
		w := &set[i]
		if w.until > now && w.holds(h) {
			until = foldUntil(until, w.until)
			if forget && w.mask == ^uint64(0) {
				*w = evictedWay{}
			}
		}
	}
	return until
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

// noteUntil is what the record keeps of a bucket idle at until, blocked
// or not: the time with its lowest bit set for a blocked bucket and clear
// for another, rounding up either way, so that the kept time is never
// earlier than the bucket's.
func noteUntil(until int64, blocked bool) int64 {
	if blocked {
		return until | 1
	}
	return until + until&1
}

// foldUntil is the kept time of two entries folded: the later, blocked
// if either was, so that it restores no fuller than either.
func foldUntil(a, b int64) int64 { return max(a, b) | (a|b)&1 }

// restoreLocked makes the fresh bucket e of p no fuller than a bucket that
// was evicted live and would have become idle at until. token_bucket and
// leaky_bucket keep their whole state in that time, so they come back as
// they left. The others come back spent: fixed_window with its window
// full, sliding_window_counter with both counts at the limit, so that its
// budget grows back no sooner than the evicted one's could, and
// sliding_window_log admitting nothing before until (an empty log, spent
// until then). A bucket that was blocked (until's lowest bit, see
// noteUntil) comes back blocked until then, whatever its budget.
func (e *entry) restoreLocked(p *Policy, until int64) {
	if until&1 != 0 && p.Block > 0 {
		if e.ext == nil {
			e.ext = new(entryExt)
		}
		e.ext.block = until
	}
	switch p.Algorithm {
	case TokenBucket, LeakyBucket:
		e.s[0] = until
	case FixedWindow:
		e.s[0], e.s[1] = until-p.window, p.Limit
	case SlidingWindowCounter:
		e.s[0], e.s[1], e.s[2] = until-2*p.window, p.Limit, p.Limit
	case SlidingWindowLog:
		e.ext.spent = until
	}
}
