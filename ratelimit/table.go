package ratelimit

import (
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// entry is one bucket, kept inline in its shard's table: the slot is the
// bucket, so a decision on a cold bucket costs one cache miss for its
// state. The policy name half of the bucket's identity is pol.Name: a
// lookup only ever hands the entry a policy of the same name.
//
// It is 64 bytes, one cache line: what only some buckets need lives in ext.
//
// The tag doubles as the bucket's lock (lockBit), so that a decision locks
// nothing but the cache line it works on: two cores deciding for different
// consumers share no line they write. Every field but the tag belongs to
// whoever holds the lock; the tag is only ever read and written with
// atomics. Methods of entry that end in Locked need the entry's lock.
//
// An entry moves when its shard's table grows or shrinks and when a bucket
// next to it is removed; both happen under the shard's lock, with the
// moved entries' locks held. A pointer to an entry is good while its lock
// is held, or while the shard's lock is held.
type entry struct {
	tag uint64 // the bucket's hash with lockBit and usedBit; 0 in an empty slot
	key string
	pol *Policy
	s   [3]int64  // scalar state of every algorithm but the log
	ext *entryExt // the log, or requests in Wait; nil when neither
}

// The bits of a tag besides the hash. usedBit marks a bucket decided since
// the clock hand last passed; lockBit is the bucket's lock. A hash has
// neither, and always has hashSet, so that no tag of a bucket is 0.
const (
	usedBit  = 1 << 63
	hashSet  = 1 << 62
	lockBit  = 1 << 61
	hashMask = ^uint64(usedBit | lockBit)
)

// entryExt is the part of a bucket that only some have: a
// sliding_window_log bucket's log, a leaky_bucket's waiting requests
// while there are any, and a block once one started.
type entryExt struct {
	log   SlidingLogState
	wq    waitQueue
	block int64 // Unix ns the bucket's block ends; 0 when not blocked
	// spent is, for a sliding_window_log bucket brought back after its
	// eviction, the Unix ns before which it admits nothing; 0 otherwise.
	spent int64
}

// lock spins until it holds e's lock and returns e's tag without lockBit.
// The caller holds the shard's lock, so e stays a bucket meanwhile; the
// holders it waits for are decisions, which hold it for a few dozen
// nanoseconds.
func (e *entry) lock() uint64 {
	for n := 1; ; n++ {
		tag := atomic.LoadUint64(&e.tag)
		if tag&lockBit == 0 && atomic.CompareAndSwapUint64(&e.tag, tag, tag|lockBit) {
			return tag
		}
		yieldEvery(n)
	}
}

// tryLock takes e's lock when e is a bucket and nobody holds it.
func (e *entry) tryLock() bool {
	tag := atomic.LoadUint64(&e.tag)
	return tag != 0 && tag&lockBit == 0 && atomic.CompareAndSwapUint64(&e.tag, tag, tag|lockBit)
}

// unlock releases e's lock, marking the bucket used when used is set.
func (e *entry) unlock(used bool) {
	tag := atomic.LoadUint64(&e.tag) &^ lockBit
	if used {
		tag |= usedBit
	}
	atomic.StoreUint64(&e.tag, tag)
}

// yieldEvery lets other goroutines run every so many turns of a spin, so a
// lock holder that lost its processor gets it back.
func yieldEvery(n int) {
	if n%32 == 0 {
		runtime.Gosched()
	}
}

// logLocked is a sliding_window_log bucket's log.
func (e *entry) logLocked() *SlidingLogState { return &e.ext.log }

// waitedLocked reports whether requests wait in Wait on the bucket.
func (e *entry) waitedLocked() bool { return e.ext != nil && e.ext.wq.head != nil }

// pinnedLocked reports whether the bucket must stay: requests wait on it,
// or hold tokens of it (Policy.Hold) that are not settled yet.
func (e *entry) pinnedLocked() bool {
	return e.waitedLocked() || e.pol.Algorithm == TokenBucket && e.s[1] > 0
}

// table is a shard's open-addressing table with linear probing, at most
// seven eighths full. A probe reads marks, a compact array of the buckets'
// hashes' high halves, and touches a bucket only when its mark matches: a
// decision then writes its own bucket's cache line and reads no other
// bucket's, which another core may be writing. The marks change only when
// buckets are made, moved or removed, so every core keeps them cached.
//
// A removal shifts the buckets after it back into the hole, so the table
// has no tombstones and a probe ends at the first empty mark. Growing or
// shrinking makes a new table.
type table struct {
	marks []uint32 // mark(hash) of the bucket in each slot; 0 when empty
	slots []entry  // see grownSize for the lengths
}

func newTable(size int) *table {
	return &table{marks: make([]uint32, size), slots: make([]entry, size)}
}

// mark is a bucket's mark in the table's marks: high bits of its hash,
// never 0 since every hash has hashSet.
func mark(h uint64) uint32 { return uint32(h & hashMask >> 32) }

// setLocked makes slot i, whose lock the caller holds or which is empty,
// the bucket of src and publishes it under tag: the fields are written
// before the tag, and the tag before the mark, which a lookup reads in the
// other order.
func (t *table) setLocked(i int, src *entry, tag uint64) {
	e := &t.slots[i]
	e.key, e.pol, e.s, e.ext = src.key, src.pol, src.s, src.ext
	atomic.StoreUint64(&e.tag, tag)
	atomic.StoreUint32(&t.marks[i], mark(tag))
}

// minSlots is the smallest table a shard has.
const minSlots = 8

// noBuckets is the table of every shard that never held a bucket, shared
// and never written, so that a policy's shards cost no table until used:
// a lookup finds nothing in it, and the first bucket made replaces it.
var noBuckets = newTable(minSlots)

// home is the slot where a probe for hash h starts: the low 32 bits of h
// scaled to the table's length, which need not be a power of two.
func (t *table) home(h uint64) int { return int(h & 0xffffffff * uint64(len(t.slots)) >> 32) }

// next is the slot a probe visits after i.
func (t *table) next(i int) int {
	if i++; i == len(t.slots) {
		return 0
	}
	return i
}

// dist is how many steps a probe takes from slot a to slot b.
func (t *table) dist(a, b int) int {
	if b < a {
		return b + len(t.slots) - a
	}
	return b - a
}

// insertLocked puts src's bucket into the first empty slot of its probe
// under tag and returns the slot; the caller holds the shard's lock, and
// the table has room and does not hold the bucket.
func (t *table) insertLocked(src *entry, tag uint64) *entry {
	i := t.home(tag)
	for atomic.LoadUint32(&t.marks[i]) != 0 {
		i = t.next(i)
	}
	t.setLocked(i, src, tag)
	return &t.slots[i]
}

// memShard holds a share of one policy's buckets in a table. Decisions on
// buckets that exist take no shard lock: they find the bucket and lock
// just it. The shard's lock serializes what changes the table (making,
// moving and removing buckets) and the bookkeeping below.
type memShard struct {
	mu      sync.Mutex
	tab     atomic.Pointer[table] // replaced, never resized in place
	busy    atomic.Bool           // decisions take mu: see MemoryStore.Decide
	n       int                   // buckets in the table
	hand    int                   // the clock hand's slot
	idle    idleQueue             // buckets that become idle soonest; empty until the first eviction
	evicted evictedRecord         // live buckets evicted; empty until the first
	gone    goneTimes             // idle buckets removed, for late requests
	resets  map[string]resetNote  // keys reset lately; nil until the first
	_       [64]byte              // keeps neighbouring shards' locks off one cache line
}

// resetNote is a Reset of a bucket: the store's count of resets it made,
// and when, in Unix ns. unfold is the latest end of the folded entries of
// the record of evicted buckets that stood for the bucket when it was
// reset (0 when none did): until then they no longer count for it, unless
// it is evicted live again (see recordLocked).
type resetNote struct{ gen, at, unfold int64 }

// resetMemory is how long a shard notes a Reset: longer than any request
// takes to be settled (a hold that is never settled runs out within 10
// minutes with Redis), so no unit of before it is given to the fresh
// bucket.
const resetMemory = int64(time.Hour)

// noteReset notes that key was reset at now, the store's count of resets
// being gen, while folded record entries that end at unfold stood for it.
// Notes older than resetMemory, and past their unfold, go whenever the
// notes reach a multiple of 64, so that many resets cost a pass over the
// notes each 64. The caller holds s.mu.
func (s *memShard) noteReset(key string, gen, now, unfold int64) {
	if s.resets == nil {
		s.resets = make(map[string]resetNote)
	}
	if len(s.resets)%64 == 63 {
		for k, n := range s.resets {
			if now-n.at > resetMemory && n.unfold <= now {
				delete(s.resets, k)
			}
		}
	}
	s.resets[key] = resetNote{gen, now, unfold}
}

// recordLocked is what the shard's record of evicted buckets holds for the
// bucket of key, whose hash is h, of p at now: the times a bucket made
// then starts from (see restoreLocked). Folded entries that stood for the
// bucket when it was last reset do not count: a reset makes the bucket
// fresh, and a folded entry, which stands for other evicted buckets too,
// cannot forget it alone. Once the bucket is evicted live again they
// count, as they may hold its new eviction too. forget is take's. The
// caller holds s.mu.
func (s *memShard) recordLocked(p *Policy, key string, h uint64, now int64, forget bool) evictedTimes {
	own, folded := s.evicted.lookup(p, h, now, forget)
	if folded.end() > now && s.resets != nil {
		if n, ok := s.resets[key]; ok && n.unfold > now {
			return own
		}
	}
	return own.fold(folded)
}

// madeFromLocked is what a bucket of key, whose hash is h, of p, made at
// now starts from: the record of evicted buckets' times (recordLocked;
// forget is take's), and those of an idle bucket removed after now
// (goneTimes). The caller holds s.mu.
func (s *memShard) madeFromLocked(p *Policy, key string, h uint64, now int64, forget bool) evictedTimes {
	return s.recordLocked(p, key, h, now, forget).fold(s.gone.at(p, h))
}

// evictedLiveLocked notes that key's bucket was evicted live: folded
// entries count for it again (see recordLocked). The caller holds s.mu.
func (s *memShard) evictedLiveLocked(key string) {
	if n, ok := s.resets[key]; ok && n.unfold != 0 {
		n.unfold = 0
		s.resets[key] = n
	}
}

// resetSince reports whether key was reset after a unit taken when the
// store's count of resets was gen. The caller holds s.mu.
func (s *memShard) resetSince(key string, gen int64) bool {
	n, ok := s.resets[key]
	return ok && n.gen > gen
}

// find returns the bucket of (p.Name, key), whose hash is h, holding its
// lock, or nil when there is none. The caller holds the shard's lock.
func (s *memShard) find(h uint64, p *Policy, key string) *entry { return s.lookup(h, p, key, true) }

// tryFind is find for a caller without the shard's lock. It returns nil
// when it cannot have the bucket at once: there is none, it moved while
// tryFind looked (its table grew or a removal shifted it), or another
// goroutine holds it. The caller then asks again with the shard's lock.
func (s *memShard) tryFind(h uint64, p *Policy, key string) *entry {
	return s.lookup(h, p, key, false)
}

func (s *memShard) lookup(h uint64, p *Policy, key string, wait bool) *entry {
	t := s.tab.Load()
	want := mark(h)
	for i, n := t.home(h), 0; ; {
		switch m := atomic.LoadUint32(&t.marks[i]); {
		case m == 0:
			return nil
		case m != want:
			i = t.next(i)
			continue
		}
		e := &t.slots[i]
		tag := atomic.LoadUint64(&e.tag)
		switch {
		case tag&hashMask != h:
			// Another hash with the same mark, or a slot being
			// emptied or refilled by a removal.
			i = t.next(i)
		case tag&lockBit != 0 && !wait:
			return nil
		case tag&lockBit != 0:
			if n++; n == 1 && !s.busy.Load() {
				s.busy.Store(true)
			}
			yieldEvery(n)
		case atomic.CompareAndSwapUint64(&e.tag, tag, tag|lockBit):
			if e.key == key && (e.pol == p || e.pol.Name == p.Name) {
				return e
			}
			atomic.StoreUint64(&e.tag, tag) // another key of the same hash
			i = t.next(i)
		}
	}
}

// getLocked returns the bucket of r, whose hash is h, holding its lock,
// and creates it when there is none: when the shard holds limit buckets it
// first evicts one (see evictLocked), but none whose hash is in keep. A
// bucket the record says was evicted live comes back no fuller than it
// left, and so does one removed as idle for a request decided before its
// removal (see goneTimes). now is the decision time in Unix ns. The caller holds the shard's
// lock and unlocks the bucket as used.
func (s *memShard) getLocked(r Request, h uint64, now int64, limit int, keep []uint64) *entry {
	if e := s.find(h, r.Policy, r.Key); e != nil {
		e.refreshLocked(r.Policy)
		return e
	}
	// The record is read before an eviction notes another bucket in it:
	// that note may fold entries, and one folded with this bucket's own
	// would bring it back emptier than it left, and than Peek showed it.
	// Taking the entry first also frees its way for the note.
	left := s.madeFromLocked(r.Policy, r.Key, h, now, true)
	if s.n >= limit {
		s.evictLocked(r.Policy, now, limit, keep)
	}
	t := s.tab.Load()
	switch {
	case t == noBuckets:
		t = newTable(minSlots)
		s.tab.Store(t)
	case 8*(s.n+1) > 7*len(t.slots):
		t = s.resizeLocked(grownSize(len(t.slots)))
	}
	// A new bucket starts marked, so it outlives at least one turn of the
	// hand, as it would outlive a shard's worth of newer buckets in a
	// least-recently-used list; starting unmarked would let a flood of
	// new keys evict each newcomer before its second request.
	fresh := entry{key: r.Key, pol: r.Policy}
	if r.Policy.Algorithm == SlidingWindowLog {
		fresh.ext = new(entryExt)
	}
	fresh.restoreLocked(r.Policy, left, now)
	e := t.insertLocked(&fresh, h|usedBit|lockBit)
	s.n++
	if s.idle.due != nil {
		s.idle.push(idleDue{h, now}) // idle no sooner than now; looked at once decided
	}
	return e
}

// resizeLocked moves the buckets into a new table of size slots and
// returns it. It holds every bucket's lock while it copies them, then
// empties the old table, so that a lookup still reading it goes to the
// shard's lock and finds the new one.
func (s *memShard) resizeLocked(size int) *table {
	old := s.tab.Load()
	t := newTable(size)
	for i := range old.slots {
		if atomic.LoadUint32(&old.marks[i]) != 0 {
			t.insertLocked(&old.slots[i], old.slots[i].lock())
		}
	}
	s.tab.Store(t)
	// Marks first: a lookup spinning on a bucket of the old table then
	// meets an empty mark once the bucket's tag is gone.
	for i := range old.marks {
		atomic.StoreUint32(&old.marks[i], 0)
	}
	for i := range old.slots {
		atomic.StoreUint64(&old.slots[i].tag, 0)
	}
	s.hand = 0
	return t
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
// once. An empty shard goes back to noBuckets: a policy no longer used
// keeps no table.
func (s *memShard) shrinkLocked() {
	if s.n == 0 {
		s.tab.Store(noBuckets)
		s.hand = 0
		return
	}
	size := len(s.tab.Load().slots)
	for size/2 >= minSlots && 8*s.n <= 3*(size/2) {
		size /= 2
	}
	if size < len(s.tab.Load().slots) {
		s.resizeLocked(size)
	}
}

// evictLocked makes room for one bucket of p at now, never taking one
// that requests wait on or whose hash is in keep. An idle bucket (whose
// state equals a fresh one's) goes whenever the shard holds one: the
// shard's queue of the buckets that become idle soonest (see idleQueue)
// names it, or, once the queue no longer knows every bucket that may be
// idle, a pass over the table removes every idle bucket and refills the
// queue. When none is idle, the clock hand walks: it takes the first
// bucket that was not used since the hand last passed (or is idle after
// all), clearing the marks of the used ones. Two turns of the hand clear
// every mark, so it finds one unless every bucket has waiters, is kept or
// is being decided on. A live bucket taken is noted in the shard's record
// with the times its budget and its block would have ended.
//
// Its cost: an entry of the queue that comes due costs a lookup and a
// heap step, and comes due once per bucket made and once per time its
// bucket was used after its entry was made; a pass, up to twice the
// table's length in slot visits, comes once the queue has run out, at
// most once per limit/16 entries come due or buckets made. The worst
// single eviction does a pass and looks at every due entry; spread over
// the buckets made, a flood of live keys costs a lookup and a few slot
// visits a bucket, as before.
func (s *memShard) evictLocked(p *Policy, now int64, limit int, keep []uint64) {
	s.idle.makeLocked(limit)
	if s.takeIdleLocked(now, keep) || now >= s.idle.horizon && s.passLocked(now, keep) > 0 {
		return
	}
	t := s.tab.Load()
	for range 2 * len(t.slots) {
		if s.hand >= len(t.slots) {
			s.hand = 0
		}
		e := &t.slots[s.hand]
		// A bucket locked right now keeps its mark: it is in use, and
		// only its holder writes its tag.
		if tag := atomic.LoadUint64(&e.tag); atomic.LoadUint32(&t.marks[s.hand]) != 0 &&
			tag&lockBit == 0 && !slices.Contains(keep, tag&hashMask) &&
			atomic.CompareAndSwapUint64(&e.tag, tag, tag|lockBit) {
			idle := e.idleAt()
			switch {
			case e.pinnedLocked():
				e.unlock(false)
			case idle <= now:
				s.dropIdleLocked(s.hand)
				s.hand++
				return
			case tag&usedBit != 0:
				atomic.StoreUint64(&e.tag, tag&^usedBit)
			default:
				if s.evicted.sets == nil {
					s.evicted = newEvictedRecord(limit)
				}
				passed := s.evicted.note(p, tag&hashMask, e.evictedTimesLocked(now), now)
				s.gone.keep(p, passed, len(t.slots))
				if s.resets != nil {
					s.evictedLiveLocked(e.key)
				}
				s.removeLocked(s.hand)
				s.hand++
				return
			}
		}
		s.hand++
	}
}

// removeIdleLocked looks at up to n slots from slot at and removes the
// idle buckets among them that no request waits on and whose hash is not
// in keep. It returns the slot to look at next and how many it removed. A
// removal shifts a later bucket into at, so at is looked at again; one
// shifted from the table's start is merely looked at twice. A bucket
// locked by a decision is in use, so not idle.
func (s *memShard) removeIdleLocked(at, n int, now int64, keep []uint64) (next, removed int) {
	slots := s.tab.Load().slots
	for ; n > 0 && at < len(slots); n-- {
		e := &slots[at]
		switch {
		case !e.tryLock():
			at++
		case !e.pinnedLocked() && e.idleAt() <= now &&
			!slices.Contains(keep, atomic.LoadUint64(&e.tag)&hashMask):
			s.dropIdleLocked(at)
			removed++
		default:
			e.unlock(false)
			at++
		}
	}
	return at, removed
}

// removeLocked drops the bucket in slot i, whose lock the caller holds, and
// shifts back into the hole every later bucket of the run that may sit
// there, so that no probe meets an empty slot before its bucket. A bucket
// is published in its new slot before its old one is reused, so a lookup
// without the shard's lock sees it in one or the other, or misses it and
// asks again with the lock.
func (s *memShard) removeLocked(i int) {
	t := s.tab.Load()
	s.n--
	for j := t.next(i); atomic.LoadUint32(&t.marks[j]) != 0; j = t.next(j) {
		e := &t.slots[j]
		// The bucket at j may fill the hole when the hole lies on its
		// probe, from its home up to j. Its hash, which says so, does
		// not change while the shard's lock is held, so only a bucket
		// that moves needs its own lock.
		if t.dist(t.home(atomic.LoadUint64(&e.tag)), j) >= t.dist(i, j) {
			t.setLocked(i, e, e.lock())
			i = j // still locked: the new hole
		}
	}
	t.setLocked(i, &entry{}, 0)
}
