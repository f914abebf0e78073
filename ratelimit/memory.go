package ratelimit

import (
	"context"
	"hash/maphash"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// MemoryOptions configure a MemoryStore. The zero value gives the defaults.
type MemoryOptions struct {
	// MaxKeys bounds the tracked buckets of each policy that sets no
	// Policy.MaxKeys of its own. Default 1,000,000.
	MaxKeys int
	// SweepInterval is how often idle buckets are removed. Default 10s;
	// negative turns the sweeper off (Sweep can still be called).
	SweepInterval time.Duration
	// Clock is the real time the store arms its timers and sweeps with:
	// Wait's departures and the sweeper's idea of now. Decisions never
	// read it; they take their time as an argument, which should come from
	// the same clock (a Clock's Now). Default: a SystemClock's Now.
	Clock func() time.Time
	// Observe, if set, is called once per Decide with the time it took
	// (read from Clock) and its error, from the calling goroutine, as
	// the Redis store's Observe is once per round trip. It must be safe
	// for concurrent use.
	Observe func(d time.Duration, err error)
}

// MemoryStore keeps limiter state in process memory. Each policy (by name)
// has a table of its own, in shards, bounded by the policy's MaxKeys apart
// from every other: a flood of new keys on one policy evicts none of
// another's buckets. A decision on a bucket that exists locks only that
// bucket, inside the cache line that holds its state, so decisions for
// different keys on different cores share no memory they write; making
// and removing buckets takes the shard's mutex, and so do the decisions
// of a shard where goroutines fought over a bucket since the last sweep.
// Idle buckets are removed by a background sweep.
//
// A shard at its bound evicts first the buckets whose state equals a fresh
// one's, then by CLOCK, an approximation of least recently used: a
// decision only marks its bucket used, and a hand walking the shard's
// buckets clears marks until it finds an unmarked one, which goes. Unlike
// a least-recently-used list this touches no other bucket on the hot
// path. Buckets with requests in Wait, or with held tokens, are never
// evicted. A live bucket that goes is noted in the shard's record of
// evicted buckets, and comes back no fuller than it left.
//
// It is safe for concurrent use. Create it with NewMemoryStore and stop it
// with Close.
type MemoryStore struct {
	// tables maps policy names to their tables; replaced whole, under
	// tablesMu, when a policy is first seen.
	tables   atomic.Pointer[map[string]*policyTable]
	tablesMu sync.Mutex
	seed     maphash.Seed
	maxKeys  int
	clock    func() time.Time
	observe  func(time.Duration, error)
	// resets counts Resets: a Ticket's Gen is its value when the unit
	// was taken, and each shard notes the value a Reset of a key set.
	resets atomic.Int64

	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once

	// nextID is the id of the next table made; guarded by tablesMu.
	nextID int
	// live holds the policy names the serving configuration has, nil
	// until Retain is first called (see Retain).
	live atomic.Pointer[map[string]bool]
}

var _ Store = (*MemoryStore)(nil)

// policyTable holds one policy's buckets in shards, each holding its share
// of the policy's bound. Its shards are fixed when the policy is first
// seen; a reload that changes max_keys changes each shard's share.
type policyTable struct {
	id     int // orders the shard locks of a route's limits
	shards []memShard
	mask   uint64
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
		o.Clock = SystemClock().Now
	}
	m := &MemoryStore{
		seed:    maphash.MakeSeed(),
		maxKeys: o.MaxKeys,
		clock:   o.Clock,
		observe: o.Observe,
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	m.tables.Store(&map[string]*policyTable{})
	if o.SweepInterval > 0 {
		go m.sweepLoop(o.SweepInterval)
	} else {
		close(m.done)
	}
	return m
}

// maxKeysOf is p's bound on buckets.
func (m *MemoryStore) maxKeysOf(p *Policy) int {
	if p.MaxKeys > 0 {
		return p.MaxKeys
	}
	return m.maxKeys
}

// table returns the table of p's name, making it the first time.
func (m *MemoryStore) table(p *Policy) *policyTable {
	if pt := (*m.tables.Load())[p.Name]; pt != nil {
		return pt
	}
	m.tablesMu.Lock()
	defer m.tablesMu.Unlock()
	old := *m.tables.Load()
	if pt := old[p.Name]; pt != nil {
		return pt
	}
	// Up to 64 shards, each with room for at least 64 buckets (when
	// max_keys allows as many).
	maxKeys := m.maxKeysOf(p)
	n := 1
	for n < 64 && maxKeys/(2*n) >= 64 {
		n *= 2
	}
	// Ids are never reused: a dropped table's (see Retain) may still be
	// locked by a request that found it before the drop.
	pt := &policyTable{id: m.nextID, shards: make([]memShard, n), mask: uint64(n - 1)}
	m.nextID++
	for i := range pt.shards {
		pt.shards[i].tab.Store(noBuckets)
	}
	tables := make(map[string]*policyTable, len(old)+1)
	for name, t := range old {
		tables[name] = t
	}
	tables[p.Name] = pt
	m.tables.Store(&tables)
	return pt
}

// perShard is each shard's bound for p: never more than p's bound in all,
// but for a bound below the number of shards, which holds one a shard.
func (m *MemoryStore) perShard(pt *policyTable, p *Policy) int {
	return max(m.maxKeysOf(p)/len(pt.shards), 1)
}

// hash is the bucket's identity as 64 bits: the key hashed with the
// store's seed, mixed with the policy name's hash, which NewPolicy made.
func (m *MemoryStore) hash(p *Policy, key string) uint64 {
	h := maphash.String(m.seed, key)
	h = (h ^ p.nameHash*0x9e3779b97f4a7c15) * 0xbf58476d1ce4e5b9
	return h&hashMask | hashSet
}

// shardIndex picks the shard from high bits of h; the tables use low ones.
func (pt *policyTable) shardIndex(h uint64) int { return int((h >> 40) & pt.mask) }

func (pt *policyTable) shardOf(h uint64) *memShard { return &pt.shards[pt.shardIndex(h)] }

// shardOf is the shard of the bucket of p whose hash is h.
func (m *MemoryStore) shardOf(p *Policy, h uint64) *memShard { return m.table(p).shardOf(h) }

// Decide implements Store.
func (m *MemoryStore) Decide(_ context.Context, now time.Time, reqs []Request, out []Decision) error {
	if m.observe == nil {
		return m.decide(now, reqs, out)
	}
	start := m.clock()
	err := m.decide(now, reqs, out)
	m.observe(m.clock().Sub(start), err)
	return err
}

func (m *MemoryStore) decide(now time.Time, reqs []Request, out []Decision) error {
	t := now.UnixNano()
	if len(reqs) == 1 {
		r := reqs[0]
		pt := m.table(r.Policy)
		h := m.hash(r.Policy, r.Key)
		s := pt.shardOf(h)
		// Without the shard's lock but for a busy shard: one where a
		// goroutine found a bucket held by another since the last sweep.
		// Goroutines that fight over one bucket (a hot key on every
		// core) then queue on the shard's mutex, which parks them,
		// instead of spinning on the bucket's cache line together and
		// moving it between cores at every decision.
		var e *entry
		if !s.busy.Load() {
			e = s.tryFind(h, r.Policy, r.Key)
		}
		if e != nil {
			e.refreshLocked(r.Policy)
			e.decideInto(r.Policy, t, &out[0])
			m.stamp(&out[0])
			e.unlock(true)
		} else {
			s.mu.Lock()
			e = s.getLocked(r, h, t, m.perShard(pt, r.Policy), nil)
			e.decideInto(r.Policy, t, &out[0])
			m.stamp(&out[0])
			e.unlock(true)
			s.mu.Unlock()
		}
		setDeparture(out[:1], now)
		return nil
	}
	var hashBuf [8]uint64
	var entryBuf [8]*entry
	var shardBuf [8]*memShard
	var orderBuf [8]lockOrder
	hashes, entries, shards, order := hashBuf[:0], entryBuf[:0], shardBuf[:0], orderBuf[:0]
	for _, r := range reqs {
		pt := m.table(r.Policy)
		h := m.hash(r.Policy, r.Key)
		i := pt.shardIndex(h)
		hashes = append(hashes, h)
		shards = append(shards, &pt.shards[i])
		order = append(order, lockOrder{pt.id<<8 | i, &pt.shards[i]})
	}
	// Locks are taken in (table, shard) order, each once, so two routes
	// that share shards never deadlock.
	slices.SortFunc(order, func(a, b lockOrder) int { return a.rank - b.rank })
	order = slices.CompactFunc(order, func(a, b lockOrder) bool { return a.rank == b.rank })
	for _, o := range order {
		o.s.mu.Lock()
	}
	// Every bucket is found or made first, none evicting one found before
	// it; creating one may move the others, so they are looked up again,
	// and locked, once the tables no longer change. A bucket two limits
	// name is locked once.
	for i, r := range reqs {
		pt := m.table(r.Policy)
		shards[i].getLocked(r, hashes[i], t, m.perShard(pt, r.Policy), hashes[:i]).unlock(true)
	}
	admitted := true
	for i, r := range reqs {
		e := sameBucket(reqs[:i], hashes[:i], entries, r, hashes[i])
		if e == nil {
			e = shards[i].find(hashes[i], r.Policy, r.Key)
		}
		entries = append(entries, e)
		e.decideInto(r.Policy, t, &out[i])
		m.stamp(&out[i])
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
	for i, r := range reqs {
		if sameBucket(reqs[:i], hashes[:i], entries, r, hashes[i]) == nil {
			entries[i].unlock(false)
		}
	}
	for _, o := range slices.Backward(order) {
		o.s.mu.Unlock()
	}
	setDeparture(out, now)
	return nil
}

// stamp gives d's ticket, when it has one, the store's count of resets;
// the caller holds the bucket's lock, under which Reset counts too.
func (m *MemoryStore) stamp(d *Decision) {
	if d.Ticket.Store != 0 {
		d.Ticket.Gen = m.resets.Load()
	}
}

// lockOrder is a shard in the order a multi-limit decision locks it.
type lockOrder struct {
	rank int // the table's id, then the shard's index
	s    *memShard
}

// sameBucket returns the entry of the first of reqs that names the bucket
// of r, whose hash is h, or nil when none does.
func sameBucket(reqs []Request, hashes []uint64, entries []*entry, r Request, h uint64) *entry {
	for j, o := range reqs {
		if hashes[j] == h && o.Key == r.Key && o.Policy.Name == r.Policy.Name {
			return entries[j]
		}
	}
	return nil
}

// Peek implements Store.
func (m *MemoryStore) Peek(_ context.Context, now time.Time, r Request) (Decision, error) {
	t := now.UnixNano()
	h := m.hash(r.Policy, r.Key)
	s := m.shardOf(r.Policy, h)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.find(h, r.Policy, r.Key)
	if e == nil {
		// The bucket it would be made as: fresh, or as the record of
		// evicted buckets has it, or, at a time before an idle bucket's
		// removal, as goneTimes has it.
		fresh := entry{pol: r.Policy}
		if r.Policy.Algorithm == SlidingWindowLog {
			fresh.ext = new(entryExt)
		}
		fresh.restoreLocked(r.Policy, s.madeFromLocked(r.Policy, r.Key, h, t, false), t)
		return fresh.peekLocked(r.Policy, t), nil
	}
	defer e.unlock(false)
	e.refreshLocked(r.Policy)
	return e.peekLocked(r.Policy, t), nil
}

// Refund implements Store.
func (m *MemoryStore) Refund(_ context.Context, now time.Time, reqs []Request, ds []Decision) error {
	m.settle(now, reqs, ds, true)
	return nil
}

// Keep implements Store.
func (m *MemoryStore) Keep(_ context.Context, now time.Time, reqs []Request, ds []Decision) error {
	m.settle(now, reqs, ds, false)
	return nil
}

// settle refunds, or keeps, the units of the admitted decisions ds. Only
// held units are kept; a unit not held is spent already.
func (m *MemoryStore) settle(now time.Time, reqs []Request, ds []Decision, refund bool) {
	t := now.UnixNano()
	for i, r := range reqs {
		if !ds[i].Allowed || ds[i].Ticket.Store != memoryTicket || !refund && ds[i].Ticket.Hold == 0 {
			continue
		}
		h := m.hash(r.Policy, r.Key)
		s := m.shardOf(r.Policy, h)
		s.mu.Lock()
		// A bucket that is gone, was started afresh for new settings, or
		// was reset since, holds nothing of this unit.
		if s.resetSince(r.Key, ds[i].Ticket.Gen) {
			s.mu.Unlock()
			continue
		}
		if e := s.find(h, r.Policy, r.Key); e != nil {
			if e.pol.serial == ds[i].Ticket.Life && e.pol.Settings() == r.Policy.Settings() {
				e.settleLocked(r.Policy, t, ds[i].Ticket, refund)
			}
			e.unlock(false)
		}
		s.mu.Unlock()
	}
}

// Reset implements Store. Requests already waiting in a leaky_bucket's
// queue keep their departures, and the next leaves one interval after
// the last of them (see resetLocked).
//
// The record of evicted buckets would otherwise bring the bucket back
// spent once it is gone (evicted, or removed by the sweeper as fresh): its
// own entry there is dropped, and the folded entries that stand for it
// stop counting for it (see recordLocked). A bucket that is gone stays
// gone, so a reset evicts no other bucket to make room for a fresh one.
func (m *MemoryStore) Reset(_ context.Context, r Request) error {
	h := m.hash(r.Policy, r.Key)
	s := m.shardOf(r.Policy, h)
	s.mu.Lock()
	defer s.mu.Unlock()
	now := m.clock().UnixNano()
	own, folded := s.evicted.lookup(r.Policy, h, now, true)
	e := s.find(h, r.Policy, r.Key)
	if e == nil {
		if own.end() > now || folded.end() > now {
			s.noteReset(r.Key, m.resets.Add(1), now, folded.end())
		}
		return nil
	}
	e.pol = r.Policy
	e.resetLocked(r.Policy)
	s.noteReset(r.Key, m.resets.Add(1), now, folded.end())
	e.unlock(true)
	return nil
}

// Keys returns the number of tracked buckets per policy name; a policy
// with none is left out.
func (m *MemoryStore) Keys() map[string]int64 {
	out := make(map[string]int64)
	for name, pt := range *m.tables.Load() {
		if n := pt.len(); n > 0 {
			out[name] = int64(n)
		}
	}
	return out
}

// Len returns the number of tracked buckets.
func (m *MemoryStore) Len() int {
	n := 0
	for _, pt := range *m.tables.Load() {
		n += pt.len()
	}
	return n
}

func (pt *policyTable) len() int {
	n := 0
	for i := range pt.shards {
		s := &pt.shards[i]
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
// table it leaves mostly empty. A shard it passes is no longer busy, so a
// key that stopped being hot on several cores at once goes back to
// decisions without the shard's lock.
func (m *MemoryStore) Sweep(now time.Time) int {
	const stretch = 1024
	t := now.UnixNano()
	removed := 0
	for name, pt := range *m.tables.Load() {
		for i := range pt.shards {
			s := &pt.shards[i]
			for at, done := 0, false; !done; {
				s.mu.Lock()
				var n int
				at, n = s.removeIdleLocked(at, stretch, t, nil)
				removed += n
				done = at >= len(s.tab.Load().slots)
				if done {
					s.shrinkLocked()
					if s.busy.Load() {
						s.busy.Store(false)
					}
				}
				s.mu.Unlock()
			}
		}
		m.dropRetired(name, pt, t)
	}
	return removed
}

// refreshLocked starts the state afresh when the policy behind the bucket
// changed its settings (a reload); a policy with equal settings keeps it.
// Idle state needs no reset: every step treats old state as spent.
//
// e.pol stays the policy that started the state, or one with its
// settings that replaced it afresh (Reset), so that its number tells each
// start of the state from the others: a ticket carries it (Ticket.Life),
// and a unit of a state that a reload to other settings and one back
// replaced is settled against neither. Only settings are read of e.pol.
func (e *entry) refreshLocked(p *Policy) {
	if e.pol != p && e.pol.Settings() != p.Settings() {
		e.resetLocked(p)
		e.pol = p
	}
}

// resetLocked makes the state fresh for p. Requests waiting in the
// bucket's queue keep their departures, of a schedule that ends here; a
// leaky_bucket's new schedule starts one interval of p after the last of
// them, as HoldDepartures starts one after another store's, so that
// requests still leave one per interval in arrival order instead of
// the new schedule's beside the old one's until it drains.
func (e *entry) resetLocked(p *Policy) {
	e.s = [3]int64{}
	if e.waitedLocked() {
		for w := e.ext.wq.head; w != nil; w = w.next {
			w.old = true
		}
		if p.Algorithm == LeakyBucket {
			// The queue is in departure order.
			e.s[0] = e.ext.wq.tail.dep + p.interval
		}
	}
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
	if e.ext != nil {
		e.ext.block, e.ext.spent = 0, 0
	}
}

// idleAt is the Unix ns from which the bucket's state equals a fresh one:
// a blocked bucket is not fresh before its block ends.
func (e *entry) idleAt() int64 {
	t := e.budgetIdleAt()
	if e.ext != nil {
		t = max(t, e.ext.block)
	}
	return t
}

// budgetIdleAt is idleAt without the block.
func (e *entry) budgetIdleAt() int64 {
	switch e.pol.Algorithm {
	case TokenBucket:
		if e.s[1] > 0 {
			return math.MaxInt64 // held tokens refill only once settled
		}
		return e.s[0]
	case LeakyBucket:
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
			return max(l.settled, e.ext.spent)
		}
		return max(l.newest()+e.pol.window, e.ext.spent)
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
// hot path copies of it. A blocked bucket rejects without a step; a
// rejection by a policy that blocks starts its block; a policy that no
// longer blocks (a reload took block: away) ignores one it started, as
// decide.lua does. A block that ended
// stays noted, as decide.lua's key does until it expires: a request
// decided late, at a time within the block, is still refused.
func (e *entry) decideInto(p *Policy, now int64, d *Decision) {
	if p.Block > 0 && e.ext != nil && e.ext.block > now {
		*d = e.blockedLocked(p, now)
		return
	}
	e.stepInto(p, now, d)
	switch {
	case d.Allowed:
		e.ticketLocked(p, d)
	case p.Block > 0:
		var until int64
		if until, *d = StartBlock(p, now, *d); until != 0 {
			if e.ext == nil {
				e.ext = new(entryExt)
			}
			e.ext.block = until
		}
	}
}

// ticketLocked marks d, which e's policy p just admitted, with what its
// unit is, for Refund and Wait: the state right after the step names it.
func (e *entry) ticketLocked(p *Policy, d *Decision) {
	d.Ticket.Store = memoryTicket
	d.Ticket.Life = e.pol.serial
	switch p.Algorithm {
	case TokenBucket:
		d.Ticket.At = e.s[0]
		if p.Hold {
			d.Ticket.Hold = 1
		}
	case SlidingWindowLog:
		if l := e.logLocked(); l.n > 0 {
			d.Ticket.At = l.newest()
		}
	case LeakyBucket:
		d.Ticket.At = e.s[0] - p.interval // the departure
	default:
		d.Ticket.At = e.s[0]
	}
}

// memoryTicket is Ticket.Store of a MemoryStore.
const memoryTicket = 1

// settleLocked refunds, or keeps, the unit of ticket at now (see
// Store.Refund and Store.Keep).
func (e *entry) settleLocked(p *Policy, now int64, ticket Ticket, refund bool) {
	at := ticket.At
	switch {
	case p.Algorithm == TokenBucket && ticket.Hold != 0:
		s := SettleTokenBucket(p, TokenBucketState{e.s[0], e.s[1]}, now, refund)
		e.s[0], e.s[1] = s.TAT, s.Held
	case !refund:
	case p.Algorithm == TokenBucket:
		s := RefundTokenBucket(p, TokenBucketState{e.s[0], e.s[1]}, now)
		e.s[0], e.s[1] = s.TAT, s.Held
	case p.Algorithm == FixedWindow:
		s := RefundFixedWindow(FixedWindowState{e.s[0], e.s[1]}, at)
		e.s[0], e.s[1] = s.Start, s.Count
	case p.Algorithm == SlidingWindowCounter:
		s := RefundSlidingWindowCounter(p, SlidingWindowCounterState{e.s[0], e.s[1], e.s[2]}, at)
		e.s[0], e.s[1], e.s[2] = s.Start, s.Cur, s.Prev
	case p.Algorithm == SlidingWindowLog:
		RefundSlidingWindowLog(e.logLocked(), at)
	}
}

// stepInto applies p's step for one request.
func (e *entry) stepInto(p *Policy, now int64, d *Decision) {
	switch p.Algorithm {
	case TokenBucket:
		var s TokenBucketState
		s, *d = StepTokenBucket(p, TokenBucketState{e.s[0], e.s[1]}, now, 1)
		e.s[0], e.s[1] = s.TAT, s.Held
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
		if e.ext.spent > now {
			wait := time.Duration(e.ext.spent - now)
			*d = Decision{Limit: p.Limit, RetryAfter: wait, Reset: wait}
			return
		}
		*d = StepSlidingWindowLog(p, e.logLocked(), now, 1)
	default:
		*d = Decision{}
	}
}

// undoLocked gives back the request that decideLocked admitted, for a
// request another limit rejected.
func (e *entry) undoLocked(p *Policy) {
	switch p.Algorithm {
	case TokenBucket:
		e.s[0] -= p.interval
		if p.Hold {
			e.s[1]--
		}
	case LeakyBucket:
		e.s[0] -= p.interval
	case FixedWindow, SlidingWindowCounter:
		e.s[1]--
	case SlidingWindowLog:
		e.logLocked().pop()
	}
}

// peekLocked reports the budget without taking any.
func (e *entry) peekLocked(p *Policy, now int64) Decision {
	if p.Block > 0 && e.ext != nil && e.ext.block > now {
		return e.blockedLocked(p, now)
	}
	return e.budgetLocked(p, now)
}

// blockedLocked is the decision on e while its block lasts: a rejection
// that takes nothing, whose RetryAfter points at the block's end and
// whose Reset at when the budget, which the block leaves as it is, is
// whole again, if that is later.
func (e *entry) blockedLocked(p *Policy, now int64) Decision {
	d := BlockedDecision(p, e.ext.block, now)
	d.Reset = max(d.Reset, e.budgetLocked(p, now).Reset)
	return d
}

// budgetLocked is peekLocked without the block.
func (e *entry) budgetLocked(p *Policy, now int64) Decision {
	var d Decision
	switch p.Algorithm {
	case TokenBucket:
		_, d = StepTokenBucket(p, TokenBucketState{e.s[0], e.s[1]}, now, 0)
	case LeakyBucket:
		_, d = StepLeakyBucket(p, LeakyBucketState{e.s[0]}, now, 0)
	case FixedWindow:
		_, d = StepFixedWindow(p, FixedWindowState{e.s[0], e.s[1]}, now, 0)
	case SlidingWindowCounter:
		_, d = StepSlidingWindowCounter(p, SlidingWindowCounterState{e.s[0], e.s[1], e.s[2]}, now, 0)
	case SlidingWindowLog:
		if e.ext.spent > now {
			// Brought back after its eviction: nothing before then.
			wait := time.Duration(e.ext.spent - now)
			return Decision{Allowed: true, Limit: p.Limit, RetryAfter: wait, Reset: wait}
		}
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
