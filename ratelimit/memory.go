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
	// MaxKeys bounds the tracked buckets; beyond it a bucket of the shard
	// not used lately is evicted (CLOCK, an approximation of least
	// recently used). Default 1,000,000.
	MaxKeys int
	// SweepInterval is how often idle buckets are removed. Default 10s;
	// negative turns the sweeper off (Sweep can still be called).
	SweepInterval time.Duration
	// Clock is the real time the store arms its timers and sweeps with:
	// Wait's departures and the sweeper's idea of now. Decisions never
	// read it; they take their time as an argument. Default time.Now.
	Clock func() time.Time
}

// MemoryStore keeps limiter state in process memory, in shards each guarded
// by its own mutex, so decisions for different keys rarely contend. Idle
// buckets are removed by a background sweep; the number of buckets is
// bounded by MaxKeys, each shard holding its share.
//
// Eviction is CLOCK: a decision only marks its bucket used, and a hand
// walking the shard's buckets clears marks until it finds an unmarked one,
// which goes: a bucket used since the hand last passed survives. Unlike a
// least-recently-used list this touches no other bucket on the hot path.
// Buckets with requests in Wait are never evicted.
//
// It is safe for concurrent use. Create it with NewMemoryStore and stop it
// with Close.
type MemoryStore struct {
	shards   []memShard
	mask     uint64
	seed     maphash.Seed
	perShard int
	clock    func() time.Time

	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

var _ Store = (*MemoryStore)(nil)

// entry is one bucket, kept inline in its shard's table: the slot is the
// bucket, so a decision on a cold bucket costs one cache miss for its
// state. The policy name half of the bucket's identity is pol.Name: a
// lookup only ever hands the entry a policy of the same name.
//
// It is 64 bytes, one cache line: what only some buckets need lives in ext.
// An entry moves when its shard's table grows or shrinks and when a bucket
// next to it is removed, so a pointer to one is good only until the table
// next changes; Wait finds its bucket again by hash after each unlock.
type entry struct {
	tag uint64 // the bucket's hash, with usedBit when decided since the clock hand last passed; 0 in an empty slot
	key string
	pol *Policy
	s   [3]int64  // scalar state of every algorithm but the log
	ext *entryExt // the log, or requests in Wait; nil when neither
}

// usedBit in an entry's tag marks it decided since the clock hand last
// passed. A hash never has it, and always has hashSet, so that no hash is
// 0, the tag of an empty slot.
const (
	usedBit = 1 << 63
	hashSet = 1 << 62
)

// entryExt is the part of a bucket that only some have: a
// sliding_window_log bucket's log, and a leaky_bucket's waiting requests
// while there are any.
type entryExt struct {
	log SlidingLogState
	wq  waitQueue
}

// logLocked is a sliding_window_log bucket's log.
func (e *entry) logLocked() *SlidingLogState { return &e.ext.log }

// waitedLocked reports whether requests wait in Wait on the bucket.
func (e *entry) waitedLocked() bool { return e.ext != nil && e.ext.wq.head != nil }

// minSlots is the smallest table a shard has.
const minSlots = 8

// memShard holds a share of the buckets in an open-addressing table with
// linear probing, at most seven eighths full: a bucket is one cache miss,
// and the probe past it reads the next lines, which the processor fetches
// ahead. A fuller table is smaller, which spares misses of the address
// translation cache. A removal shifts the buckets after it back into the
// hole, so the table has no tombstones and a probe ends at the first empty
// slot.
type memShard struct {
	mu     sync.Mutex
	slots  []entry // see grownSize for the lengths; the clock hand walks it
	n      int     // buckets in slots
	hand   int
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
	if o.Clock == nil {
		o.Clock = time.Now
	}
	n := 1
	for n < 64 && o.MaxKeys/(2*n) >= 64 {
		n *= 2
	}
	m := &MemoryStore{
		shards:   make([]memShard, n),
		mask:     uint64(n - 1),
		seed:     maphash.MakeSeed(),
		perShard: max(o.MaxKeys/n, 1), // never more than MaxKeys in all
		clock:    o.Clock,
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	for i := range m.shards {
		s := &m.shards[i]
		s.slots = make([]entry, minSlots)
		s.counts = make(map[string]int64)
	}
	if o.SweepInterval > 0 {
		go m.sweepLoop(o.SweepInterval)
	} else {
		close(m.done)
	}
	return m
}

// hash is the bucket's identity as 64 bits: the key hashed with the
// store's seed, mixed with the policy name's hash.
func (m *MemoryStore) hash(policy, key string) uint64 { return bucketHash(m.seed, policy, key) }

func bucketHash(seed maphash.Seed, policy, key string) uint64 {
	h := maphash.String(seed, key)
	h = (h ^ maphash.String(seed, policy)*0x9e3779b97f4a7c15) * 0xbf58476d1ce4e5b9
	return h&^usedBit | hashSet
}

// shardIndex picks the shard from high bits of h; the tables use low ones.
func (m *MemoryStore) shardIndex(h uint64) int { return int((h >> 40) & m.mask) }

func (m *MemoryStore) shardOf(h uint64) *memShard { return &m.shards[m.shardIndex(h)] }

// Decide implements Store.
func (m *MemoryStore) Decide(_ context.Context, now time.Time, reqs []Request, out []Decision) error {
	t := now.UnixNano()
	if len(reqs) == 1 {
		r := reqs[0]
		h := m.hash(r.Policy.Name, r.Key)
		s := m.shardOf(h)
		s.mu.Lock()
		s.getLocked(r, h, m.perShard, nil).decideInto(r.Policy, t, &out[0])
		s.mu.Unlock()
		setDeparture(out[:1], now)
		return nil
	}
	var hashBuf [8]uint64
	var entryBuf [8]*entry
	var orderBuf [8]int
	hashes, entries, order := hashBuf[:0], entryBuf[:0], orderBuf[:0]
	for _, r := range reqs {
		h := m.hash(r.Policy.Name, r.Key)
		hashes = append(hashes, h)
		order = append(order, m.shardIndex(h))
	}
	// Locks are taken in shard order, each once, so two routes that share
	// shards never deadlock.
	slices.Sort(order)
	order = slices.Compact(order)
	for _, i := range order {
		m.shards[i].mu.Lock()
	}
	// Every bucket is found or made first, none evicting one found before
	// it; creating one may move the others, so they are looked up again
	// once the tables no longer change.
	for i, r := range reqs {
		m.shardOf(hashes[i]).getLocked(r, hashes[i], m.perShard, hashes[:i])
	}
	admitted := true
	for i, r := range reqs {
		e := m.shardOf(hashes[i]).lookupLocked(hashes[i], r.Policy.Name, r.Key)
		entries = append(entries, e)
		e.decideInto(r.Policy, t, &out[i])
		if !out[i].Allowed && !r.Policy.Shadow {
			admitted = false
		}
	}
	if !admitted {
		// Nothing is consumed: undo what the admitting limits took, the
		// last taken first, so two limits on one bucket unwind in order.
		for i := len(reqs) - 1; i >= 0; i-- {
			if out[i].Allowed {
				entries[i].undoLocked(reqs[i].Policy)
			}
		}
		for i, r := range reqs {
			if out[i].Allowed {
				out[i] = entries[i].peekLocked(r.Policy, t)
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
	h := m.hash(r.Policy.Name, r.Key)
	s := m.shardOf(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.lookupLocked(h, r.Policy.Name, r.Key)
	if e == nil {
		fresh := entry{pol: r.Policy}
		if r.Policy.Algorithm == SlidingWindowLog {
			fresh.ext = new(entryExt)
		}
		return fresh.peekLocked(r.Policy, t), nil
	}
	e.refreshLocked(r.Policy)
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
		n += s.n
		s.mu.Unlock()
	}
	return n
}

// Close stops the sweeper and waits for it to return. The store still
// answers afterwards; requests in Wait keep waiting.
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
		case <-tick.C:
			m.Sweep(m.clock())
		}
	}
}

// Sweep removes the buckets that are idle at now and returns how many it
// removed. A bucket is idle when its state equals a fresh one. It locks one
// shard at a time, for a bounded stretch of slots each time, and shrinks a
// table it leaves mostly empty.
func (m *MemoryStore) Sweep(now time.Time) int {
	const stretch = 1024
	t := now.UnixNano()
	removed := 0
	for i := range m.shards {
		s := &m.shards[i]
		for at, done := 0, false; !done; {
			s.mu.Lock()
			for n := 0; n < stretch && at < len(s.slots); n++ {
				// A removal shifts a later bucket into at, so at is
				// looked at again; one shifted from the table's start
				// is merely looked at twice.
				if e := &s.slots[at]; e.tag != 0 && !e.waitedLocked() && e.idleAt() <= t {
					s.removeLocked(at)
					removed++
				} else {
					at++
				}
			}
			done = at >= len(s.slots)
			if done {
				s.shrinkLocked()
			}
			s.mu.Unlock()
		}
	}
	return removed
}

// home is the slot where a probe for hash h starts: the low 32 bits of h
// scaled to the table's length, which need not be a power of two.
func (s *memShard) home(h uint64) int { return int(h & 0xffffffff * uint64(len(s.slots)) >> 32) }

// next is the slot a probe visits after i.
func (s *memShard) next(i int) int {
	if i++; i == len(s.slots) {
		return 0
	}
	return i
}

// lookupLocked returns the bucket of (policy, key), whose hash is h, or
// nil. The pointer is good until the shard's table next changes.
func (s *memShard) lookupLocked(h uint64, policy, key string) *entry {
	for i := s.home(h); ; i = s.next(i) {
		e := &s.slots[i]
		if e.tag == 0 {
			return nil
		}
		if e.tag&^usedBit == h && e.key == key && e.pol.Name == policy {
			return e
		}
	}
}

// getLocked returns the bucket of r, whose hash is h, creating it (and
// evicting the least recently used one when the shard is full, but none
// whose hash is in keep), marked as just used. The pointer is good until
// the shard's table next changes.
func (s *memShard) getLocked(r Request, h uint64, limit int, keep []uint64) *entry {
	if e := s.lookupLocked(h, r.Policy.Name, r.Key); e != nil {
		e.refreshLocked(r.Policy)
		e.tag |= usedBit
		return e
	}
	if s.n >= limit {
		s.evictLocked(keep)
	}
	if 8*(s.n+1) > 7*len(s.slots) {
		s.resizeLocked(grownSize(len(s.slots)))
	}
	// A new bucket starts marked, so it outlives at least one turn of the
	// hand, as it would outlive a shard's worth of newer buckets in a
	// least-recently-used list; starting unmarked would let a flood of
	// new keys evict each newcomer before its second request.
	e := s.insertLocked(entry{tag: h | usedBit, key: r.Key, pol: r.Policy})
	if r.Policy.Algorithm == SlidingWindowLog {
		e.ext = new(entryExt)
	}
	s.n++
	s.counts[r.Policy.Name]++
	return e
}

// insertLocked puts e into the first empty slot of its probe; the table
// has room and does not hold e's bucket.
func (s *memShard) insertLocked(e entry) *entry {
	i := s.home(e.tag)
	for s.slots[i].tag != 0 {
		i = s.next(i)
	}
	s.slots[i] = e
	return &s.slots[i]
}

// resizeLocked moves the buckets into a table of size slots.
func (s *memShard) resizeLocked(size int) {
	old := s.slots
	s.slots = make([]entry, size)
	for i := range old {
		if old[i].tag != 0 {
			s.insertLocked(old[i])
		}
	}
	s.hand = 0
}

// grownSize is the table length after size: tables are 2^k or 3*2^(k-1)
// long (8, 12, 16, 24, ...), so a full shard's table is at least about
// 58% full, and its memory at most about 1.7 times the buckets'.
func grownSize(size int) int {
	if size&(size-1) == 0 {
		return size + size/2
	}
	return size + size/3
}

// shrinkLocked halves the table while it would stay at most three eighths
// full, so that memory follows a sweep and a refill does not resize at
// once.
func (s *memShard) shrinkLocked() {
	size := len(s.slots)
	for size/2 >= minSlots && 8*s.n <= 3*(size/2) {
		size /= 2
	}
	if size < len(s.slots) {
		s.resizeLocked(size)
	}
}

// evictLocked removes a bucket not used since the clock hand last passed,
// that no request is waiting on and whose hash is not in keep. Two turns
// of the hand clear every mark, so it finds one unless every bucket has
// waiters or is kept.
func (s *memShard) evictLocked(keep []uint64) {
	for range 2 * len(s.slots) {
		if s.hand >= len(s.slots) {
			s.hand = 0
		}
		e := &s.slots[s.hand]
		if e.tag != 0 {
			if e.tag&usedBit == 0 && !e.waitedLocked() && !slices.Contains(keep, e.tag) {
				s.removeLocked(s.hand)
				return
			}
			e.tag &^= usedBit
		}
		s.hand++
	}
}

// removeLocked drops the bucket in slot i and shifts back into the hole
// every later bucket of the run that may sit there, so that no probe
// meets an empty slot before its bucket.
func (s *memShard) removeLocked(i int) {
	s.decCountLocked(s.slots[i].pol.Name)
	s.n--
	for j := s.next(i); s.slots[j].tag != 0; j = s.next(j) {
		// The bucket at j may fill the hole when the hole lies on its
		// probe, from its home up to j.
		if s.dist(s.home(s.slots[j].tag), j) >= s.dist(i, j) {
			s.slots[i] = s.slots[j]
			i = j
		}
	}
	s.slots[i] = entry{}
}

// dist is how many steps a probe takes from slot a to slot b.
func (s *memShard) dist(a, b int) int {
	if b < a {
		return b + len(s.slots) - a
	}
	return b - a
}

func (s *memShard) decCountLocked(name string) {
	if s.counts[name]--; s.counts[name] <= 0 {
		delete(s.counts, name)
	}
}

// refreshLocked starts the state afresh when the policy behind the bucket
// changed its settings (a reload); a policy with equal settings keeps it.
// Idle state needs no reset: every step treats old state as spent.
func (e *entry) refreshLocked(p *Policy) {
	if e.pol != p {
		if e.pol.Settings() != p.Settings() {
			e.resetLocked(p)
		}
		e.pol = p
	}
}

func (e *entry) resetLocked(p *Policy) {
	e.s = [3]int64{}
	switch {
	case p.Algorithm == SlidingWindowLog && e.ext == nil:
		e.ext = new(entryExt)
	case p.Algorithm == SlidingWindowLog:
		e.ext.log.reset()
	case e.waitedLocked():
		e.ext.log = SlidingLogState{}
	default:
		e.ext = nil
	}
}

// idleAt is the Unix ns from which the bucket's state equals a fresh one.
func (e *entry) idleAt() int64 {
	switch e.pol.Algorithm {
	case TokenBucket, LeakyBucket:
		return e.s[0]
	case FixedWindow:
		if e.s[1] == 0 {
			return 0
		}
		return e.s[0] + e.pol.window
	case SlidingWindowCounter:
		if e.s[1] == 0 && e.s[2] == 0 {
			return 0
		}
		return e.s[0] + 2*e.pol.window
	case SlidingWindowLog:
		l := e.logLocked()
		if l.n == 0 {
			return l.settled
		}
		return l.newest() + e.pol.window
	}
	return 0
}

// decideLocked takes one request from the bucket when p admits it.
func (e *entry) decideLocked(p *Policy, now int64) Decision {
	var d Decision
	e.decideInto(p, now, &d)
	return d
}

// decideInto is decideLocked writing the Decision to d, which spares the
// hot path copies of it.
func (e *entry) decideInto(p *Policy, now int64, d *Decision) {
	switch p.Algorithm {
	case TokenBucket:
		var s TokenBucketState
		s, *d = StepTokenBucket(p, TokenBucketState{e.s[0]}, now, 1)
		e.s[0] = s.TAT
	case LeakyBucket:
		var s LeakyBucketState
		s, *d = StepLeakyBucket(p, LeakyBucketState{e.s[0]}, now, 1)
		e.s[0] = s.Next
	case FixedWindow:
		var s FixedWindowState
		s, *d = StepFixedWindow(p, FixedWindowState{e.s[0], e.s[1]}, now, 1)
		e.s[0], e.s[1] = s.Start, s.Count
	case SlidingWindowCounter:
		var s SlidingWindowCounterState
		s, *d = StepSlidingWindowCounter(p, SlidingWindowCounterState{e.s[0], e.s[1], e.s[2]}, now, 1)
		e.s[0], e.s[1], e.s[2] = s.Start, s.Cur, s.Prev
	case SlidingWindowLog:
		*d = StepSlidingWindowLog(p, e.logLocked(), now, 1)
	default:
		*d = Decision{}
	}
}

// undoLocked gives back the request that decideLocked admitted, for a
// request another limit rejected.
func (e *entry) undoLocked(p *Policy) {
	switch p.Algorithm {
	case TokenBucket, LeakyBucket:
		e.s[0] -= p.interval
	case FixedWindow, SlidingWindowCounter:
		e.s[1]--
	case SlidingWindowLog:
		e.logLocked().pop()
	}
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
		d = StepSlidingWindowLog(p, e.logLocked(), now, 0)
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
