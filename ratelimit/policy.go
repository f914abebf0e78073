// Package ratelimit decides whether a request may pass a rate limit.
//
// The algorithms are pure steps over small state structs: given a state, the
// decision time and a policy they return the next state and a Decision.
// Stores keep the state; they never decide anything on their own. The
// package knows nothing of HTTP.
package ratelimit

import (
	"errors"
	"fmt"
	"hash/maphash"
	"strconv"
	"sync/atomic"
	"time"
)

// Algorithm names one of the five rate-limit algorithms.
type Algorithm uint8

// The algorithms, named in configuration exactly as their String form.
const (
	TokenBucket Algorithm = iota + 1
	LeakyBucket
	FixedWindow
	SlidingWindowLog
	SlidingWindowCounter
)

var algorithmNames = [...]string{
	TokenBucket:          "token_bucket",
	LeakyBucket:          "leaky_bucket",
	FixedWindow:          "fixed_window",
	SlidingWindowLog:     "sliding_window_log",
	SlidingWindowCounter: "sliding_window_counter",
}

// Algorithms lists every algorithm in a stable order.
var Algorithms = []Algorithm{TokenBucket, LeakyBucket, FixedWindow, SlidingWindowLog, SlidingWindowCounter}

// String returns the configuration name of a, such as "token_bucket".
func (a Algorithm) String() string {
	if int(a) < len(algorithmNames) && algorithmNames[a] != "" {
		return algorithmNames[a]
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// ParseAlgorithm returns the algorithm whose configuration name is s.
func ParseAlgorithm(s string) (Algorithm, error) {
	for _, a := range Algorithms {
		if algorithmNames[a] == s {
			return a, nil
		}
	}
	return 0, fmt.Errorf("unknown algorithm %q (want token_bucket, leaky_bucket, fixed_window, sliding_window_log or sliding_window_counter)", s)
}

// Policy is one compiled rate limit. Build it with NewPolicy; a Policy is
// immutable afterwards and safe for concurrent use.
type Policy struct {
	// Name identifies the budget: buckets are (Name, key).
	Name string
	// Algorithm is how requests are counted.
	Algorithm Algorithm
	// Limit is the number of requests per Window.
	Limit int64
	// Window is the period Limit applies to: a whole number of
	// microseconds, at most MaxSpan.
	Window time.Duration
	// Burst is the token_bucket capacity; NewPolicy defaults it to Limit.
	Burst int64
	// Queue is the leaky_bucket FIFO capacity; 0 rejects overflow at once.
	Queue int64
	// MaxWait is the longest leaky_bucket wait; 0 means the default,
	// which NewPolicy fills in: Queue x Interval.
	MaxWait time.Duration
	// Shadow policies are decided and counted but never reject.
	Shadow bool
	// Block is how long a key is refused by this policy once the policy
	// rejects one of its requests; 0 (the default) blocks nothing. Shadow
	// policies never reject, so never block. At most MaxSpan.
	Block time.Duration
	// Sync is how the Redis store shares the budget between instances:
	// SyncPerRequest (the zero value) runs a script per decision,
	// SyncLease spends batches leased from Redis locally. The memory
	// store ignores it.
	Sync Sync
	// Hold makes every unit an admitted request takes wait for its
	// outcome: the caller ends it with Store.Refund (the request should
	// not count) or Store.Keep (it does). count_status policies hold. Of
	// the algorithms only token_bucket keeps held units apart (see
	// TokenBucketState); the others' refunds are exact without. It is not
	// part of Settings: each Ticket says whether its unit is held.
	Hold bool
	// MaxKeys bounds the policy's buckets in the memory store, apart from
	// every other policy's; 0 takes the store's MemoryOptions.MaxKeys. It
	// is not part of Settings: a reload that changes it keeps the buckets.
	MaxKeys int

	interval  int64  // Window / Limit in nanoseconds, rounded up to a whole microsecond
	window    int64  // Window in nanoseconds, a whole number of microseconds
	tolerance int64  // leaky_bucket: longest acceptable wait, min(Queue*interval, MaxWait) in whole microseconds
	nameHash  uint64 // Name hashed with nameSeed, for the stores' tables
	serial    int64  // tells this compiled policy from every other: see Ticket.Life
}

// nameSeed hashes policy names, once per policy rather than per decision.
var nameSeed = maphash.MakeSeed()

// policies counts the policies NewPolicy compiled, to number them.
var policies atomic.Int64

// Settings are the fields of a Policy that decide what its state means. Two
// policies with equal Settings can share state, which is how a reload keeps
// the buckets of policies that did not change.
type Settings struct {
	Algorithm Algorithm
	Limit     int64
	Window    time.Duration
	Burst     int64
	Queue     int64
	MaxWait   time.Duration
	Sync      Sync
}

// Sync says how a policy's budget is shared between the instances of a
// Redis store.
type Sync uint8

// The sync modes, named in configuration as their String form.
const (
	// SyncPerRequest decides every request with one Redis script.
	SyncPerRequest Sync = iota
	// SyncLease takes batches of budget from Redis and spends them
	// locally (fixed_window, token_bucket and sliding_window_counter).
	SyncLease
)

// String returns the configuration name of s: "request" or "lease".
func (s Sync) String() string {
	switch s {
	case SyncPerRequest:
		return "request"
	case SyncLease:
		return "lease"
	}
	return fmt.Sprintf("Sync(%d)", uint8(s))
}

// Leases reports whether a's budget can be leased: fixed_window,
// token_bucket and sliding_window_counter.
func (a Algorithm) Leases() bool {
	return a == FixedWindow || a == TokenBucket || a == SlidingWindowCounter
}

// NewPolicy checks p, fills in its defaults and returns the compiled policy.
func NewPolicy(p Policy) (*Policy, error) {
	var errs []error
	if p.Name == "" {
		errs = append(errs, errors.New("name: must not be empty"))
	}
	if p.Algorithm < TokenBucket || p.Algorithm > SlidingWindowCounter {
		errs = append(errs, fmt.Errorf("algorithm: unknown algorithm %d", p.Algorithm))
	}
	if p.Limit <= 0 {
		errs = append(errs, errors.New("limit: must be > 0"))
	}
	if p.Limit > MaxLimit {
		errs = append(errs, fmt.Errorf("limit: must be at most %d: RateLimit-Policy gives it as a Structured Field integer, of at most 15 digits", int64(MaxLimit)))
	}
	if p.Window <= 0 {
		errs = append(errs, errors.New("window: must be > 0"))
	}
	if p.Burst < 0 {
		errs = append(errs, errors.New("burst: must be >= 0"))
	}
	if p.Queue < 0 {
		errs = append(errs, errors.New("queue: must be >= 0"))
	}
	if p.MaxWait < 0 {
		errs = append(errs, errors.New("max_wait: must be >= 0"))
	}
	if p.Block < 0 {
		errs = append(errs, errors.New("block: must be >= 0"))
	}
	if p.MaxKeys < 0 {
		errs = append(errs, errors.New("max_keys: must be > 0"))
	}
	if p.Algorithm != TokenBucket && p.Burst != 0 {
		errs = append(errs, errors.New("burst: only token_bucket has a burst"))
	}
	if p.Algorithm != LeakyBucket && p.Queue != 0 {
		errs = append(errs, errors.New("queue: only leaky_bucket has a queue"))
	}
	if p.Algorithm != LeakyBucket && p.MaxWait != 0 {
		errs = append(errs, errors.New("max_wait: only leaky_bucket has a max_wait"))
	}
	switch {
	case p.Sync > SyncLease:
		errs = append(errs, fmt.Errorf("sync: unknown sync %d", p.Sync))
	case p.Sync == SyncLease && p.Algorithm >= TokenBucket && p.Algorithm <= SlidingWindowCounter && !p.Algorithm.Leases():
		errs = append(errs, fmt.Errorf("sync: lease works with fixed_window, token_bucket and sliding_window_counter, not %s", p.Algorithm))
	case p.Sync == SyncLease && p.Block > 0:
		errs = append(errs, errors.New("sync: lease does not support block: a block would need a Redis call per rejected request"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	burstSet := p.Burst != 0
	if p.Burst == 0 {
		if p.Algorithm == TokenBucket {
			p.Burst = p.Limit
		}
	}
	p.window = int64(p.Window)
	p.interval = intervalOf(p.window, p.Limit)
	errs = append(errs, p.checkSpans(burstSet)...)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	p.nameHash = maphash.String(nameSeed, p.Name)
	p.serial = policies.Add(1)
	return &p, nil
}

// MaxSpan is the longest time a policy may need to remember: its window
// and its block, a token_bucket's burst x interval and a leaky_bucket's
// longest wait. Decision times are Unix nanoseconds in an int64 (until
// 2262) and microseconds in a Lua double (exact until 2255), so a span of
// up to a century keeps every sum of a time and a span exact.
const MaxSpan = 100 * 365 * 24 * time.Hour

// MaxLimit is the largest limit: 999,999,999,999,999. The RateLimit-Policy
// field gives the limit as q, a Structured Field integer (RFC 9651), which
// has at most 15 digits: a larger one makes the whole field unparsable to
// a strict client. The bound also keeps the limit below 2^53, under which
// the Redis store's scripts, counting in Lua doubles, hold every whole
// number: above it a limit would be decided and reported by another
// number than the one configured (2^63 - 1 came back as a negative
// remaining count). Every store takes the bound, so that a configuration
// means the same whichever store runs it.
const MaxLimit = 999_999_999_999_999

// lossDenominator bounds what rounding an interval up to a whole
// microsecond may take from a token_bucket's or leaky_bucket's rate: at
// most 1/lossDenominator of it, 0.1%.
const lossDenominator = 1000

// intervalOf is window / limit rounded up to a whole microsecond, at least
// 1µs. Rounding up never admits more than the policy says, and whole
// microseconds are what the Redis scripts count in, so every store works
// with the very same interval.
func intervalOf(window, limit int64) int64 {
	const us = int64(time.Microsecond)
	w := window / us
	iv := w / limit
	if w%limit != 0 || iv == 0 {
		iv++
	}
	return iv * us
}

// checkSpans reports what the stores cannot represent exactly: a window
// that is not a whole number of microseconds, an interval that rounding to
// a whole microsecond would lengthen by more than 0.1%, and spans (a
// block's among them) longer than MaxSpan. It sets p.tolerance and the default MaxWait on the way. The
// products are computed so that they cannot overflow. burstSet tells an
// explicit burst from one defaulted to Limit, which is the window's doing.
func (p *Policy) checkSpans(burstSet bool) []error {
	var errs []error
	const us = int64(time.Microsecond)
	wholeUs := p.window%us == 0
	if !wholeUs {
		errs = append(errs, fmt.Errorf("window: %v is not a whole number of microseconds, which the stores count in", p.Window))
	}
	if p.Window > MaxSpan {
		errs = append(errs, fmt.Errorf("window: must be at most 100 years (%v)", MaxSpan))
	}
	if p.Block > MaxSpan {
		// The block's end, now + Block, would wrap past 2262.
		errs = append(errs, fmt.Errorf("block: must be at most 100 years (%v)", MaxSpan))
	}
	if wholeUs && (p.Algorithm == TokenBucket || p.Algorithm == LeakyBucket) {
		// The rate lost is (interval x limit - window) / window; the excess
		// is computed without the product, which may not fit.
		w := p.window / us
		excess := (p.Limit - w%p.Limit) % p.Limit
		if w < p.Limit {
			excess = p.Limit - w
		}
		if excess > w/lossDenominator {
			exact := float64(p.window) / float64(p.Limit)
			lost := 100 * (1 - float64(p.window)/(float64(p.interval)*float64(p.Limit)))
			errs = append(errs, fmt.Errorf("limit: the interval window / limit is %s, not a whole number of microseconds; rounded up to %v it would admit %s%% fewer requests than %d per %v (at most 0.1%% is allowed)",
				nanos(exact), p.Interval(), percent(lost), p.Limit, p.Window))
		}
	}
	switch p.Algorithm {
	case TokenBucket:
		// A window over MaxSpan is reported already: its products
		// would only say so again, on a burst or queue never set.
		if p.Window <= MaxSpan && p.Burst > int64(MaxSpan)/p.interval {
			f := "burst"
			if !burstSet {
				f = "window"
			}
			errs = append(errs, fmt.Errorf("%s: burst x interval (%d x %v) must be at most 100 years: the bucket could not be counted", f, p.Burst, p.Interval()))
		}
	case LeakyBucket:
		queued := int64(MaxSpan) + 1 // Queue x interval, saturated above MaxSpan
		if p.Queue <= int64(MaxSpan)/p.interval {
			queued = p.Queue * p.interval
		}
		switch {
		case p.MaxWait > MaxSpan:
			errs = append(errs, fmt.Errorf("max_wait: must be at most 100 years (%v)", MaxSpan))
		case p.MaxWait == 0 && queued > int64(MaxSpan) && p.Window <= MaxSpan:
			errs = append(errs, fmt.Errorf("queue: queue x interval (%d x %v) must be at most 100 years: set a max_wait, or a smaller queue", p.Queue, p.Interval()))
		case p.MaxWait == 0:
			p.MaxWait = time.Duration(queued)
		}
		// Whole microseconds, like the interval, rounded down: a wait
		// never exceeds max_wait.
		p.tolerance = min(queued, int64(p.MaxWait)) / us * us
	}
	return errs
}

// nanos writes an interval of ns nanoseconds as time.Duration does, but
// keeps what lies below a nanosecond, which a Duration would truncate to
// 0s: 10,000,000,000 per second is an interval of 0.1ns.
func nanos(ns float64) string {
	if ns < 1 {
		return strconv.FormatFloat(ns, 'g', 3, 64) + "ns"
	}
	return time.Duration(ns).String()
}

// percent writes p with three significant digits, or more where three
// would round a loss short of all of it up to 100.
func percent(p float64) string {
	for prec := 3; ; prec++ {
		s := strconv.FormatFloat(p, 'g', prec, 64)
		if s != "100" || p >= 100 || prec == 17 {
			return s
		}
	}
}

// MustPolicy is NewPolicy for tests and examples: it panics on error.
func MustPolicy(p Policy) *Policy {
	c, err := NewPolicy(p)
	if err != nil {
		panic(err)
	}
	return c
}

// Interval is Window / Limit rounded up to a whole microsecond: the token
// refill period of token_bucket and the departure spacing of leaky_bucket.
// NewPolicy rejects a token_bucket or leaky_bucket policy whose rate the
// rounding would lower by more than 0.1%.
func (p *Policy) Interval() time.Duration { return time.Duration(p.interval) }

// Tolerance is the longest wait a leaky_bucket admits, min(Queue x Interval,
// MaxWait) rounded down to a whole microsecond; 0 for other algorithms.
func (p *Policy) Tolerance() time.Duration { return time.Duration(p.tolerance) }

// Settings returns the fields that give p's state its meaning.
func (p *Policy) Settings() Settings {
	return Settings{p.Algorithm, p.Limit, p.Window, p.Burst, p.Queue, p.MaxWait, p.Sync}
}

// Capacity is the most requests the policy admits at once from an idle
// bucket: Burst for token_bucket, 1 + queue places for leaky_bucket, Limit
// otherwise.
func (p *Policy) Capacity() int64 {
	switch p.Algorithm {
	case TokenBucket:
		return p.Burst
	case LeakyBucket:
		return 1 + p.tolerance/p.interval
	}
	return p.Limit
}
