// Package simulate replays traffic against every rate-limit algorithm
// offline, with a virtual clock, and reports what each admits. The traffic
// is a hand-written pattern, a generated one or an access log. It backs the
// `sluice simulate` command.
//
// The simulation uses the same decision code as the gateway (a
// ratelimit.MemoryStore, one bucket per consumer key), so its answers are
// the gateway's answers; it never reads the wall clock and never sleeps.
package simulate

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
)

// MaxRequests bounds the total number of requests one -at pattern sends, so
// that a typo in a pattern cannot exhaust memory.
const MaxRequests = 1_000_000

// MaxTraffic bounds the requests of a generated pattern or a replayed log.
const MaxTraffic = 20_000_000

// Params are the settings of the policy under test. Each algorithm takes the
// ones it understands: Burst only token_bucket (0 means Limit), Queue and
// MaxWait only leaky_bucket (MaxWait 0 means Queue x Window/Limit).
type Params struct {
	Limit   int64         // requests per Window; must be > 0
	Window  time.Duration // must be > 0
	Burst   int64         // token_bucket capacity; 0: Limit
	Queue   int64         // leaky_bucket FIFO capacity; 0: reject overflow at once
	MaxWait time.Duration // leaky_bucket longest wait; 0: Queue x interval
	// Block is how long a consumer is refused once a request of it was
	// rejected (a policy's block:); 0: none. Every algorithm takes it.
	Block time.Duration
}

// Validate reports every setting of p that no algorithm accepts, one line
// per problem. The checks are the policy compiler's own: limit, window and
// burst as a token_bucket takes them, queue and max_wait as a leaky_bucket
// does.
func (p Params) Validate() error {
	_, rate := ratelimit.NewPolicy(ratelimit.Policy{Name: "check", Algorithm: ratelimit.TokenBucket, Limit: p.Limit, Window: p.Window, Burst: p.Burst, Block: p.Block})
	_, queue := ratelimit.NewPolicy(ratelimit.Policy{Name: "check", Algorithm: ratelimit.LeakyBucket, Limit: 1, Window: time.Microsecond, Queue: p.Queue, MaxWait: p.MaxWait})
	return errors.Join(rate, queue)
}

// policy compiles p for one algorithm, leaving out the settings the
// algorithm does not take.
func (p Params) policy(a ratelimit.Algorithm) (*ratelimit.Policy, error) {
	pol := ratelimit.Policy{Name: a.String(), Algorithm: a, Limit: p.Limit, Window: p.Window, Block: p.Block}
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
