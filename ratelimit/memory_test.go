package ratelimit

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
)

// TestDecideAllocs checks the hot path allocates nothing once a bucket
// exists: one limit, and routes of two and three limits.
func TestDecideAllocs(t *testing.T) {
	pols := make([]*Policy, 0, len(Algorithms))
	for _, a := range Algorithms {
		pols = append(pols, benchPolicy(a))
	}
	routes := map[string][]Request{
		"one":   {{Policy: pols[0], Key: "consumer-1"}},
		"two":   {{Policy: pols[2], Key: "consumer-1"}, {Policy: pols[1], Key: "consumer-1"}},
		"three": {{Policy: pols[3], Key: "consumer-1"}, {Policy: pols[4], Key: "10.0.0.1"}, {Policy: pols[0], Key: "consumer-1|10.0.0.1"}},
	}
	for _, a := range Algorithms {
		routes[a.String()] = []Request{{Policy: benchPolicy(a), Key: "consumer-2"}}
	}
	// count_status: a held token_bucket, decided then kept.
	held := *benchPolicy(TokenBucket)
	held.Name, held.Hold = "held", true
	routes["held"] = []Request{{Policy: MustPolicy(held), Key: "consumer-3"}}
	m := NewMemoryStore(MemoryOptions{SweepInterval: -1})
	defer m.Close()
	ctx := context.Background()
	for name, reqs := range routes {
		out := make([]Decision, len(reqs))
		i := 0
		step := 10 * time.Millisecond // each limit's interval, so every request passes
		if err := m.Decide(ctx, t0, reqs, out); err != nil {
			t.Fatal(err)
		}
		m.Keep(ctx, t0, reqs, out)
		allocs := testing.AllocsPerRun(1000, func() {
			i++
			now := t0.Add(time.Duration(i) * step)
			m.Decide(ctx, now, reqs, out)
			m.Keep(ctx, now, reqs, out)
		})
		if allocs != 0 {
			t.Errorf("%s: got %v allocs per Decide and Keep, want 0", name, allocs)
		}
		if !Admitted(reqs, out) {
			t.Errorf("%s: got rejected at the end, want the virtual clock to keep admitting", name)
		}
	}
}

func fill(t *testing.T, m *MemoryStore, p *Policy, now time.Time, keys ...string) {
	t.Helper()
	out := make([]Decision, 1)
	for _, k := range keys {
		if err := m.Decide(context.Background(), now, []Request{{Policy: p, Key: k}}, out); err != nil {
			t.Fatal(err)
		}
	}
}

// used reports whether the bucket holds state: a fresh one has its whole
// budget.
func used(t *testing.T, m *MemoryStore, p *Policy, now time.Time, key string) bool {
	t.Helper()
	d, err := m.Peek(context.Background(), now, Request{Policy: p, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	return d.Remaining < p.Capacity()
}

func TestRecentlyUsedSurvivesFlood(t *testing.T) {
	t.Parallel()
	// 64 keys make one shard, so one clock hand.
	m := NewMemoryStore(MemoryOptions{MaxKeys: 64, SweepInterval: -1})
	defer m.Close()
	p := MustPolicy(Policy{Name: "fw", Algorithm: FixedWindow, Limit: 5, Window: time.Hour})
	if got := len(m.table(p).shards); got != 1 {
		t.Fatalf("got %d shards, want 1", got)
	}
	for i := range 64 {
		fill(t, m, p, t0, "k"+strconv.Itoa(i))
	}
	// A key used between every two newcomers keeps its bucket; so does a
	// newcomer until a shard's worth of others has come after it.
	for i := range 1000 {
		fill(t, m, p, t0, "hot", "new"+strconv.Itoa(i))
		if !tracked(m, p, "hot") {
			t.Fatalf("after %d newcomers: hot key evicted, want kept (used between every two)", i+1)
		}
		if i >= 1 && !tracked(m, p, "new"+strconv.Itoa(i-1)) {
			t.Fatalf("after %d newcomers: the one before got evicted, want kept for a while", i+1)
		}
		if got := m.Len(); got > 64 {
			t.Fatalf("got Len %d, want at most 64", got)
		}
	}
	if tracked(m, p, "k0") {
		t.Errorf("k0: got kept, want evicted by the flood (never used again)")
	}
}

// tracked reports whether the store holds a bucket for key: unlike used,
// it tells an evicted bucket from one that came back spent.
func tracked(m *MemoryStore, p *Policy, key string) bool {
	h := m.hash(p, key)
	s := m.shardOf(p, h)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.find(h, p, key)
	if e != nil {
		e.unlock(false)
	}
	return e != nil
}

func TestMaxKeysBound(t *testing.T) {
	t.Parallel()
	m := NewMemoryStore(MemoryOptions{MaxKeys: 1000, SweepInterval: -1})
	defer m.Close()
	p := MustPolicy(Policy{Name: "tb", Algorithm: TokenBucket, Limit: 5, Window: time.Hour})
	q := MustPolicy(Policy{Name: "log", Algorithm: SlidingWindowLog, Limit: 5, Window: time.Hour})
	own := MustPolicy(Policy{Name: "own", Algorithm: FixedWindow, Limit: 5, Window: time.Hour, MaxKeys: 100})
	for i := range 10_000 {
		for _, pol := range []*Policy{p, q, own} {
			fill(t, m, pol, t0, "k"+strconv.Itoa(i))
		}
	}
	// Each policy holds up to its own bound, whatever the others hold.
	keys := m.Keys()
	for _, c := range []struct {
		name  string
		bound int64
	}{{"tb", 1000}, {"log", 1000}, {"own", 100}} {
		if got := keys[c.name]; got > c.bound || got < c.bound*9/10 {
			t.Errorf("%s: got %d buckets, want at most %d and close to it", c.name, got, c.bound)
		}
	}
	if got, want := keys["tb"]+keys["log"]+keys["own"], int64(m.Len()); got != want {
		t.Errorf("got Keys summing to %d, want Len %d", got, want)
	}
}

func TestEvictionSkipsWaitedBuckets(t *testing.T) {
	t.Parallel()
	m := NewMemoryStore(MemoryOptions{MaxKeys: 8, SweepInterval: -1})
	defer m.Close()
	p := MustPolicy(Policy{Name: "lb", Algorithm: LeakyBucket, Limit: 1, Window: time.Hour, Queue: 3})
	for i := range 8 {
		fill(t, m, p, t0, "k"+strconv.Itoa(i))
	}
	s := &m.table(p).shards[0]
	s.mu.Lock()
	slots := s.tab.Load().slots
	for i := range slots {
		atomic.AndUint64(&slots[i].tag, ^uint64(usedBit))
	}
	tail := s.nextVictimLocked(t) // the hand's next victim, but for its waiters
	tail.lock()
	key := tail.key
	tail.ext = &entryExt{wq: waitQueue{head: &waiter{}}}
	tail.unlock(false)
	s.mu.Unlock()
	fill(t, m, p, t0, "new")
	s.mu.Lock()
	e := s.find(m.hash(p, key), p, key)
	kept := e != nil
	if kept {
		e.ext = nil
		e.unlock(false)
	}
	s.mu.Unlock()
	if !kept {
		t.Errorf("bucket %s with waiters: got evicted, want kept", key)
	}
	if got, want := m.Len(), 8; got != want {
		t.Errorf("got Len %d, want %d", got, want)
	}
}

func TestHashCollisionsProbeOn(t *testing.T) {
	t.Parallel()
	m := NewMemoryStore(MemoryOptions{MaxKeys: 64, SweepInterval: -1})
	defer m.Close()
	p := MustPolicy(Policy{Name: "fw", Algorithm: FixedWindow, Limit: 3, Window: time.Hour})
	s := &m.table(p).shards[0]
	s.mu.Lock()
	defer s.mu.Unlock()
	const h = 42 | hashSet // both keys forced onto one hash
	s.getLocked(Request{Policy: p, Key: "a"}, h, 0, 64, nil).unlock(true)
	s.getLocked(Request{Policy: p, Key: "b"}, h, 0, 64, nil).unlock(true)
	// find returns a bucket locked; look is find and unlock.
	look := func(key string) *entry {
		e := s.find(h, p, key)
		if e != nil {
			e.unlock(false)
		}
		return e
	}
	a, b := look("a"), look("b")
	if a == nil || b == nil || a == b {
		t.Fatalf("colliding keys: got buckets %p and %p, want two", a, b)
	}
	if a.key != "a" || b.key != "b" {
		t.Errorf("got buckets of keys %q and %q, want a and b", a.key, b.key)
	}
	a.decideLocked(p, t0.UnixNano())
	if got := look("a"); got != a {
		t.Errorf("lookup a: got %p, want %p", got, a)
	}
	if got := s.getLocked(Request{Policy: p, Key: "b"}, h, 0, 64, nil); got != b {
		t.Errorf("get b again: got %p, want %p", got, b)
	}
	if got, want := s.n, 2; got != want {
		t.Errorf("got %d buckets, want %d", got, want)
	}
	s.removeLocked(slotOf(s, b)) // b's lock is held since getLocked
	if got := look("b"); got != nil {
		t.Errorf("lookup b after removal: got %p, want nil", got)
	}
	a = look("a")
	if a == nil || a.key != "a" || a.s[1] != 1 {
		t.Errorf("lookup a after b's removal: got %+v, want a's bucket with one request", a)
	}
	// Another policy's bucket for the same key is another bucket; a new
	// *Policy of the same name finds the old one.
	q := MustPolicy(Policy{Name: "fw2", Algorithm: FixedWindow, Limit: 3, Window: time.Hour})
	qa := s.getLocked(Request{Policy: q, Key: "a"}, h, 0, 64, nil)
	qa.unlock(true)
	if qa == a || qa.pol != q {
		t.Errorf("policy fw2, key a: got bucket %p of %q, want a new bucket, not %p", qa, qa.pol.Name, a)
	}
	again := MustPolicy(Policy{Name: "fw", Algorithm: FixedWindow, Limit: 3, Window: time.Hour})
	if got := s.find(h, again, "a"); got != a {
		t.Errorf("new *Policy named fw, key a: got %p, want %p", got, a)
	} else {
		got.unlock(false)
	}
}

// slotOf is the index of e in s's table.
func slotOf(s *memShard, e *entry) int {
	return int((uintptr(unsafe.Pointer(e)) - uintptr(unsafe.Pointer(&s.tab.Load().slots[0]))) / unsafe.Sizeof(entry{}))
}

// nextVictimLocked is the bucket the clock hand reaches first.
func (s *memShard) nextVictimLocked(t *testing.T) *entry {
	t.Helper()
	slots := s.tab.Load().slots
	for k := range len(slots) {
		if e := &slots[(s.hand+k)%len(slots)]; atomic.LoadUint64(&e.tag) != 0 {
			return e
		}
	}
	t.Fatal("got an empty shard, want buckets")
	return nil
}

func TestSweepRemovesIdleBuckets(t *testing.T) {
	t.Parallel()
	m := NewMemoryStore(MemoryOptions{SweepInterval: -1})
	defer m.Close()
	short := MustPolicy(Policy{Name: "short", Algorithm: SlidingWindowCounter, Limit: 5, Window: time.Second})
	long := MustPolicy(Policy{Name: "long", Algorithm: TokenBucket, Limit: 5, Window: time.Hour})
	for _, p := range []*Policy{short, long} {
		for _, a := range Algorithms {
			q := MustPolicy(Policy{Name: p.Name + "-" + a.String(), Algorithm: a, Limit: p.Limit, Window: p.Window})
			fill(t, m, q, t0, "a", "b")
		}
	}
	fill(t, m, long, t0, "x")
	fill(t, m, short, t0, "y") // the most recently used
	if got := m.Sweep(t0); got != 0 {
		t.Errorf("sweep at t0: got %d removed, want 0", got)
	}
	if got := m.Sweep(t0.Add(3 * time.Second)); got != 11 {
		t.Errorf("sweep after the short windows: got %d removed, want 11 (every short bucket)", got)
	}
	keys := m.Keys()
	if got, want := len(keys), 6; got != want || keys["long"] != 1 || keys["short"] != 0 {
		t.Errorf("got Keys %v, want the 5 long-* policies and long", keys)
	}
	if got := m.Sweep(t0.Add(2 * time.Hour)); got != 11 {
		t.Errorf("sweep after the long windows: got %d removed, want 11", got)
	}
	if got := m.Len(); got != 0 {
		t.Errorf("got Len %d, want 0", got)
	}
}

func TestSweeperStopsWithClose(t *testing.T) {
	t.Parallel()
	far := t0.Add(24 * time.Hour)
	m := NewMemoryStore(MemoryOptions{SweepInterval: time.Millisecond, Clock: func() time.Time { return far }})
	p := MustPolicy(Policy{Name: "fw", Algorithm: FixedWindow, Limit: 5, Window: time.Minute})
	fill(t, m, p, t0, "a", "b", "c")
	// The sweeper runs on its own: the buckets, idle by its clock, go.
	deadline := time.Now().Add(5 * time.Second)
	for m.Len() > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := m.Len(); got != 0 {
		t.Errorf("after the sweeper ran: got Len %d, want 0", got)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.done:
	default:
		t.Fatal("after Close: sweeper still running, want it stopped")
	}
	// Close is idempotent and the store still answers.
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	fill(t, m, p, t0, "a")
	if got := m.Len(); got != 1 {
		t.Errorf("after Close: got Len %d, want 1", got)
	}
}

// TestEntrySize keeps a bucket to one cache line: a decision on a cold
// bucket then costs one miss for its state.
func TestEntrySize(t *testing.T) {
	t.Parallel()
	if got, want := unsafe.Sizeof(entry{}), uintptr(64); got != want {
		t.Errorf("got entry of %d bytes, want %d", got, want)
	}
}

// TestConcurrentUse drives every entry point at once on a small store, so
// that evictions, sweeps, reloads and waits interleave under the race
// detector; it checks the bound and that nothing fails.
func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	m := NewMemoryStore(MemoryOptions{MaxKeys: 256, SweepInterval: time.Millisecond})
	defer m.Close()
	var pols []*Policy
	for _, a := range Algorithms {
		p := Policy{Name: a.String(), Algorithm: a, Limit: 3, Window: 50 * time.Millisecond}
		if a == LeakyBucket {
			p.Queue = 2
		}
		pols = append(pols, MustPolicy(p), MustPolicy(p)) // two *Policy, same settings
	}
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 99))
			out := make([]Decision, 3)
			for range 400 {
				now := time.Unix(0, clock.Add(int64(100*time.Microsecond)))
				reqs := make([]Request, 1+rng.IntN(3))
				for i := range reqs {
					reqs[i] = Request{Policy: pols[rng.IntN(len(pols))], Key: "k" + strconv.Itoa(rng.IntN(400))}
				}
				if err := m.Decide(context.Background(), now, reqs, out[:len(reqs)]); err != nil {
					t.Error(err)
					return
				}
				for i, r := range reqs {
					if out[i].Delay > 0 && rng.IntN(4) == 0 {
						ctx, cancel := context.WithCancel(context.Background())
						cancel()
						m.Wait(ctx, r, out[i])
					}
				}
				switch rng.IntN(20) {
				case 0:
					m.Sweep(now)
				case 1:
					m.Keys()
				case 2:
					m.Peek(context.Background(), now, reqs[0])
				}
			}
		})
	}
	wg.Wait()
	for name, n := range m.Keys() {
		if n > 256 {
			t.Errorf("%s: got %d buckets, want at most 256", name, n)
		}
	}
}

// TestTableKeepsEveryBucket fills one shard's table through several
// growths, removes every other bucket by a sweep (each removal shifting
// buckets back, some across the table's end) and checks that every bucket
// left is still found and the emptied table shrank.
func TestTableKeepsEveryBucket(t *testing.T) {
	t.Parallel()
	m := NewMemoryStore(MemoryOptions{MaxKeys: 120, SweepInterval: -1})
	defer m.Close()
	// One token of five an hour is back after 12 minutes, all five after
	// an hour: the "s" buckets go idle first.
	p := MustPolicy(Policy{Name: "tb", Algorithm: TokenBucket, Limit: 5, Window: time.Hour})
	shards := m.table(p).shards
	if len(shards) != 1 {
		t.Fatalf("got %d shards, want 1", len(shards))
	}
	for i := range 60 {
		fill(t, m, p, t0, "s"+strconv.Itoa(i))
		for range 5 {
			fill(t, m, p, t0, "l"+strconv.Itoa(i))
		}
	}
	if got, want := m.Len(), 120; got != want {
		t.Fatalf("got Len %d, want %d", got, want)
	}
	grown := len(shards[0].tab.Load().slots)
	if got := m.Sweep(t0.Add(30 * time.Minute)); got != 60 {
		t.Errorf("sweep: got %d removed, want 60", got)
	}
	for i := range 60 {
		if k := "l" + strconv.Itoa(i); !used(t, m, p, t0, k) {
			t.Errorf("bucket %s: got lost after the sweep, want kept", k)
		}
	}
	if got := m.Sweep(t0.Add(2 * time.Hour)); got != 60 {
		t.Errorf("second sweep: got %d removed, want 60", got)
	}
	// An emptied shard holds no table of its own, and the shared one
	// stays empty.
	if got := shards[0].tab.Load(); got != noBuckets {
		t.Errorf("emptied shard: got a table of %d slots (from %d), want noBuckets", len(got.slots), grown)
	}
	fill(t, m, p, t0.Add(3*time.Hour), "again")
	if !tracked(m, p, "again") || slices.ContainsFunc(noBuckets.marks, func(m uint32) bool { return m != 0 }) {
		t.Errorf("refilled shard: got the bucket lost or noBuckets written, want a table of its own")
	}
}

// TestHeldBucketsStay: a bucket with held tokens (Policy.Hold) is neither
// swept nor evicted, however long its request takes: held tokens do not
// refill, and a bucket made again would have forgotten them.
func TestHeldBucketsStay(t *testing.T) {
	t.Parallel()
	m := NewMemoryStore(MemoryOptions{MaxKeys: 8, SweepInterval: -1})
	defer m.Close()
	p := MustPolicy(Policy{Name: "held", Algorithm: TokenBucket, Limit: 2, Window: time.Minute, Hold: true})
	r := Request{Policy: p, Key: "held"}
	out := make([]Decision, 1)
	if err := m.Decide(context.Background(), t0, []Request{r}, out); err != nil || !out[0].Allowed {
		t.Fatalf("got %+v, %v; want admitted", out[0], err)
	}
	held := out[0]
	later := t0.Add(time.Hour)
	if got := m.Sweep(later); got != 0 {
		t.Errorf("sweep an hour on: got %d removed, want 0", got)
	}
	// A flood of buckets that hold nothing: each kept at once.
	for i := range 100 {
		f := Request{Policy: p, Key: "flood" + strconv.Itoa(i)}
		if err := m.Decide(context.Background(), later, []Request{f}, out); err != nil {
			t.Fatal(err)
		}
		if err := m.Keep(context.Background(), later, []Request{f}, out); err != nil {
			t.Fatal(err)
		}
	}
	if d, _ := m.Peek(context.Background(), later, r); d.Remaining != 1 {
		t.Errorf("after a flood an hour on: got remaining %d, want 1 (the token is still held)", d.Remaining)
	}
	if err := m.Keep(context.Background(), later, []Request{r}, []Decision{held}); err != nil {
		t.Fatal(err)
	}
	if d, _ := m.Peek(context.Background(), later.Add(30*time.Second), r); d.Remaining != 2 {
		t.Errorf("30s after it was kept: got remaining %d, want 2", d.Remaining)
	}
}

// TestRefundAcrossSettingsReload: a count_status unit taken under the
// old settings and answered (not counted) after a reload that changed the
// policy's settings gives nothing to the bucket the new settings started
// afresh, which never counted it: otherwise each request in flight at such
// a reload would add one unit to the new budget.
func TestRefundAcrossSettingsReload(t *testing.T) {
	t.Parallel()
	for _, alg := range []Algorithm{FixedWindow, SlidingWindowCounter, TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			m := NewMemoryStore(MemoryOptions{SweepInterval: -1})
			defer m.Close()
			old := MustPolicy(Policy{Name: "login", Algorithm: alg, Limit: 3, Window: time.Hour, Hold: true})
			cur := MustPolicy(Policy{Name: "login", Algorithm: alg, Limit: 2, Window: time.Hour, Hold: true})
			at := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
			decide := func(p *Policy) Decision {
				d := decideOne(t, m, at, p, "alice")
				at = at.Add(time.Millisecond)
				return d
			}
			// Three decoys in flight under the old configuration.
			var inflight []Decision
			for range 3 {
				d := decide(old)
				if !d.Allowed {
					t.Fatal("decoy rejected")
				}
				inflight = append(inflight, d)
			}
			// Reload: the limit is lowered to 2; the bucket starts afresh.
			admitted := 0
			var kept []Decision
			for range 2 {
				if d := decide(cur); d.Allowed {
					admitted++
					kept = append(kept, d)
				}
			}
			// The guesses are answered 401 (counted): kept.
			for _, d := range kept {
				m.Keep(context.Background(), at, []Request{{Policy: cur, Key: "alice"}}, []Decision{d})
			}
			// The decoys are answered 400 (not counted): given back.
			for _, d := range inflight {
				m.Refund(context.Background(), at, []Request{{Policy: old, Key: "alice"}}, []Decision{d})
			}
			for range 5 {
				if d := decide(cur); d.Allowed {
					admitted++
					m.Keep(context.Background(), at, []Request{{Policy: cur, Key: "alice"}}, []Decision{d})
				}
			}
			if admitted > 2 {
				t.Errorf("%v: %d guesses admitted by the new policy (limit 2 per hour) after 3 decoys of the old configuration were given back", alg, admitted)
			}
		})
	}
}

// TestLongestBlockBlocks: a block of MaxSpan, the longest NewPolicy
// takes, ends after it starts, so the key stays blocked past the window.
func TestLongestBlockBlocks(t *testing.T) {
	t.Parallel()
	p := MustPolicy(Policy{Name: "login", Algorithm: FixedWindow, Limit: 1, Window: time.Minute, Block: MaxSpan})
	m := NewMemoryStore(MemoryOptions{SweepInterval: -1})
	defer m.Close()
	admitOne(t, m, t0, p, "k")
	if d := decideOne(t, m, t0, p, "k"); d.Allowed {
		t.Fatalf("2nd request: got %+v, want rejected", d)
	}
	later := t0.Add(2 * time.Minute) // the next window: only the block refuses
	if d := decideOne(t, m, later, p, "k"); d.Allowed || !d.Blocked || d.RetryAfter != MaxSpan-2*time.Minute {
		t.Errorf("at +2m: got Allowed %v Blocked %v RetryAfter %v, want blocked for %v", d.Allowed, d.Blocked, d.RetryAfter, MaxSpan-2*time.Minute)
	}
}
