package ratelimit

// evictedRecord is a shard's memory of the live buckets it had to evict:
// for each, its hash and the time it would have become idle. A bucket made
// again while its record entry lasts starts no fuller than it left (see
// restoreLocked), so evicting a spent bucket never gives its budget back.
//
// The record has a fixed size, as many ways as the shard's bound on
// buckets, in sets of four ways, one cache line each. A way that has
// passed its time is free again. When a set is full, the way that ends
// first and the new entry fold into one way that stands for every hash of
// the set, with the later of the two times: a collision can make a bucket
// come back emptier than it left, or a new bucket start spent, never one
// come back fuller.
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

type evictedWay struct {
	h     uint64 // the bucket's hash; 0 in a free way, anyHash for the whole set
	until int64  // Unix ns the bucket would have become idle
}

// anyHash marks a way that stands for every hash of its set. No bucket has
// it as a hash, since every hash has hashSet.
const anyHash = 1

// newEvictedRecord returns a record of at least ways ways.
func newEvictedRecord(ways int) evictedRecord {
	return evictedRecord{sets: make([]evictedSet, max((ways+3)/4, 1))}
}

// set is h's set: h's low 32 bits scaled to the number of sets, like a
// table's home slot (the shard's index lies in other bits).
func (r *evictedRecord) set(h uint64) *evictedSet {
	return &r.sets[h&0xffffffff*uint64(len(r.sets))>>32]
}

// note records that the bucket of hash h, of policy p, was evicted at now
// while live, and would have become idle at until.
func (r *evictedRecord) note(p *Policy, h uint64, until, now int64) {
	r.follow(p)
	set := r.set(h)
	free := -1
	for i := range set {
		w := &set[i]
		if w.h == h {
			w.until = max(w.until, until)
			return
		}
		if free < 0 && (w.h == 0 || w.until <= now) {
			free = i
		}
	}
	if free >= 0 {
		set[free] = evictedWay{h, until}
		return
	}
	// Full: fold into the way that already stands for the set, or else
	// into the one that ends first.
	j := 0
	for i := range set {
		if set[i].h == anyHash {
			j = i
			break
		}
		if set[i].until < set[j].until {
			j = i
		}
	}
	set[j] = evictedWay{anyHash, max(set[j].until, until)}
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
		switch {
		case w.until <= now:
		case w.h == h:
			until = max(until, w.until)
			if forget {
				*w = evictedWay{}
			}
		case w.h == anyHash:
			until = max(until, w.until)
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

// restoreLocked makes the fresh bucket e of p no fuller than a bucket that
// was evicted live and would have become idle at until. token_bucket and
// leaky_bucket keep their whole state in that time, so they come back as
// they left. The others come back spent: fixed_window with its window
// full, sliding_window_counter with both counts at the limit, so that its
// budget grows back no sooner than the evicted one's could, and
// sliding_window_log admitting nothing before until (an empty log that
// settled at until).
func (e *entry) restoreLocked(p *Policy, until int64) {
	switch p.Algorithm {
	case TokenBucket, LeakyBucket:
		e.s[0] = until
	case FixedWindow:
		e.s[0], e.s[1] = until-p.window, p.Limit
	case SlidingWindowCounter:
		e.s[0], e.s[1], e.s[2] = until-2*p.window, p.Limit, p.Limit
	case SlidingWindowLog:
		e.logLocked().settled = until
	}
}
