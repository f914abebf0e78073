package redisstore

import (
	"context"
	_ "embed"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/ratelimit"
)

//go:embed hold.lua
var holdSource string

var holdScript = rueidis.NewLuaScript(holdSource)

// departureHolder is a Fallback that can be told the departures Redis
// scheduled (ratelimit.MemoryStore is one).
type departureHolder interface {
	HoldDepartures(r ratelimit.Request, next time.Time)
}

// blockHolder is a Fallback that can be told the blocks Redis kept
// (ratelimit.MemoryStore is one).
type blockHolder interface {
	BlockUntil(r ratelimit.Request, until time.Time)
}

// handover keeps a leaky_bucket's outflow single when decisions move
// between Redis and the local fallback. While Redis decides, it remembers
// per bucket the next departure Redis had free after this store's latest
// request; when Redis fails, the fallback starts the bucket's schedule
// there, instead of from an empty one while the requests Redis scheduled
// still leave. While the fallback decides, it remembers the fallback's
// next free departure; on the first decision back on Redis, Redis's
// schedule of the bucket is held until then (Store.handBack). The zero
// value is ready; it is safe for concurrent use.
type handover struct {
	redis schedules // on Redis, for the fallback
	local schedules // on the fallback, for Redis
	// blocks are the ends of the blocks Redis answered for this store's
	// requests, for the fallback: a key blocked in Redis stays blocked
	// when the fallback decides it. A key Redis answers without a block
	// is forgotten (a reset lifted it). Blocks other instances saw, and
	// resets made through them, are not known here until Redis answers
	// this store for the key.
	blocks schedules
	// carried are the buckets whose blocks were handed to the fallback:
	// Redis decides again once it answers, and the fallback's copies are
	// dropped then, so that a reset made meanwhile leaves no stale copy
	// to refuse the key at the next outage.
	carried carriedBlocks
}

// carriedBlocks maps bucket keys to the request whose block was handed to
// the fallback. The zero value is ready; it is safe for concurrent use.
type carriedBlocks struct {
	mu      sync.Mutex
	reqs    map[string]ratelimit.Request
	pending atomic.Bool // the map is not empty
}

// add notes that the block of r's bucket key was handed to the fallback;
// it reports false when the map is full and the block must not be.
func (c *carriedBlocks) add(key string, r ratelimit.Request) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reqs == nil {
		c.reqs = make(map[string]ratelimit.Request)
	}
	if _, ok := c.reqs[key]; !ok && len(c.reqs) >= maxSchedules {
		return false
	}
	c.reqs[key] = r
	c.pending.Store(true)
	return true
}

// drain returns and forgets every request noted.
func (c *carriedBlocks) drain() map[string]ratelimit.Request {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.reqs
	c.reqs = nil
	c.pending.Store(false)
	return m
}

// maxSchedules bounds the buckets a schedules remembers.
const maxSchedules = 1 << 16

// schedules maps bucket keys to a next free departure (Unix ns on the
// caller's clock). An entry is of use only until its time, and goes at the
// latest when a full map is swept. The zero value is ready.
type schedules struct {
	mu      sync.Mutex
	next    map[string]int64
	swept   time.Time   // when the map was last swept
	pending atomic.Bool // the map is not empty
	// lifts counts lift's calls; it changes under mu.
	lifts atomic.Int64
}

// record notes that the bucket key's schedule is busy until next.
func (m *schedules) record(key string, next, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recordLocked(key, next, now)
}

// recordSince is record unless lift was called since m.lifts was lifts.
func (m *schedules) recordSince(key string, next, now time.Time, lifts int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lifts.Load() == lifts {
		m.recordLocked(key, next, now)
	}
}

func (m *schedules) recordLocked(key string, next, now time.Time) {
	if m.next == nil {
		m.next = make(map[string]int64)
	}
	if _, ok := m.next[key]; !ok && len(m.next) >= maxSchedules {
		// Full: a bucket that finds no room is not handed over.
		if m.sweepLocked(now); len(m.next) >= maxSchedules {
			return
		}
	}
	m.next[key] = max(m.next[key], next.UnixNano())
	m.pending.Store(true)
}

// take returns and forgets the bucket key's busy-until time when it is
// still ahead of now.
func (m *schedules) take(key string, now time.Time) (time.Time, bool) {
	if !m.pending.Load() {
		return time.Time{}, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	n, ok := m.next[key]
	if ok {
		delete(m.next, key)
	}
	// Entries never taken would keep pending set, and every decision
	// coming here, long after they passed.
	m.sweepLocked(now)
	m.pending.Store(len(m.next) > 0)
	return time.Unix(0, n), ok && n > now.UnixNano()
}

// forget drops what m notes of the bucket key.
func (m *schedules) forget(key string) {
	if !m.pending.Load() {
		return
	}
	m.mu.Lock()
	delete(m.next, key)
	m.mu.Unlock()
}

// lift forgets the bucket key for a reset that Redis ran. Replies to
// calls sent before it may still come, naming the state it removed: a
// recordBlocks of such a call notes nothing.
func (m *schedules) lift(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lifts.Add(1)
	delete(m.next, key)
}

// sweepLocked drops the entries that have passed, at most once a second.
func (m *schedules) sweepLocked(now time.Time) {
	if now.Sub(m.swept) < time.Second {
		return
	}
	m.swept = now
	t := now.UnixNano()
	for k, n := range m.next {
		if n <= t {
			delete(m.next, k)
		}
	}
}

// handOver starts the fallback's schedule of each leaky_bucket limit in
// reqs where Redis's stood, and blocks each key of reqs that Redis had
// blocked, before the fallback decides reqs. The fallback's copy goes
// when Redis answers again (dropCarried); the next outage hands over only
// what Redis answered this store since.
func (s *Store) handOver(now time.Time, reqs []ratelimit.Request) {
	if b, ok := s.fallback.(blockHolder); ok && s.handover.blocks.pending.Load() {
		for _, r := range reqs {
			if r.Policy.Block <= 0 {
				continue
			}
			key := Key(s.prefix, r)
			if until, ok := s.handover.blocks.take(key, now); ok && s.handover.carried.add(key, r) {
				b.BlockUntil(r, until)
			}
		}
	}
	h, ok := s.fallback.(departureHolder)
	if !ok || !s.handover.redis.pending.Load() {
		return
	}
	for _, r := range reqs {
		if r.Policy.Algorithm != ratelimit.LeakyBucket {
			continue
		}
		if next, ok := s.handover.redis.take(Key(s.prefix, r), now); ok {
			h.HoldDepartures(r, next)
		}
	}
}

// noteForFallback notes, after Redis decided reqs, what the local
// fallback would need to take over: where leaky_bucket schedules stand and
// when blocks end. Redis answering ends the fallback's copies of blocks.
// lifts is s.handover.blocks.lifts read before the call was sent.
func (s *Store) noteForFallback(now time.Time, trip time.Duration, reqs []ratelimit.Request, out []ratelimit.Decision, lifts int64) {
	if s.o.OnError == OnErrorLocal {
		if s.handover.carried.pending.Load() {
			s.dropCarried()
		}
		s.handover.redis.recordSchedules(s.prefix, now, trip, reqs, out)
		s.handover.blocks.recordBlocks(s.prefix, now, trip, reqs, out, lifts)
	}
}

// dropCarried lifts, in the fallback, the blocks handed to it from Redis:
// Redis answers again, and its word, which a reset may have changed
// since, is the one to hand over at the next outage. The fallback's
// bucket is reset, which also drops what it counted of the key during the
// outage; Redis's state outranks it now.
func (s *Store) dropCarried() {
	for _, r := range s.handover.carried.drain() {
		_ = s.fallback.Reset(context.Background(), r)
	}
}

// recordBlocks notes the end of each block Redis answered for reqs: a
// rejection by a policy that blocks starts or meets one, whose end its
// RetryAfter names, counted like recordSchedules' times. A key Redis
// admitted is no longer blocked there: what was noted of it goes. A reset
// lifted since the call was sent (m.lifts is no longer lifts) may have
// ended the block the reply names: nothing is noted then.
func (m *schedules) recordBlocks(prefix string, now time.Time, trip time.Duration, reqs []ratelimit.Request, out []ratelimit.Decision, lifts int64) {
	for i, r := range reqs {
		switch {
		case r.Policy.Block <= 0 || r.Policy.Shadow:
		case !out[i].Allowed && out[i].RetryAfter > 0:
			m.recordSince(Key(prefix, r), now.Add(trip+out[i].RetryAfter), now, lifts)
		case out[i].Allowed && m.pending.Load():
			// Only when something is noted: the key costs an allocation.
			m.forget(Key(prefix, r))
		}
	}
}

// handBack holds Redis's schedule of every leaky_bucket limit in reqs that
// the fallback decided on while Redis was away, until the fallback's own
// queue for it has left: one small script per such bucket, once, on the
// first decision back on Redis. Without it the shared schedule would start
// beside the requests the fallback still holds. A failure only loses the
// hold.
func (s *Store) handBack(ctx context.Context, c rueidis.Client, now time.Time, reqs []ratelimit.Request) {
	for _, r := range reqs {
		if r.Policy.Algorithm != ratelimit.LeakyBucket {
			continue
		}
		key := Key(s.prefix, r)
		next, ok := s.handover.local.take(key, now)
		if !ok {
			continue
		}
		at := ""
		if s.o.CallerTime {
			at = strconv.FormatInt(now.UnixMicro(), 10)
		}
		start := time.Now()
		hargs := []string{at, strconv.FormatInt(micros(next.Sub(now)), 10), s.slack}
		err := bounded(ctx, func() rueidis.RedisResult { return holdScript.Exec(ctx, c, []string{key}, hargs) }).Error()
		s.observe(start, err)
	}
}

// recordSchedules notes where each leaky_bucket limit's schedule stands
// after a decision: wrote is how long until its next free departure. On
// Redis it counts from the script's time, which lies within the round
// trip, so the time noted is at most a round trip late, never early.
func (m *schedules) recordSchedules(prefix string, now time.Time, trip time.Duration, reqs []ratelimit.Request, out []ratelimit.Decision) {
	for i, r := range reqs {
		if r.Policy.Algorithm == ratelimit.LeakyBucket && out[i].Allowed && out[i].Reset > 0 {
			m.record(Key(prefix, r), now.Add(trip+wrote(r.Policy, out[i])), now)
		}
	}
}
