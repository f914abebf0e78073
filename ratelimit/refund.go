package ratelimit

import "time"

// The Refund steps give back one unit that an admitted request took, for a
// request whose outcome says it should not have counted (count_status).
// Each takes the bucket's state as it stands now and the mark the decision
// left (Ticket.At), and returns the state as if that request had never been
// counted, as far as its unit still counts. Like the decision steps they
// touch nothing else, so every store and Redis script mirrors them.

// SettleTokenBucket ends the hold on one token that a Hold policy's
// request took, at now: refund gives it back, otherwise it stays spent and
// starts to refill from now. Either way the bucket is first brought to
// the level the hold kept it at (TAT at least now + Held x Interval), so
// the refill the held tokens were denied is never made good later.
//
// That makes a refund exact: the bucket is left as if the request had
// never been counted, however many requests came and went meanwhile,
// because a held token never refilled, so nothing was lost to the cap at
// Burst that returning it would have to undo. A token kept starts to
// refill when its answer comes back rather than when it was taken, later
// by the upstream's answer time: a counted request is never cheaper than
// it was. A bucket that holds nothing (it was reset, or made afresh for
// new settings) is left as it is.
func SettleTokenBucket(p *Policy, s TokenBucketState, now int64, refund bool) TokenBucketState {
	if s.Held <= 0 {
		return s
	}
	s.TAT = max(s.TAT, now+s.Held*p.interval)
	s.Held--
	if refund {
		s.TAT -= p.interval
	}
	return s
}

// RefundTokenBucket returns one token that was not held to the bucket at
// now; a bucket never holds more than Burst. This is the bucket without
// the request whenever no decision since found the bucket within a token
// of full: each then moved TAT by exactly its own cost. One that did
// lost refill to the cap, which the returned token now makes good, by up
// to one token per refund. Hold policies, which count_status makes, are
// settled exactly with SettleTokenBucket instead.
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
