package ratelimit

import (
	"context"
	"time"
)

// Wait implements Store. The waiting request's own goroutine sleeps on a
// timer; the store keeps no worker. A request that gives up while it is the
// last in the queue returns its departure slot to the bucket.
func (m *MemoryStore) Wait(ctx context.Context, r Request, d Decision) error {
	if d.Delay <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(time.Until(d.Departure))
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
	}
	dep := d.Departure.UnixNano()
	s := &m.shards[m.shardOf(r)]
	s.mu.Lock()
	if e, ok := s.m[bucketKey{r.Policy.Name, r.Key}]; ok && e.pol.Settings() == r.Policy.Settings() && e.s[0] == dep+r.Policy.interval {
		e.s[0] = dep
	}
	s.mu.Unlock()
	return ctx.Err()
}
