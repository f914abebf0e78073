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
	h := m.hash(r.Policy, r.Key)
	s := m.shardOf(h)
	s.mu.Lock()
	e := s.getLocked(r, h, m.perShard, nil)
	e.s[0] = max(e.s[0], next.UnixNano())
	e.unlock(true)
	s.mu.Unlock()
}
