package ratelimit

import "time"

// The Refund steps give back one unit that an admitted request took, for a
// request whose outcome says it should not have counted (count_status).
// Each takes the bucket's state as it stands now and the mark the decision
// left (Ticket.At), and returns the state as if that request had never been
// counted, as far as its unit still counts. Like the decision steps they
// touch nothing else, so every store and Redis script mirrors them.

// RefundTokenBucket returns one token to the bucket at now; a bucket never
// holds more than Burst. This is the bucket without the request whenever
// no decision since found the bucket full: each then moved TAT by exactly
// its own cost. One that found it full (a burst after idle) lost refill
// to the cap that the returned token now makes good, by less than one
// token.
func RefundTokenBucket(p *Policy, s TokenBucketState, now int64) TokenBucketState {
	if s.TAT > now {
		s.TAT = max(s.TAT-p.interval, now)
	}
	return s
}

// RefundFixedWindow uncounts a request counted in the window that starts
// at taken, while that window is still the bucket's.
func RefundFixedWindow(s FixedWindowState, taken int64) FixedWindowState {
	if s.Start == taken && s.Count > 0 {
		s.Count--
	}
	return s
}

// RefundSlidingWindowCounter uncounts a request counted in the window that
// starts at taken, while that window still weighs: as the current one, or
// as the previous one once the next has begun.
func RefundSlidingWindowCounter(p *Policy, s SlidingWindowCounterState, taken int64) SlidingWindowCounterState {
	switch {
	case s.Start == taken && s.Cur > 0:
		s.Cur--
	case s.Start == taken+p.window && s.Prev > 0:
		s.Prev--
	}
	return s
}

// RefundSlidingWindowLog removes the entry of a request that was logged at
// taken, when the log still holds one; entries logged at the same time are
// alike, so any of them will do. Like StepSlidingWindowLog it updates the
// log in place.
func RefundSlidingWindowLog(l *SlidingLogState, taken int64) {
	i := l.n - 1
	for i >= 0 && l.at(i) > taken {
		i--
	}
	if i < 0 || l.at(i) != taken {
		return
	}
	for j := i; j < l.n-1; j++ {
		l.ring[(int(l.head)+int(j))%len(l.ring)] = l.at(j + 1)
	}
	l.n--
	if l.n == 0 {
		l.head = 0
	}
}

// BlockedDecision is the decision for a request at now on a bucket that p
// blocks until until (Unix ns, after now): rejected, consuming nothing,
// with RetryAfter and Reset at the block's end.
func BlockedDecision(p *Policy, until, now int64) Decision {
	left := time.Duration(until - now)
	return Decision{Limit: p.Limit, RetryAfter: left, Reset: left, Blocked: true}
}

// StartBlock applies p's Block to d, a rejection by p at now: it returns
// the time the block ends (Unix ns, 0 when p does not block) and d with
// RetryAfter and Reset no earlier than that end, since no retry can pass
// before it.
func StartBlock(p *Policy, now int64, d Decision) (int64, Decision) {
	if p.Block <= 0 || p.Shadow || d.Allowed {
		return 0, d
	}
	d.RetryAfter = max(d.RetryAfter, p.Block)
	d.Reset = max(d.Reset, p.Block)
	return now + int64(p.Block), d
}
