package ratelimit

import (
	"context"
	"hash/maphash"
	"slices"
	"sync"
	"time"
)

// MemoryOptions configure a MemoryStore. The zero value gives the defaults.
type MemoryOptions struct {
	// MaxKeys bounds the tracked buckets; beyond it the least recently used
	// bucket of the shard is evicted. Default 1,000,000.
	MaxKeys int
	// SweepInterval is how often idle buckets are removed. Default 10s;
	// negative turns the sweeper off (expiry on access still applies).
	SweepInterval time.Duration
}

// MemoryStore keeps limiter state in process memory, in shards each guarded
// by its own mutex, so decisions for different keys rarely contend. Idle
// buckets expire on access and in a background sweep; the number of buckets
// is bounded by MaxKeys with least-recently-used eviction. It is safe for
// concurrent use. Create it with NewMemoryStore and stop it with Close.
type MemoryStore struct {
	shards   []memShard
	mask     uint64
	seed     maphash.Seed
	perShard int

	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

var _ Store = (*MemoryStore)(nil)

type bucketKey struct {
	policy, key string
}

// entry is one bucket. It sits in its shard's map and LRU list.
type entry struct {
	prev, next *entry
	k          bucketKey
	pol        *Policy
	idleAt     int64    // Unix ns from which the state equals a fresh one
	s          [3]int64 // scalar state of every algorithm but the log
	log        *SlidingLogState
}

type memShard struct {
	mu     sync.Mutex
	m      map[bucketKey]*entry
	lru    entry            // sentinel: lru.next is the most recently used
	counts map[string]int64 // buckets per policy name
	_      [64]byte         // keeps neighbouring shards' locks off one cache line
}

// NewMemoryStore returns a MemoryStore and starts its sweeper.
func NewMemoryStore(o MemoryOptions) *MemoryStore {
	if o.MaxKeys <= 0 {
		o.MaxKeys = 1_000_000
	}
	if o.SweepInterval == 0 {
		o.SweepInterval = 10 * time.Second
	}
	n := 1
	for n < 64 && o.MaxKeys/(2*n) >= 64 {
		n *= 2
	}
	m := &MemoryStore{
		shards:   make([]memShard, n),
		mask:     uint64(n - 1),
		seed:     maphash.MakeSeed(),
		perShard: max((o.MaxKeys+n-1)/n, 8),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	for i := range m.shards {
		s := &m.shards[i]
		s.m = make(map[bucketKey]*entry)
		s.counts = make(map[string]int64)
		s.lru.next, s.lru.prev = &s.lru, &s.lru
	}
	if o.SweepInterval > 0 {
		go m.sweepLoop(o.SweepInterval)
	} else {
		close(m.done)
	}
	return m
}

func (m *MemoryStore) shardOf(r Request) int {
	h := maphash.String(m.seed, r.Key) ^ maphash.String(m.seed, r.Policy.Name)*0x9e3779b97f4a7c15
	return int(h & m.mask)
}

// Decide implements Store.
func (m *MemoryStore) Decide(_ context.Context, now time.Time, reqs []Request, out []Decision) error {
	t := now.UnixNano()
	if len(reqs) == 1 {
		s := &m.shards[m.shardOf(reqs[0])]
		s.mu.Lock()
		e := s.getLocked(reqs[0], t, m.perShard)
		out[0] = e.decideLocked(reqs[0].Policy, t)
		s.mu.Unlock()
		setDeparture(out[:1], now)
		return nil
	}
	var shardBuf [8]int
	var entryBuf [8]*entry
	shards, entries := shardBuf[:0], entryBuf[:0]
	for _, r := range reqs {
		shards = append(shards, m.shardOf(r))
	}
	var orderBuf [8]int
	order := append(orderBuf[:0], shards...)
	slices.Sort(order)
	order = slices.Compact(order)
	for _, i := range order {
		m.shards[i].mu.Lock()
	}
	admitted := true
	for i, r := range reqs {
		e := m.shards[shards[i]].getLocked(r, t, m.perShard)
		entries = append(entries, e)
		out[i] = e.decideLocked(r.Policy, t)
		if !out[i].Allowed && !r.Policy.Shadow {
			admitted = false
		}
	}
	if !admitted {
		// Nothing is consumed: undo what the admitting limits took.
		for i, r := range reqs {
			if out[i].Allowed {
				out[i] = entries[i].undoLocked(r.Policy, t, out[i])
			}
		}
	}
	for _, i := range slices.Backward(order) {
		m.shards[i].mu.Unlock()
	}
	setDeparture(out, now)
	return nil
}

// Peek implements Store.
func (m *MemoryStore) Peek(_ context.Context, now time.Time, r Request) (Decision, error) {
	t := now.UnixNano()
	s := &m.shards[m.shardOf(r)]
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[bucketKey{r.Policy.Name, r.Key}]
	if !ok {
		var fresh entry
		return fresh.peekLocked(r.Policy, t), nil
	}
	e.refreshLocked(r.Policy, t)
	return e.peekLocked(r.Policy, t), nil
}

// Keys returns the number of tracked buckets per policy name.
func (m *MemoryStore) Keys() map[string]int64 {
	out := make(map[string]int64)
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		for name, n := range s.counts {
			out[name] += n
		}
		s.mu.Unlock()
	}
	return out
}

// Len returns the number of tracked buckets.
func (m *MemoryStore) Len() int {
	n := 0
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}

// Close stops the sweeper. The store still answers afterwards.
func (m *MemoryStore) Close() error {
	m.stopOnce.Do(func() { close(m.stop) })
	<-m.done
	return nil
}

func (m *MemoryStore) sweepLoop(every time.Duration) {
	defer close(m.done)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-m.stop:
			return
		case now := <-tick.C:
			m.Sweep(now)
		}
	}
}

// Sweep removes the buckets that are idle at now, oldest used first, and
// returns how many it removed. Each shard is locked in turn, never all.
func (m *MemoryStore) Sweep(now time.Time) int {
	t := now.UnixNano()
	removed := 0
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		// Walk from the least recently used end; stop at the first busy
		// bucket so a sweep never scans a shard that is mostly in use.
		for e := s.lru.prev; e != &s.lru && e.idleAt <= t; {
			prev := e.prev
			s.removeLocked(e)
			removed++
			e = prev
		}
		s.mu.Unlock()
	}
	return removed
}

// getLocked returns the bucket of r, creating it (and evicting the least
// recently used one when the shard is full), marked as just used.
func (s *memShard) getLocked(r Request, now int64, limit int) *entry {
	k := bucketKey{r.Policy.Name, r.Key}
	e, ok := s.m[k]
	if ok {
		e.refreshLocked(r.Policy, now)
		if s.lru.next != e {
			e.prev.next, e.next.prev = e.next, e.prev
			s.pushFrontLocked(e)
		}
		return e
	}
	if len(s.m) >= limit {
		s.removeLocked(s.lru.prev)
	}
	e = &entry{k: k, pol: r.Policy}
	if r.Policy.Algorithm == SlidingWindowLog {
		e.log = new(SlidingLogState)
	}
	s.m[k] = e
	s.counts[k.policy]++
	s.pushFrontLocked(e)
	return e
}

func (s *memShard) pushFrontLocked(e *entry) {
	e.prev, e.next = &s.lru, s.lru.next
	s.lru.next.prev = e
	s.lru.next = e
}

func (s *memShard) removeLocked(e *entry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
	delete(s.m, e.k)
	if s.counts[e.k.policy]--; s.counts[e.k.policy] <= 0 {
		delete(s.counts, e.k.policy)
	}
}

// refreshLocked resets the state when it has gone idle or when the policy
// behind the bucket changed its settings (a reload).
func (e *entry) refreshLocked(p *Policy, now int64) {
	if e.pol != p {
		if e.pol.Settings() != p.Settings() {
			e.resetLocked(p)
		}
		e.pol = p
	}
	if now >= e.idleAt && e.idleAt != 0 {
		e.resetLocked(p)
	}
}

func (e *entry) resetLocked(p *Policy) {
	e.s = [3]int64{}
	e.idleAt = 0
	if p.Algorithm == SlidingWindowLog {
		if e.log == nil {
			e.log = new(SlidingLogState)
		} else {
			e.log.reset()
		}
	} else {
		e.log = nil
	}
}

// decideLocked takes one request from the bucket when p admits it.
func (e *entry) decideLocked(p *Policy, now int64) Decision {
	var d Decision
	switch p.Algorithm {
	case TokenBucket:
		var s TokenBucketState
		s, d = StepTokenBucket(p, TokenBucketState{e.s[0]}, now, 1)
		e.s[0] = s.TAT
		e.idleAt = max(e.idleAt, s.TAT)
	case LeakyBucket:
		var s LeakyBucketState
		s, d = StepLeakyBucket(p, LeakyBucketState{e.s[0]}, now, 1)
		e.s[0] = s.Next
		e.idleAt = max(e.idleAt, s.Next)
	case FixedWindow:
		var s FixedWindowState
		s, d = StepFixedWindow(p, FixedWindowState{e.s[0], e.s[1]}, now, 1)
		e.s[0], e.s[1] = s.Start, s.Count
		e.idleAt = max(e.idleAt, s.Start+p.window)
	case SlidingWindowCounter:
		var s SlidingWindowCounterState
		s, d = StepSlidingWindowCounter(p, SlidingWindowCounterState{e.s[0], e.s[1], e.s[2]}, now, 1)
		e.s[0], e.s[1], e.s[2] = s.Start, s.Cur, s.Prev
		e.idleAt = max(e.idleAt, s.Start+2*p.window)
	case SlidingWindowLog:
		d = StepSlidingWindowLog(p, e.log, now, 1)
		if e.log.n > 0 {
			e.idleAt = max(e.idleAt, e.log.newest()+p.window)
		}
	}
	return d
}

// undoLocked gives back the request that decideLocked admitted, for a
// request another limit rejected, and returns the decision as it stands
// without that request.
func (e *entry) undoLocked(p *Policy, now int64, d Decision) Decision {
	switch p.Algorithm {
	case TokenBucket, LeakyBucket:
		e.s[0] -= p.interval
	case FixedWindow:
		e.s[1]--
	case SlidingWindowCounter:
		e.s[1]--
	case SlidingWindowLog:
		e.log.pop()
	}
	return e.peekLocked(p, now)
}

// peekLocked reports the budget without taking any.
func (e *entry) peekLocked(p *Policy, now int64) Decision {
	var d Decision
	switch p.Algorithm {
	case TokenBucket:
		_, d = StepTokenBucket(p, TokenBucketState{e.s[0]}, now, 0)
	case LeakyBucket:
		_, d = StepLeakyBucket(p, LeakyBucketState{e.s[0]}, now, 0)
	case FixedWindow:
		_, d = StepFixedWindow(p, FixedWindowState{e.s[0], e.s[1]}, now, 0)
	case SlidingWindowCounter:
		_, d = StepSlidingWindowCounter(p, SlidingWindowCounterState{e.s[0], e.s[1], e.s[2]}, now, 0)
	case SlidingWindowLog:
		if e.log == nil {
			e.log = new(SlidingLogState)
		}
		d = StepSlidingWindowLog(p, e.log, now, 0)
	}
	return d
}

func setDeparture(ds []Decision, now time.Time) {
	for i := range ds {
		if ds[i].Delay > 0 {
			ds[i].Departure = now.Add(ds[i].Delay)
		}
	}
}
