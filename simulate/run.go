// Package simulate replays a traffic pattern against every rate-limit
// algorithm offline, with a virtual clock, and reports what each admits. It
// backs the `sluice simulate` command.
//
// The simulation uses the same decision code as the gateway (a
// ratelimit.MemoryStore), so its answers are the gateway's answers for one
// bucket; it never reads the wall clock and never sleeps.
package simulate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
)

// MaxRequests bounds the total number of requests one simulation sends, so
// that a typo in a pattern cannot exhaust memory.
const MaxRequests = 1_000_000

// Params are the settings of the policy under test. Each algorithm takes the
// ones it understands: Burst only token_bucket (0 means Limit), Queue and
// MaxWait only leaky_bucket (MaxWait 0 means Queue x Window/Limit).
type Params struct {
	Limit   int64         // requests per Window; must be > 0
	Window  time.Duration // must be > 0
	Burst   int64         // token_bucket capacity; 0: Limit
	Queue   int64         // leaky_bucket FIFO capacity; 0: reject overflow at once
	MaxWait time.Duration // leaky_bucket longest wait; 0: Queue x interval
}

// Validate reports every setting of p that no algorithm accepts, one line
// per problem. The checks are the policy compiler's own: limit, window and
// burst as a token_bucket takes them, queue and max_wait as a leaky_bucket
// does.
func (p Params) Validate() error {
	_, rate := ratelimit.NewPolicy(ratelimit.Policy{Name: "check", Algorithm: ratelimit.TokenBucket, Limit: p.Limit, Window: p.Window, Burst: p.Burst})
	_, queue := ratelimit.NewPolicy(ratelimit.Policy{Name: "check", Algorithm: ratelimit.LeakyBucket, Limit: 1, Window: time.Microsecond, Queue: p.Queue, MaxWait: p.MaxWait})
	return errors.Join(rate, queue)
}

// policy compiles p for one algorithm, leaving out the settings the
// algorithm does not take.
func (p Params) policy(a ratelimit.Algorithm) (*ratelimit.Policy, error) {
	pol := ratelimit.Policy{Name: a.String(), Algorithm: a, Limit: p.Limit, Window: p.Window}
	switch a {
	case ratelimit.TokenBucket:
		pol.Burst = p.Burst
	case ratelimit.LeakyBucket:
		pol.Queue, pol.MaxWait = p.Queue, p.MaxWait
	}
	c, err := ratelimit.NewPolicy(pol)
	if err != nil {
		return nil, fmt.Errorf("compiling %s policy: %w", a, err)
	}
	return c, nil
}

// Result is what one algorithm made of the traffic.
type Result struct {
	Algorithm string `json:"algorithm"`
	// Accepted counts the requests that reached the upstream, at once or
	// after waiting in the leaky_bucket queue.
	Accepted int `json:"accepted"`
	Rejected int `json:"rejected"`
	// Queued counts the accepted requests that waited first.
	Queued int `json:"queued"`
	// Peak is the most requests reaching the upstream, counted when they
	// leave, in any half-open interval (t - Window, t].
	Peak int `json:"peak"`
	// Departures are the offsets at which the accepted requests left for
	// the upstream, in order.
	Departures []time.Duration `json:"-"`
}

// base is an arbitrary fixed instant; the origin is base moved back to a
// window boundary, so offsets are measured from a boundary as fixed_window
// and sliding_window_counter see it.
var base = time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)

// Origin returns the virtual instant that offset 0 stands for with this
// window: a fixed date truncated to a multiple of window since the Unix
// epoch.
func Origin(window time.Duration) time.Time {
	ns := base.UnixNano()
	if window > 0 {
		ns -= ns % int64(window)
	}
	return time.Unix(0, ns).UTC()
}

// Run sends the arrivals, in order of offset (groups with equal offsets in
// the order given), through every algorithm in ratelimit.Algorithms order,
// each with its own bucket, and returns one Result per algorithm. It is a
// pure function of its arguments.
func Run(p Params, arrivals []Arrival) ([]Result, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	total := 0
	for _, a := range arrivals {
		if a.Count < 0 {
			return nil, fmt.Errorf("arrival %d@%s: count must be >= 0", a.Count, a.Offset)
		}
		if a.Offset < 0 {
			return nil, fmt.Errorf("arrival %d@%s: offset must be >= 0", a.Count, a.Offset)
		}
		if total += a.Count; total > MaxRequests {
			return nil, fmt.Errorf("simulating more than %d requests", MaxRequests)
		}
	}
	policies := make([]*ratelimit.Policy, len(ratelimit.Algorithms))
	for i, a := range ratelimit.Algorithms {
		pol, err := p.policy(a)
		if err != nil {
			return nil, err
		}
		policies[i] = pol
	}
	sorted := slices.Clone(arrivals)
	slices.SortStableFunc(sorted, func(a, b Arrival) int { return cmp.Compare(a.Offset, b.Offset) })

	t0 := Origin(p.Window)
	store := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{SweepInterval: -1})
	defer store.Close()
	ctx := context.Background()
	out := make([]ratelimit.Decision, 1)
	results := make([]Result, len(policies))
	for i, pol := range policies {
		r := Result{Algorithm: pol.Algorithm.String(), Departures: make([]time.Duration, 0, min(total, 1024))}
		reqs := []ratelimit.Request{{Policy: pol, Key: "simulate"}}
		for _, a := range sorted {
			now := t0.Add(a.Offset)
			for range a.Count {
				if err := store.Decide(ctx, now, reqs, out); err != nil {
					return nil, fmt.Errorf("deciding %s at %s: %w", r.Algorithm, a.Offset, err)
				}
				d := out[0]
				if !d.Allowed {
					r.Rejected++
					continue
				}
				r.Accepted++
				leave := a.Offset
				if d.Delay > 0 {
					r.Queued++
					leave += d.Delay
				}
				r.Departures = append(r.Departures, leave)
			}
		}
		// Departures are already in order for every algorithm; sorting is
		// cheap insurance for the peak's two-pointer walk.
		slices.Sort(r.Departures)
		r.Peak = peak(r.Departures, p.Window)
		results[i] = r
	}
	return results, nil
}

// peak returns the most departures in any half-open interval
// (t - window, t]. The maximum is reached with t at a departure, so it
// suffices to look back one window from each; deps must be sorted.
func peak(deps []time.Duration, window time.Duration) int {
	best, lo := 0, 0
	for hi, t := range deps {
		for deps[lo] <= t-window {
			lo++
		}
		// With ties at t, the last of them sees the whole group.
		best = max(best, hi-lo+1)
	}
	return best
}
