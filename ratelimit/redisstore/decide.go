package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/ratelimit"
)

//go:embed decide.lua
var decideSource string

// commonSource holds the helpers decide.lua and lease.lua share; each
// script is sent with it in front.
//
//go:embed common.lua
var commonSource string

// decideScript decides, looks (Peek) and gives back. A look takes no
// budget but, like the memory store's Peek, drops sliding log entries that
// have left the window, so it is not a read-only script.
var decideScript = rueidis.NewLuaScript(commonSource + decideSource)

//go:embed reset.lua
var resetSource string

// resetScript makes a bucket fresh and gives it a new identity; see
// reset.lua.
var resetScript = rueidis.NewLuaScript(resetSource)

// Script modes, ARGV[5] of decide.lua.
const (
	modeTake   = "1"
	modeLook   = "0"
	modeJudge  = "j"
	modeUndo   = "u"
	modeRefund = "r"
	modeKeep   = "k"
)

// fieldsPerLimit is the number of reply integers per limit.
const fieldsPerLimit = 9

// redisTicket is ratelimit.Ticket.Store of a unit this store took in
// Redis; units its Fallback took carry the fallback's own.
const redisTicket = 2

// ErrUnavailable is wrapped by the errors of calls that cannot follow
// OnError (Peek with "allow" or "deny") while Redis is unreachable.
var ErrUnavailable = errors.New("redis unavailable")

// Decide implements ratelimit.Store. It returns an error only when a
// Fallback store does: when Redis fails, times out or the breaker is open,
// it decides as OnError says.
func (s *Store) Decide(ctx context.Context, now time.Time, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	if len(reqs) == 0 {
		return nil
	}
	if hasLease(reqs) {
		return s.decideWithLeases(ctx, now, reqs, out)
	}
	began := time.Now()
	c := s.client.Load()
	if c == nil || s.br.open.Load() {
		return s.degraded(ctx, now, reqs, out)
	}
	lifts := s.handover.blocks.lifts.Load()
	tctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	if s.o.OnError == OnErrorLocal && s.handover.local.pending.Load() {
		s.handBack(tctx, *c, now, reqs)
	}
	var err error
	if s.cluster && len(reqs) > 1 {
		err = s.decideCluster(tctx, *c, now, reqs, out)
	} else {
		_, err = s.decideOnce(tctx, *c, now, reqs, out, modeTake)
	}
	cancel()
	if err != nil {
		// A caller that went away is not Redis failing.
		if ctx.Err() == nil {
			s.br.failed(err, false)
		}
		return s.degraded(ctx, now, reqs, out)
	}
	s.br.succeeded()
	trip := time.Duration(0)
	if !s.o.CallerTime {
		trip = time.Since(began)
		s.afterRoundTrip(now, trip, out)
	}
	s.noteForFallback(now, trip, reqs, out, lifts)
	return nil
}

// afterRoundTrip times queued departures from the reply rather than from
// now. On the server's clock the script scheduled the departure at its own
// time plus Delay, and its time lies somewhere in the round trip; counting
// Delay from now, before the round trip, would let the request leave up to
// a round trip early, closer than the interval to the one ahead of it.
// Counted from the reply it leaves at, or just after, its slot. Delay then
// includes the round trip, so Departure is still now + Delay.
func (s *Store) afterRoundTrip(now time.Time, trip time.Duration, out []ratelimit.Decision) {
	for i := range out {
		if out[i].Delay > 0 {
			out[i].Delay += trip
			out[i].Departure = now.Add(out[i].Delay)
		}
	}
}

// Peek implements ratelimit.Store: one script that takes nothing. While Redis is
// unreachable it asks the Fallback (OnError "local") or fails with an
// error wrapping ErrUnavailable.
func (s *Store) Peek(ctx context.Context, now time.Time, r ratelimit.Request) (ratelimit.Decision, error) {
	var out [1]ratelimit.Decision
	c := s.client.Load()
	if c == nil || s.br.open.Load() {
		if r.Policy.Sync == ratelimit.SyncLease && (s.o.OnError == OnErrorLocal) {
			r.Policy = s.fallbacks.local(r.Policy, s.instances())
		}
		return s.peekDegraded(ctx, now, r, s.LastError())
	}
	tctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	if r.Policy.Sync == ratelimit.SyncLease {
		d, err := s.peekLease(tctx, *c, now, r)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				s.br.failed(err, false)
			}
			if s.o.OnError == OnErrorLocal {
				r.Policy = s.fallbacks.local(r.Policy, s.instances())
			}
			return s.peekDegraded(ctx, now, r, err)
		}
		s.br.succeeded()
		return d, nil
	}
	_, err := s.decideOnce(tctx, *c, now, []ratelimit.Request{r}, out[:], modeLook)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			s.br.failed(err, false)
		}
		return s.peekDegraded(ctx, now, r, err)
	}
	s.br.succeeded()
	return out[0], nil
}

// decideOnce runs decide.lua once over reqs, whose keys must share a slot
// in cluster mode, and returns the server's decision time in us.
func (s *Store) decideOnce(ctx context.Context, c rueidis.Client, now time.Time, reqs []ratelimit.Request, out []ratelimit.Decision, mode string) (int64, error) {
	keys, args := s.call(now, reqs, mode, s.token(), "", nil, nil, nil)
	return s.run(ctx, c, decideScript, keys, args, now, reqs, out, nil)
}

// token returns a string unique to one call of this store.
func (s *Store) token() string {
	return s.id + "." + strconv.FormatUint(s.seq.Add(1), 36)
}

// tailToken identifies a leaky_bucket request decided at now by this store;
// Wait rebuilds it from the Decision's Ticket.
func (s *Store) tailToken(now time.Time) string {
	return s.id + "." + strconv.FormatInt(now.UnixNano(), 36)
}

// call builds the keys and arguments of one decide.lua call. undo, when
// not nil, names what to give back per limit (mode "u", for a decision at
// undoAt in us; modes "r" and "k", the units to settle). held, when not
// nil, says per limit whether the unit to settle was held; otherwise each
// policy's Hold does. gens, when not nil, names per limit the generation
// of the bucket the unit to settle was taken in. See appendParams.
func (s *Store) call(now time.Time, reqs []ratelimit.Request, mode, token, undoAt string, undo []string, held []bool, gens []string) (keys, args []string) {
	keys = make([]string, len(reqs))
	args = make([]string, 6, 6+11*len(reqs))
	if s.o.CallerTime {
		args[0] = strconv.FormatInt(now.UnixMicro(), 10)
	}
	args[1] = s.slack
	args[2] = token
	args[3] = s.tailToken(now)
	args[4] = mode
	args[5] = undoAt
	for i, r := range reqs {
		keys[i] = Key(s.prefix, r)
		u := "-"
		if undo != nil {
			u = undo[i]
		}
		hold := r.Policy.Hold
		if held != nil {
			hold = held[i]
		}
		g := "-"
		if gens != nil {
			g = gens[i]
		}
		args = appendParams(args, r, u, hold, g)
	}
	return keys, args
}

// run executes script and converts its reply into out.
//
// starts, when not nil, receives each limit's mark in us (see decide.lua's
// reply): for fixed_window and sliding_window_counter the window start.
func (s *Store) run(ctx context.Context, c rueidis.Client, script *rueidis.Lua, keys, args []string, now time.Time, reqs []ratelimit.Request, out []ratelimit.Decision, starts []int64) (int64, error) {
	start := time.Now()
	var res rueidis.RedisResult
	if script == decideScript && args[4] == modeTake {
		res = s.execTake(ctx, c, keys, args, now, reqs)
	} else {
		res = bounded(ctx, func() rueidis.RedisResult { return script.Exec(ctx, c, keys, args) })
	}
	vals, err := res.ToArray()
	if err == nil && len(vals) != 1+fieldsPerLimit*len(keys) {
		err = fmt.Errorf("decoding script reply: got %d values, want %d", len(vals), 1+fieldsPerLimit*len(keys))
	}
	s.observe(start, err)
	if err != nil {
		return 0, fmt.Errorf("running decision script: %w", err)
	}
	return decodeReply(vals, now, reqs, out, starts)
}

// decodeReply converts decide.lua's reply for reqs, decided at now, into
// out (and starts, when not nil; see run) and returns the script's time.
func decodeReply(vals []rueidis.RedisMessage, now time.Time, reqs []ratelimit.Request, out []ratelimit.Decision, starts []int64) (int64, error) {
	at, err := vals[0].AsInt64()
	if err != nil {
		return 0, fmt.Errorf("decoding script reply: %w", err)
	}
	var f [fieldsPerLimit]int64
	for i := range reqs {
		for j := range f {
			if f[j], err = vals[1+i*fieldsPerLimit+j].AsInt64(); err != nil {
				return 0, fmt.Errorf("decoding script reply: %w", err)
			}
		}
		d := ratelimit.Decision{
			Allowed:    f[0] == 1,
			Limit:      reqs[i].Policy.Limit,
			Remaining:  f[1],
			RetryAfter: time.Duration(f[2]) * time.Microsecond,
			Reset:      time.Duration(f[3]) * time.Microsecond,
			Delay:      time.Duration(f[4]) * time.Microsecond,
			Blocked:    f[6] == 1,
		}
		switch {
		case !d.Allowed:
		case reqs[i].Policy.Algorithm == ratelimit.LeakyBucket:
			// The queue knows a waiting request by its tail token, made
			// of the call's time: Wait rebuilds it from the ticket.
			if d.Delay > 0 {
				d.Ticket = ratelimit.Ticket{Store: redisTicket, At: now.UnixNano()}
			}
		case f[5] >= 0:
			// A unit taken (-1: none); 0 is the mark of a window
			// that starts at the epoch.
			d.Ticket = ratelimit.Ticket{Store: redisTicket, At: f[5], Hold: f[7], Gen: f[8]}
		}
		if d.Delay > 0 {
			d.Departure = now.Add(d.Delay)
		}
		out[i] = d
		if starts != nil {
			starts[i] = f[5]
		}
	}
	return at, nil
}

// execTake runs decide.lua in mode take, as bounded does. When ctx ends
// first, the caller decides without Redis (OnError), but the script it
// sent still runs once Redis gets to it, and takes its units: the request
// would count twice, in the fallback and in Redis, and a give-back of it
// reaches the fallback only. So the reply is still awaited, for as long
// as rueidis keeps a connection that does not answer, and what a late
// reply took is given back (giveBackLate). A script that runs after
// rueidis gave up on the connection, or whose reply is lost, keeps what
// it took: the bucket is held lower, never higher.
func (s *Store) execTake(ctx context.Context, c rueidis.Client, keys, args []string, now time.Time, reqs []ratelimit.Request) rueidis.RedisResult {
	// Like bounded's, the call is not waited for by Close, which ends
	// bgCtx: it then returns at once.
	return await(ctx, func() rueidis.RedisResult {
		lctx, cancel := context.WithTimeout(s.bgCtx, s.lateWait())
		defer cancel()
		return decideScript.Exec(lctx, c, keys, args)
	}, func() func(rueidis.RedisResult) {
		// The late reply comes after Decide has returned, when reqs
		// is the caller's again: the gateway clears and reuses it for
		// the next request, so the give-back works from a copy, made
		// only for a call the caller stops waiting for.
		late := slices.Clone(reqs)
		return func(r rueidis.RedisResult) { s.giveBackLate(c, r, keys, args, now, late) }
	}, rueidis.NewErrorResult)
}

// lateWait is how long a decision's reply is awaited after its caller
// stopped waiting: as long as rueidis keeps a connection whose server does
// not answer (ConnWriteTimeout), after which the reply cannot come.
func (s *Store) lateWait() time.Duration { return max(10*s.o.Timeout, time.Second) + s.o.Timeout }

// giveBackLate gives back what a decision took in Redis after its caller
// had stopped waiting for it, with decide.lua's undo mode, as a cluster
// request rejected in another slot is given back: the caller decided
// without Redis. reply is the late reply to the call of keys and args,
// for reqs at now.
func (s *Store) giveBackLate(c rueidis.Client, reply rueidis.RedisResult, keys, args []string, now time.Time, reqs []ratelimit.Request) {
	vals, err := reply.ToArray()
	if err != nil || len(vals) != 1+fieldsPerLimit*len(keys) {
		return // it did not run, or nothing tells what it took
	}
	out := make([]ratelimit.Decision, len(reqs))
	starts := make([]int64, len(reqs))
	at, err := decodeReply(vals, now, reqs, out, starts)
	if err != nil || !ratelimit.Admitted(reqs, out) {
		return // a rejected request took nothing
	}
	ctx, cancel := context.WithTimeout(s.bgCtx, s.looseTimeout())
	defer cancel()
	s.undoTake(ctx, c, now, args[2], reqs, out, starts, at)
}

// degraded decides without Redis, as OnError says.
func (s *Store) degraded(ctx context.Context, now time.Time, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	switch s.o.OnError {
	case OnErrorAllow:
		for i, r := range reqs {
			out[i] = ratelimit.Decision{Allowed: true, Limit: r.Policy.Limit, Remaining: max(r.Policy.Capacity()-1, 0)}
		}
		return nil
	case OnErrorDeny:
		for i, r := range reqs {
			out[i] = ratelimit.Decision{Limit: r.Policy.Limit, RetryAfter: time.Second, Reset: time.Second}
		}
		return nil
	}
	s.handOver(now, reqs)
	if err := s.fallback.Decide(ctx, now, reqs, out); err != nil {
		return err
	}
	s.handover.local.recordSchedules(s.prefix, now, 0, reqs, out)
	return nil
}

// peekDegraded is Peek without Redis. With on_error local it reads the
// Fallback after handing it what Redis answered this store of the bucket
// (its block, its leaky_bucket schedule), as the decision it reports on
// would: the Fallback's fresh bucket would show a blocked key unblocked.
func (s *Store) peekDegraded(ctx context.Context, now time.Time, r ratelimit.Request, cause error) (ratelimit.Decision, error) {
	if s.o.OnError == OnErrorLocal {
		s.handOver(now, []ratelimit.Request{r})
		return s.fallback.Peek(ctx, now, r)
	}
	if cause == nil {
		return ratelimit.Decision{}, ErrUnavailable
	}
	return ratelimit.Decision{}, fmt.Errorf("peeking at %s: %w: %w", r.Policy.Name, ErrUnavailable, cause)
}

// Refund implements ratelimit.Store: one script call gives back the units
// this store took in Redis (one per slot in cluster mode), against the
// server's clock as decisions are; units its Fallback took go back to the
// Fallback, and units spent from a lease go back to the lease while it
// still holds them as counted (see refundLease). While Redis is
// unreachable the units it took stay taken, and the error wraps
// ErrUnavailable.
func (s *Store) Refund(ctx context.Context, now time.Time, reqs []ratelimit.Request, ds []ratelimit.Decision) error {
	return s.settle(ctx, now, reqs, ds, true)
}

// Keep implements ratelimit.Store as Refund does, for the held units of
// ds: one script call ends their holds in Redis. While Redis is
// unreachable the holds stay until they run out (see decide.lua), which
// holds the buckets lower, never higher.
func (s *Store) Keep(ctx context.Context, now time.Time, reqs []ratelimit.Request, ds []ratelimit.Decision) error {
	return s.settle(ctx, now, reqs, ds, false)
}

// settle refunds, or keeps, the units of ds; see Refund and Keep.
func (s *Store) settle(ctx context.Context, now time.Time, reqs []ratelimit.Request, ds []ratelimit.Decision, refund bool) error {
	var mine []int
	for i := range ds {
		switch {
		case !ds[i].Allowed || ds[i].Ticket.Store == 0:
		case !refund && ds[i].Ticket.Hold == 0:
			// Not held: spent already.
		case ds[i].Ticket.Store == leaseTicket:
			s.settleLease(now, reqs[i], ds[i], refund)
		case ds[i].Ticket.Store == redisTicket:
			mine = append(mine, i)
		case s.fallback != nil:
			// A leased limit's unit was taken with its fallback copy.
			r := []ratelimit.Request{reqs[i]}
			if r[0].Policy.Sync == ratelimit.SyncLease {
				r[0].Policy = s.fallbacks.current(r[0].Policy)
			}
			var err error
			if refund {
				err = s.fallback.Refund(ctx, now, r, ds[i:i+1])
			} else {
				err = s.fallback.Keep(ctx, now, r, ds[i:i+1])
			}
			if err != nil {
				return err
			}
		}
	}
	if len(mine) == 0 {
		return nil
	}
	what, mode := "giving back", modeRefund
	if !refund {
		what, mode = "keeping", modeKeep
	}
	c := s.client.Load()
	if c == nil || s.br.open.Load() {
		return fmt.Errorf("%s %d units: %w", what, len(mine), ErrUnavailable)
	}
	// Keys of one script call must share a slot; in cluster mode each
	// limit's keys do, so each limit gets its own call.
	groups := [][]int{mine}
	if s.cluster && len(mine) > 1 {
		groups = groups[:0]
		for _, i := range mine {
			groups = append(groups, []int{i})
		}
	}
	for _, g := range groups {
		sub := make([]ratelimit.Request, len(g))
		undo := make([]string, len(g))
		held := make([]bool, len(g))
		gens := make([]string, len(g))
		for j, i := range g {
			sub[j] = reqs[i]
			t := ds[i].Ticket
			undo[j], held[j], gens[j] = formatInt(t.At), t.Hold != 0, formatInt(t.Gen)
			if held[j] {
				undo[j] = formatInt(t.Hold)
			}
		}
		keys, args := s.call(now, sub, mode, s.token(), "", undo, held, gens)
		tctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
		_, err := s.run(tctx, *c, decideScript, keys, args, now, sub, make([]ratelimit.Decision, len(g)), nil)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				s.br.failed(err, false)
			}
			return fmt.Errorf("%s units of %s: %w", what, sub[0].Policy.Name, err)
		}
		s.br.succeeded()
	}
	return nil
}

// Reset implements ratelimit.Store: it deletes the bucket's keys, its
// block included, in Redis and in the Fallback, and gives the bucket a new
// identity, so that no unit taken before it is settled against the fresh
// bucket. For a leased policy it
// also drops this instance's lease of the bucket; what other instances'
// leases hold is still spent until it runs out (the window's end, or the
// token_bucket lease TTL).
func (s *Store) Reset(ctx context.Context, r ratelimit.Request) error {
	if s.fallback != nil {
		if err := s.fallback.Reset(ctx, r); err != nil {
			return err
		}
	}
	c := s.client.Load()
	if c == nil || s.br.open.Load() {
		return fmt.Errorf("resetting %s: %w", r.Policy.Name, ErrUnavailable)
	}
	k := Key(s.prefix, r)
	// What the fallback would be handed of the bucket goes with it.
	s.handover.blocks.forget(k)
	s.handover.redis.forget(k)
	s.handover.local.forget(k)
	if r.Policy.Sync == ratelimit.SyncLease {
		// Units this instance holds go with the state; other instances'
		// leases still run out (to the window's end, or their TTL).
		if l := s.leases.drop(k); l != nil {
			l.mu.Lock()
			l.gone, l.units, l.back, l.spent, l.held = true, 0, 0, 0, 0
			var sent chan struct{}
			if l.sending {
				sent = l.inflight
			}
			l.mu.Unlock()
			// A call of the lease already sent would take its grant
			// from the fresh bucket were it to run after the reset,
			// and the grant is dropped here: it runs first.
			if sent != nil {
				wctx, wcancel := context.WithTimeout(ctx, s.o.Timeout)
				select {
				case <-sent:
				case <-wctx.Done():
				}
				wcancel()
			}
		}
	}
	tctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	defer cancel()
	start := time.Now()
	err := bounded(tctx, func() rueidis.RedisResult { return resetScript.Exec(tctx, *c, []string{k}, []string{s.token()}) }).Error()
	s.observe(start, err)
	// A decision sent before the reset ran may answer after the forget
	// above, with the block the reset lifted.
	s.handover.blocks.lift(k)
	if err != nil {
		if ctx.Err() == nil {
			s.br.failed(err, false)
		}
		return fmt.Errorf("resetting %s: %w", r.Policy.Name, err)
	}
	s.br.succeeded()
	return nil
}

// bounded runs do, one Redis round trip, but returns when ctx ends,
// whatever rueidis does meanwhile. A command that lands on a connection
// rueidis must dial first waits for that dial, and against a hung server a
// failed handshake holds the call about a second while rueidis closes the
// new pipe, regardless of ctx: decisions then took a second instead of
// Timeout, and the prober's pings a second each. The abandoned call ends
// by itself; what it uses must not be reused by the caller (the keys and
// arguments are built per call), and its reply, if any, is dropped like
// any reply that comes after ctx.
func bounded(ctx context.Context, do func() rueidis.RedisResult) rueidis.RedisResult {
	return await(ctx, do, nil, rueidis.NewErrorResult)
}

// await runs do in a goroutine of its own and returns its result, or,
// once ctx ends first, failed(ctx.Err()). As ctx ends, abandon (when not
// nil) runs before the caller stops waiting, while what the call uses is
// still the caller's, and returns what the result of the call goes to
// when it comes later; a result that comes as ctx ends goes to exactly
// one of the two.
func await[T any](ctx context.Context, do func() T, abandon func() func(T), failed func(error) T) T {
	const waiting, answered, abandoned = 0, 1, 2
	var state atomic.Int32
	var late atomic.Pointer[func(T)]
	done := make(chan T, 1)
	go func() {
		r := do()
		if state.CompareAndSwap(waiting, answered) {
			done <- r
		} else if f := late.Load(); f != nil {
			(*f)(r)
		}
	}()
	select {
	case r := <-done:
		return r
	case <-ctx.Done():
		if abandon != nil {
			f := abandon()
			late.Store(&f)
		}
		if state.CompareAndSwap(waiting, abandoned) {
			return failed(ctx.Err())
		}
		return <-done // answered just in time
	}
}
