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
	pt := m.table(r.Policy)
	r.Policy = pt.current(r.Policy)
	h := m.hash(r.Policy, r.Key)
	s := pt.shardOf(h)
	s.mu.Lock()
	// The store's clock stands for now: only an eviction (and a record of
	// evicted buckets) reads it here.
	e := s.getLocked(r, h, m.clock().UnixNano(), m.perShard(pt, r.Policy), nil)
	e.s[0] = max(e.s[0], next.UnixNano())
	e.unlock(true)
	s.mu.Unlock()
}
