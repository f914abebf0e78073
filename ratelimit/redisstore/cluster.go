package redisstore

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/ratelimit"
)

// slotGroup is the limits of one request whose keys share a cluster slot.
type slotGroup struct {
	idx      []int // indexes into the request's limits
	reqs     []ratelimit.Request
	out      []ratelimit.Decision
	starts   []int64 // window starts the decision counted in, us
	leaky    bool
	token    string
	at       int64 // the script's decision time, us
	ran      bool
	consumed bool // the group admitted the request and took its budget
	err      error
}

// decideCluster decides a request whose limits may live in different
// slots. Limits that share a slot are decided by one script, exactly as in
// standalone mode. Across slots it runs the groups without a leaky_bucket
// limit first, in parallel; only if they all admit does it run the group
// that queues (otherwise it only judges it, taking nothing); and when any group rejects it gives back what the others
// took with a compensating script. Each limit stays exact on its own; that
// a rejected request consumes nothing elsewhere holds once the
// compensation has run (see "Cluster mode" in README.md).
func (s *Store) decideCluster(ctx context.Context, c rueidis.Client, now time.Time, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	groups := groupBySlot(s.prefix, reqs)
	if len(groups) == 1 {
		_, err := s.decideOnce(ctx, c, now, reqs, out, modeTake)
		return err
	}
	base := s.token()
	var first, last []*slotGroup
	for i, g := range groups {
		g.token = base + "/" + string(rune('a'+i%26))
		if g.leaky {
			last = append(last, g)
		} else {
			first = append(first, g)
		}
	}
	admitted := s.runGroups(ctx, c, now, first, modeTake)
	if err := groupErr(first); err != nil {
		s.compensate(ctx, c, now, first)
		return err
	}
	mode := modeJudge
	if admitted {
		mode = modeTake
	}
	if !s.runGroups(ctx, c, now, last, mode) {
		admitted = false
	}
	if err := groupErr(last); err != nil {
		s.compensate(ctx, c, now, groups)
		return err
	}
	if !admitted {
		s.compensate(ctx, c, now, groups)
	}
	for _, g := range groups {
		for j, i := range g.idx {
			out[i] = g.out[j]
		}
	}
	return nil
}

// runGroups runs the groups' scripts in parallel and reports whether all
// admitted the request.
func (s *Store) runGroups(ctx context.Context, c rueidis.Client, now time.Time, gs []*slotGroup, mode string) bool {
	var wg sync.WaitGroup
	for _, g := range gs {
		wg.Go(func() {
			keys, args := s.call(now, g.reqs, mode, g.token, "", nil, nil, nil)
			g.at, g.err = s.run(ctx, c, decideScript, keys, args, now, g.reqs, g.out, g.starts)
			g.ran = g.err == nil
			g.consumed = g.ran && mode == modeTake && ratelimit.Admitted(g.reqs, g.out)
		})
	}
	wg.Wait()
	all := true
	for _, g := range gs {
		if !g.ran || !ratelimit.Admitted(g.reqs, g.out) {
			all = false
		}
	}
	return all
}

// compensate gives back what the groups that admitted took, and replaces
// their decisions with the buckets as they stand without the request.
func (s *Store) compensate(ctx context.Context, c rueidis.Client, now time.Time, gs []*slotGroup) {
	var wg sync.WaitGroup
	for _, g := range gs {
		if !g.consumed {
			continue
		}
		wg.Go(func() {
			got, gave, err := s.undoTake(ctx, c, now, g.token, g.reqs, g.out, g.starts, g.at)
			if err != nil {
				// The budget stays taken until the keys expire; the
				// decisions still report the rejection correctly.
				return
			}
			g.consumed = false
			for j := range g.reqs {
				if gave[j] {
					g.out[j] = got[j]
				}
			}
		})
	}
	wg.Wait()
}

// undoTake gives back what a decision that admitted reqs, whose keys share
// a slot, took by an earlier call: out, starts and at (us) are that call's
// reply, token its token. It returns the buckets as they then stand and
// which limits it gave anything back to.
//
// A held token_bucket unit (count_status) is refunded, as Refund does:
// a held token never refilled, so its refund is exact whatever other
// requests took from the bucket since (see ratelimit.SettleTokenBucket),
// where undoing the take (decide.lua's undo mode) gives nothing back once
// another request took from the bucket, and leaves the hold to keep the
// bucket down until it runs out. Everything else is undone.
func (s *Store) undoTake(ctx context.Context, c rueidis.Client, now time.Time, token string, reqs []ratelimit.Request, out []ratelimit.Decision, starts []int64, at int64) ([]ratelimit.Decision, []bool, error) {
	gave := make([]bool, len(reqs))
	var held []ratelimit.Request
	var marks, gens []string
	for j, r := range reqs {
		if out[j].Allowed && out[j].Ticket.Hold != 0 {
			held = append(held, r)
			marks = append(marks, formatInt(out[j].Ticket.Hold))
			gens = append(gens, formatInt(out[j].Ticket.Gen))
			gave[j] = true
		}
	}
	if len(held) > 0 {
		keys, args := s.call(now, held, modeRefund, s.token(), "", marks, slices.Repeat([]bool{true}, len(held)), gens)
		if _, err := s.run(ctx, c, decideScript, keys, args, now, held, make([]ratelimit.Decision, len(held)), nil); err != nil {
			return nil, nil, err
		}
	}
	undo := undoMarks(reqs, out, starts, at)
	for j := range undo {
		gave[j] = gave[j] || undo[j] != "-"
	}
	keys, args := s.call(now, reqs, modeUndo, token, formatInt(at), undo, nil, nil)
	got := make([]ratelimit.Decision, len(reqs))
	if _, err := s.run(ctx, c, decideScript, keys, args, now, reqs, got, nil); err != nil {
		return nil, nil, err
	}
	return got, gave, nil
}

// undoMarks names, per limit, what a decision that admitted reqs at the
// script's time at (us) took, for decide.lua's undo mode: "-" for a limit
// that took nothing, or whose held token undoTake refunds instead. out
// and starts are the decision's reply.
func undoMarks(reqs []ratelimit.Request, out []ratelimit.Decision, starts []int64, at int64) []string {
	undo := make([]string, len(reqs))
	for j, r := range reqs {
		switch {
		case !out[j].Allowed, out[j].Ticket.Hold != 0:
			undo[j] = "-"
		case r.Policy.Algorithm == ratelimit.FixedWindow || r.Policy.Algorithm == ratelimit.SlidingWindowCounter:
			undo[j] = formatInt(starts[j])
		case r.Policy.Algorithm == ratelimit.TokenBucket || r.Policy.Algorithm == ratelimit.LeakyBucket:
			// The time the take wrote (TAT, next departure): the
			// script's time plus wrote. Given back
			// only while it is still what the bucket holds.
			undo[j] = formatInt(at + int64(wrote(r.Policy, out[j])/time.Microsecond))
		default:
			undo[j] = "1"
		}
	}
	return undo
}

// wrote is how far past the script's time an admitting token_bucket or
// leaky_bucket decision d put the bucket's TAT or next departure: its
// Reset, except that a leaky_bucket's budget is whole (Reset 0 once the
// last departure lies within tolerance%interval) before its outflow is
// idle.
func wrote(p *ratelimit.Policy, d ratelimit.Decision) time.Duration {
	if p.Algorithm != ratelimit.LeakyBucket || d.Reset == 0 {
		return d.Reset
	}
	return d.Reset + p.Tolerance()%p.Interval()
}

func groupErr(gs []*slotGroup) error {
	for _, g := range gs {
		if g.err != nil {
			return g.err
		}
	}
	return nil
}

// groupBySlot splits reqs by the cluster slot of their keys, in order of
// first appearance.
func groupBySlot(prefix string, reqs []ratelimit.Request) []*slotGroup {
	var groups []*slotGroup
	bySlot := make(map[uint16]*slotGroup, len(reqs))
	for i, r := range reqs {
		slot := Slot(Key(prefix, r))
		g := bySlot[slot]
		if g == nil {
			g = &slotGroup{}
			bySlot[slot] = g
			groups = append(groups, g)
		}
		g.idx = append(g.idx, i)
		g.reqs = append(g.reqs, r)
		if r.Policy.Algorithm == ratelimit.LeakyBucket {
			g.leaky = true
		}
	}
	for _, g := range groups {
		g.out = make([]ratelimit.Decision, len(g.reqs))
		g.starts = make([]int64, len(g.reqs))
	}
	return groups
}
