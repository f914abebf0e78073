package ratelimit

import "time"

// HoldDepartures makes the leaky_bucket bucket of r schedule no departure
// before next. A store that takes over from another (the local fallback of
// a Redis store whose Redis failed) is told this way of the requests the
// other had scheduled and that are still leaving: without it the new
// schedule would start at once, beside the old one, and the outflow would
// double until the old queue drained. It does nothing for other algorithms
// or when the bucket already schedules later.
func (m *MemoryStore) HoldDepartures(r Request, next time.Time) {
	if r.Policy.Algorithm != LeakyBucket {
		return
	}
	m.update(r, func(e *entry) { e.s[0] = max(e.s[0], next.UnixNano()) })
}

// BlockUntil blocks the bucket of r until until, as a rejection by its
// policy would have, when the policy blocks and the bucket's block ends
// sooner. A store that takes over from another (the local fallback of a
// Redis store) is told this way of the blocks the other kept: without it a
// key blocked there would find a fresh bucket here.
func (m *MemoryStore) BlockUntil(r Request, until time.Time) {
	if r.Policy.Block <= 0 {
		return
	}
	m.update(r, func(e *entry) {
		if e.ext == nil {
			e.ext = new(entryExt)
		}
		e.ext.block = max(e.ext.block, until.UnixNano())
	})
}

// update runs f on the bucket of r, made if need be, under its lock. The
// store's clock stands for now: only an eviction (and a record of evicted
// buckets) reads it here.
func (m *MemoryStore) update(r Request, f func(e *entry)) {
	pt := m.table(r.Policy)
	h := m.hash(r.Policy, r.Key)
	s := pt.shardOf(h)
	s.mu.Lock()
	e := s.getLocked(r, h, m.clock().UnixNano(), m.perShard(pt, r.Policy), nil)
	f(e)
	e.unlock(true)
	s.mu.Unlock()
}
