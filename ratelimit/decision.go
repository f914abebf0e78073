package ratelimit

import (
	"context"
	"time"
)

// Decision is the outcome of one limit for one request. Being rejected is a
// Decision with Allowed false, never an error.
type Decision struct {
	// Allowed reports whether the request may pass (after Delay).
	Allowed bool
	// Limit is the policy's limit (requests per window).
	Limit int64
	// Remaining is how many more requests the bucket would admit right now.
	Remaining int64
	// RetryAfter is how long until the budget next grows, 0 when it is
	// whole: for a rejected request, the earliest time a retry can be
	// admitted. sliding_window_counter rounds it up to a whole microsecond.
	RetryAfter time.Duration
	// Reset is how long until the budget is whole again.
	Reset time.Duration
	// Delay is how long an admitted leaky_bucket request waits in the FIFO
	// before it may leave for the upstream; 0 for every other algorithm.
	Delay time.Duration
	// Departure is when an admitted leaky_bucket request leaves: the
	// decision time plus Delay. Zero for every other algorithm.
	Departure time.Time
	// Blocked reports a rejection by an active block (Policy.Block): the
	// bucket refuses every request until RetryAfter has passed, whatever
	// its budget, and the rejection consumed nothing.
	Blocked bool
	// Ticket names the unit an admitted decision took, for Store.Refund.
	Ticket Ticket
}

// Ticket names the unit an admitted Decision took from a bucket, so that
// Store.Refund can give exactly that unit back and Store.Wait knows which
// store queued the request. Stores fill it in and read it back; callers
// only carry it. The zero Ticket names nothing.
type Ticket struct {
	// Store tells which store took the unit, 0 when none did; a store
	// that delegates (the Redis store to its fallback) tells them apart.
	Store uint8
	// At is the store's mark of the unit. The memory store's, in Unix ns:
	// the token bucket's TAT right after it, the window start it was
	// counted in, the time its log entry carries, or a leaky_bucket
	// request's departure.
	At int64
	// Hold is the store's mark of a held token_bucket unit (a Hold
	// policy's), 0 when the unit is not held: Refund and Keep must end
	// the hold. Stores that expire holds tell their generations apart.
	Hold int64
	// Gen tells the life of the bucket the unit was taken in from a later
	// one: after a Reset, Refund and Keep give nothing to the fresh
	// bucket, which never counted the unit. The memory store counts its
	// resets; the Redis store keeps a count per bucket, and names each
	// lease.
	Gen int64
	// Life tells, for the memory store, the state the unit was taken
	// from apart from a later one that a reload made afresh for new
	// settings: it numbers the policy whose settings started the
	// bucket's state. A reload that changes a policy and a second that
	// changes it back make the bucket afresh twice, with settings equal
	// to the unit's, and a unit taken before both settles against
	// neither. (The Redis store keeps each settings' buckets apart.)
	Life int64
}

// Request names one bucket: a policy and the consumer's key values.
type Request struct {
	Policy *Policy
	Key    string
}

// Store keeps limiter state and applies the algorithms' steps to it.
// Implementations are safe for concurrent use.
type Store interface {
	// Decide applies one request to every limit in reqs at now and writes
	// one Decision per limit to out, which must be as long as reqs. The
	// limits are decided together: unless every non-shadow limit admits
	// the request, nothing is consumed from any of them. A shadow limit
	// that rejects is reported but blocks nothing. The error is non-nil
	// only when the store failed.
	Decide(ctx context.Context, now time.Time, reqs []Request, out []Decision) error
	// Peek reports the bucket's budget at now without consuming any.
	Peek(ctx context.Context, now time.Time, r Request) (Decision, error)
	// Wait holds a request that a leaky_bucket limit admitted with a
	// Delay until its Departure; d is the Decision, Ticket included, that
	// the store made. It returns nil when the request may leave
	// and ctx.Err() when ctx ends first, or ErrDrained when ctx carries a
	// Drain (WithDrain) that begins while the request's departure lies
	// after its deadline; a request that gives up returns its place in
	// the queue.
	Wait(ctx context.Context, r Request, d Decision) error
	// Refund gives back, at now, the units that the admitted decisions ds
	// took from the buckets of reqs (ds[i] from reqs[i]): each bucket is
	// left as if its request had not been counted, as far as that unit
	// still counts (see SettleTokenBucket, RefundTokenBucket and the
	// other Refund steps). A decision with a zero Ticket is skipped. The
	// error is non-nil only when the store failed.
	Refund(ctx context.Context, now time.Time, reqs []Request, ds []Decision) error
	// Keep ends, at now, the hold on the units that the admitted
	// decisions ds took from the buckets of reqs: they stay spent, and a
	// token starts to refill (see SettleTokenBucket). Every held unit
	// must be refunded or kept once; a decision whose Ticket holds
	// nothing is skipped. The error is non-nil only when the store
	// failed.
	Keep(ctx context.Context, now time.Time, reqs []Request, ds []Decision) error
	// Reset makes r's bucket fresh and lifts its block.
	Reset(ctx context.Context, r Request) error
	// Close releases the store's resources and stops its background work.
	Close() error
}

// Admitted reports whether a request with these decisions may pass: every
// non-shadow limit admitted it.
func Admitted(reqs []Request, ds []Decision) bool {
	for i := range reqs {
		if !ds[i].Allowed && !reqs[i].Policy.Shadow {
			return false
		}
	}
	return true
}
