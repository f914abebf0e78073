package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
)

// leaseFallbacks keeps, for leased policies, the local copy the Fallback
// decides with while Redis is unreachable (limit / N), and which policies
// are deciding locally. The zero value is ready; it is safe for
// concurrent use.
type leaseFallbacks struct {
	mu     sync.Mutex
	copies map[*ratelimit.Policy]fallbackCopy
	// active holds the policies deciding locally, each with the time of
	// its last local decision and the declaration it was reported under.
	active map[string]falling
	n      atomic.Int32 // len(active), read without mu on the hot path
	// declared counts DeclareLeases calls: each comes with a load whose
	// metrics may have dropped a policy's gauge (a reload that took its
	// lease away, then one that gave it back), and made it afresh at 0.
	declared int64
}

// falling is a policy deciding locally: since its last local decision
// at, reported while declared was declared.
type falling struct {
	at       time.Time
	declared int64
}

// resumeQuiet is how long a leased policy must have decided nothing
// locally before an answer from Redis ends its fallback. A Redis that
// answers some calls and fails others (full, answering OOM to the writes
// of fresh keys) would otherwise flip the policy, its log line and its
// gauge, on every request, at the pace of whoever sends fresh keys.
const resumeQuiet = time.Second

type fallbackCopy struct {
	instances int
	p         *ratelimit.Policy
}

// fallbackPolicy is p as one of n instances enforces it alone: limit and
// burst divided by n, at least 1, and no lease.
func fallbackPolicy(p *ratelimit.Policy, n int) *ratelimit.Policy {
	q := *p
	q.Sync = ratelimit.SyncPerRequest
	q.Limit = max(1, p.Limit/int64(n))
	if p.Algorithm == ratelimit.TokenBucket {
		q.Burst = max(1, p.Burst/int64(n))
	}
	c, err := ratelimit.NewPolicy(q)
	if err != nil {
		// The divided rate cannot be counted exactly (interval
		// rounding); the window is stretched instead, which divides
		// the rate as well.
		q.Limit = p.Limit
		q.Window = p.Window * time.Duration(n)
		if c, err = ratelimit.NewPolicy(q); err != nil {
			q.Window = p.Window
			c = ratelimit.MustPolicy(q)
		}
	}
	return c
}

// local returns the fallback copy of leased policy p for n instances.
func (f *leaseFallbacks) local(p *ratelimit.Policy, n int) *ratelimit.Policy {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.copies[p]; ok && c.instances == n {
		return c.p
	}
	if f.copies == nil || len(f.copies) >= maxLeases {
		f.copies = make(map[*ratelimit.Policy]fallbackCopy)
	}
	c := fallbackCopy{n, fallbackPolicy(p, n)}
	f.copies[p] = c
	return c.p
}

// current returns the fallback copy of leased policy p last made, or p
// when there is none: the policy the Fallback's bucket of p was decided
// with, to settle its units with.
func (f *leaseFallbacks) current(p *ratelimit.Policy) *ratelimit.Policy {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.copies[p]; ok {
		return c.p
	}
	return p
}

// degradedLeased decides a request with leased limits without Redis: with
// on_error local, each leased limit is decided by the Fallback with its
// limit / N copy. When outage is set (Redis is unreachable), the policy is
// reported as in fallback; a caller that went away while its request
// waited is no outage, and is decided the same way without it.
func (s *Store) degradedLeased(ctx context.Context, now time.Time, reqs []ratelimit.Request, out []ratelimit.Decision, cause error, outage bool) error {
	if s.o.OnError != OnErrorLocal {
		return s.degraded(ctx, now, reqs, out)
	}
	n := s.instances()
	local := make([]ratelimit.Request, len(reqs))
	for i, r := range reqs {
		local[i] = r
		if r.Policy.Sync == ratelimit.SyncLease {
			local[i].Policy = s.fallbacks.local(r.Policy, n)
			if outage {
				s.enterFallback(r.Policy, local[i].Policy, n, cause)
			}
		}
	}
	return s.degraded(ctx, now, local, out)
}

// enterFallback reports that leased policy p decides locally with q.
func (s *Store) enterFallback(p, q *ratelimit.Policy, n int, cause error) {
	f := &s.fallbacks
	now := time.Now()
	f.mu.Lock()
	if a, ok := f.active[p.Name]; ok {
		f.active[p.Name] = falling{now, f.declared}
		again := a.declared != f.declared
		f.mu.Unlock()
		if again && s.o.OnLeaseFallback != nil {
			// Still in fallback, but a load declared leases since,
			// whose gauge may read 0: it hears again, once.
			s.o.OnLeaseFallback(p.Name, true)
		}
		return
	}
	if f.active == nil {
		f.active = make(map[string]falling)
	}
	f.active[p.Name] = falling{now, f.declared}
	f.n.Store(int32(len(f.active)))
	f.mu.Unlock()
	if cause == nil {
		cause = s.LastError()
	}
	if s.o.Logger != nil {
		s.o.Logger.Warn("lease fallback", "policy", p.Name, "instances", n, "limit", q.Limit, "err", cause)
	}
	if s.o.OnLeaseFallback != nil {
		s.o.OnLeaseFallback(p.Name, true)
	}
}

// resumed reports that leased policy p was decided without the fallback:
// it leaves fallback if it was in it and has decided nothing locally for
// resumeQuiet.
func (s *Store) resumed(p *ratelimit.Policy) {
	f := &s.fallbacks
	if f.n.Load() == 0 {
		return
	}
	f.mu.Lock()
	last, ok := f.active[p.Name]
	if !ok || time.Since(last.at) < resumeQuiet {
		f.mu.Unlock()
		return
	}
	delete(f.active, p.Name)
	f.n.Store(int32(len(f.active)))
	f.mu.Unlock()
	s.reportResumed(p.Name)
}

// resumeIdle ends the fallback of every leased policy that has decided
// nothing locally for resumeQuiet while Redis answers: one whose traffic
// stopped would otherwise stay in fallback, its gauge at 1, until its
// next request. The heartbeat calls it once a second.
func (s *Store) resumeIdle() {
	f := &s.fallbacks
	if f.n.Load() == 0 || s.br.open.Load() || !s.br.healthy.Load() {
		return
	}
	var names []string
	f.mu.Lock()
	for name, last := range f.active {
		if time.Since(last.at) >= resumeQuiet {
			delete(f.active, name)
			names = append(names, name)
		}
	}
	f.n.Store(int32(len(f.active)))
	f.mu.Unlock()
	for _, name := range names {
		s.reportResumed(name)
	}
}

func (s *Store) reportResumed(name string) {
	if s.o.Logger != nil {
		s.o.Logger.Info("lease resumed", "policy", name)
	}
	if s.o.OnLeaseFallback != nil {
		s.o.OnLeaseFallback(name, false)
	}
}
