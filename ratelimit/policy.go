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
	// Window is the period Limit applies to.
	Window time.Duration
	// Burst is the token_bucket capacity; NewPolicy defaults it to Limit.
	Burst int64
	// Queue is the leaky_bucket FIFO capacity; 0 rejects overflow at once.
	Queue int64
	// MaxWait is the longest leaky_bucket wait; NewPolicy defaults it to
	// Queue x Interval.
	MaxWait time.Duration
	// Shadow policies are decided and counted but never reject.
	Shadow bool

	interval  int64  // Window / Limit in nanoseconds, at least 1
	window    int64  // Window in nanoseconds
	tolerance int64  // leaky_bucket: longest acceptable wait, min(Queue*interval, MaxWait)
	nameHash  uint64 // Name hashed with nameSeed, for the stores' tables
}

// nameSeed hashes policy names, once per policy rather than per decision.
var nameSeed = maphash.MakeSeed()

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
	if p.Algorithm != TokenBucket && p.Burst != 0 {
		errs = append(errs, errors.New("burst: only token_bucket has a burst"))
	}
	if p.Algorithm != LeakyBucket && p.Queue != 0 {
		errs = append(errs, errors.New("queue: only leaky_bucket has a queue"))
	}
	if p.Algorithm != LeakyBucket && p.MaxWait != 0 {
		errs = append(errs, errors.New("max_wait: only leaky_bucket has a max_wait"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if p.Burst == 0 {
		if p.Algorithm == TokenBucket {
			p.Burst = p.Limit
		}
	}
	p.window = int64(p.Window)
	p.interval = max(p.window/p.Limit, 1)
	if p.MaxWait == 0 {
		p.MaxWait = time.Duration(p.Queue * p.interval)
	}
	p.tolerance = min(p.Queue*p.interval, int64(p.MaxWait))
	p.nameHash = maphash.String(nameSeed, p.Name)
	return &p, nil
}

// MustPolicy is NewPolicy for tests and examples: it panics on error.
func MustPolicy(p Policy) *Policy {
	c, err := NewPolicy(p)
	if err != nil {
		panic(err)
	}
	return c
}

// Interval is Window / Limit: the token refill period of token_bucket and
// the departure spacing of leaky_bucket.
func (p *Policy) Interval() time.Duration { return time.Duration(p.interval) }

// Settings returns the fields that give p's state its meaning.
func (p *Policy) Settings() Settings {
	return Settings{p.Algorithm, p.Limit, p.Window, p.Burst, p.Queue, p.MaxWait}
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
