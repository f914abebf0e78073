package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/ratelimit"
)

//go:embed lease.lua
var leaseSource string

// leaseScript grants, takes back and hears about leased budget.
var leaseScript = rueidis.NewLuaScript(commonSource + leaseSource)

// Lease tuning; see "Leases" in README.md.
const (
	// leaseHorizon is how much of its own traffic an instance asks to
	// hold: a batch is the arrival rate times the horizon. It is also how
	// long an exhausted lease rejects locally before asking again.
	leaseHorizon = 200 * time.Millisecond
	// leaseHalfLife is the half-life of the arrival rate's estimate.
	leaseHalfLife = time.Second
	// leaseIdle is the least time a lease may go without requests before
	// its units go back to Redis and the lease is forgotten (see
	// idleLocked).
	leaseIdle = 2 * leaseHorizon
	// leaseTTL is how long a token_bucket grant may be spent, at least;
	// a grant before then renews the instance's whole holding (never
	// shortening it, see lease.lua). A steady
	// lease's grant lasts as long as its batch does (see ttlLocked), up
	// to leaseMaxTTL.
	leaseTTL    = time.Second
	leaseMaxTTL = 10 * time.Second
	// leaseSteadyScore is the decayed arrival count (rate x leaseTau) from
	// which a lease's traffic is steady: about two requests a second or
	// more. A steady lease asks for at least leaseSteadyBatch units, so
	// that a call brings that many admissions even where the rate times
	// the horizon is one or two: under steady traffic Redis calls stay
	// well below a fifth of the requests, heartbeats included.
	leaseSteadyScore = 2.5
	leaseSteadyBatch = 16
	// leaseIdleGaps is how many mean gaps between its arrivals a lease
	// may go without a request before it is idle, when that is longer
	// than leaseIdle: a lease that waits a little longer than its
	// traffic's usual pause is not given back between two requests.
	leaseIdleGaps = 3
	// holdShare bounds what all instances may hold at once: each holds
	// at most capacity / (holdShare x N) units, and at least one.
	holdShare = 10
	// maxLeases bounds the local lease table; past it a decision takes
	// one unit with a call of its own.
	maxLeases = 1 << 16
)

// leaseTicket is ratelimit.Ticket.Store of a unit spent from a local
// lease; Ticket.At is the window start (us) it was counted in, or 0 for a
// token_bucket.
const leaseTicket = 3

// leaseTau is the time constant of the arrival rate's decay, in seconds.
var leaseTau = leaseHalfLife.Seconds() / math.Ln2

// lease is one bucket's budget held by this instance. Its fields are
// guarded by mu.
type lease struct {
	key string // the bucket's Redis key
	id  int64  // this lease among all the table made: Ticket.Gen of its units

	mu       sync.Mutex
	req      ratelimit.Request
	units    int64     // left to spend
	deadline time.Time // units may be spent before it
	from     time.Time // with caller time: units may be spent from then on
	mark     int64     // window start (us) the units are counted in
	spent    int64     // token_bucket: spent since the last call
	held     int64     // token_bucket, Policy.Hold: spent, the outcome not known yet
	gen      int64     // bumped when held units are taken as kept; Ticket.Hold is gen+1
	back     int64     // units that expired unspent, to give back
	refunds  int64     // token_bucket: refunds of units reported spent
	backMark int64
	batch    int64     // the last batch asked for
	score    float64   // decayed count of arrivals: rate x leaseTau
	scoreAt  time.Time // when score was last decayed
	lastNow  time.Time // the latest decision time
	lastUse  time.Time // the latest arrival, on this process's clock
	quiet    time.Time // Redis was short: reject without asking until then
	retryAt  time.Time // Redis was short: when a unit may be free there
	resetAt  time.Time // when the bucket is whole, as last heard
	remote   int64     // what the bucket had left, as last heard
	inflight chan struct{}
	sending  bool // inflight's call is past its look at gone
	gone     bool // dropped from the table (Reset, idle, Close)
}

// leaseReply is what lease.lua answers.
type leaseReply struct {
	granted   int64
	at        int64 // the script's time, us
	valid     time.Duration
	mark      int64
	remaining int64
	retry     time.Duration
	reset     time.Duration
}

// leaseTable holds this instance's leases by bucket key. The zero value
// is ready; it is safe for concurrent use.
type leaseTable struct {
	mu   sync.RWMutex
	m    map[string]*lease
	made int64 // leases made, the id of the last
}

// get returns the lease of key, creating it; nil when the table is full.
func (t *leaseTable) get(key string, r ratelimit.Request) *lease {
	t.mu.RLock()
	l := t.m[key]
	t.mu.RUnlock()
	if l != nil {
		return l
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if l := t.m[key]; l != nil {
		return l
	}
	if t.m == nil {
		t.m = make(map[string]*lease)
	}
	if len(t.m) >= maxLeases {
		return nil
	}
	t.made++
	l = &lease{key: key, id: t.made, req: r}
	t.m[key] = l
	return l
}

// drop forgets the lease of key and returns it, nil when there is none.
func (t *leaseTable) drop(key string) *lease {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.m[key]
	delete(t.m, key)
	return l
}

// all returns every lease.
func (t *leaseTable) all() []*lease {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*lease, 0, len(t.m))
	for _, l := range t.m {
		out = append(out, l)
	}
	return out
}

func (t *leaseTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}

// arriveLocked counts one arrival at now in the decayed rate.
func (l *lease) arriveLocked(now time.Time) {
	if !l.scoreAt.IsZero() {
		if dt := now.Sub(l.scoreAt).Seconds(); dt > 0 {
			l.score *= math.Exp(-dt / leaseTau)
		}
	}
	if now.After(l.scoreAt) {
		l.scoreAt = now
	}
	l.score++
	if now.After(l.lastNow) {
		l.lastNow = now
	}
	l.lastUse = time.Now()
}

// wantLocked is the batch to ask for: the rate times the horizon, at
// least 1 and at most two thirds of maxBatch. A refill starts below half
// a batch and asks for a whole one (within maxBatch), so that each call
// brings about a batch while the holding stays within maxBatch.
func (l *lease) wantLocked(instances int) int64 {
	rate := l.score / leaseTau
	want := int64(math.Ceil(rate * leaseHorizon.Seconds()))
	if l.score >= leaseSteadyScore {
		want = max(want, leaseSteadyBatch)
	}
	return min(max(want, 1), max(1, maxBatch(l.req.Policy, instances)*2/3))
}

// gapLocked is the mean time between the lease's arrivals, as the decayed
// rate estimates it at the latest one.
func (l *lease) gapLocked() time.Duration {
	if l.score <= 0 {
		return leaseMaxTTL
	}
	return time.Duration(leaseTau / l.score * float64(time.Second))
}

// idleLocked is how long l may go without a request before its units go
// back and it is forgotten: leaseIdleGaps of its mean gaps, at least
// leaseIdle and at most leaseMaxTTL. A lease forgotten between two
// requests would lose the rate it learnt, and never become steady.
func (l *lease) idleLocked() time.Duration {
	return min(max(leaseIdle, leaseIdleGaps*l.gapLocked()), leaseMaxTTL)
}

// ttlLocked is how long a token_bucket grant of want units may be spent:
// leaseTTL, or for steady traffic the time its batch and the units
// already held last at the lease's rate, with half again to spare (at
// most leaseMaxTTL). Units a lease cannot spend before they expire go
// back with its next call, and that call is one a longer grant saves.
func (l *lease) ttlLocked(want int64) time.Duration {
	if l.score < leaseSteadyScore {
		return leaseTTL
	}
	last := time.Duration(want+l.units) * l.gapLocked() * 3 / 2
	return min(max(leaseTTL, last), leaseMaxTTL)
}

// maxBatch is the most units one of n instances holds at once, so that
// all of them together hold at most a tenth of the capacity (or one
// each, when that is less than one).
func maxBatch(p *ratelimit.Policy, n int) int64 {
	return max(1, p.Capacity()/(holdShare*int64(max(n, 1))))
}

// expireLocked drops units whose time has passed; they go back to Redis
// with the next call, since they were counted and never spent. Held units
// are kept.
func (l *lease) expireLocked(now time.Time) {
	if l.units > 0 && !now.Before(l.deadline) {
		if l.back == 0 || l.backMark == l.mark {
			l.back += l.units
			l.backMark = l.mark
		}
		l.units = 0
	}
	if l.held > 0 && !now.Before(l.deadline) {
		l.keepHeldLocked()
	}
}

// trimLocked moves what l holds past its share among n instances into
// the units to give back with the next call: a holding built while fewer
// instances were seen would otherwise stay above the share until spent,
// and the fleet's leases above the bound on what all of them hold. A call
// gives back units of one window: units to give back of another, an
// ended one, are dropped, as returnLeases drops them. No later call would
// trim (a refill is not started while the lease holds its share), and
// they matter less: Redis has moved on from a fixed window's, and a
// sliding_window_counter's only weigh less and less; kept counted, they
// err towards admitting less.
func (l *lease) trimLocked(n int) {
	share := maxBatch(l.req.Policy, n)
	if l.units <= share {
		return
	}
	if l.back > 0 && l.backMark != l.mark {
		l.back = 0
	}
	l.back += l.units - share
	l.backMark = l.mark
	l.units = share
}

// keepHeldLocked takes every held unit as kept: each is reported spent
// with the next call, and its request's refund or keep finds nothing to
// settle (its Ticket.Hold names an older generation). Redis holds a
// token_bucket's lease only until its expiry, and drops it then as
// spent, so a unit held past the deadline can no longer be given back
// exactly; kept, it errs towards admitting less.
func (l *lease) keepHeldLocked() {
	l.spent += l.held
	l.held = 0
	l.gen++
}

// takeLocked spends one unit when the lease has one.
func (l *lease) takeLocked(now time.Time) bool {
	l.expireLocked(now)
	if l.units == 0 || now.Before(l.from) {
		return false
	}
	l.units--
	if l.req.Policy.Algorithm == ratelimit.TokenBucket {
		if l.req.Policy.Hold {
			// Still this instance's in Redis, until it is settled:
			// the refill stays capped below it, as for a per-request
			// hold (ratelimit.SettleTokenBucket).
			l.held++
		} else {
			l.spent++
		}
	}
	return true
}

// untakeLocked gives back a unit takeLocked spent, while it still counts:
// a held one exactly, back into the lease (see keepHeldLocked). A unit of
// another lease of the bucket (one dropped by a Reset, or forgotten when
// idle) is not this one's to take back.
func (l *lease) untakeLocked(now time.Time, t ratelimit.Ticket) bool {
	if l.gone || !now.Before(l.deadline) || t.Gen != l.id {
		return false
	}
	at := t.At
	if l.req.Policy.Algorithm == ratelimit.TokenBucket && t.Hold != 0 {
		if t.Hold != l.gen+1 || l.held == 0 {
			return false
		}
		l.held--
	} else if l.req.Policy.Algorithm == ratelimit.TokenBucket {
		if l.spent == 0 {
			// Reported spent already: Redis takes it back with the
			// next call, which need not wait.
			l.refunds++
			l.quiet = time.Time{}
			return false
		}
		l.spent--
	} else if at != l.mark {
		return false
	}
	l.units++
	return true
}

// decisionLocked reports the lease as it stands after an admission
// (allowed) or a rejection.
func (l *lease) decisionLocked(now time.Time, allowed bool) ratelimit.Decision {
	p := l.req.Policy
	d := ratelimit.Decision{Allowed: allowed, Limit: p.Limit}
	if allowed {
		d.Remaining = min(l.units+l.remote, p.Capacity())
		d.Ticket = ratelimit.Ticket{Store: leaseTicket, At: l.mark, Gen: l.id}
		if p.Algorithm == ratelimit.TokenBucket && p.Hold {
			d.Ticket.Hold = l.gen + 1
		}
		if p.Algorithm == ratelimit.TokenBucket {
			if d.Remaining < p.Capacity() {
				d.RetryAfter = p.Interval()
			}
		} else {
			d.RetryAfter = max(l.deadline.Sub(now), 0)
		}
	} else {
		d.RetryAfter = max(l.retryAt.Sub(now), time.Microsecond)
	}
	d.Reset = max(l.resetAt.Sub(now), d.RetryAfter)
	return d
}

// leaseField is the token_bucket field that holds what lease l has leased
// and not reported spent: one per lease, written by its calls alone, so
// that a call may say what the lease holds (see refill) without a lease
// of the same bucket before it (given back as it went idle, its call
// perhaps still on the way) counting in it.
func (s *Store) leaseField(l *lease) string {
	return "o:" + s.id + "/" + strconv.FormatInt(l.id, 10)
}

// leaseArgs builds the arguments of one lease.lua call; field is the
// token_bucket field that holds what the call leases (see leaseField).
func (s *Store) leaseArgs(now time.Time, p *ratelimit.Policy, field string, want, back, backMark, spent, refunds int64, ttl time.Duration) []string {
	at := ""
	if s.o.CallerTime {
		at = strconv.FormatInt(now.UnixMicro(), 10)
	}
	return []string{
		at, s.slack,
		strconv.Itoa(int(p.Algorithm)),
		strconv.FormatInt(p.Limit, 10),
		strconv.FormatInt(micros(p.Window), 10),
		strconv.FormatInt(micros(p.Interval()), 10),
		strconv.FormatInt(p.Burst, 10),
		strconv.FormatInt(want, 10),
		strconv.FormatInt(back, 10),
		strconv.FormatInt(backMark, 10),
		strconv.FormatInt(spent, 10),
		field,
		strconv.FormatInt(micros(ttl), 10),
		strconv.FormatInt(refunds, 10),
	}
}

// parseLease decodes a lease.lua reply.
func parseLease(vals []rueidis.RedisMessage) (leaseReply, error) {
	if len(vals) != 7 {
		return leaseReply{}, fmt.Errorf("decoding lease reply: got %d values, want 7", len(vals))
	}
	var f [7]int64
	for i := range f {
		var err error
		if f[i], err = vals[i].AsInt64(); err != nil {
			return leaseReply{}, fmt.Errorf("decoding lease reply: %w", err)
		}
	}
	return leaseReply{
		granted: f[0], at: f[1], valid: time.Duration(f[2]) * time.Microsecond, mark: f[3],
		remaining: f[4], retry: time.Duration(f[5]) * time.Microsecond, reset: time.Duration(f[6]) * time.Microsecond,
	}, nil
}

// runLease runs lease.lua with args, which ask for want units and give
// back back.
func (s *Store) runLease(ctx context.Context, c rueidis.Client, p *ratelimit.Policy, key string, args []string, want, back int64) (leaseReply, error) {
	start := time.Now()
	vals, err := bounded(ctx, func() rueidis.RedisResult { return leaseScript.Exec(ctx, c, []string{key}, args) }).ToArray()
	var rep leaseReply
	if err == nil {
		rep, err = parseLease(vals)
	}
	s.observe(start, err)
	s.calls.Add(1)
	result := "error"
	switch {
	case err != nil:
	case want == 0 && back > 0:
		result = "returned"
	case want == 0:
		result = "" // a look (Peek) is no lease round trip
	case rep.granted > 0:
		result = "granted"
	default:
		result = "exhausted"
	}
	if result != "" && s.o.OnLease != nil {
		s.o.OnLease(p.Name, result)
	}
	if err != nil {
		return rep, fmt.Errorf("running lease script: %w", err)
	}
	// Only an answer counts for the breaker: decisions from a lease
	// make no round trip and prove nothing about Redis.
	s.br.succeeded()
	return rep, nil
}

// refill asks Redis for a batch for l at now, handing back what l owes
// (units it spent, units that expired unspent), and merges the reply.
// The caller has set l.inflight; refill clears and closes it.
func (s *Store) refill(ctx context.Context, c rueidis.Client, l *lease, now time.Time) error {
	l.mu.Lock()
	if l.gone {
		// Reset or the idle sweep dropped the lease after the call was
		// planned (the heartbeat's trim lists the leases, then starts
		// each call), and took what it held and owed: a grant now would
		// be spent by no one while the bucket counted it.
		close(l.inflight)
		l.inflight = nil
		l.mu.Unlock()
		return nil
	}
	// A batch, never past maxBatch in all: what one instance holds
	// stays within it. (A holding past it, as N grew, gives the rest
	// back and asks for nothing.)
	l.expireLocked(now)
	n := s.instances()
	l.trimLocked(n)
	target := l.wantLocked(n)
	want := max(min(target, maxBatch(l.req.Policy, n)-l.units), 0)
	spent, back, backMark, refunds := l.spent, l.back, l.backMark, l.refunds
	l.spent, l.back, l.refunds = 0, 0, 0
	p := l.req.Policy
	args := s.leaseArgs(now, p, s.leaseField(l), want, back, backMark, spent, refunds, l.ttlLocked(want))
	args = append(args, strconv.FormatInt(l.units+l.held, 10))
	l.sending = true
	l.mu.Unlock()

	rep, err := s.runLease(ctx, c, p, l.key, args, want, back)

	l.mu.Lock()
	defer l.mu.Unlock()
	close(l.inflight)
	l.inflight, l.sending = nil, false
	if err != nil {
		// Whether the script ran is unknown: what was reported stays
		// reported (re-sending could count it twice), and the units
		// held stay as they are. Both err towards admitting less.
		return err
	}
	s.resumed(p)
	if l.gone {
		// Reset or Close dropped the lease meanwhile: the grant is not
		// spent here, and goes back (idle sweep) only if Redis still
		// counts it; leaving it is conservative.
		return nil
	}
	l.remote = rep.remaining
	l.resetAt = now.Add(rep.reset)
	if rep.granted < want {
		// Short: the lease's rejections, until the next short call, say
		// when Redis may have a unit again. (A partial grant is short
		// too: the rejections once its units are spent must not say
		// sooner.) A call that asks for nothing (the heartbeat's trim,
		// a lease holding past its share) is never short, and leaves
		// retryAt as the last short one set it: the rejections are
		// that call's, made while the quiet it set lasts, and this
		// reply's retry says nothing of it (the window's end, or none
		// at all for units just given back).
		l.retryAt = now.Add(max(rep.retry, time.Microsecond))
		// Ask again only once the rest may be there, so that a
		// bucket at its limit does not turn rejections into calls.
		wait := max(rep.retry, time.Microsecond)
		if p.Algorithm == ratelimit.TokenBucket || p.Algorithm == ratelimit.SlidingWindowCounter {
			// Both free at most one unit per interval (the counter's
			// estimate falls by prev/window ≤ limit/window): the
			// missing units cannot all be there sooner.
			wait = max(wait, time.Duration(want-rep.granted)*p.Interval())
		}
		l.quiet = now.Add(min(leaseHorizon, wait))
	}
	if rep.granted == 0 {
		return nil
	}
	if p.Algorithm == ratelimit.TokenBucket && !s.spendTime(now).Before(l.deadline) {
		// The answer came after the deadline of what the lease held:
		// the script may have run past that holding's expiry in Redis,
		// which then dropped it as spent before this grant. What the
		// lease still held, and what it spent or let expire since the
		// call, belongs to no holding Redis counts: merged into this
		// grant's it would be spent again, or reported out of it.
		// Dropped, it errs towards admitting less.
		l.units, l.back, l.spent = 0, 0, 0
		if l.held > 0 {
			l.held = 0
			l.gen++
		}
	}
	if rep.mark != l.mark {
		// A new window: units of the old one are past their time.
		l.expireLocked(now.Add(rep.valid))
		l.units = 0
	}
	l.units += rep.granted
	l.mark = rep.mark
	l.deadline = now.Add(rep.valid)
	if s.o.CallerTime && rep.mark != 0 {
		// Decisions on virtual clocks may run out of order: a call
		// made at now may find the bucket already in a later window,
		// whose units must not be spent before it starts. (On the
		// server's clock the reply comes after the script's time.)
		l.from = time.UnixMicro(rep.mark)
	}
	l.batch = target
	if rep.granted == want {
		l.quiet = time.Time{}
	}
	return nil
}

// startRefillLocked starts a background refill when l runs below half of
// its last batch and none is in flight. A batch of one is not fetched
// ahead: traffic that slow would hold a unit only to give it back idle,
// three calls where a request's own call is one. Nor is a window's batch
// while the units held last, at the lease's rate, to the window's end:
// what it brought would be dropped there, a call for nothing (two a
// window where one does, with a steady batch and windows of a second).
func (s *Store) startRefillLocked(c rueidis.Client, l *lease, now time.Time) {
	if l.inflight != nil || l.batch <= 1 || l.units*2 >= l.batch || now.Before(l.quiet) {
		return
	}
	if l.units >= maxBatch(l.req.Policy, s.instances()) {
		// The batch was sized for fewer instances: what the lease
		// holds is already its share now that more are seen, so a
		// refill would ask for nothing, a round trip per admission
		// until the holding fell below the share.
		return
	}
	if l.req.Policy.Algorithm != ratelimit.TokenBucket && float64(l.units) >= l.score/leaseTau*l.deadline.Sub(now).Seconds() {
		return
	}
	l.inflight = make(chan struct{})
	if !s.goRefill(func() { s.backgroundRefill(c, l, now) }) {
		l.inflight = nil // closed: Close gives the lease back
	}
}

// backgroundRefill is the refill a request or the heartbeat's trim starts
// in the background: bounded by Timeout, a failure counted by the
// breaker.
func (s *Store) backgroundRefill(c rueidis.Client, l *lease, now time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), s.o.Timeout)
	defer cancel()
	if err := s.refill(ctx, c, l, now); err != nil {
		s.br.failed(err, false)
	}
}

// trimLeases starts a call, in the background, for each lease that holds
// more than its share among the instances now seen, to give the rest
// back (see trimLocked): the heartbeat calls it when N grows, so that a
// lease holds its new share whether its traffic goes on or not. A holding
// that has run out holds nothing: its lease is left to its next request
// or the idle sweep, since a call would find nothing to trim and fetch a
// fresh batch for a lease that may have no traffic left.
func (s *Store) trimLeases() {
	c := s.client.Load()
	if c == nil {
		return
	}
	for _, l := range s.leases.all() {
		s.trimLease(*c, l, true)
	}
}

// trimLease starts l's call for trimLeases. A call already on its way may
// have been planned for the instances seen before N grew, and bring the
// lease up to the old share: when wait is set, l is looked at again once
// that call is back. A call started after that planned for the new N.
func (s *Store) trimLease(c rueidis.Client, l *lease, wait bool) {
	l.mu.Lock()
	now := l.lastNow
	if !s.o.CallerTime {
		now = time.Now()
	}
	if ch := l.inflight; ch != nil && wait && !l.gone {
		l.mu.Unlock()
		s.goRefill(func() {
			<-ch
			s.trimLease(c, l, false)
		})
		return
	}
	defer l.mu.Unlock()
	if l.gone || l.inflight != nil || l.units <= maxBatch(l.req.Policy, s.instances()) || !now.Before(l.deadline) {
		return
	}
	l.inflight = make(chan struct{})
	if !s.goRefill(func() { s.backgroundRefill(c, l, now) }) {
		l.inflight = nil // closed: Close gives the lease back
	}
}

// leaseUnit is a unit takeLease took from a local lease.
type leaseUnit struct {
	l     *lease    // the lease it came from; nil when none was taken
	until time.Time // the lease's deadline when it was taken
}

// takeLease decides request r from its local lease, asking Redis when the
// lease is empty. The returned unit says which lease the unit came from
// and until when it may be spent. An error means Redis failed.
func (s *Store) takeLease(ctx context.Context, c rueidis.Client, now time.Time, r ratelimit.Request) (ratelimit.Decision, leaseUnit, error) {
	key := Key(s.prefix, r)
	s.startHeartbeatWithin(ctx)
	l := s.leases.get(key, r)
	if l == nil {
		return s.takeOne(ctx, c, now, r, key)
	}
	l.mu.Lock()
	l.req = r
	l.arriveLocked(now)
	// Until a unit is taken, Redis has said the budget is short (quiet)
	// or ctx ends: a burst on a lease whose batch is still small drains
	// each refill and waits for the next, rather than being rejected
	// with budget left in Redis.
	for {
		if l.gone {
			l.mu.Unlock()
			// Reset or the idle sweep dropped it just now: start over.
			// Close marks its leases gone and leaves them in the table,
			// so a decision after it (a request the shutdown cut off)
			// finds the same one again: that is decided by a call of
			// its own, as a full table's.
			nl := s.leases.get(key, r)
			if nl == nil || nl == l {
				return s.takeOne(ctx, c, now, r, key)
			}
			l = nl
			l.mu.Lock()
			l.req = r
			l.arriveLocked(now)
		}
		if l.takeLocked(s.spendTime(now)) {
			d, u := l.decisionLocked(now, true), leaseUnit{l, l.deadline}
			s.startRefillLocked(c, l, now)
			l.mu.Unlock()
			return d, u, nil
		}
		if now.Before(l.quiet) {
			break
		}
		if ch := l.inflight; ch != nil {
			l.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return ratelimit.Decision{}, leaseUnit{}, fmt.Errorf("waiting for a lease of %s: %w", r.Policy.Name, ctx.Err())
			}
			l.mu.Lock()
			continue
		}
		l.inflight = make(chan struct{})
		l.mu.Unlock()
		if err := s.refill(ctx, c, l, now); err != nil {
			return ratelimit.Decision{}, leaseUnit{}, err
		}
		l.mu.Lock()
	}
	d := l.decisionLocked(now, false)
	var u leaseUnit
	if d.Allowed = l.takeLocked(s.spendTime(now)); d.Allowed {
		d, u = l.decisionLocked(now, true), leaseUnit{l, l.deadline}
	}
	l.mu.Unlock()
	return d, u, nil
}

// spendTime is the time a unit taken now is spent at, for the lease's
// deadline: the decision's time, or, on the server's clock, the present
// when that is later. A decision may be made long after its time (a
// round trip for a limit before or after it, a refill it waited for, a
// goroutine that ran late); a unit of a window spent then, past the
// deadline, would count in a window that has ended while the next one's
// whole budget is spent as well. The unit is taken at the decision's
// start and checked again once every limit is decided (retakeLate).
func (s *Store) spendTime(now time.Time) time.Time {
	if s.o.CallerTime {
		return now
	}
	if t := time.Now(); t.After(now) {
		return t
	}
	return now
}

// takeOne decides r with a call of its own for one unit, spent at once:
// the table is full. A token_bucket's unit is held under a field of its
// own ("o:ID:1"), and each call reports all that field holds spent, so
// the instance's holding from these calls is one unit at most (the last
// one, until the next call or the lease's end) rather than one more per
// admission, which would cap the refill lower and lower.
func (s *Store) takeOne(ctx context.Context, c rueidis.Client, now time.Time, r ratelimit.Request, key string) (ratelimit.Decision, leaseUnit, error) {
	args := s.leaseArgs(now, r.Policy, "o:"+s.id+":1", 1, 0, 0, math.MaxInt32, 0, leaseTTL)
	rep, err := s.runLease(ctx, c, r.Policy, key, args, 1, 0)
	if err != nil {
		return ratelimit.Decision{}, leaseUnit{}, err
	}
	s.resumed(r.Policy)
	d := ratelimit.Decision{Allowed: rep.granted > 0, Limit: r.Policy.Limit, Remaining: rep.remaining, Reset: rep.reset}
	if !d.Allowed {
		d.RetryAfter = max(rep.retry, time.Microsecond)
	}
	return d, leaseUnit{}, nil
}

// hasLease reports whether any limit of reqs is leased.
func hasLease(reqs []ratelimit.Request) bool {
	for _, r := range reqs {
		if r.Policy.Sync == ratelimit.SyncLease {
			return true
		}
	}
	return false
}

// decideLeased decides a request with at least one leased limit. Leased
// limits are taken locally first; the others go to decide.lua, which
// only judges them when a leased limit has rejected. When the request is
// not admitted, the leased units go back to their leases.
func (s *Store) decideLeased(ctx context.Context, c rueidis.Client, now time.Time, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	took := make([]leaseUnit, len(reqs))
	admitted := true
	var others []int
	var err error
	for i, r := range reqs {
		if r.Policy.Sync != ratelimit.SyncLease {
			others = append(others, i)
			continue
		}
		if out[i], took[i], err = s.takeLease(ctx, c, now, r); err != nil {
			break
		}
		if !out[i].Allowed && !r.Policy.Shadow {
			admitted = false
		}
	}
	if err == nil && len(others) > 0 {
		sub := make([]ratelimit.Request, len(others))
		for j, i := range others {
			sub[j] = reqs[i]
		}
		subOut := make([]ratelimit.Decision, len(sub))
		err = s.decideRequests(ctx, c, now, sub, subOut, admitted)
		if err == nil {
			s.br.succeeded()
			for j, i := range others {
				out[i] = subOut[j]
			}
			if !ratelimit.Admitted(sub, subOut) {
				admitted = false
			}
		}
	}
	if err == nil && admitted && len(reqs) > 1 {
		// (A lone limit's unit was checked as it was taken.)
		admitted, err = s.retakeLate(ctx, c, now, reqs, out, took)
	}
	if err != nil || !admitted {
		for i, u := range took {
			if u.l == nil {
				continue
			}
			u.l.mu.Lock()
			if u.l.untakeLocked(now, out[i].Ticket) {
				out[i] = u.l.decisionLocked(now, true)
			}
			out[i].Ticket = ratelimit.Ticket{}
			u.l.mu.Unlock()
		}
	}
	return err
}

// retakeLate makes sure every leased unit of an admitted request is spent
// before its deadline, now that all the request's limits are decided. A
// unit is taken before the route's other limits are decided, and their
// round trips (decide.lua, or another lease's refill) may end after the
// unit's window has: spent then, it would admit in a window whose whole
// budget may be spent elsewhere. Such a unit goes back, as for a
// rejection, and the limit is taken again at the present, which may
// reject (the units the other limits took in Redis then stay spent:
// rare, and it admits less). Each pass may wait for Redis again, so it
// repeats until no unit is late, within ctx.
func (s *Store) retakeLate(ctx context.Context, c rueidis.Client, now time.Time, reqs []ratelimit.Request, out []ratelimit.Decision, took []leaseUnit) (bool, error) {
	for {
		late := false
		for i, u := range took {
			if u.l == nil || s.spendTime(now).Before(u.until) {
				continue
			}
			if err := ctx.Err(); err != nil {
				return false, fmt.Errorf("taking a lease of %s again: %w", reqs[i].Policy.Name, err)
			}
			late = true
			u.l.mu.Lock()
			u.l.untakeLocked(now, out[i].Ticket)
			u.l.mu.Unlock()
			var err error
			if out[i], took[i], err = s.takeLease(ctx, c, now, reqs[i]); err != nil {
				return false, err
			}
			if !out[i].Allowed && !reqs[i].Policy.Shadow {
				return false, nil
			}
		}
		if !late {
			return true, nil
		}
	}
}

// decideRequests decides the per-request limits of a request that also
// has leased ones: taking when take is set, else only judging.
func (s *Store) decideRequests(ctx context.Context, c rueidis.Client, now time.Time, reqs []ratelimit.Request, out []ratelimit.Decision, take bool) error {
	if take {
		if s.cluster && len(reqs) > 1 {
			return s.decideCluster(ctx, c, now, reqs, out)
		}
		_, err := s.decideOnce(ctx, c, now, reqs, out, modeTake)
		return err
	}
	if !s.cluster {
		_, err := s.decideOnce(ctx, c, now, reqs, out, modeJudge)
		return err
	}
	groups := groupBySlot(s.prefix, reqs)
	base := s.token()
	for i, g := range groups {
		g.token = base + "/" + string(rune('a'+i%26))
	}
	s.runGroups(ctx, c, now, groups, modeJudge)
	if err := groupErr(groups); err != nil {
		return err
	}
	for _, g := range groups {
		for j, i := range g.idx {
			out[i] = g.out[j]
		}
	}
	return nil
}

// settleLease refunds, or keeps, a unit spent from a local lease. A refund
// gives it back to the lease while the lease still holds it as counted;
// otherwise the unit stays spent. Keeping a held unit reports it spent
// with the next call.
func (s *Store) settleLease(now time.Time, r ratelimit.Request, d ratelimit.Decision, refund bool) {
	s.leases.mu.Lock()
	l := s.leases.m[Key(s.prefix, r)]
	s.leases.mu.Unlock()
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if refund {
		l.untakeLocked(now, d.Ticket)
		return
	}
	if l.expireLocked(now); !l.gone && d.Ticket.Gen == l.id && d.Ticket.Hold == l.gen+1 && l.held > 0 {
		l.held--
		l.spent++
	}
}

// peekLease reports a leased bucket: what Redis has left plus what this
// instance holds. Units other instances hold are not counted.
func (s *Store) peekLease(ctx context.Context, c rueidis.Client, now time.Time, r ratelimit.Request) (ratelimit.Decision, error) {
	key := Key(s.prefix, r)
	// A look leases nothing, so it names no lease's field; the empty
	// field tells the script to write nothing (a Peek makes no bucket).
	rep, err := s.runLease(ctx, c, r.Policy, key, s.leaseArgs(now, r.Policy, "", 0, 0, 0, 0, 0, leaseTTL), 0, 0)
	if err != nil {
		return ratelimit.Decision{}, err
	}
	d := ratelimit.Decision{Allowed: true, Limit: r.Policy.Limit, Remaining: rep.remaining, Reset: rep.reset}
	s.leases.mu.Lock()
	l := s.leases.m[key]
	s.leases.mu.Unlock()
	if l != nil {
		l.mu.Lock()
		l.expireLocked(now)
		d.Remaining += l.units
		l.mu.Unlock()
	}
	d.Remaining = min(d.Remaining, r.Policy.Capacity())
	if d.Remaining == 0 {
		d.RetryAfter = max(rep.retry, time.Microsecond)
	}
	return d, nil
}

// returnLeases returns the units ls hold, and reports what they spent, in one
// pipelined batch bounded by ctx; the leases are gone afterwards.
func (s *Store) returnLeases(ctx context.Context, c rueidis.Client, ls []*lease) {
	type ret struct {
		p   *ratelimit.Policy
		key string
		n   int64
	}
	var rets []ret
	var execs []rueidis.LuaExec
	for _, l := range ls {
		l.mu.Lock()
		l.gone = true
		now := l.lastNow
		l.expireLocked(now)
		if l.held > 0 {
			l.keepHeldLocked()
		}
		back, mark := l.back, l.backMark
		if l.units > 0 {
			if back > 0 && mark != l.mark {
				back = 0
			}
			back += l.units
			mark = l.mark
		}
		spent, refunds := l.spent, l.refunds
		l.units, l.back, l.spent, l.refunds = 0, 0, 0, 0
		p := l.req.Policy
		ranOut := !s.spendTime(now).Before(l.deadline)
		l.mu.Unlock()
		if back == 0 && spent == 0 && refunds == 0 {
			continue
		}
		if p.Algorithm == ratelimit.TokenBucket && ranOut {
			// The holding has run out: Redis drops it as spent at
			// the bucket's next call, so neither what it spent nor
			// what it let expire needs a call (a slow lease, a
			// batch of one, would otherwise cost two calls a
			// request). Refunds still go back.
			if back, spent = 0, 0; refunds == 0 {
				continue
			}
		}
		rets = append(rets, ret{p, l.key, back})
		execs = append(execs, rueidis.LuaExec{Keys: []string{l.key}, Args: s.leaseArgs(now, p, s.leaseField(l), 0, back, mark, spent, refunds, leaseTTL)})
	}
	if len(execs) == 0 {
		return
	}
	start := time.Now()
	res := boundedMulti(ctx, len(execs), func() []rueidis.RedisResult { return leaseScript.ExecMulti(ctx, c, execs...) })
	for i, r := range res {
		_, err := r.ToArray()
		s.observe(start, err)
		s.calls.Add(1)
		result := "returned"
		if err != nil {
			result = "error"
		}
		if s.o.OnLease != nil {
			s.o.OnLease(rets[i].p.Name, result)
		}
	}
}

// boundedMulti is bounded for a pipelined batch of n commands.
func boundedMulti(ctx context.Context, n int, do func() []rueidis.RedisResult) []rueidis.RedisResult {
	return await(ctx, do, nil, func(err error) []rueidis.RedisResult {
		out := make([]rueidis.RedisResult, n)
		for i := range out {
			out[i] = rueidis.NewErrorResult(err)
		}
		return out
	})
}

// sweepLeases gives back and forgets the leases idle at now (this
// process's clock): without a request for their idleLocked.
func (s *Store) sweepLeases(ctx context.Context, c rueidis.Client, now time.Time) {
	var idle []*lease
	s.leases.mu.Lock()
	for k, l := range s.leases.m {
		l.mu.Lock()
		// A lease with held units stays until they are settled (or
		// run out): their requests settle them here.
		if l.lastUse.Before(now.Add(-l.idleLocked())) && l.inflight == nil && l.held == 0 {
			idle = append(idle, l)
			delete(s.leases.m, k)
		}
		l.mu.Unlock()
	}
	s.leases.mu.Unlock()
	if len(idle) > 0 {
		s.returnLeases(ctx, c, idle)
	}
}

// leaseLoop sweeps idle leases until the store stops.
func (s *Store) leaseLoop() {
	defer s.bg.Done()
	tick := time.NewTicker(leaseHorizon)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		c := s.client.Load()
		if c == nil || s.br.open.Load() || s.leases.len() == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.o.Timeout)
		s.sweepLeases(ctx, *c, time.Now())
		cancel()
	}
}

// decideWithLeases is Decide for a request with a leased limit.
func (s *Store) decideWithLeases(ctx context.Context, now time.Time, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	c := s.client.Load()
	if c == nil || s.br.open.Load() {
		return s.degradedLeased(ctx, now, reqs, out, nil, true)
	}
	lifts := s.handover.blocks.lifts.Load()
	tctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	if s.o.OnError == OnErrorLocal && s.handover.local.pending.Load() {
		s.handBack(tctx, *c, now, reqs)
	}
	err := s.decideLeased(tctx, *c, now, reqs, out)
	cancel()
	if err != nil {
		// A caller that went away is not Redis failing: neither the
		// breaker nor the fallback's log line and gauge hear of it.
		outage := ctx.Err() == nil
		if outage {
			s.br.failed(err, false)
		}
		return s.degradedLeased(ctx, now, reqs, out, err, outage)
	}
	// As Decide does, for the route's limits that are not leased.
	s.noteForFallback(now, 0, reqs, out, lifts)
	for _, r := range reqs {
		// Decided on leases again, even from units held since before
		// the outage (see resumed for when that ends the fallback).
		if r.Policy.Sync == ratelimit.SyncLease {
			s.resumed(r.Policy)
		}
	}
	return nil
}
